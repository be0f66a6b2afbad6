"""The control files a running query and the provider exchange through the checkpoint's storage.

Standard library only: this module is shared by the Spark side (inside the user's driver,
which imports nothing but pyspark and this package's standard-library-only modules: ``spark``,
``clock``, ``batch_names``) and the Airflow side.

Layout, inside the checkpoint root (Spark ignores folders it does not know)::

    _ckpt/heartbeat.json     written by the running query every ``interval_s`` seconds
    _ckpt/stop-request.json  written by the provider: please stop between two batches
    _ckpt/stop-ack.json      written by the query once it stopped: where, and how

All three are small JSON objects written whole (write to a temporary name, then rename where
the filesystem allows it). Times are UTC ISO-8601 strings.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import Any, TypeVar

from airflow_ckpt_provider.clock import utc_now

CONTROL_DIR = "_ckpt"
HEARTBEAT = f"{CONTROL_DIR}/heartbeat.json"
STOP_REQUEST = f"{CONTROL_DIR}/stop-request.json"
STOP_ACK = f"{CONTROL_DIR}/stop-ack.json"

RUNNING = "running"
STOPPED = "stopped"
CLEAN = "clean"  # stopped between batches: last planned == last committed
INTERRUPTED = "interrupted"  # a planned batch was cut short; its offsets must not be handed over

T = TypeVar("T", bound="_ControlRecord")


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value)


class _ControlRecord:
    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls: type[T], data: str | bytes) -> T:
        """Parse a control file; ``ValueError`` when it is not this record's JSON object."""
        raw: Any = json.loads(data)
        if not isinstance(raw, dict):
            raise ValueError(f"{cls.__name__}: expected a JSON object, got {type(raw).__name__}")
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass(frozen=True)
class Heartbeat(_ControlRecord):
    """A query's sign of life on its checkpoint."""

    query_id: str
    run_id: str
    state: str  # RUNNING or STOPPED
    started_at: str
    updated_at: str
    interval_s: float
    host: str = ""
    pid: int = 0
    app_id: str = ""

    def is_alive(self, now: datetime | None = None, missed_beats: float = 3.0) -> bool:
        """Running and updated within ``missed_beats`` intervals of ``now``."""
        if self.state != RUNNING:
            return False
        now = now or utc_now()
        age = (now - parse_time(self.updated_at)).total_seconds()
        return age <= max(self.interval_s, 0.1) * missed_beats


@dataclass(frozen=True)
class StopRequest(_ControlRecord):
    """Ask the query to stop at the next batch boundary."""

    request_id: str
    requested_at: str
    requested_by: str = ""
    reason: str = ""
    expires_at: str = ""  # after this the requester has escalated or given up; "" = never

    def is_expired(self, now: datetime | None = None) -> bool:
        """True once ``expires_at`` (when set) has passed: a query must no longer honour it."""
        if not self.expires_at:
            return False
        return (now or utc_now()) > parse_time(self.expires_at)


@dataclass(frozen=True)
class StopAck(_ControlRecord):
    """Written by the query after it stopped."""

    request_id: str
    query_id: str
    run_id: str
    outcome: str  # CLEAN or INTERRUPTED
    last_committed_batch: int | None
    last_planned_batch: int | None
    stopped_at: str
