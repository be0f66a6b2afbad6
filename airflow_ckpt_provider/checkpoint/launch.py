"""``LaunchHandle``: how to find, watch and kill a launched streaming job (pure value object).

The launch operator returns it as XCom; the stop operator uses it to escalate (kill the local
process group, kill a standalone driver, ``yarn application -kill``); rollback uses it to stop a
new job that must not stay. How each kind of job is followed and killed lives in
:mod:`airflow_ckpt_provider.jobs`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidLaunchHandle
from airflow_ckpt_provider.checkpoint.jsonin import load_json
from airflow_ckpt_provider.checkpoint.secrets import redact_command, redact_text
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field
from airflow_ckpt_provider.records.control import ProcessScope


class LaunchMode(StrEnum):
    """Where the driver runs (the built-in job kinds; more can be registered, see
    :func:`airflow_ckpt_provider.jobs.register_job_kind`)."""

    LOCAL = "local"  # a detached spark-submit (client mode) on the Airflow worker's machine
    STANDALONE_CLUSTER = "standalone-cluster"  # driver on a Spark standalone worker
    YARN_CLUSTER = "yarn-cluster"  # driver in a YARN application master


class DriverState(StrEnum):
    """A launched driver's state, the same words for every kind of job (:mod:`airflow_ckpt_provider.jobs`
    re-exports it; the cluster managers' own words map onto it in
    :mod:`airflow_ckpt_provider.checkpoint.old_job`)."""

    SUBMITTED = "submitted"  # accepted by the cluster manager, not running yet
    RUNNING = "running"
    FINISHED = "finished"  # ended by itself (exit code 0, FINISHED)
    FAILED = "failed"  # ended with an error
    KILLED = "killed"
    EXITED = "exited"  # ended; how is not known here (a process that is not our child)
    UNKNOWN = "unknown"  # cannot be told from here (another host, an unreachable master)

    @property
    def alive(self) -> bool | None:
        """True while submitted or running, False once ended, None when unknown."""
        if self in (DriverState.SUBMITTED, DriverState.RUNNING):
            return True
        if self is DriverState.UNKNOWN:
            return None
        return False


class RelaunchMode(StrEnum):
    """How an upgrade starts the new version (``build_stream_upgrade_dag(relaunch_mode=...)``)."""

    STANDBY = "standby"  # launched before the old version stops, released at the handover
    COLD = "cold"  # launched after the stop, the handover and the archive
    SWITCHOVER = "switchover"  # launched as a standby that takes over inside the drivers (stateless queries)


_REQUIRED: dict[LaunchMode, tuple[str, ...]] = {
    LaunchMode.LOCAL: ("pid",),
    LaunchMode.STANDALONE_CLUSTER: ("driver_id", "master"),
    LaunchMode.YARN_CLUSTER: ("application_id",),
}
_MODE_NAME = re.compile(r"[a-z][a-z0-9-]{0,62}\Z")


@dataclass(frozen=True)
class LaunchHandle:
    """A launched job: mode, ids, log location, Spark UI URL when known.

    ``pid`` is the process (and process group) id of a local launch, meaningful only in the
    process scope it was recorded in (``host``, ``boot_id``, ``pid_namespace``: see
    :class:`ProcessScope`); ``driver_id`` and ``master`` identify a standalone-cluster driver;
    ``application_id`` a YARN application. ``launch_id`` names this launch in the job's control
    files (``_ckpt/driver.json``). ``log_path`` is the driver log (local) or the spark-submit
    output, on the launching host. ``mode`` is a :class:`LaunchMode` for the built-in kinds or
    the name of a registered job kind. The handle goes to XCom, so it never carries secrets:
    ``extra["command"]`` (a JSON argument list) is redacted with :func:`redact_command`, other
    ``extra`` values and ``master`` with :func:`redact_text`.
    Raises :class:`InvalidLaunchHandle` when the ids its mode needs are missing, or a local
    handle names pid 0 or 1 (signalling those would hit a whole session or the init process).
    """

    mode: LaunchMode | str
    checkpoint_uri: str
    app_name: str
    started_at: str
    pid: int | None = None
    driver_id: str | None = None
    master: str | None = None
    application_id: str | None = None
    log_path: str | None = None
    ui_url: str | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    launch_id: str = ""
    host: str = ""
    boot_id: str = ""
    pid_namespace: str = ""

    def __post_init__(self) -> None:
        mode = _mode(self.mode)
        object.__setattr__(self, "mode", mode)
        required = _REQUIRED.get(mode, ()) if isinstance(mode, LaunchMode) else ()
        missing = [name for name in required if getattr(self, name) in (None, "")]
        if missing:
            raise InvalidLaunchHandle(
                found=f"a {self.kind} handle without {', '.join(missing)}",
                expected=f"{', '.join(required)} for mode {self.kind}",
            )
        if self.pid is not None:
            bad = isinstance(self.pid, bool) or not isinstance(self.pid, int)
            if bad or (mode is LaunchMode.LOCAL and self.pid < 2):
                raise InvalidLaunchHandle(found=f"pid {self.pid!r}",
                                          expected="the process group id of the launched driver (an integer > 1)")
        extra = {str(k): _redact_extra(str(k), v) for k, v in dict(self.extra).items()}
        if not self.host and extra.get("host"):  # handles recorded before the scope fields existed
            object.__setattr__(self, "host", extra["host"])
        object.__setattr__(self, "extra", extra)
        if self.master:
            object.__setattr__(self, "master", redact_text(self.master))

    @property
    def kind(self) -> str:
        """The job kind's name (``local``, ``standalone-cluster``, ``yarn-cluster`` or a registered one)."""
        return self.mode.value if isinstance(self.mode, LaunchMode) else str(self.mode)

    @property
    def scope(self) -> ProcessScope:
        """Where ``pid`` means something (see :class:`ProcessScope`)."""
        return ProcessScope(self.host, self.boot_id, self.pid_namespace)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mode"] = self.kind
        return _HANDLE.encode(data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> LaunchHandle:
        """Rebuild from :meth:`to_json` output or its dict (as XCom gives it back);
        :class:`InvalidLaunchHandle` on anything else (unknown keys too)."""
        try:
            return cls(**_HANDLE.decode(data))
        except TypeError as exc:  # e.g. extra not a mapping
            raise InvalidLaunchHandle(found=str(exc), expected="a LaunchHandle JSON object") from None


#: :class:`LaunchHandle`'s codec: strict about keys (unknown ones refused), ``mode`` a text and
#: ``pid`` an integer (as before the codec; :meth:`LaunchHandle.__post_init__` checks the rest).
#: Written by today's release without a format number; the other fields take any JSON value as
#: they did.
_HANDLE = Codec("LaunchHandle", InvalidLaunchHandle, {
    "mode": Field((str,)),
    "checkpoint_uri": Field(),
    "app_name": Field(),
    "started_at": Field(),
    "pid": Field((int,), required=False, nullable=True),
    **{name: Field(required=False) for name in ("driver_id", "master", "application_id", "log_path", "ui_url")},
    "extra": Field(required=False, default=MappingProxyType({})),
    **{name: Field(required=False, default="") for name in ("launch_id", "host", "boot_id", "pid_namespace")},
}, versions=(UNVERSIONED,))


def _mode(value: object) -> LaunchMode | str:
    try:
        return LaunchMode(value)
    except ValueError:
        pass
    if isinstance(value, str) and _MODE_NAME.match(value):
        return value  # a registered job kind; jobs.job_for() refuses an unknown one
    raise InvalidLaunchHandle(found=f"mode {value!r}",
                              expected=f"one of {', '.join(m.value for m in LaunchMode)} or a registered job kind")


def _redact_extra(key: str, value: object) -> str:
    """``extra`` values are strings; a recorded command is a JSON argument list."""
    text = str(value)
    if key == "command":
        try:
            argv = load_json(text)
        except ValueError:
            argv = None
        if isinstance(argv, list):
            return json.dumps(redact_command([str(a) for a in argv]))
    return redact_text(text)
