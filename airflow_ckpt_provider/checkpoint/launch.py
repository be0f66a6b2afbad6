"""``LaunchHandle``: how to find, watch and kill a launched streaming job (pure value object).

The launch operator returns it as XCom; the stop operator uses it to escalate (kill the local
process group, ``spark-submit --kill`` a standalone driver, ``yarn application -kill``);
rollback uses it to stop a new job that must not stay.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import CheckpointError
from airflow_ckpt_provider.checkpoint.secrets import redact_command, redact_text


class InvalidLaunchHandle(CheckpointError, ValueError):
    summary = "invalid launch handle"
    default_action = "Pass the JSON returned by the launch operator, unchanged."


class LaunchMode(str, Enum):
    """Where the driver runs."""

    LOCAL = "local"  # a detached spark-submit (client mode) on the Airflow worker's machine
    STANDALONE_CLUSTER = "standalone-cluster"  # driver on a Spark standalone worker
    YARN_CLUSTER = "yarn-cluster"  # driver in a YARN application master


_REQUIRED: dict[LaunchMode, tuple[str, ...]] = {
    LaunchMode.LOCAL: ("pid",),
    LaunchMode.STANDALONE_CLUSTER: ("driver_id", "master"),
    LaunchMode.YARN_CLUSTER: ("application_id",),
}


@dataclass(frozen=True)
class LaunchHandle:
    """A launched job: mode, ids, log location, Spark UI URL when known.

    ``pid`` is the process (and process group) id of a local launch; ``driver_id`` and
    ``master`` identify a standalone-cluster driver; ``application_id`` a YARN application.
    ``log_path`` is the driver log (local) or the spark-submit output. The handle goes to XCom, so
    it never carries secrets: ``extra["command"]`` (a JSON argument list) is redacted with
    :func:`redact_command`, other ``extra`` values and ``master`` with :func:`redact_text`.
    Raises :class:`InvalidLaunchHandle` when the ids its mode needs are missing.
    """

    mode: LaunchMode
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

    def __post_init__(self) -> None:
        try:
            mode = LaunchMode(self.mode)
        except ValueError:
            raise InvalidLaunchHandle(
                found=f"mode {self.mode!r}", expected=f"one of {', '.join(m.value for m in LaunchMode)}"
            ) from None
        object.__setattr__(self, "mode", mode)
        missing = [name for name in _REQUIRED[mode] if getattr(self, name) in (None, "")]
        if missing:
            raise InvalidLaunchHandle(
                found=f"a {mode.value} handle without {', '.join(missing)}",
                expected=f"{', '.join(_REQUIRED[mode])} for mode {mode.value}",
            )
        object.__setattr__(self, "extra", {str(k): _redact_extra(str(k), v) for k, v in dict(self.extra).items()})
        if self.master:
            object.__setattr__(self, "master", redact_text(self.master))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mode"] = self.mode.value
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> LaunchHandle:
        """Rebuild from :meth:`to_json` output or its dict (as XCom gives it back)."""
        try:
            raw = json.loads(data) if isinstance(data, (str, bytes)) else dict(data)
        except (TypeError, ValueError) as exc:
            raise InvalidLaunchHandle(found=f"unreadable JSON ({exc})", expected="a LaunchHandle JSON object") from None
        known = set(cls.__dataclass_fields__)
        if not isinstance(raw, dict):
            raise InvalidLaunchHandle(found=f"a JSON {type(raw).__name__}", expected="a LaunchHandle JSON object")
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidLaunchHandle(found=f"unknown keys {unknown}", expected=f"only {sorted(known)}")
        try:
            return cls(**raw)
        except TypeError as exc:
            raise InvalidLaunchHandle(found=str(exc), expected=f"keys {sorted(known)}") from None


def _redact_extra(key: str, value: object) -> str:
    """``extra`` values are strings; a recorded command is a JSON argument list."""
    text = str(value)
    if key == "command":
        try:
            argv = json.loads(text)
        except ValueError:
            argv = None
        if isinstance(argv, list):
            return json.dumps(redact_command([str(a) for a in argv]))
    return redact_text(text)
