"""The control files a running query and the provider exchange through the checkpoint's storage.

Standard library only (a module of the records layer, below the core): this module is shared by
the Spark side (inside the user's driver, which imports nothing but pyspark and this package's
standard-library-only modules) and the Airflow side.

Layout, inside the checkpoint root (Spark ignores folders it does not know)::

    _ckpt/heartbeat.json     written by the running query every ``interval_s`` seconds
    _ckpt/stop-request.json  written by the provider: please stop between two batches
    _ckpt/stop-ack.json      written by the query once it stopped: where, and how
    _ckpt/stop-withdrawal.json  written by the provider just before it removes a stop request it
                             no longer wants carried out (a failed switchover): which request
    _ckpt/stop-withdrawn.json   written by the query when it did not carry a request out (withdrawn,
                             replaced or expired): it goes on running. A withdrawn request is
                             answered either this way or, by a driver already past its last look
                             at the request, with its stop acknowledgement: never neither
    _ckpt/driver.json        written by the provider's supervisor of a local driver process:
                             running (refreshed every ``interval_s``) or exited, with exit code
    _ckpt/standby-release.json  written by the provider for a standby driver (launched before
                             the old version stopped, waiting in ``await_handover``): start now,
                             at these offsets
    _ckpt/switchover-release.json  written by the provider for a standby before the old version
                             stops: watch the old checkpoint, start once its query stopped clean
                             (:mod:`airflow_ckpt_provider.spark.switchover`)
    _ckpt/switchover-handover.json  written by that standby as it starts: the old checkpoint's
                             handover it read, the offsets it starts at, and when
    _ckpt/switchover-refusal.json  written by that standby when it does not start: why, found
                             and expected (it keeps waiting for the provider)
    _ckpt/delivered.json     written by the job's ``foreach_batch`` wrapper after the job's function
                             returned for a batch: the sink has that batch whole (the sink ledger)
    _ckpt/rehearsal/<id>/    a standby's rehearsal scratch (a short streaming query's checkpoint,
                             output and state export, :mod:`airflow_ckpt_provider.spark.rehearsal`),
                             removed when the rehearsal ends; never part of the checkpoint: the
                             archive leaves it out, and the checkpoint reader never looks in ``_ckpt/``

A standby driver heartbeats in state ``standby`` while it waits; a stop request makes it exit
without writing a single checkpoint file (it acknowledges like a stopped query, with no batch).

All are small JSON objects written whole (write to a temporary name, then rename where
the filesystem allows it). Times are UTC ISO-8601 strings. Each record is decoded by the one codec
(:mod:`airflow_ckpt_provider.records.codec`), derived from its dataclass's fields: it carries format
:data:`CONTROL_FORMAT` (a record without a format number is one of a driver or provider released
before control files had one, read as format 0), a newer format is refused, and a missing field is
refused, with :class:`InvalidControlRecord` (a ``ValueError``) or the record's own ``invalid`` error.
Keys no field declares are ignored: a driver and a provider of different releases exchange these
files, and a field a newer release adds is optional by rule (a change an older reader must not
miss gets a new format number instead).
"""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from airflow_ckpt_provider.clock import utc_now
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, TypedError

CONTROL_DIR = "_ckpt"
HEARTBEAT = f"{CONTROL_DIR}/heartbeat.json"
STOP_REQUEST = f"{CONTROL_DIR}/stop-request.json"
STOP_ACK = f"{CONTROL_DIR}/stop-ack.json"
STOP_WITHDRAWAL = f"{CONTROL_DIR}/stop-withdrawal.json"
STOP_WITHDRAWN = f"{CONTROL_DIR}/stop-withdrawn.json"
DRIVER = f"{CONTROL_DIR}/driver.json"
STANDBY_RELEASE = f"{CONTROL_DIR}/standby-release.json"
DELIVERED = f"{CONTROL_DIR}/delivered.json"
SWITCHOVER_RELEASE = f"{CONTROL_DIR}/switchover-release.json"
SWITCHOVER_HANDOVER = f"{CONTROL_DIR}/switchover-handover.json"
SWITCHOVER_REFUSAL = f"{CONTROL_DIR}/switchover-refusal.json"
#: The folder of a standby's rehearsal scratch folders (one per rehearsal) in a checkpoint on a
#: cluster's filesystem; scratch, never part of the checkpoint (see the layout above).
REHEARSAL_SCRATCH_DIR = f"{CONTROL_DIR}/rehearsal"

#: Spark conf keys the launcher passes to the job (``--conf``); a standby release sets the same
#: keys in the waiting driver's session (see :mod:`airflow_ckpt_provider.spark.kafka`).
CONF_CHECKPOINT_LOCATION = "spark.ckpt.checkpointLocation"
CONF_STARTING_OFFSETS = "spark.ckpt.startingOffsets"
CONF_HANDOVER_JSON = "spark.ckpt.handoverJson"
#: the old query's exported state (a state-manifest.json folder), when the upgrade carries it
CONF_INITIAL_STATE_PATH = "spark.ckpt.initialStatePath"
#: ``true``: the driver is a standby; it waits for its release before starting its query.
CONF_STANDBY = "spark.ckpt.standby"
#: Seconds a standby waits for its release before it exits (default :data:`DEFAULT_STANDBY_TIMEOUT_S`).
CONF_STANDBY_TIMEOUT_S = "spark.ckpt.standbyTimeoutS"
DEFAULT_STANDBY_TIMEOUT_S = 3600.0
#: ``false``: a standby warms up with a batch read only, without its rehearsal (a short stateful
#: streaming query and a state read, :mod:`airflow_ckpt_provider.spark.rehearsal`); default ``true``.
CONF_STANDBY_REHEARSAL = "spark.ckpt.standbyRehearsal"


class HeartbeatState(StrEnum):
    """A query's state in its heartbeat."""

    RUNNING = "running"
    STANDBY = "standby"  # a standby driver: session ready, query not started, waiting for its handover
    STOPPED = "stopped"


#: Heartbeat states of a live driver that a stop request must reach (a query, or a standby).
LIVE_STATES = frozenset({HeartbeatState.RUNNING, HeartbeatState.STANDBY})


class AckOutcome(StrEnum):
    """How a query stopped on request."""

    CLEAN = "clean"  # stopped between batches: last planned == last committed
    INTERRUPTED = "interrupted"  # a planned batch was cut short; its offsets must not be handed over
    HELD = "held"  # the next batch was planned and held at the sink gate before it wrote: its offsets are not used


class DriverStatus(StrEnum):
    """A supervised driver process's state in ``_ckpt/driver.json``."""

    RUNNING = "running"
    EXITED = "exited"


RUNNING = HeartbeatState.RUNNING
STANDBY = HeartbeatState.STANDBY
STOPPED = HeartbeatState.STOPPED
CLEAN = AckOutcome.CLEAN
INTERRUPTED = AckOutcome.INTERRUPTED
HELD = AckOutcome.HELD
#: Outcomes of a driver that stopped its query and wrote nothing after: its ack's batches are final.
STOPPED_OUTCOMES = frozenset({CLEAN, HELD})

T = TypeVar("T", bound="_ControlRecord")
log = logging.getLogger(__name__)


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class ProcessScope:
    """Where a process id means something: the host name, the kernel's boot id and the PID
    namespace. A pid may be looked up or signalled only from the same scope: another host,
    another boot (pids are reused) or another PID namespace (a container, ``unshare --pid``)
    sees other processes under the same number. Scopes match when all three parts are equal and
    the host is known: a handle recorded without boot id or namespace (by hand, or by an older
    version) never matches a scope where they are known."""

    host: str = ""
    boot_id: str = ""
    pid_namespace: str = ""

    @classmethod
    def current(cls) -> ProcessScope:
        """This process's scope (Linux: ``/proc``; elsewhere boot id and namespace stay unknown)."""
        try:
            namespace = os.readlink("/proc/self/ns/pid")
        except OSError:
            namespace = ""
        return cls(socket.gethostname(), _read_text("/proc/sys/kernel/random/boot_id"), namespace)

    def same_as(self, other: ProcessScope) -> bool:
        """Whether a pid recorded in ``other`` names the same process when seen from here."""
        return bool(self.host) and self == other

    def describe(self) -> str:
        return f"host {self.host or '?'}, boot {self.boot_id[:8] or '?'}, {self.pid_namespace or 'pid namespace ?'}"


#: The format number every control record is written with.
CONTROL_FORMAT = 1


class InvalidControlRecord(TypedError, ValueError):
    """A control file that is not its record's JSON: not an object, a format this release does not
    read, or a field missing (callers read it as "not yet": see :func:`parse_record`)."""

    default_action = ("Nothing was changed. A control file is written whole by the provider or the driver: wait for "
                      "the next write, or upgrade the side that reads it when a newer release wrote it.")


class _ControlRecord:
    """A control file's record: a frozen dataclass whose JSON goes through its codec (derived from
    its fields once per class, see the module doc)."""

    #: the error a record that does not decode raises (a record may name its own)
    invalid: ClassVar[type[TypedError]] = InvalidControlRecord
    _codecs: ClassVar[dict[type, Codec]] = {}

    @classmethod
    def codec(cls) -> Codec:
        """The record's codec: every dataclass field, required when it has no default."""
        found = _ControlRecord._codecs.get(cls)
        if found is None:
            specs = {f.name: Field(required=f.default is MISSING and f.default_factory is MISSING)
                     for f in fields(cls)}  # type: ignore[arg-type]
            found = Codec(f"{cls.__name__} control file", cls.invalid, specs, version=CONTROL_FORMAT,
                          versions=(UNVERSIONED,), unknown_keys="ignore")
            _ControlRecord._codecs[cls] = found
        return found

    def to_dict(self) -> dict[str, Any]:
        """The record as its JSON object, with its format number."""
        return self.codec().encode(asdict(self))  # type: ignore[call-overload]

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls: type[T], data: str | bytes) -> T:
        """Decode a control file; :class:`InvalidControlRecord` (or the record's ``invalid`` error)
        when it is not this record's JSON object, the record's own checks' errors beyond that."""
        return cls(**cls.codec().present(data))


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
    boot_id: str = ""
    pid_namespace: str = ""

    def is_alive(self, now: datetime | None = None, missed_beats: float = 3.0) -> bool:
        """Running (or waiting as a standby) and updated within ``missed_beats`` intervals of ``now``."""
        return self.state in LIVE_STATES and _fresh(self.updated_at, self.interval_s, now, missed_beats)

    @property
    def is_standby(self) -> bool:
        """A standby driver: its session is ready, its query waits for the handover."""
        return self.state == STANDBY

    @property
    def scope(self) -> ProcessScope:
        """Where ``pid`` (the driver's Python process) lives."""
        return ProcessScope(self.host, self.boot_id, self.pid_namespace)


def _fresh(updated_at: str, interval_s: float, now: datetime | None, missed_beats: float) -> bool:
    age = ((now or utc_now()) - parse_time(updated_at)).total_seconds()
    return age <= max(interval_s, 0.1) * missed_beats


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
    seen_at: str = ""  # when the driver read the request ("" from drivers before this field)
    boundary_at: str = ""  # when it found the batch boundary and called query.stop()


@dataclass(frozen=True)
class StopWithdrawal(_ControlRecord):
    """The provider takes stop request ``request_id`` back (``_ckpt/stop-withdrawal.json``, written
    before the request file is removed). The driver answers it: :class:`StopWithdrawn` when it goes
    on running, or its :class:`StopAck` when it was already past its last look at the request."""

    request_id: str
    withdrawn_at: str
    withdrawn_by: str = ""


@dataclass(frozen=True)
class StopWithdrawn(_ControlRecord):
    """The driver's answer to a stop request it did not carry out (``_ckpt/stop-withdrawn.json``):
    the query of run ``run_id`` goes on running. ``reason``: ``withdrawn`` (the request file was
    removed), ``replaced`` (another request took its place) or ``expired``; ``seen_at``: when the
    driver first read the request ("" when it never did: withdrawn before the driver looked)."""

    request_id: str
    run_id: str
    query_id: str
    reason: str
    answered_at: str
    seen_at: str = ""


@dataclass(frozen=True)
class Delivery(_ControlRecord):
    """The last batch whose ``foreachBatch`` function returned (its writes are done), by the
    provider's wrapper (:func:`airflow_ckpt_provider.spark.foreach_batch`). Batch ids grow with
    the checkpoint, so a record of batch M says every batch up to M reached the sink."""

    batch_id: int
    delivered_at: str
    query_id: str = ""


@dataclass(frozen=True)
class DriverRecord(_ControlRecord):
    """A local driver process as its supervisor sees it (``_ckpt/driver.json``).

    The supervisor (:mod:`airflow_ckpt_provider.jobs.supervise`) starts spark-submit on the
    launching host and writes this record through the checkpoint's storage: ``running``,
    refreshed every ``interval_s`` seconds, then ``exited`` with the exit code and the log tail
    (secrets redacted). Whoever can read the checkpoint can tell whether the driver lives, from
    any host, container or PID namespace. A record that stopped being refreshed while
    ``running`` means the supervisor was killed with its driver.
    """

    launch_id: str
    state: str
    pid: int  # the process group: the supervisor and the driver it started
    started_at: str
    updated_at: str
    interval_s: float
    host: str = ""
    boot_id: str = ""
    pid_namespace: str = ""
    exit_code: int | None = None
    ended_at: str = ""
    log_tail: str = ""

    def is_alive(self, now: datetime | None = None, missed_beats: float = 3.0) -> bool:
        """Running and refreshed within ``missed_beats`` intervals of ``now``."""
        return self.state == DriverStatus.RUNNING and _fresh(self.updated_at, self.interval_s, now, missed_beats)

    @property
    def scope(self) -> ProcessScope:
        return ProcessScope(self.host, self.boot_id, self.pid_namespace)


@dataclass(frozen=True)
class StandbyRelease(_ControlRecord):
    """The provider's go for a standby driver: start the query now, at these offsets.

    ``starting_offsets`` is the Kafka startingOffsets JSON; ``handover_json`` the full handover
    (optional); ``conf`` more ``spark.ckpt.*`` keys the driver sets before its query starts (the
    same keys a cold launch passes with ``--conf``). ``standby_run_id`` names the standby
    heartbeat's run it is meant for; a driver takes only a release naming its own run (one
    without a run is never taken), so a release left from an earlier upgrade starts no later standby.
    """

    release_id: str
    released_at: str
    starting_offsets: str
    handover_json: str = ""
    conf: dict[str, str] = field(default_factory=dict)
    requested_by: str = ""
    standby_run_id: str = ""

    def spark_conf(self) -> dict[str, str]:
        """Every ``spark.ckpt.*`` key this release sets in the driver's session."""
        keys = {CONF_STARTING_OFFSETS: self.starting_offsets, **{str(k): str(v) for k, v in self.conf.items()}}
        if self.handover_json:
            keys[CONF_HANDOVER_JSON] = self.handover_json
        return keys


def pending_request(request: StopRequest | None, ack: StopAck | None, now: datetime | None = None) -> bool:
    """A stop request still waiting for the query: present, not acknowledged, not expired."""
    return request is not None and not request.is_expired(now) and (ack is None or ack.request_id != request.request_id)


R = TypeVar("R", bound=_ControlRecord)


def parse_record(data: bytes | None, cls: type[R], where: str) -> R | None:
    """The control record in ``data`` (None when the file was missing); an unreadable one is
    logged and read as None, so a half-visible file on an eventually consistent store reads as
    "not yet"."""
    if data is None:
        return None
    try:
        return cls.from_json(data)
    except (ValueError, TypeError) as exc:
        log.warning("ignoring unreadable %s: %s", where, exc)
        return None
