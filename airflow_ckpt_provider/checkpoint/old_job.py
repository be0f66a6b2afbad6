"""An old job the provider did not launch: its declaration, what its cluster manager says about it,
and the decisions of an adoption. Pure: no I/O (the cluster managers' clients are
:mod:`airflow_ckpt_provider.jobs.yarn`, :mod:`~airflow_ckpt_provider.jobs.kubernetes` and
:mod:`~airflow_ckpt_provider.jobs.adopt`).

* :class:`OldJobSpec` — the old job declared by what runs it (:class:`OldJobKind`): a process, a
  Spark standalone driver, a YARN application, a Kubernetes driver pod, or a job a person stops
  (``external``); ``launched`` is today's :class:`~airflow_ckpt_provider.checkpoint.launch.LaunchHandle`.
  Built from a DAG param with :meth:`OldJobSpec.from_value`; a bad field raises
  :class:`InvalidOldJob` naming it; it never holds a credential.
* :class:`ClusterApplication` — what the cluster manager says about the job (state, user, queue,
  start, AM container...), with :meth:`~ClusterApplication.describe` for the approval and the report.
* Decisions over the managers' JSON: :func:`yarn_application`, :func:`yarn_am_container`,
  :func:`choose_application`, :func:`k8s_pod_state`, :func:`k8s_application`,
  :func:`restarts_itself`, :func:`kill_settled`, :func:`rm_web_urls` (``yarn-site.xml``).
* :func:`adoption_plan` — how the old job stops (:class:`StopMethod`) and what the approver reads,
  or the refusal: :class:`KillNeedsSinkLedger`, :class:`CutBatchNotAccepted`,
  :class:`CheckpointOnDriverDisk`, :class:`SwitchoverUnsupported`.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointOnDriverDisk,
    CutBatchNotAccepted,
    InvalidLaunchHandle,
    InvalidOldJob,
    KillNeedsSinkLedger,
    OldJobAmbiguous,
    OldJobNotFound,
    OldJobRestartsItself,
    SwitchoverUnsupported,
)
from airflow_ckpt_provider.checkpoint.launch import DriverState, LaunchHandle, LaunchMode, RelaunchMode
from airflow_ckpt_provider.checkpoint.secrets import redact_location
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, array_of, one_of

__all__ = [
    "MAX_SITE_XML_BYTES", "STANDALONE_DRIVER_ID", "YARN_APPLICATION_ID", "YARN_STATES", "AdoptionPlan",
    "ClusterApplication", "CutExposure", "OldJobKind", "OldJobSpec", "StopMethod", "adoption_plan",
    "choose_application", "k8s_application", "k8s_pod_state", "kill_settled", "restarts_itself", "rm_web_urls",
    "yarn_am_container", "yarn_application",
]

#: A YARN application id (``application_<cluster timestamp>_<sequence>``).
YARN_APPLICATION_ID = re.compile(r"application_\d+_\d+")
#: A Spark standalone driver id, as the master names it.
STANDALONE_DRIVER_ID = re.compile(r"driver-\d{14}-\d{4,}")
#: YARN's application states (``state``, and ``finalStatus`` of a FINISHED one) in DriverState words.
YARN_STATES: Mapping[str, DriverState] = MappingProxyType({
    "NEW": DriverState.SUBMITTED, "NEW_SAVING": DriverState.SUBMITTED, "SUBMITTED": DriverState.SUBMITTED,
    "ACCEPTED": DriverState.SUBMITTED, "RUNNING": DriverState.RUNNING, "FINISHED": DriverState.FINISHED,
    "FAILED": DriverState.FAILED, "KILLED": DriverState.KILLED,
})
#: A pod's phase in DriverState words (a pod that is gone, HTTP 404, is EXITED).
K8S_PHASES: Mapping[str, DriverState] = MappingProxyType({
    "Pending": DriverState.SUBMITTED, "Running": DriverState.RUNNING, "Succeeded": DriverState.FINISHED,
    "Failed": DriverState.FAILED, "Unknown": DriverState.UNKNOWN,
})
#: Owners that bring a deleted driver pod back (or start a new one).
RESTARTING_OWNERS = frozenset({"SparkApplication", "ScheduledSparkApplication", "Job", "CronJob", "ReplicaSet",
                               "StatefulSet", "Deployment", "DaemonSet"})
#: A NodeManager container state that means the AM process is gone (the NM's internal states and
#: the API's COMPLETE).
ENDED_CONTAINER_STATES = frozenset({"DONE", "EXITED_WITH_SUCCESS", "EXITED_WITH_FAILURE",
                                    "CONTAINER_CLEANEDUP_AFTER_KILL", "COMPLETE"})
#: The largest ``yarn-site.xml`` :func:`rm_web_urls` reads.
MAX_SITE_XML_BYTES = 1_000_000
#: Default seconds the checkpoint must stay quiet after a kill the manager reported done (a driver may
#: outlive its manager's KILLED by a moment; the kill already waited for the AM container to end).
DEFAULT_KILL_GRACE_S = 10.0
MAX_KILL_GRACE_S = 3600.0


class OldJobKind(StrEnum):
    """What runs the old job."""

    LAUNCHED = "launched"  # launched by the provider: its LaunchHandle (the old_launch_handle param)
    PROCESS = "process"  # a local process group on a known host
    STANDALONE = "standalone"  # a driver on a Spark standalone cluster
    YARN = "yarn"  # a YARN application (cluster deploy mode)
    KUBERNETES = "kubernetes"  # a driver pod
    EXTERNAL = "external"  # something else: a person stops it

    @property
    def on_cluster(self) -> bool:
        """Whether the driver runs on a cluster node (its local disk is not this host's)."""
        return self in (OldJobKind.STANDALONE, OldJobKind.YARN, OldJobKind.KUBERNETES)


#: The fields each kind takes (the others must stay empty); every kind takes :data:`_COMMON`.
_KIND_FIELDS: Mapping[OldJobKind, tuple[str, ...]] = MappingProxyType({
    OldJobKind.LAUNCHED: ("launch_handle",),
    OldJobKind.PROCESS: ("pid", "host"),
    OldJobKind.STANDALONE: ("master", "master_ui_url", "driver_id"),
    OldJobKind.YARN: ("resource_manager", "application_id", "application_tags", "application_name", "user"),
    OldJobKind.KUBERNETES: ("namespace", "pod", "label_selector", "context"),
    OldJobKind.EXTERNAL: ("description",),
})
_COMMON = ("kill_grace_s", "confirmed", "shared_mount")

_HTTP_URL = re.compile(r"(?P<scheme>https?)://(?P<authority>[^/\s?#]+)(?P<path>/[^\s?#]*)?\Z", re.IGNORECASE)
_SPARK_MASTER = re.compile(r"spark://[^/\s?#@]+\Z")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.\-]{0,251}[A-Za-z0-9])?\Z")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}\Z)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_LABEL_SELECTOR = re.compile(r"[A-Za-z0-9_.\-/=!,() ]{1,1000}\Z")
_USER = re.compile(r"[A-Za-z0-9._@$\\\-]{1,128}\Z")
_TAG = re.compile(r"[\x21-\x2b\x2d-\x7e]{1,100}\Z")  # printable ASCII, no space, no comma (YARN's limit: 100)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _invalid(name: str, value: object, expected: str) -> InvalidOldJob:
    shown = redact_location(repr(value))
    return InvalidOldJob(found=f"old_job.{name} = {shown[:200]}", expected=f"{name}: {expected}")


def _url(name: str, value: str) -> str:
    """``value`` as an http(s) URL without user-info, without a trailing slash."""
    text = value.strip().rstrip("/")
    match = _HTTP_URL.match(text)
    if not match:
        raise _invalid(name, value, "an http:// or https:// URL such as http://rm-host:8088")
    if "@" in match["authority"]:
        raise InvalidOldJob(found=f"old_job.{name} with user-info in its URL: {redact_location(text)}",
                            expected=f"{name} without user-info (credentials belong in a connection)")
    return text


def _text(name: str, value: str, pattern: re.Pattern[str] | None, expected: str, limit: int = 1000) -> str:
    text = value.strip()
    if not text or len(text) > limit or _CONTROL.search(text) or (pattern is not None and not pattern.match(text)):
        raise _invalid(name, value, expected)
    return text


def _tags(value: object) -> tuple[str, ...]:
    """A tag list from a JSON array or a comma-separated text (the codec's decoder)."""
    if isinstance(value, str):
        return tuple(tag.strip() for tag in value.split(",") if tag.strip())
    return tuple(str(tag).strip() for tag in array_of(str)(value))


def _is_local_path(uri: str) -> bool:
    """Whether ``uri`` names a path on the local disk (``file:`` or no scheme at all)."""
    text = uri.strip()
    if text.lower().startswith("file:"):
        return True
    return re.match(r"[A-Za-z][A-Za-z0-9+.\-]*:", text) is None or re.match(r"[A-Za-z]:[\\/]", text) is not None


@dataclass(frozen=True)
class OldJobSpec:
    """The old job, declared by what runs it (see :class:`OldJobKind`).

    * ``launched``: ``launch_handle``;
    * ``process``: ``pid`` (its process group) and ``host`` (where it runs; "" = this host);
    * ``standalone``: ``master`` (``spark://host:7077``), ``driver_id``, ``master_ui_url`` (default
      from the master);
    * ``yarn``: one of ``application_id``, ``application_tags`` (all must be on the application;
      compared case-insensitively: YARN lowercases them) or ``application_name``;
      ``resource_manager`` (the RM web URL, or a comma list of an HA pair; "" = from
      ``yarn-site.xml``); ``user`` (the kill's ``user.name``);
    * ``kubernetes``: ``namespace`` and one of ``pod`` or ``label_selector``; ``context`` (the
      kubeconfig context of the connection);
    * ``external``: ``description`` (what the person stops, and how);
    * every kind: ``kill_grace_s`` (seconds the quiet check waits after a kill), ``confirmed`` (a
      person vouches that this job writes the checkpoint), ``shared_mount`` (a ``file:`` checkpoint
      is on a mount the driver's node and this host share).

    :class:`InvalidOldJob` names the field that is missing, malformed, holds a credential, or does
    not belong to the kind.
    """

    kind: OldJobKind
    launch_handle: LaunchHandle | None = None
    pid: int | None = None
    host: str = ""
    master: str = ""
    master_ui_url: str = ""
    driver_id: str = ""
    resource_manager: str = ""
    application_id: str = ""
    application_tags: tuple[str, ...] = ()
    application_name: str = ""
    user: str = ""
    namespace: str = ""
    pod: str = ""
    label_selector: str = ""
    context: str = ""
    description: str = ""
    kill_grace_s: float = DEFAULT_KILL_GRACE_S
    confirmed: bool = False
    shared_mount: bool = False

    def __post_init__(self) -> None:
        try:
            kind = OldJobKind(self.kind)
        except ValueError:
            raise _invalid("kind", self.kind, f"one of {', '.join(OldJobKind)}") from None
        object.__setattr__(self, "kind", kind)
        own = set(_KIND_FIELDS[kind]) | set(_COMMON) | {"kind"}
        for spec in fields(self):
            if spec.name not in own and getattr(self, spec.name) not in (None, "", ()):
                raise InvalidOldJob(found=f"old_job.{spec.name} given for kind {kind}",
                                    expected=f"for kind {kind} only {', '.join(_KIND_FIELDS[kind])} "
                                             f"(and {', '.join(_COMMON)})")
        for name in ("host", "master", "master_ui_url", "driver_id", "resource_manager", "application_id",
                     "application_name", "user", "namespace", "pod", "label_selector", "context", "description"):
            if not isinstance(getattr(self, name), str):
                raise _invalid(name, getattr(self, name), "a string")
        getattr(self, f"_check_{kind.value}")()
        grace = self.kill_grace_s
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= MAX_KILL_GRACE_S:
            raise _invalid("kill_grace_s", grace, f"seconds between 0 and {MAX_KILL_GRACE_S:g}")
        object.__setattr__(self, "kill_grace_s", float(grace))
        for name in ("confirmed", "shared_mount"):
            if not isinstance(getattr(self, name), bool):
                raise _invalid(name, getattr(self, name), "true or false")

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def _check_launched(self) -> None:
        if not isinstance(self.launch_handle, LaunchHandle):
            raise _invalid("launch_handle", self.launch_handle,
                           "the launch handle the provider's launch returned (a JSON object)")

    def _check_process(self) -> None:
        if isinstance(self.pid, bool) or not isinstance(self.pid, int) or self.pid < 2:
            raise _invalid("pid", self.pid, "the driver's process group id (an integer > 1)")
        if self.host:
            self._set("host", _text("host", self.host, _HOST, "a host name"))

    def _check_standalone(self) -> None:
        master = self.master.strip()
        if not master.startswith("spark://") or not all(_SPARK_MASTER.match(f"spark://{part.strip()}")
                                                         for part in master[len("spark://"):].split(",")):
            if "@" in master:
                raise InvalidOldJob(found=f"old_job.master with user-info: {redact_location(master)}",
                                    expected="master without user-info (credentials belong in a connection)")
            raise _invalid("master", self.master, "the master URL, spark://host:7077 (HA: spark://h1:7077,h2:7077)")
        self._set("master", master)
        self._set("driver_id", _text("driver_id", self.driver_id, STANDALONE_DRIVER_ID,
                                     "the driver id the master shows, driver-<yyyyMMddHHmmss>-<n>"))
        if self.master_ui_url:
            self._set("master_ui_url", _url("master_ui_url", self.master_ui_url))

    def _check_yarn(self) -> None:
        given = [name for name in ("application_id", "application_tags", "application_name") if getattr(self, name)]
        if len(given) != 1:
            raise InvalidOldJob(
                found=f"old_job with {' and '.join(given) if given else 'none'} of application_id, "
                      "application_tags, application_name",
                expected="exactly one of application_id, application_tags or application_name")
        if self.application_id:
            self._set("application_id", _text("application_id", self.application_id, YARN_APPLICATION_ID,
                                              "a YARN application id, application_<cluster>_<n>"))
        if self.application_tags:
            if not isinstance(self.application_tags, tuple):
                raise _invalid("application_tags", self.application_tags, "a list of tags")
            self._set("application_tags", tuple(
                _text("application_tags", str(tag), _TAG, "tags of printable ASCII without spaces or commas, "
                                                          "at most 100 characters each")
                for tag in self.application_tags))
        if self.application_name:
            self._set("application_name", _text("application_name", self.application_name, None,
                                                "the application's name (spark.app.name)"))
        if self.resource_manager:
            urls = [part for part in self.resource_manager.split(",") if part.strip()]
            self._set("resource_manager", ",".join(_url("resource_manager", url) for url in urls))
        if self.user:
            self._set("user", _text("user", self.user, _USER, "a user name (the kill's user.name)", 128))

    def _check_kubernetes(self) -> None:
        self._set("namespace", _text("namespace", self.namespace, _DNS_LABEL, "a Kubernetes namespace", 63))
        if bool(self.pod) == bool(self.label_selector):
            raise InvalidOldJob(found=f"old_job with {'both' if self.pod else 'neither'} of pod and label_selector",
                                expected="exactly one of pod (the driver pod's name) or label_selector")
        if self.pod:
            self._set("pod", _text("pod", self.pod, _DNS_SUBDOMAIN, "the driver pod's name", 253))
        if self.label_selector:
            self._set("label_selector", _text("label_selector", self.label_selector, _LABEL_SELECTOR,
                                              "a label selector such as spark-app-name=orders,spark-role=driver"))
        if self.context:
            self._set("context", _text("context", self.context, None, "a kubeconfig context name", 253))

    def _check_external(self) -> None:
        self._set("description", _text("description", self.description, None,
                                       "what a person stops, and how (shown in the approval)", 2000))

    # -- reading and writing -------------------------------------------------------------------

    @property
    def rm_urls(self) -> tuple[str, ...]:
        """The declared ResourceManager web URLs, in order (none: from ``yarn-site.xml``)."""
        return tuple(url for url in self.resource_manager.split(",") if url)

    @property
    def on_cluster(self) -> bool:
        """Whether the driver runs on a cluster node: its kind, or a launched handle's mode."""
        if self.kind is OldJobKind.LAUNCHED and self.launch_handle is not None:
            return self.launch_handle.kind in (LaunchMode.STANDALONE_CLUSTER.value, LaunchMode.YARN_CLUSTER.value)
        return self.kind.on_cluster

    def describe(self) -> str:
        """The declaration in words (for logs and refusals)."""
        kind = self.kind
        if kind is OldJobKind.LAUNCHED:
            handle = self.launch_handle
            assert handle is not None
            return f"the {handle.kind} job {handle.app_name!r} the provider launched"
        if kind is OldJobKind.PROCESS:
            return f"process group {self.pid} on {self.host or 'this host'}"
        if kind is OldJobKind.STANDALONE:
            return f"standalone driver {self.driver_id} on {self.master}"
        if kind is OldJobKind.YARN:
            rm = f" on {', '.join(self.rm_urls)}" if self.rm_urls else ""
            if self.application_id:
                return f"YARN application {self.application_id}{rm}"
            if self.application_tags:
                return f"the YARN application tagged {', '.join(self.application_tags)}{rm}"
            return f"the YARN application named {self.application_name!r}{rm}"
        if kind is OldJobKind.KUBERNETES:
            which = f"pod {self.pod}" if self.pod else f"the driver pod with labels {self.label_selector}"
            return f"{which} in namespace {self.namespace}"
        return f"a job a person stops: {self.description}"

    def to_dict(self) -> dict[str, Any]:
        """The kind's own fields and the common ones (the others are empty), with the format number."""
        data: dict[str, Any] = {"kind": self.kind.value}
        for name in (*_KIND_FIELDS[self.kind], *_COMMON):
            value = getattr(self, name)
            if name == "launch_handle":
                value = value.to_dict()
            elif name == "application_tags":
                value = list(value)
            if value not in (None, "", []) or name in _COMMON:
                data[name] = value
        return _SPEC.encode(data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> OldJobSpec:
        """From :meth:`to_json` output, its dict, or a hand-written declaration, through the strict
        codec: :class:`InvalidOldJob` for unknown keys, wrong types, bad fields."""
        return cls(**_SPEC.present(data))

    @classmethod
    def from_value(cls, value: OldJobSpec | LaunchHandle | Mapping[str, Any] | str | bytes | None) -> OldJobSpec | None:
        """A declaration from a DAG param or flag: itself, a :class:`LaunchHandle` or its JSON object
        (one with ``mode``: the ``launched`` kind), a declaration object or its JSON; None when nothing
        is declared (``None``, ``""``, ``{}``, a rendered ``None``/``null``). :class:`InvalidOldJob`
        for anything else."""
        if value is None or isinstance(value, OldJobSpec):
            return value
        if isinstance(value, LaunchHandle):
            return cls(kind=OldJobKind.LAUNCHED, launch_handle=value)
        if isinstance(value, (str, bytes)):
            text = value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value
            if text.strip() in ("", "None", "null", "{}"):
                return None
        raw = _SPEC.parse(value)
        if not raw:
            return None
        if "mode" in raw and "kind" not in raw:
            try:
                return cls(kind=OldJobKind.LAUNCHED, launch_handle=LaunchHandle.from_json(raw))
            except InvalidLaunchHandle as exc:
                raise InvalidOldJob(found=f"old_job as a launch handle: {exc.found}",
                                    expected=f"the launch handle the provider returned; {exc.expected}") from None
        return cls.from_json(raw)


def _handle(value: Any) -> LaunchHandle:  # noqa: ANN401 - a checked JSON object
    return LaunchHandle.from_json(value)


_TEXT = Field((str,), required=False, default="")
#: :class:`OldJobSpec`'s codec: format 1, and the same keys without a format number (a declaration
#: a person writes in the DAG's trigger form).
_SPEC = Codec("old job", InvalidOldJob, {
    "kind": Field((str,), decode=one_of(*OldJobKind, decode=OldJobKind)),
    "launch_handle": Field((dict,), required=False, nullable=True, decode=_handle,
                           expected="the launch handle the provider's launch returned (an object)"),
    "pid": Field((int,), required=False, nullable=True),
    **{name: _TEXT for name in ("host", "master", "master_ui_url", "driver_id", "resource_manager",
                                "application_id", "application_name", "user", "namespace", "pod",
                                "label_selector", "context", "description")},
    "application_tags": Field((list, str), required=False, default=(), decode=_tags,
                              expected="a list of tags (or one comma-separated text)"),
    "kill_grace_s": Field((float,), required=False, default=DEFAULT_KILL_GRACE_S),
    "confirmed": Field((bool,), required=False, default=False),
    "shared_mount": Field((bool,), required=False, default=False),
}, versions=(UNVERSIONED,))


# -- what the cluster manager says -------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterApplication:
    """The old job as its cluster manager sees it. ``manager`` is ``yarn``, ``standalone`` or
    ``kubernetes``; ``app_id`` the application id (YARN), driver id (standalone) or pod name;
    ``state`` in :class:`DriverState` words and ``final_status`` the manager's own (YARN's
    ``finalStatus``, a pod's phase); ``started_at`` ISO-8601 UTC ("" if unknown);
    ``am_container_id`` / ``am_node_http`` the YARN application master's container and its
    NodeManager's web address; ``running_containers`` -1 when unknown; ``found_by`` how the
    declaration matched it."""

    manager: str
    app_id: str
    name: str = ""
    user: str = ""
    queue: str = ""
    state: DriverState = DriverState.UNKNOWN
    final_status: str = ""
    started_at: str = ""
    tracking_url: str = ""
    am_container_id: str = ""
    am_node_http: str = ""
    running_containers: int = -1
    tags: tuple[str, ...] = ()
    found_by: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", DriverState(self.state))
        object.__setattr__(self, "tags", tuple(self.tags))
        object.__setattr__(self, "tracking_url", redact_location(self.tracking_url))

    @property
    def alive(self) -> bool | None:
        return self.state.alive

    def describe(self) -> str:
        """One line: ``YARN application_… `orders-v1` (user alice, queue default, running since …,
        found by tags orders)``."""
        manager = {"yarn": "YARN", "standalone": "Spark standalone", "kubernetes": "Kubernetes pod"}.get(
            self.manager, self.manager)
        name = f" `{self.name}`" if self.name else ""
        state = self.state.value if not self.final_status or self.state.alive else \
            f"{self.state.value} ({self.final_status})"
        since = f" since {self.started_at}" if self.started_at else ""
        parts = [f"user {self.user}" if self.user else "", f"queue {self.queue}" if self.queue else "",
                 f"{state}{since}", f"found by {self.found_by}" if self.found_by else ""]
        return f"{manager} {self.app_id}{name} ({', '.join(p for p in parts if p)})"

    def to_dict(self) -> dict[str, Any]:
        data = {spec.name: getattr(self, spec.name) for spec in fields(self)}
        data["state"] = self.state.value
        data["tags"] = list(self.tags)
        return _APPLICATION.encode(data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> ClusterApplication:
        """From :meth:`to_json` output or its dict; :class:`InvalidOldJob` otherwise."""
        return cls(**_APPLICATION.decode(data))


_APP_TEXT = Field((str,), required=False, default="")
_APPLICATION = Codec("cluster application", InvalidOldJob, {
    "manager": Field((str,)),
    "app_id": Field((str,)),
    **{name: _APP_TEXT for name in ("name", "user", "queue", "final_status", "started_at", "tracking_url",
                                    "am_container_id", "am_node_http", "found_by")},
    "state": Field((str,), decode=one_of(*DriverState, decode=DriverState)),
    "running_containers": Field((int,), required=False, default=-1),
    "tags": Field((list,), required=False, default=(), decode=array_of(str)),
})


def _iso_ms(value: object) -> str:
    """Epoch milliseconds (YARN's times) as ISO-8601 UTC; "" for 0, absent or odd values."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return ""
    try:
        return datetime.fromtimestamp(value / 1000, timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):
        return ""


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def yarn_state(state: str, final_status: str = "") -> DriverState:
    """YARN's ``state`` (and a FINISHED application's ``finalStatus``: FAILED or KILLED) in
    :class:`DriverState` words; UNKNOWN for words YARN does not use."""
    mapped = YARN_STATES.get(state.upper(), DriverState.UNKNOWN)
    if mapped is DriverState.FINISHED and final_status.upper() in ("FAILED", "KILLED"):
        return YARN_STATES[final_status.upper()]
    return mapped


def yarn_application(app_json: Mapping[str, Any], *, found_by: str = "") -> ClusterApplication:
    """The application of one ``/ws/v1/cluster/apps/{id}`` answer (``{"app": {...}}``) or one item
    of ``/ws/v1/cluster/apps`` (``apps.app[]``). :class:`InvalidOldJob` when it has no id."""
    app = app_json.get("app", app_json) if isinstance(app_json, Mapping) else None
    if not isinstance(app, Mapping) or not YARN_APPLICATION_ID.fullmatch(_str(app.get("id"))):
        raise InvalidOldJob(found=f"a ResourceManager answer without an application id ({str(app_json)[:120]})",
                            expected="a YARN application object with id application_<cluster>_<n>",
                            action="Check that resource_manager names a YARN ResourceManager's web address.")
    running = app.get("runningContainers")
    tags = _str(app.get("applicationTags"))
    return ClusterApplication(
        manager="yarn", app_id=_str(app["id"]), name=_str(app.get("name")), user=_str(app.get("user")),
        queue=_str(app.get("queue")), state=yarn_state(_str(app.get("state")), _str(app.get("finalStatus"))),
        final_status=_str(app.get("finalStatus")), started_at=_iso_ms(app.get("startedTime")),
        tracking_url=_str(app.get("trackingUrl")), am_node_http=_str(app.get("amHostHttpAddress")),
        running_containers=running if isinstance(running, int) and not isinstance(running, bool) else -1,
        tags=tuple(tag.strip() for tag in tags.split(",") if tag.strip()), found_by=found_by)


def yarn_apps(apps_json: Mapping[str, Any], *, found_by: str = "") -> list[ClusterApplication]:
    """The applications of a ``/ws/v1/cluster/apps`` answer (``{"apps": {"app": [...]}}``;
    ``{"apps": null}`` when none)."""
    apps = apps_json.get("apps") if isinstance(apps_json, Mapping) else None
    items = apps.get("app") if isinstance(apps, Mapping) else None
    return [yarn_application(item, found_by=found_by) for item in items or () if isinstance(item, Mapping)]


def yarn_am_container(attempts_json: Mapping[str, Any]) -> tuple[str, str]:
    """(container id, NodeManager web address) of the newest attempt in a
    ``/ws/v1/cluster/apps/{id}/appattempts`` answer; ("", "") when there is none."""
    holder = attempts_json.get("appAttempts") if isinstance(attempts_json, Mapping) else None
    attempts = holder.get("appAttempt") if isinstance(holder, Mapping) else None
    items = [a for a in attempts or () if isinstance(a, Mapping)]
    if not items:
        return "", ""
    newest = max(items, key=lambda a: (a.get("id") if isinstance(a.get("id"), int) else -1,
                                       a.get("startTime") if isinstance(a.get("startTime"), int) else -1))
    return _str(newest.get("containerId")), _str(newest.get("nodeHttpAddress"))


def _matches(app: ClusterApplication, spec: OldJobSpec) -> bool:
    if spec.application_id:
        return app.app_id == spec.application_id
    if spec.application_tags:
        have = {tag.lower() for tag in app.tags}
        return all(tag.lower() in have for tag in spec.application_tags)
    if spec.application_name:
        return app.name == spec.application_name
    if spec.pod:
        return app.app_id == spec.pod
    return True  # a label selector: the manager filtered already


def found_by(spec: OldJobSpec) -> str:
    """How ``spec`` finds its application, in words (:attr:`ClusterApplication.found_by`)."""
    if spec.application_id:
        return "application id"
    if spec.application_tags:
        return f"tags {', '.join(spec.application_tags)}"
    if spec.application_name:
        return f"name {spec.application_name!r}"
    if spec.pod:
        return "pod name"
    if spec.label_selector:
        return f"labels {spec.label_selector}"
    return "declaration"


def choose_application(apps: Sequence[ClusterApplication], spec: OldJobSpec) -> ClusterApplication:
    """The one application ``spec`` declares among ``apps`` (what the manager listed).

    One live match (submitted or running) is it. Declared by application id (or pod name), the
    application is it even when it has ended (the adoption then stops nothing, and says so).
    Raises :class:`OldJobAmbiguous` for several live matches and :class:`OldJobNotFound` for none
    (an ended match found by tags, name or labels is not taken: an earlier run of the same job),
    both listing the candidates."""
    how = found_by(spec)
    matching = [replace(app, found_by=how) for app in apps if _matches(app, spec)]
    live = [app for app in matching if app.alive]
    if len(live) == 1:
        return live[0]
    if len(live) > 1:
        raise OldJobAmbiguous(found=f"{len(live)} live applications match {spec.describe()}: "
                                    + "; ".join(app.describe() for app in live[:10]),
                              expected="exactly one live application")
    if (spec.application_id or spec.pod) and matching:
        return matching[0]
    ended = "; ".join(app.describe() for app in matching[:10])
    listed = f" (ended matches: {ended})" if ended else f" ({len(apps)} application(s) listed, none matching)"
    raise OldJobNotFound(found=f"no live application matches {spec.describe()}{listed}",
                         expected="one submitted or running application")


# -- Kubernetes ------------------------------------------------------------------------------------------


def k8s_pod_state(pod_json: Mapping[str, Any] | None) -> DriverState:
    """A driver pod's phase in :class:`DriverState` words; None (the API answered 404: the pod is
    gone) is EXITED; a pod without a known phase is UNKNOWN."""
    if pod_json is None:
        return DriverState.EXITED
    status = pod_json.get("status") if isinstance(pod_json, Mapping) else None
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return K8S_PHASES.get(_str(phase), DriverState.UNKNOWN)


def k8s_application(pod_json: Mapping[str, Any], *, found_by: str = "") -> ClusterApplication:
    """The driver pod as a :class:`ClusterApplication` (its name, namespace as the queue, Spark's
    ``spark-app-name`` / ``spark-app-selector`` labels, the service account as the user).
    :class:`InvalidOldJob` when it has no name."""
    meta = pod_json.get("metadata") if isinstance(pod_json, Mapping) else None
    if not isinstance(meta, Mapping) or not _str(meta.get("name")):
        raise InvalidOldJob(found=f"an API server answer without a pod name ({str(pod_json)[:120]})",
                            expected="a Pod object (kind Pod, metadata.name)")
    labels = _mapping(meta.get("labels"))
    spec = _mapping(pod_json.get("spec"))
    status = _mapping(pod_json.get("status"))
    selector = _str(labels.get("spark-app-selector"))
    return ClusterApplication(
        manager="kubernetes", app_id=_str(meta["name"]), name=_str(labels.get("spark-app-name")),
        user=_str(spec.get("serviceAccountName")), queue=_str(meta.get("namespace")), state=k8s_pod_state(pod_json),
        final_status=_str(status.get("phase")), started_at=_str(status.get("startTime")),
        tags=(selector,) if selector else (), found_by=found_by)


def k8s_pods(list_json: Mapping[str, Any], *, found_by: str = "") -> list[ClusterApplication]:
    """The pods of a ``PodList`` answer (``items``)."""
    items = list_json.get("items") if isinstance(list_json, Mapping) else None
    return [k8s_application(item, found_by=found_by) for item in items or () if isinstance(item, Mapping)]


def restarts_itself(pod_json: Mapping[str, Any]) -> OldJobRestartsItself | None:
    """The refusal to raise when the pod's owner (``metadata.ownerReferences``) would bring a
    deleted driver back — a SparkApplication, Job, ReplicaSet, StatefulSet... (see
    :data:`RESTARTING_OWNERS`) —, else None."""
    meta = pod_json.get("metadata") if isinstance(pod_json, Mapping) else None
    owners = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    restarting = [o for o in owners or () if isinstance(o, Mapping) and _str(o.get("kind")) in RESTARTING_OWNERS]
    if not restarting:
        return None
    named = ", ".join(f"{_str(o.get('kind'))} {_str(o.get('name'))}" for o in restarting)
    pod = _str(meta.get("name")) if isinstance(meta, Mapping) else ""
    return OldJobRestartsItself(found=f"pod {pod} is owned by {named}, which starts it again when it is deleted",
                                expected="a driver pod no controller restarts (spark-submit's own driver pod)")


def kill_settled(app: ClusterApplication, am_container_json: Mapping[str, Any] | None) -> bool:
    """Whether a killed YARN application is really gone: its state is final, it runs no container
    (``runningContainers`` <= 0; unknown counts as none), and its AM container on its
    NodeManager (``/ws/v1/node/containers/{id}``: ``{"container": {"state": ...}}``) has ended;
    None means the NodeManager answered 404 (the container is gone). A caller that could not ask
    the NodeManager must not call this with None."""
    if app.alive is not False or app.running_containers > 0:
        return False
    if am_container_json is None:
        return True
    container = am_container_json.get("container", am_container_json)
    state = _str(container.get("state")) if isinstance(container, Mapping) else ""
    return state.upper() in ENDED_CONTAINER_STATES


# -- yarn-site.xml ---------------------------------------------------------------------------------------

_VARIABLE = re.compile(r"\$\{([^}\s]+)\}")


def _site_properties(xml_text: str | bytes) -> dict[str, str]:
    """The ``name -> value`` of a Hadoop ``*-site.xml`` (``${var}`` expanded from the same file).
    :class:`InvalidOldJob` for a file beyond :data:`MAX_SITE_XML_BYTES`, one with a DOCTYPE (an
    entity declaration could expand without bound), or one that is not XML."""
    size = len(xml_text.encode("utf-8", errors="replace") if isinstance(xml_text, str) else xml_text)
    if size > MAX_SITE_XML_BYTES:
        raise InvalidOldJob(found=f"yarn-site.xml of {size:,} bytes",
                            expected=f"at most {MAX_SITE_XML_BYTES:,} bytes",
                            action="Declare resource_manager (the ResourceManager's web URL) in the old job.")
    text = xml_text if isinstance(xml_text, str) else xml_text.decode("utf-8", errors="replace")
    if re.search(r"<!DOCTYPE|<!ENTITY", text, re.IGNORECASE):
        raise InvalidOldJob(found="yarn-site.xml with a DOCTYPE or ENTITY declaration",
                            expected="a Hadoop configuration file of <property> elements",
                            action="Declare resource_manager (the ResourceManager's web URL) in the old job.")
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as exc:
        raise InvalidOldJob(found=f"yarn-site.xml that is not XML ({exc})",
                            expected="a Hadoop configuration file of <property> elements",
                            action="Declare resource_manager (the ResourceManager's web URL) in the old job.") from None
    props: dict[str, str] = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name and value is not None:
            props[name.strip()] = value.strip()

    def expand(value: str) -> str:
        for _ in range(10):  # bounded: a variable that names itself stops here
            expanded = _VARIABLE.sub(lambda m: props.get(m.group(1), m.group(0)), value)
            if expanded == value:
                break
            value = expanded
        return value

    return {name: expand(value) for name, value in props.items()}


def rm_web_urls(yarn_site_xml_text: str | bytes) -> tuple[str, ...]:
    """The ResourceManagers' web URLs a ``yarn-site.xml`` names, in order.

    Without HA: ``yarn.resourcemanager.webapp.address`` (or ``.webapp.https.address`` when
    ``yarn.http.policy`` is HTTPS_ONLY), else ``yarn.resourcemanager.hostname`` with the default
    port (8088; https 8090). With HA (``yarn.resourcemanager.ha.enabled`` and ``.ha.rm-ids``): the
    same per RM id (``...webapp.address.<id>``, ``...hostname.<id>``). A wildcard host (0.0.0.0)
    is replaced by the hostname. Empty when the file names no ResourceManager. Raises
    :class:`InvalidOldJob` for a file it will not read (see :func:`_site_properties`)."""
    props = _site_properties(yarn_site_xml_text)
    https = props.get("yarn.http.policy", "HTTP_ONLY").upper() == "HTTPS_ONLY"
    scheme, key, port = ("https", "webapp.https.address", 8090) if https else ("http", "webapp.address", 8088)
    prefix = "yarn.resourcemanager."
    ha = props.get(prefix + "ha.enabled", "false").lower() == "true"
    ids = [i.strip() for i in props.get(prefix + "ha.rm-ids", "").split(",") if i.strip()] if ha else []
    urls: list[str] = []
    for suffix in [f".{rm_id}" for rm_id in ids] or [""]:
        hostname = props.get(f"{prefix}hostname{suffix}") or props.get(f"{prefix}hostname", "")
        address = props.get(f"{prefix}{key}{suffix}") or (f"{hostname}:{port}" if hostname else "")
        if not address:
            continue
        host, _, number = address.rpartition(":") if ":" in address else (address, "", str(port))
        if host in ("0.0.0.0", "", "[::]") and hostname:  # noqa: S104 - a bind-all address, replaced
            host = hostname
        if host and host not in ("0.0.0.0", "[::]"):  # noqa: S104
            url = f"{scheme}://{host}:{number or port}"
            if url not in urls:
                urls.append(url)
    return tuple(urls)


# -- the adoption's plan ---------------------------------------------------------------------------------


class StopMethod(StrEnum):
    """How the old job stops."""

    GRACEFUL = "graceful"  # a live GracefulStop heartbeat: the stop request, between two batches
    KILL = "kill"  # through its cluster manager (or its process group): may cut one batch
    PERSON = "person"  # a person stops it (kind external), then the provider checks the quiet
    NONE = "none"  # it ended by itself: nothing to stop


class CutExposure(StrEnum):
    """What a batch cut by a kill means for the sink (see
    :meth:`~airflow_ckpt_provider.sinks.spec.SinkKind.cut_exposure`)."""

    EXACT = "exact"  # Delta, file sink: the sink's own record says whether it holds the batch
    COUNTED = "counted"  # a Kafka sink with source headers: what it holds twice is counted
    AT_LEAST_ONCE = "at_least_once"  # foreach_batch, a Kafka sink without source headers: may be processed twice
    UNDECLARED = "undeclared"  # no sink declared: nothing can be told


@dataclass(frozen=True)
class AdoptionPlan:
    """How the adoption stops the old job (``stop_method``), what the approver reads (``lines``,
    Markdown), the application the manager showed (if any), the sink's exposure to a cut batch,
    and whether the person accepted that the cut batch is processed twice."""

    stop_method: StopMethod
    lines: tuple[str, ...]
    exposure: CutExposure
    application: ClusterApplication | None = None
    accepted_cut_batch: bool = False

    @property
    def may_cut_batch(self) -> bool:
        """Whether the stop can leave a planned batch uncommitted (a kill, or a person's stop)."""
        return self.stop_method in (StopMethod.KILL, StopMethod.PERSON)

    def to_dict(self) -> dict[str, Any]:
        return _PLAN.encode({"stop_method": self.stop_method.value, "lines": list(self.lines),
                             "exposure": self.exposure.value,
                             "application": self.application.to_dict() if self.application else None,
                             "accepted_cut_batch": self.accepted_cut_batch})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> AdoptionPlan:
        """From :meth:`to_json` output or its dict; :class:`InvalidOldJob` otherwise."""
        return cls(**_PLAN.decode(data))


_PLAN = Codec("adoption plan", InvalidOldJob, {
    "stop_method": Field((str,), decode=one_of(*StopMethod, decode=StopMethod)),
    "lines": Field((list,), decode=array_of(str)),
    "exposure": Field((str,), decode=one_of(*CutExposure, decode=CutExposure)),
    "application": Field((dict,), required=False, nullable=True, decode=ClusterApplication.from_json),
    "accepted_cut_batch": Field((bool,), required=False, default=False),
})

_MANAGER_STOP = {
    OldJobKind.LAUNCHED: "through its launch handle", OldJobKind.PROCESS: "by signalling its process group",
    OldJobKind.STANDALONE: "through its standalone master", OldJobKind.YARN: "through its ResourceManager",
    OldJobKind.KUBERNETES: "by deleting its driver pod through the API server",
}


def _stop_method(spec: OldJobSpec, state: DriverState, heartbeat_alive: bool) -> StopMethod:
    if heartbeat_alive:
        return StopMethod.GRACEFUL
    if state.alive is False:
        return StopMethod.NONE
    return StopMethod.PERSON if spec.kind is OldJobKind.EXTERNAL else StopMethod.KILL


def adoption_plan(
    spec: OldJobSpec,
    *,
    state: DriverState,
    heartbeat_alive: bool,
    exposure: CutExposure,
    old_checkpoint: str,
    relaunch_mode: RelaunchMode | str,
    accept_cut_batch: bool = False,
    application: ClusterApplication | None = None,
    in_flight: Sequence[str] = (),
    recent_batch_sizes: Sequence[int] = (),
    new_locations: Sequence[str] = (),
    new_on_cluster: bool = False,
) -> AdoptionPlan:
    """Decide how the old job stops and what the approver reads.

    ``state`` is the job's state as its manager (or its kind) reports it, ``heartbeat_alive``
    whether a GracefulStop heartbeat beats on the old checkpoint, ``exposure`` the sink's
    (:class:`CutExposure`). The stop is ``graceful`` with a live heartbeat, ``none`` when the job
    ended by itself, ``person`` for an external job, else ``kill``. ``in_flight`` (the input range
    per partition planned and not committed now, in words) and ``recent_batch_sizes`` (records per
    recent batch) show what one cut batch costs. ``new_locations`` are the new checkpoint and sink
    path, checked when the new version runs on a cluster (``new_on_cluster``).

    Refuses, in this order: :class:`CheckpointOnDriverDisk` (a local old checkpoint while the driver
    runs on a cluster node, or a local new location for a cluster deploy, unless
    ``spec.shared_mount``); :class:`SwitchoverUnsupported` (the switchover path needs GracefulStop
    in the old driver); :class:`KillNeedsSinkLedger` (a kill or a person's stop with no sink
    declared); :class:`CutBatchNotAccepted` (the same with an at-least-once sink and not
    ``accept_cut_batch``)."""
    local = []
    if spec.on_cluster and _is_local_path(old_checkpoint):
        local.append(f"the old checkpoint {old_checkpoint} (the driver runs on a cluster node)")
    if new_on_cluster:
        local += [f"{where} (the new version deploys in cluster mode)" for where in new_locations
                  if where and _is_local_path(where)]
    if local and not spec.shared_mount:
        raise CheckpointOnDriverDisk(found=f"a local path for {'; '.join(local)}",
                                     expected="storage every host reads (hdfs://, s3a://, ...), or shared_mount true")
    method = _stop_method(spec, state, heartbeat_alive)
    cuts = method in (StopMethod.KILL, StopMethod.PERSON)
    how = "to be killed" if method is StopMethod.KILL else "to be stopped by a person"
    if cuts and str(relaunch_mode) == RelaunchMode.SWITCHOVER.value:
        raise SwitchoverUnsupported(
            found=f"{spec.describe()} has no live GracefulStop heartbeat, so it is {how}, and the switchover "
                  "takes over inside the old driver",
            expected="an old driver that runs GracefulStop (its heartbeat live), for a switchover")
    if cuts and exposure is CutExposure.UNDECLARED:
        raise KillNeedsSinkLedger(found=f"{spec.describe()} is {how} (no live GracefulStop heartbeat) and the sink "
                                        "is not declared (accept_undeclared_sink does not cover a kill)",
                                  expected="the sink declared, so the handover reads what it holds of the cut batch")
    cost = _cost(in_flight, recent_batch_sizes)
    if cuts and exposure is CutExposure.AT_LEAST_ONCE and not accept_cut_batch:
        raise CutBatchNotAccepted(found=f"{spec.describe()} is {how}, and its sink is at-least-once: the batch the "
                                        f"stop cuts may be processed twice ({cost})",
                                  expected="accept_cut_batch true, or an exact sink")
    lines = [_old_job_line(spec, application, method, state)]
    if cuts:
        lines.append(_sink_line(exposure, accept_cut_batch, cost))
    if spec.shared_mount and local:
        lines.append(f"**Shared mount:** declared for {'; '.join(local)}: the driver's node and this host "
                     "read the same files.")
    if spec.confirmed:
        lines.append("**Identity:** a person confirmed that this job writes the old checkpoint.")
    return AdoptionPlan(method, tuple(lines), exposure, application,
                        accepted_cut_batch=accept_cut_batch and cuts and exposure is CutExposure.AT_LEAST_ONCE)


def _cost(in_flight: Sequence[str], sizes: Sequence[int]) -> str:
    flight = f"in flight now: {'; '.join(in_flight)}" if in_flight else "no batch in flight now"
    recent = f"recent batches: {', '.join(f'{n:,}' for n in sizes[-5:])} records" if sizes else \
        "recent batch sizes unknown"
    return f"{flight}; {recent}"


def _old_job_line(spec: OldJobSpec, application: ClusterApplication | None, method: StopMethod,
                  state: DriverState) -> str:
    what = application.describe() if application is not None else spec.describe()
    if method is StopMethod.GRACEFUL:
        return (f"**Old job:** {what}: its GracefulStop heartbeat is live, so it is asked to stop between two "
                "batches.")
    if method is StopMethod.NONE:
        return f"**Old job:** {what}: it has ended by itself ({state.value}); nothing is stopped."
    if method is StopMethod.PERSON:
        return (f"**Old job:** {what}. A person stops it after this approval; the stop step then waits (up to its "
                "stop timeout) until the checkpoint stays quiet (no new batch planned or committed).")
    return (f"**Old job:** {what}: it runs without GracefulStop, so it is killed {_MANAGER_STOP[spec.kind]}; a "
            f"kill may cut one batch. Then the checkpoint must stay quiet for {spec.kill_grace_s:g} s.")


def _sink_line(exposure: CutExposure, accepted: bool, cost: str) -> str:
    if exposure is CutExposure.EXACT:
        return ("**Sink ledger:** exact: the sink records each batch atomically, so the handover reads whether it "
                "holds the cut batch and the new version starts right after what it holds.")
    if exposure is CutExposure.COUNTED:
        return ("**Sink ledger:** counted: the output topic's records name their input (source headers); the "
                f"report lists exactly what the cut batch wrote twice ({cost}).")
    return (f"**Sink ledger:** at-least-once, cut batch accepted (`accept_cut_batch`): the batch the stop cuts may "
            f"be processed twice ({cost}); the report lists its input range.")
