"""Kubernetes job kind (``k8s-cluster``): a Spark driver pod, followed and killed through the
Kubernetes API server's REST API (urllib; no client library).

The provider does not launch on Kubernetes; it adopts a driver pod spark-submit started
(:mod:`airflow_ckpt_provider.jobs.adopt`). The handle names the pod (``driver_id``) and in its
``extra`` the ``namespace``, the ``app_selector`` (Spark's ``spark-app-selector`` label, shared by
the driver and its executors) and where the API server is (``api_server``, ``token_file``,
``ca_file``; :class:`JobOptions` ``cluster`` settings win). Without them the in-cluster
defaults apply (``$KUBERNETES_SERVICE_HOST``, the service account's token and CA). The bearer token
is read from its file for each request (service-account tokens rotate) and never logged, recorded
or put into an error.

* state: the pod's phase (:func:`~airflow_ckpt_provider.checkpoint.old_job.k8s_pod_state`); a pod
  that is gone (404) has EXITED; UNKNOWN when the API server cannot be asked;
* kill: ``DELETE`` the pod (``gracePeriodSeconds``), then wait until it is gone (404) and no
  executor pod of the application is left. :class:`EscalationFailed` when the token may not delete
  it (401/403) or it is still there at the deadline.

Tested on recorded API answers only: no cluster runs here.
"""

from __future__ import annotations

import logging
import os
import ssl
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from airflow_ckpt_provider.checkpoint.errors import (
    ClusterManagerRefused,
    ClusterManagerUnreachable,
    EscalationFailed,
    InvalidOldJob,
    LaunchFailed,
)
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.old_job import k8s_pod_state
from airflow_ckpt_provider.checkpoint.secrets import redact_location
from airflow_ckpt_provider.jobs.base import DriverState, JobOfKind, JobOptions, SubmitRequest
from airflow_ckpt_provider.jobs.http import HttpAnswer, request_json

log = logging.getLogger(__name__)

#: The job kind's name (a handle's mode).
KIND = "k8s-cluster"
#: Where a pod finds its service account's token and the cluster's CA.
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: The most bytes of a token file read.
MAX_TOKEN_BYTES = 64_000
#: The settings that say where the API server is (JobOptions ``cluster`` keys, a handle's ``extra`` keys).
SETTINGS = ("api_server", "token_file", "ca_file")
#: Seconds the pod is given to stop after its SIGTERM (Kubernetes' ``gracePeriodSeconds``).
DEFAULT_DELETE_GRACE_S = 30


@dataclass(frozen=True)
class KubernetesApi:
    """The API server at ``server`` (``https://host:port``), authenticated by the bearer token in
    ``token_file`` (none: no Authorization header), TLS verified against ``ca_file`` (none: the
    system's CAs). Raises :class:`ClusterManagerUnreachable` when the server does not answer and
    :class:`ClusterManagerRefused` (with its ``status``) for an error status a call does not expect."""

    server: str
    token_file: str = ""
    ca_file: str = ""
    timeout: float = 10.0

    @classmethod
    def for_handle(cls, handle: LaunchHandle, options: JobOptions) -> KubernetesApi:
        """From the options' ``cluster`` settings, the handle's ``extra``, then the in-cluster
        defaults. :class:`InvalidOldJob` for an API server URL with user-info, or none at all."""
        return cls.from_settings({key: options.endpoint(handle, key) for key in SETTINGS}, options)

    @classmethod
    def from_settings(cls, settings: Mapping[str, str], options: JobOptions) -> KubernetesApi:
        """From ``settings`` (``api_server``, ``token_file``, ``ca_file``), then the in-cluster
        defaults (see :meth:`for_handle`)."""
        server = settings.get("api_server", "")
        environ = {**os.environ, **options.env}
        if not server and environ.get("KUBERNETES_SERVICE_HOST"):
            host = environ["KUBERNETES_SERVICE_HOST"]
            host = f"[{host}]" if ":" in host else host
            server = f"https://{host}:{environ.get('KUBERNETES_SERVICE_PORT', '443')}"
        if not server:
            raise InvalidOldJob(found="no Kubernetes API server for this job",
                                expected="api_server in the connection or the handle, or an in-cluster environment")
        if "@" in server.split("://", 1)[-1].split("/", 1)[0]:
            raise InvalidOldJob(found=f"an API server URL with user-info: {redact_location(server)}",
                                expected="the API server's URL without user-info (the token goes in token_file)")
        in_cluster = SERVICE_ACCOUNT / "token"
        token = settings.get("token_file") or (str(in_cluster) if in_cluster.is_file() else "")
        ca = settings.get("ca_file") or (str(SERVICE_ACCOUNT / "ca.crt") if (SERVICE_ACCOUNT / "ca.crt").is_file()
                                         else "")
        return cls(server.rstrip("/"), token, ca, timeout=min(options.command_timeout, 30.0))

    def _headers(self) -> dict[str, str]:
        if not self.token_file:
            return {}
        try:
            with open(self.token_file, "rb") as handle:
                token = handle.read(MAX_TOKEN_BYTES).decode("utf-8", errors="replace").strip()
        except OSError as exc:
            raise ClusterManagerUnreachable(found=f"the token file {self.token_file} cannot be read ({exc.strerror})",
                                            expected="a readable bearer token file") from None
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _context(self) -> ssl.SSLContext | None:
        if not self.server.startswith("https://"):
            return None
        return ssl.create_default_context(cafile=self.ca_file or None)

    def call(self, method: str, path: str, query: Mapping[str, str] | None = None) -> HttpAnswer:
        """``method`` ``path`` on the API server; the answer, whatever its status."""
        url = f"{self.server}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            return request_json(method, url, headers=self._headers(), timeout=self.timeout,
                                ssl_context=self._context())
        except OSError as exc:
            raise ClusterManagerUnreachable(found=f"{self.server} did not answer {method} {path} ({exc})",
                                            expected="the Kubernetes API server to answer") from None

    def _json(self, answer: HttpAnswer, what: str) -> Mapping[str, Any]:
        if not answer.ok or not isinstance(answer.body, Mapping):
            raise ClusterManagerRefused(found=f"HTTP {answer.status} from {self.server} for {what}: {answer.text}",
                                        expected=f"{what} answered", status=answer.status)
        return answer.body

    def pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The Pod object; None when it is gone (404)."""
        path = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods/{urllib.parse.quote(name)}"
        answer = self.call("GET", path)
        return None if answer.status == 404 else self._json(answer, f"pod {namespace}/{name}")

    def pods(self, namespace: str, label_selector: str) -> Mapping[str, Any]:
        """The PodList of ``namespace``'s pods with ``label_selector``."""
        answer = self.call("GET", f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods",
                           {"labelSelector": label_selector})
        return self._json(answer, f"the pods of {namespace} with labels {label_selector}")

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> bool:
        """Delete the pod with ``gracePeriodSeconds``; False when it was gone already (404)."""
        path = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods/{urllib.parse.quote(name)}"
        answer = self.call("DELETE", path, {"gracePeriodSeconds": str(grace_s)})
        if answer.status == 404:
            return False
        self._json(answer, f"the deletion of pod {namespace}/{name}")
        return True


class KubernetesJob(JobOfKind):
    """A Spark driver pod (see the module doc)."""

    kind: ClassVar[str] = KIND

    def __init__(self, handle: LaunchHandle, options: JobOptions | None = None, *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(handle, options)
        self.sleep = sleep

    @classmethod
    def launch(cls, request: SubmitRequest, options: JobOptions | None = None) -> KubernetesJob:
        """Not supported: :class:`LaunchFailed` (the provider adopts driver pods, it does not start them)."""
        raise LaunchFailed(found="a launch on Kubernetes", expected="a launch in local, standalone or YARN mode",
                           action="Submit the job with spark-submit --master k8s://... and declare it as the old job "
                                  "(kind kubernetes).")

    @property
    def namespace(self) -> str:
        return self.options.endpoint(self.handle, "namespace")

    @property
    def pod(self) -> str:
        return str(self.handle.driver_id or "")

    def api(self) -> KubernetesApi:
        return KubernetesApi.for_handle(self.handle, self.options)

    def state(self) -> DriverState:
        """The driver pod's phase; EXITED when it is gone; UNKNOWN when it cannot be asked."""
        try:
            return k8s_pod_state(self.api().pod(self.namespace, self.pod))
        except (ClusterManagerUnreachable, ClusterManagerRefused, InvalidOldJob) as exc:
            log.warning("cannot ask the API server for pod %s/%s: %s", self.namespace, self.pod, exc.found)
            return DriverState.UNKNOWN

    def log_tail(self, lines: int = 50) -> str:
        """"": the driver's log stays with the pod (``kubectl logs``)."""
        return ""

    def kill(self, *, timeout: float = 60.0) -> str:
        """Delete the driver pod and wait, within ``timeout``, until it and its executors are gone."""
        try:
            api = self.api()
            deleted = api.delete_pod(self.namespace, self.pod, min(DEFAULT_DELETE_GRACE_S, max(int(timeout), 0)))
        except (ClusterManagerUnreachable, ClusterManagerRefused, InvalidOldJob) as exc:
            raise EscalationFailed(found=f"the deletion of pod {self.namespace}/{self.pod} failed: {exc.found}",
                                   expected="the driver pod deleted") from None
        deadline = time.monotonic() + timeout
        selector = self.options.endpoint(self.handle, "app_selector")
        left = ""
        while True:
            try:
                if api.pod(self.namespace, self.pod) is not None:
                    left = "the driver pod"
                else:
                    executors = (api.pods(self.namespace, f"spark-app-selector={selector},spark-role=executor")
                                 .get("items") or []) if selector else []
                    if not executors:
                        what = "deleted" if deleted else "was gone already"
                        return f"driver pod {self.namespace}/{self.pod} {what} through {api.server}"
                    left = f"{len(executors)} executor pod(s)"
            except (ClusterManagerUnreachable, ClusterManagerRefused) as exc:
                left = f"unknown ({exc.found})"
            if time.monotonic() >= deadline:
                raise EscalationFailed(found=f"pod {self.namespace}/{self.pod} deleted, and still there after "
                                             f"{timeout:g} s: {left}", expected="the driver and its executors gone")
            self.sleep(1.0)
