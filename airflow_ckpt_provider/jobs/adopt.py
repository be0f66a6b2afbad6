"""Adopt an old job the provider did not launch: find it through what runs it, and give it a
:class:`~airflow_ckpt_provider.checkpoint.launch.LaunchHandle`, so that from there ``job_for``,
``observe`` and the stop's ``kill`` work as for a launched job. Read only: nothing is stopped here.

:func:`adopt` per kind (:class:`~airflow_ckpt_provider.checkpoint.old_job.OldJobKind`):

* ``launched``: its handle, as it is;
* ``process``: a ``local`` handle in this process's scope when the declared host is this one (else
  in that host's, where this process can neither see nor signal the pid);
* ``standalone``: the master's view of the driver (``/json/``);
* ``yarn``: the ResourceManager's application (by id, or the one live application with the tags or
  name), through :class:`~airflow_ckpt_provider.jobs.yarn.YarnRest` on the declared RM URLs, the
  options' ``rm_url``, or ``yarn-site.xml``;
* ``kubernetes``: the driver pod (by name, or the one live pod with the labels), refused when an
  owner would restart it (:func:`~airflow_ckpt_provider.checkpoint.old_job.restarts_itself`);
* ``external``: an ``external`` handle that says what a person stops.

The handle's ``extra`` says ``adopted: "true"``, how the job was found and where its manager is
(``rm_url``, ``user``; ``namespace``, ``app_selector``, ``api_server``...; never a secret), its
``started_at`` the manager's start time (:data:`UNKNOWN_START` when the manager does not say: every
heartbeat on the checkpoint then counts as this job's). Raises :class:`OldJobNotFound`,
:class:`OldJobAmbiguous`, :class:`OldJobRestartsItself`, :class:`ClusterManagerUnreachable`,
:class:`ClusterManagerRefused` and :class:`InvalidOldJob` (no manager URL known).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import (
    ClusterManagerRefused,
    ClusterManagerUnreachable,
    InvalidOldJob,
    OldJobNotFound,
)
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.old_job import (
    ClusterApplication,
    OldJobKind,
    OldJobSpec,
    choose_application,
    found_by,
    k8s_application,
    k8s_pods,
    restarts_itself,
)
from airflow_ckpt_provider.jobs import external, kubernetes
from airflow_ckpt_provider.jobs.base import DriverState, JobOptions
from airflow_ckpt_provider.jobs.kubernetes import KubernetesApi
from airflow_ckpt_provider.jobs.standalone import StandaloneJob, default_master_ui_url
from airflow_ckpt_provider.jobs.yarn import YarnRest, site_rm_urls
from airflow_ckpt_provider.records.control import ProcessScope

#: ``started_at`` of an adopted job whose manager does not say when it started.
UNKNOWN_START = "1970-01-01T00:00:00+00:00"


@dataclass(frozen=True)
class AdoptedJob:
    """The old job found: what its manager says (None for ``launched``, ``process`` and
    ``external``, which no manager describes) and its handle."""

    application: ClusterApplication | None
    handle: LaunchHandle


def adopt(spec: OldJobSpec, options: JobOptions | None = None, *, checkpoint_uri: str) -> AdoptedJob:
    """Find the job ``spec`` declares and build its handle for ``checkpoint_uri`` (see the module doc)."""
    options = options or JobOptions()
    kind = spec.kind
    if kind is OldJobKind.LAUNCHED:
        assert spec.launch_handle is not None
        return AdoptedJob(None, spec.launch_handle)
    if kind is OldJobKind.PROCESS:
        return AdoptedJob(None, _process(spec, checkpoint_uri))
    if kind is OldJobKind.STANDALONE:
        return _standalone(spec, options, checkpoint_uri)
    if kind is OldJobKind.YARN:
        return _yarn(spec, options, checkpoint_uri)
    if kind is OldJobKind.KUBERNETES:
        return _kubernetes(spec, options, checkpoint_uri)
    return AdoptedJob(None, LaunchHandle(mode=external.KIND, checkpoint_uri=checkpoint_uri, app_name="external job",
                                         started_at=UNKNOWN_START,
                                         extra=_extra(spec, description=spec.description)))


def _extra(spec: OldJobSpec, **values: str) -> dict[str, str]:
    return {"adopted": "true", "found_by": found_by(spec), **{k: v for k, v in values.items() if v}}


def _process(spec: OldJobSpec, checkpoint_uri: str) -> LaunchHandle:
    here = ProcessScope.current()
    scope = here if spec.host in ("", here.host) else ProcessScope(spec.host)
    return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=checkpoint_uri, app_name=f"process group {spec.pid}",
                        started_at=UNKNOWN_START, pid=spec.pid, host=scope.host, boot_id=scope.boot_id,
                        pid_namespace=scope.pid_namespace, extra={"adopted": "true", "found_by": "process group id"})


def _standalone(spec: OldJobSpec, options: JobOptions, checkpoint_uri: str) -> AdoptedJob:
    ui = spec.master_ui_url or default_master_ui_url(spec.master)
    handle = LaunchHandle(mode=LaunchMode.STANDALONE_CLUSTER, checkpoint_uri=checkpoint_uri, app_name=spec.driver_id,
                          started_at=UNKNOWN_START, driver_id=spec.driver_id, master=spec.master,
                          extra=_extra(spec, master_ui_url=ui))
    state = StandaloneJob(handle, options).state()
    if state is DriverState.UNKNOWN:
        raise ClusterManagerUnreachable(found=f"the standalone master's UI at {ui} did not answer",
                                        expected="the master's /json/ listing the driver")
    if state is DriverState.EXITED:
        raise OldJobNotFound(found=f"driver {spec.driver_id} is not listed by the master at {ui}",
                             expected="a driver the master lists (running or completed)")
    return AdoptedJob(ClusterApplication(manager="standalone", app_id=spec.driver_id, state=state,
                                         found_by="driver id"), handle)


def _yarn(spec: OldJobSpec, options: JobOptions, checkpoint_uri: str) -> AdoptedJob:
    urls = spec.rm_urls or tuple(u for u in str(options.cluster.get("rm_url", "")).split(",") if u.strip()) \
        or site_rm_urls(options.env)
    if not urls:
        raise InvalidOldJob(found=f"no ResourceManager for {spec.describe()}",
                            expected="resource_manager in the old job, rm_url in the connection, or yarn-site.xml "
                                     "under $HADOOP_CONF_DIR")
    rest = YarnRest(urls, timeout=min(options.command_timeout, 30.0))
    if spec.application_id:
        found = rest.app(spec.application_id)
        if found is None:
            raise OldJobNotFound(found=f"the ResourceManager at {rest.answered_by} does not know "
                                       f"{spec.application_id}", expected="an application it lists")
        apps = [found]
    else:
        apps = rest.apps(tags=spec.application_tags)
    app = choose_application(apps, spec)
    try:
        container, node = rest.attempts(app.app_id)
    except (ClusterManagerUnreachable, ClusterManagerRefused):
        container, node = "", ""
    app = replace(app, am_container_id=container, am_node_http=node or app.am_node_http)
    user = spec.user or str(options.cluster.get("user", "")) or app.user
    handle = LaunchHandle(mode=LaunchMode.YARN_CLUSTER, checkpoint_uri=checkpoint_uri,
                          app_name=app.name or app.app_id, started_at=app.started_at or UNKNOWN_START,
                          application_id=app.app_id, ui_url=app.tracking_url or None,
                          extra=_extra(spec, rm_url=",".join(urls), user=user, queue=app.queue))
    return AdoptedJob(app, handle)


def _kubernetes(spec: OldJobSpec, options: JobOptions, checkpoint_uri: str) -> AdoptedJob:
    settings = {key: str(options.cluster.get(key, "")) for key in kubernetes.SETTINGS}
    api = KubernetesApi.from_settings(settings, options)
    pods: dict[str, Mapping[str, Any]] = {}
    if spec.pod:
        pod = api.pod(spec.namespace, spec.pod)
        if pod is None:
            raise OldJobNotFound(found=f"pod {spec.namespace}/{spec.pod} does not exist on {api.server}",
                                 expected="the driver pod spark-submit started")
        pods[spec.pod] = pod
        apps = [k8s_application(pod)]
    else:
        listed = api.pods(spec.namespace, spec.label_selector)
        items = listed.get("items") or []
        pods = {str(item.get("metadata", {}).get("name", "")): item for item in items if isinstance(item, Mapping)}
        apps = k8s_pods(listed)
    app = choose_application(apps, spec)
    refusal = restarts_itself(pods[app.app_id])
    if refusal is not None:
        raise refusal
    handle = LaunchHandle(mode=kubernetes.KIND, checkpoint_uri=checkpoint_uri, app_name=app.name or app.app_id,
                          started_at=app.started_at or UNKNOWN_START, driver_id=app.app_id,
                          extra=_extra(spec, namespace=spec.namespace, app_selector=app.tags[0] if app.tags else "",
                                       context=spec.context, **{k: v for k, v in settings.items() if v}))
    return AdoptedJob(app, handle)


__all__ = ["UNKNOWN_START", "AdoptedJob", "adopt"]
