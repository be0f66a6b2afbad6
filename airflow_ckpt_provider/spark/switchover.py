"""Driver-to-driver handover: a released standby starts the moment the old query stopped clean.

The driver half of the switchover. A standby (:mod:`airflow_ckpt_provider.spark.standby`) may be
released for a SWITCHOVER before the old version stops: the provider writes
``_ckpt/switchover-release.json`` (:class:`SwitchoverRelease`) in the NEW checkpoint's control
folder, naming the standby's run, the OLD checkpoint, the stop request it is about to send there,
the start to apply and the plan the approval showed. The standby then watches the old checkpoint's
``_ckpt/``:

* the old query acknowledges the stop request (``StopAck``) with outcome ``clean`` (stopped
  between two batches) or ``held`` (the next batch was held at the sink gate before it wrote
  anything): the standby reads the old checkpoint's handover ITSELF with the provider's own reader
  (:func:`~airflow_ckpt_provider.spark.checkpoint_files.read_handover`: the end offsets of the last
  COMMITTED batch, never the in-flight one), checks that the checkpoint is where the ack says the
  query stopped, applies the chosen start (resume there, explicit offsets, or rewind to the start
  of a retained committed batch), compares it with the approved plan, writes
  ``_ckpt/switchover-handover.json`` (:class:`SwitchoverHandover`: the handover, the starting
  offsets and the times of the stop, the ack, the read and the start) and sets
  ``spark.ckpt.startingOffsets`` and ``spark.ckpt.handoverJson`` in its session: the job starts
  its query exactly as after a normal release, with no Airflow task between the old query's last
  commit and the new query's start. A release with ``seed_state`` carries a stateful query's
  state the same way: the standby reads it after the handover batch with Spark's state reader in
  its own warm session, writes it under its checkpoint's ``_ckpt/seed-state/`` and sets
  ``spark.ckpt.initialStatePath`` (:mod:`airflow_ckpt_provider.spark.state_seed`), so no state
  export job runs inside the downtime;
* anything else — an ``interrupted`` ack (a batch was cut: only the provider's sink ledger can
  tell what the sink holds of it), a stop request that expired unanswered, a handover that cannot
  be read, a start the checkpoint no longer has, a plan that differs from the approved one — and
  the standby does NOT start: it writes ``_ckpt/switchover-refusal.json``
  (:class:`SwitchoverRefusal`: why, what it found and what was expected) and keeps waiting as a
  standby, writing no checkpoint file. The provider decides: it takes the handover itself and
  writes a normal ``StandbyRelease``, or stops the standby with a stop request (it exits as
  always), or the standby's timeout ends it. A refused release is never taken again; a new
  release (another id) is.

Every record the standby writes here (the refusal, the handover) is retried on the store's
errors (:data:`WRITE_ATTEMPTS`); a write that keeps failing ends the driver with
:class:`~airflow_ckpt_provider.checkpoint.errors.SwitchoverRecordNotWritten` (the provider's wait
sees the driver die), and a release counts as refused only once its refusal is written.

Imports only pyspark (through the modules it calls), the standard library, the pure core and
this package's ``spark`` modules: the driver has no Airflow. Not exported by
:mod:`airflow_ckpt_provider.spark` (it imports the core; the standby imports it when it waits).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from py4j.protocol import Py4JError

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    InvalidStartChoice,
    InvalidSwitchoverRelease,
    SwitchoverRecordNotWritten,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.rewind import StartChoice, StartMode, StartPlan, plan_start
from airflow_ckpt_provider.checkpoint.state import state_batch
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.control import (
    CLEAN,
    CONF_HANDOVER_JSON,
    CONF_INITIAL_STATE_PATH,
    CONF_STARTING_OFFSETS,
    HELD,
    STOP_ACK,
    STOP_REQUEST,
    STOPPED_OUTCOMES,
    SWITCHOVER_HANDOVER,
    SWITCHOVER_REFUSAL,
    SWITCHOVER_RELEASE,
    StandbyRelease,
    StopAck,
    StopRequest,
    _ControlRecord,
    parse_time,
)
from airflow_ckpt_provider.spark.checkpoint_files import read_batch_start, read_handover_and_operators
from airflow_ckpt_provider.spark.state_seed import seed_location, seed_state

log = logging.getLogger(__name__)

__all__ = ["SWITCHOVER_MODES", "OldStop", "RefusalReason", "SwitchoverHandover", "SwitchoverRefusal",
           "SwitchoverRefused", "SwitchoverRelease", "SwitchoverWatch", "old_query_stop", "plan_switchover"]

#: The starts a standby can take from the old checkpoint's files alone (at_time needs the broker).
SWITCHOVER_MODES = frozenset({StartMode.RESUME, StartMode.OFFSETS, StartMode.REWIND_TO_BATCH})
#: Attempts at writing a switchover record (the refusal, the handover) before the standby's driver fails.
WRITE_ATTEMPTS = 5
#: The pause before the first retry of such a write, doubled before each next one (3 s in all).
WRITE_RETRY_S = 0.2
#: keys the standby computes itself: a release may not set them
_COMPUTED_KEYS = frozenset({CONF_STARTING_OFFSETS, CONF_HANDOVER_JSON, CONF_INITIAL_STATE_PATH})


def _invalid(found: str, expected: str) -> InvalidSwitchoverRelease:
    return InvalidSwitchoverRelease(found=found, expected=expected)


def _text(name: str, value: object, *, required: bool) -> None:
    if not isinstance(value, str) or (required and not value.strip()):
        raise _invalid(f"{name}={value!r}", f"{name} as a {'non-empty ' if required else ''}string")


@dataclass(frozen=True)
class SwitchoverRelease(_ControlRecord):
    """The provider's go for a standby to take over from the old query once it stops clean.

    ``old_checkpoint``: the old query's checkpoint (its ``_ckpt/`` is watched, its files read).
    ``stop_request_id``: the stop request the provider sends there; "" = the first one requested
    at or after ``released_at`` (the provider's clock wrote both). ``start_mode`` and
    ``start_value``: ``resume`` (no value), ``offsets`` (a startingOffsets JSON naming every
    partition, offsets >= 0) or ``rewind_to_batch`` (a batch id), as the reference DAG's
    ``handover_mode`` takes them; ``at_time`` is refused (it needs the broker). ``source``: the
    Kafka source (index or name, "" = the only one). The approved plan, either part optional:
    ``expected_batch_id`` (the committed batch whose end is handed over) and
    ``expected_starting_offsets`` (JSON); a difference refuses the start. ``accept_reprocessing`` /
    ``accept_data_loss``: the consent a start other than resume needs (as the provider asks it).
    ``conf``: more ``spark.ckpt.*`` keys set before the query starts (not the offsets keys, which
    the standby computes). ``seed_state``: carry the old query's state — the standby reads it after
    the handover batch in its own session and starts the job from it
    (:mod:`airflow_ckpt_provider.spark.state_seed`); without it a stateful old query's successor
    starts with empty state, as the provider's consent said. Construction and :meth:`from_json` raise
    :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidSwitchoverRelease` for anything else.
    """

    release_id: str
    released_at: str
    standby_run_id: str
    old_checkpoint: str
    start_mode: str = StartMode.RESUME.value
    start_value: str = ""
    stop_request_id: str = ""
    source: str = ""
    expected_batch_id: int | None = None
    expected_starting_offsets: str = ""
    accept_reprocessing: bool = False
    accept_data_loss: bool = False
    conf: dict[str, str] = field(default_factory=dict)
    requested_by: str = ""
    seed_state: bool = False

    def __post_init__(self) -> None:
        for name in ("release_id", "released_at", "standby_run_id", "old_checkpoint"):
            _text(name, getattr(self, name), required=True)
        for name in ("start_mode", "start_value", "stop_request_id", "source", "expected_starting_offsets",
                     "requested_by"):
            _text(name, getattr(self, name), required=False)
        try:
            if parse_time(self.released_at).utcoffset() is None:
                raise ValueError("no zone")
        except ValueError:
            raise _invalid(f"released_at={self.released_at!r}", "an ISO 8601 time with its zone") from None
        refuse_credentials(self.old_checkpoint, "old checkpoint location")
        self.choice()  # the start is checked here
        if self.expected_batch_id is not None and (type(self.expected_batch_id) is not int  # noqa: E721 - no bool
                                                   or self.expected_batch_id < 0):
            raise _invalid(f"expected_batch_id={self.expected_batch_id!r}", "a batch id (an integer >= 0) or null")
        self.expected_offsets()
        for name in ("accept_reprocessing", "accept_data_loss", "seed_state"):
            if not isinstance(getattr(self, name), bool):
                raise _invalid(f"{name}={getattr(self, name)!r}", f"{name} as true or false")
        if not isinstance(self.conf, Mapping) or not all(isinstance(k, str) and k.startswith("spark.ckpt.")
                                                         and isinstance(v, str) for k, v in self.conf.items()):
            raise _invalid(f"conf={self.conf!r}", "an object of spark.ckpt.* keys with string values")
        if overridden := sorted(_COMPUTED_KEYS & set(self.conf)):
            raise _invalid(f"conf setting {', '.join(overridden)}",
                           "no offsets or state keys in conf: the standby computes them from the old checkpoint")

    def choice(self) -> StartChoice:
        """The start to apply; :class:`InvalidSwitchoverRelease` for at_time or a bad value."""
        if self.start_mode not in {m.value for m in StartMode}:
            raise _invalid(f"start mode {self.start_mode!r}",
                           f"one of {', '.join(sorted(m.value for m in SWITCHOVER_MODES))}")
        try:
            choice = StartChoice.parse(self.start_mode, self.start_value or None)
        except InvalidStartChoice as exc:
            raise _invalid(f"start {self.start_mode!r} {self.start_value[:120]!r}: {exc.found}", exc.expected) from None
        if choice.mode not in SWITCHOVER_MODES:
            raise _invalid(f"start mode {choice.mode.value}",
                           f"one of {', '.join(sorted(m.value for m in SWITCHOVER_MODES))}: a standby reads its start "
                           "from the old checkpoint's files, with no broker")
        return choice

    def expected_offsets(self) -> KafkaOffsets | None:
        """The approved starting offsets (None when the plan did not fix them)."""
        if not self.expected_starting_offsets:
            return None
        try:
            offsets = KafkaOffsets.from_json(self.expected_starting_offsets)
        except ValueError as exc:
            raise _invalid(f"expected_starting_offsets {self.expected_starting_offsets[:120]!r} ({exc})",
                           'a startingOffsets JSON like {"topic": {"0": 42}}') from None
        if any(offset < 0 for _, _, offset in offsets.items()):
            raise _invalid("expected_starting_offsets with -1/-2 (latest/earliest)",
                           "explicit offsets >= 0 for every partition")
        return offsets

    def standby_release(self, starting_offsets: str, handover_json: str, released_at: str,
                        state_path: str = "") -> StandbyRelease:
        """The release this switchover amounts to once the standby computed its start (and seeded
        the state at ``state_path``)."""
        conf = {**self.conf, **({CONF_INITIAL_STATE_PATH: state_path} if state_path else {})}
        return StandbyRelease(release_id=self.release_id, released_at=released_at, starting_offsets=starting_offsets,
                              handover_json=handover_json, conf=conf, requested_by=self.requested_by,
                              standby_run_id=self.standby_run_id)


class RefusalReason(StrEnum):
    """Why a standby did not start on its switchover release."""

    STOP_NOT_CLEAN = "stop_not_clean"  # the old query's ack is not clean or held (a batch was cut)
    STOP_EXPIRED = "stop_expired"  # the stop request expired unanswered: the old query may still run
    HANDOVER_UNREADABLE = "handover_unreadable"  # the old checkpoint's handover could not be read
    CHECKPOINT_MOVED = "checkpoint_moved"  # the old checkpoint is not where the ack says the query stopped
    START_UNAVAILABLE = "start_unavailable"  # the chosen start is not in the checkpoint / lacks consent
    PLAN_CHANGED = "plan_changed"  # the handover or the start differs from the approved plan
    STATE_NOT_SEEDED = "state_not_seeded"  # the old query's state could not be read and seeded


@dataclass(frozen=True)
class SwitchoverRefusal(_ControlRecord):
    """A standby's no to its switchover release (``_ckpt/switchover-refusal.json``): it did not
    start, and waits for the provider."""

    release_id: str
    standby_run_id: str
    reason: str
    found: str
    expected: str
    refused_at: str
    old_checkpoint: str = ""
    stop_request_id: str = ""
    ack_outcome: str = ""
    handover_json: str = ""


@dataclass(frozen=True)
class SwitchoverHandover(_ControlRecord):
    """What a standby started from (``_ckpt/switchover-handover.json``), with the times that split
    the downtime: the stop asked, acknowledged (the old query's last batch is final), seen by the
    standby, the handover read, the state seeded, the new query released. ``state_path``: where it
    seeded the old query's state (its ``state-manifest.json`` lists rows and checksum per store; ""
    when it carried none), ``state_rows`` how many rows."""

    release_id: str
    standby_run_id: str
    old_checkpoint: str
    stop_request_id: str
    ack_outcome: str
    handover_json: str
    starting_offsets: str
    start_mode: str
    start_value: str
    release_written_at: str
    stop_requested_at: str
    stop_acknowledged_at: str
    ack_seen_at: str
    handover_read_at: str
    released_at: str
    reprocessed: int = 0
    skipped: int = 0
    state_path: str = ""
    state_rows: int = 0
    state_seeded_at: str = ""

    def handover(self) -> Handover:
        return Handover.from_json(self.handover_json)


class StopState(StrEnum):
    WAITING = "waiting"  # no stop request for this release yet, or one not answered yet
    STOPPED = "stopped"  # acknowledged clean or held: the old query's committed batches are final
    NOT_CLEAN = "not_clean"  # acknowledged otherwise
    EXPIRED = "expired"  # the request expired unanswered


@dataclass(frozen=True)
class OldStop:
    """Where the old query's stop stands for a switchover release."""

    state: StopState
    request: StopRequest | None = None
    ack: StopAck | None = None


def old_query_stop(release: SwitchoverRelease, request: StopRequest | None, ack: StopAck | None,
                   now: datetime | None = None) -> OldStop:
    """The old query's stop for ``release``, from the old checkpoint's request and ack. The request
    is the one the release names, else one requested at or after the release; an ack counts when it
    answers that request (an ack left from an earlier stop answers none)."""
    if release.stop_request_id:
        mine = request if request is not None and request.request_id == release.stop_request_id else None
        answer_to = release.stop_request_id
    else:
        mine = request if request is not None and _not_before(request.requested_at, release.released_at) else None
        answer_to = mine.request_id if mine is not None else ""
    if ack is not None and answer_to and ack.request_id == answer_to:
        return OldStop(StopState.STOPPED if ack.outcome in STOPPED_OUTCOMES else StopState.NOT_CLEAN, mine, ack)
    if mine is not None and mine.is_expired(now):
        return OldStop(StopState.EXPIRED, mine)
    return OldStop(StopState.WAITING, mine)


def _not_before(moment: str, since: str) -> bool:
    try:
        return parse_time(moment) >= parse_time(since)
    except (TypeError, ValueError):
        return False


class SwitchoverRefused(Exception):  # noqa: N818 - a refusal is an answer, not a failure
    """The standby does not start: ``reason``, ``found``, ``expected`` (see :class:`SwitchoverRefusal`)."""

    def __init__(self, reason: RefusalReason, found: str, expected: str) -> None:
        super().__init__(f"{reason.value}: found {found}; expected {expected}")
        self.reason = reason
        self.found = found
        self.expected = expected


def _batch(batch: int | None) -> str:
    return "no batch (its initial offsets)" if batch is None else f"batch {batch}"


def plan_switchover(release: SwitchoverRelease, handover: Handover, ack: StopAck,
                    batch_start: Callable[[int], Handover]) -> StartPlan:
    """Where the standby starts, from the old checkpoint's ``handover`` read after the old query's
    ``ack``: checked against the ack (the checkpoint committed exactly what the ack says, and nothing
    in flight unless the ack held it at the gate), the chosen start applied (``batch_start(K)``: where
    committed batch K started, from the checkpoint), consent and the approved plan compared.
    Pure but for ``batch_start``. Raises :class:`SwitchoverRefused`."""
    allowed_in_flight = ack.last_planned_batch if ack.outcome == HELD else None
    if handover.batch_id != ack.last_committed_batch or handover.in_flight_batch != allowed_in_flight:
        raise SwitchoverRefused(
            RefusalReason.CHECKPOINT_MOVED,
            f"the old checkpoint's last committed batch is {_batch(handover.batch_id)}, in flight "
            f"{_batch(handover.in_flight_batch) if handover.in_flight_batch is not None else 'none'}",
            f"what the {ack.outcome} stop acknowledged: last committed {_batch(ack.last_committed_batch)}, in flight "
            f"{_batch(allowed_in_flight) if allowed_in_flight is not None else 'none'}")
    source = release.source or None
    try:
        resume_at = handover.kafka_offsets(source)
        choice = release.choice()
        if choice.mode is StartMode.REWIND_TO_BATCH:
            assert choice.batch is not None
            start = batch_start(choice.batch).kafka_offsets(source)
        elif choice.mode is StartMode.OFFSETS:
            assert choice.offsets is not None
            start = choice.offsets
        else:
            start = resume_at
        plan = plan_start(choice, resume_at, start)
        plan.require_consent(accept_reprocessing=release.accept_reprocessing,
                             accept_data_loss=release.accept_data_loss)
    except CheckpointError as exc:
        raise SwitchoverRefused(RefusalReason.START_UNAVAILABLE, f"{exc.summary}: {exc.found}", exc.expected) from None
    differences = []
    if release.expected_batch_id is not None and handover.batch_id != release.expected_batch_id:
        differences.append((f"handover from {_batch(handover.batch_id)}",
                            f"handover from {_batch(release.expected_batch_id)}"))
    expected = release.expected_offsets()
    if expected is not None and plan.starting_offsets != expected:
        differences.append((f"starting offsets {plan.starting_offsets.to_json()}",
                            f"starting offsets {expected.to_json()}"))
    if differences:
        raise SwitchoverRefused(RefusalReason.PLAN_CHANGED, "; ".join(f for f, _ in differences),
                                "the approved plan: " + "; ".join(e for _, e in differences))
    return plan


def _positions(offsets: KafkaOffsets) -> str:
    """``topic-0 at 120, topic-1 at 98`` for a log line."""
    return ", ".join(f"{topic}-{partition} at {offset}" for topic, partition, offset in offsets.items())


class SwitchoverWatch:
    """The standby's side of a switchover (see the module doc): :meth:`poll` once per round of the
    standby's wait. ``files`` are the standby's own control files (``graceful_stop.HadoopFiles`` of
    the new checkpoint), ``read_record`` reads one control record through such files."""

    def __init__(self, spark: Any, files: Any, run_id: str, read_record: Callable[[Any, str, Any], Any], *,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.spark = spark
        self.files = files
        self._sleep = sleep
        self.run_id = run_id
        self._read_record = read_record
        self.refused: set[str] = set()
        self._release: SwitchoverRelease | None = None
        self._old: Any = None
        self._taken_at = 0.0
        self._request_seen: str = ""

    def poll(self) -> StandbyRelease | None:
        """The release to start with once the old query stopped clean and the start was planned;
        None while waiting (or after a refusal, written to ``_ckpt/switchover-refusal.json``)."""
        release = self._read_record(self.files, SWITCHOVER_RELEASE, SwitchoverRelease)
        if release is None or release.standby_run_id != self.run_id or release.release_id in self.refused:
            return None
        if self._release is None or self._release.release_id != release.release_id:
            self._take(release)
        stop = old_query_stop(release, self._read_record(self._old, STOP_REQUEST, StopRequest),
                              self._read_record(self._old, STOP_ACK, StopAck))
        if stop.state is StopState.WAITING:
            if stop.request is not None and stop.request.request_id != self._request_seen:
                self._request_seen = stop.request.request_id
                log.info("the old query on %s was asked to stop (request %s, by %s): waiting for its acknowledgement",
                         release.old_checkpoint, stop.request.request_id, stop.request.requested_by or "unknown")
            return None
        if stop.state is StopState.EXPIRED:
            assert stop.request is not None
            self._refuse(release, RefusalReason.STOP_EXPIRED,
                         f"stop request {stop.request.request_id} expired at {stop.request.expires_at} unanswered",
                         "an acknowledged clean stop of the old query", stop)
            return None
        assert stop.ack is not None
        if stop.state is StopState.NOT_CLEAN:
            ack = stop.ack
            self._refuse(release, RefusalReason.STOP_NOT_CLEAN,
                         f"the old query stopped {ack.outcome}: last committed {_batch(ack.last_committed_batch)}, "
                         f"last planned {_batch(ack.last_planned_batch)}",
                         f"a stop acknowledged {CLEAN} or {HELD} (a cut batch is for the provider's sink ledger)",
                         stop)
            return None
        return self._start(release, stop)

    def _take(self, release: SwitchoverRelease) -> None:
        from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles

        self._release, self._taken_at, self._request_seen = release, time.monotonic(), ""
        self._old = HadoopFiles(self.spark, release.old_checkpoint)
        log.info("released for a switchover (release %s): waiting for the old query on %s to stop%s, then starting "
                 "with %s", release.release_id, release.old_checkpoint,
                 f" (stop request {release.stop_request_id})" if release.stop_request_id else "",
                 release.choice().describe())

    def _start(self, release: SwitchoverRelease, stop: OldStop) -> StandbyRelease | None:
        assert stop.ack is not None
        ack_seen_at = utc_iso(timespec="milliseconds")
        log.info("the old query stopped %s (last committed batch %s), %.1f s after the switchover release: reading "
                 "its checkpoint", stop.ack.outcome, stop.ack.last_committed_batch, time.monotonic() - self._taken_at)
        started = time.monotonic()
        try:
            handover, operators = read_handover_and_operators(self.spark, release.old_checkpoint)
        except (CheckpointError, OSError) as exc:
            found = f"{exc.summary}: {exc.found}" if isinstance(exc, CheckpointError) else str(exc)
            self._refuse(release, RefusalReason.HANDOVER_UNREADABLE, found,
                         "the handover of the old checkpoint's last committed batch", stop)
            return None
        handover_read_at = utc_iso(timespec="milliseconds")
        try:
            plan = plan_switchover(release, handover, stop.ack,
                                   lambda batch: read_batch_start(self.spark, release.old_checkpoint, batch))
        except SwitchoverRefused as refused:
            self._refuse(release, refused.reason, refused.found, refused.expected, stop, handover)
            return None
        starting = plan.starting_offsets.to_json()
        state_path, state_rows, state_seeded_at = "", 0, ""
        if release.seed_state:
            target = seed_location(self.files.root, release.release_id)
            try:
                batch = state_batch(HandoverResult(handover, plan.starting_offsets, start_plan=plan))
                seeded = seed_state(self.spark, handover, batch, target, upgrade_id=release.release_id,
                                    operators=operators)
            except Exception as exc:  # noqa: BLE001 - Spark's and the reader's errors alike: refuse, start nothing
                found = f"{exc.summary}: {exc.found}" if isinstance(exc, CheckpointError) else \
                    f"{type(exc).__name__}: {str(exc)[:500]}"
                self._refuse(release, RefusalReason.STATE_NOT_SEEDED, found,
                             "the old query's state where the new version starts, read in this session", stop,
                             handover)
                return None
            if seeded is not None:
                state_path, state_rows = target, seeded.rows
            state_seeded_at = utc_iso(timespec="milliseconds")
        released_at = utc_iso(timespec="milliseconds")
        record = SwitchoverHandover(
            release_id=release.release_id, standby_run_id=self.run_id, old_checkpoint=release.old_checkpoint,
            stop_request_id=stop.ack.request_id, ack_outcome=stop.ack.outcome, handover_json=handover.to_json(),
            starting_offsets=starting, start_mode=plan.choice.mode.value, start_value=plan.choice.value(),
            release_written_at=release.released_at,
            stop_requested_at=stop.request.requested_at if stop.request is not None else "",
            stop_acknowledged_at=stop.ack.stopped_at, ack_seen_at=ack_seen_at, handover_read_at=handover_read_at,
            released_at=released_at, reprocessed=plan.reprocessed, skipped=plan.skipped, state_path=state_path,
            state_rows=state_rows, state_seeded_at=state_seeded_at)
        self._write(SWITCHOVER_HANDOVER, record, "the handover it starts from")
        log.info("handover read in %.1f s: %s committed, %s; starting %s (%d records processed again, %d skipped)",
                 time.monotonic() - started, _batch(handover.batch_id),
                 f"batch {handover.in_flight_batch} held at the gate and not handed over"
                 if handover.in_flight_batch is not None else "nothing in flight", _positions(plan.starting_offsets),
                 plan.reprocessed, plan.skipped)
        return release.standby_release(starting, handover.to_json(), released_at, state_path)

    def _write(self, rel: str, record: _ControlRecord, what: str) -> None:
        """Write ``record`` to ``rel`` in the standby's checkpoint, retried :data:`WRITE_ATTEMPTS` times
        on the store's errors; :class:`SwitchoverRecordNotWritten` when every attempt failed (the
        driver ends: the provider must not wait for an answer that was never written)."""
        data = record.to_json().encode()
        pause = WRITE_RETRY_S
        for attempt in range(1, WRITE_ATTEMPTS + 1):
            try:
                self.files.write(rel, data)
                return
            except (OSError, Py4JError) as exc:  # the store's error, through py4j or from the rename's check
                if attempt == WRITE_ATTEMPTS:
                    raise SwitchoverRecordNotWritten(
                        found=f"{what} ({rel}) not written after {attempt} attempts: {str(exc)[:500]}",
                        expected=f"{rel} written in {self.files.root}, so the provider reads the standby's answer",
                        path=str(self.files.root)) from exc
                log.warning("could not write %s (%s), attempt %d of %d: %s; retrying in %.1f s", what, rel, attempt,
                            WRITE_ATTEMPTS, str(exc)[:300], pause)
                self._sleep(pause)
                pause *= 2

    def _refuse(self, release: SwitchoverRelease, reason: RefusalReason, found: str, expected: str, stop: OldStop,
                handover: Handover | None = None) -> None:
        """Write the refusal (retried; :class:`SwitchoverRecordNotWritten` ends the driver), then mark
        the release refused: a refusal not written is never taken for given."""
        refusal = SwitchoverRefusal(
            release_id=release.release_id, standby_run_id=self.run_id, reason=reason.value, found=found,
            expected=expected, refused_at=utc_iso(timespec="milliseconds"), old_checkpoint=release.old_checkpoint,
            stop_request_id=stop.request.request_id if stop.request is not None else release.stop_request_id,
            ack_outcome=stop.ack.outcome if stop.ack is not None else "",
            handover_json=handover.to_json() if handover is not None else "")
        self._write(SWITCHOVER_REFUSAL, refusal, "its refusal")
        self.refused.add(release.release_id)
        self._release = None
        log.warning("not starting on switchover release %s (%s): found %s; expected %s. Still waiting as a standby "
                    "(no checkpoint file written) for the provider's release or stop request",
                    release.release_id, reason.value, found, expected)

