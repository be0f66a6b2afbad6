"""Graceful stop without Spark: the value objects and decisions of the stop protocol. Pure: no I/O
(the control files, the batch listings and the steps that poll and wait are
:mod:`airflow_ckpt_provider.storage.stop`).

The running query (see :mod:`airflow_ckpt_provider.spark.graceful_stop`) and the requester (the
Airflow operator and trigger, or ``ckpt stop``) talk through three small JSON files under the
checkpoint's ``_ckpt/`` folder (:mod:`airflow_ckpt_provider.records.control`). This module holds:

* :class:`StopResult` — what a stop achieved (graceful, escalated, not running), as XCom JSON;
* :class:`StopReason` — why waiting ended (shared by the trigger, the operator and the CLI);
* pure decisions: :func:`heartbeat_alive`, :func:`ack_answers`, :func:`wait_decision`,
  :func:`withdrawal_decision` (:class:`WithdrawalVerdict`: how a withdrawn request was answered),
  :func:`quiet_verdict`, and :func:`classify_query` (:class:`QueryLiveness`: running with or
  without GracefulStop, stopped, or no heartbeat ever written so nobody can tell);
and, in :mod:`airflow_ckpt_provider.storage.stop`:

* ``ControlFiles`` — read/write the control files and list ``offsets/`` and ``commits/``
  through any fsspec filesystem, and ``wait_quiet``, the bounded post-stop check;
* the steps every requester takes: ``begin_stop`` (write or join the request, or find
  nothing running), ``wait_for_ack`` (the synchronous twin of the trigger),
  ``finish_stop`` (escalate through an injected ``kill`` on timeout, then check the quiet).

Protocol rules: a request carries ``expires_at`` (request time + stop timeout) so a driver
started later never honours a request its requester gave up on; a pending request is joined,
not replaced, so concurrent callers wait for the same acknowledgement; after an escalation the
request is withdrawn. A request withdrawn while its driver may still carry it out (a failed
switchover) is a two-sided handshake: the requester writes ``_ckpt/stop-withdrawal.json``, removes
the request and waits (bounded) for the driver's answer, ``_ckpt/stop-withdrawn.json`` (it goes on)
or its acknowledgement (it was past its last look and stopped): :func:`withdrawal_decision`.

Imports neither Airflow nor Spark.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidStopResult
from airflow_ckpt_provider.clock import epoch_seconds, utc_now
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, object_of, one_of
from airflow_ckpt_provider.records.control import (
    Heartbeat,
    StopAck,
    StopRequest,
    StopWithdrawn,
)

log = logging.getLogger(__name__)
DEFAULT_MISSED_BEATS = 3.0
#: How long a supervised driver may take to exit after its query stopped.
DEFAULT_EXIT_GRACE_S = 120.0


class StopOutcome(StrEnum):
    """How the query ended up stopped."""

    GRACEFUL = "graceful"  # the query acknowledged the request (clean or interrupted: see the ack)
    ESCALATED = "escalated"  # no acknowledgement in time: the job was killed
    NOT_RUNNING = "not_running"  # nothing ran (or it went away by itself): nothing was stopped
    #: no heartbeat was ever written and nothing committed while we watched: whether a query runs
    #: (without GracefulStop, on an idle topic) cannot be seen; nothing was stopped
    NO_HEARTBEAT = "no_heartbeat"
    #: a job without GracefulStop killed through its cluster manager on purpose (no stop request was
    #: written; ``StopResult.escalation`` says how)
    KILLED = "killed"


class StopReason(StrEnum):
    """Why waiting for the acknowledgement ended (trigger event reasons, shared with the operator)."""

    ACKNOWLEDGED = "acknowledged"
    TIMEOUT = "timeout"
    NOT_RUNNING = "not_running"  # the heartbeat stopped (or went stale) without an acknowledgement


@dataclass(frozen=True)
class BatchState:
    """The highest batch ids in ``offsets/`` (planned) and ``commits/`` (committed); None if none."""

    last_planned_batch: int | None
    last_committed_batch: int | None

    @property
    def interrupted_batch(self) -> int | None:
        """The planned batch that never committed (its offsets must not be handed over), else None."""
        planned, committed = self.last_planned_batch, self.last_committed_batch
        if planned is not None and (committed is None or planned > committed):
            return planned
        return None


@dataclass(frozen=True)
class StopResult:
    """What a graceful stop achieved; returned as XCom (``to_dict``) and by ``ckpt stop --json``.

    ``last_committed_batch`` / ``interrupted_batch`` come from listing the checkpoint AFTER the
    stop (not from the acknowledgement, which is kept in ``ack``); ``waited_s`` runs from the
    stop request to the end of the quiet check.
    """

    checkpoint_uri: str
    outcome: StopOutcome
    last_committed_batch: int | None
    interrupted_batch: int | None
    waited_s: float
    last_planned_batch: int | None = None
    request_id: str | None = None
    query_id: str | None = None
    ack: Mapping[str, Any] | None = field(default=None, hash=False)
    escalation: str | None = None
    timeline: Mapping[str, float] | None = field(default=None, hash=False)
    detail: str | None = None  # when nothing was stopped: the query's status in words (QueryLiveness)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "outcome", StopOutcome(self.outcome))
        except ValueError:
            raise InvalidStopResult(
                found=f"outcome {self.outcome!r}", expected=f"one of {', '.join(o.value for o in StopOutcome)}"
            ) from None
        if self.ack is not None:
            object.__setattr__(self, "ack", dict(self.ack))
        if self.timeline is not None:
            object.__setattr__(self, "timeline", dict(self.timeline))

    def describe_timeline(self) -> str:
        """Where the stop's time went, in words ("" when unknown)."""
        return describe_stop_timeline(self.timeline or {})

    @property
    def clean(self) -> bool:
        """Stopped between two batches: nothing planned is left uncommitted."""
        return self.interrupted_batch is None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = self.outcome.value
        return _STOP_RESULT.encode(data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> StopResult:
        """Rebuild from :meth:`to_json` output or its dict (the stop step's XCom, as the journal
        records it) through its strict codec; :class:`InvalidStopResult` for anything else."""
        return cls(**_STOP_RESULT.decode(data))


_BATCH = Field((int,), nullable=True)
_TEXT_OR_NULL = Field((str,), required=False, nullable=True)
#: :class:`StopResult`'s codec: the keys and types :meth:`StopResult.to_dict` writes (no format
#: number, as today's release writes it); ``ack`` is the driver's own StopAck record, kept as it
#: wrote it (an object).
_STOP_RESULT = Codec("StopResult", InvalidStopResult, {
    "checkpoint_uri": Field((str,)),
    "outcome": Field((str,), decode=one_of(*StopOutcome, decode=StopOutcome)),
    "last_committed_batch": _BATCH,
    "interrupted_batch": _BATCH,
    "waited_s": Field((float,)),
    "last_planned_batch": Field((int,), required=False, nullable=True),
    "request_id": _TEXT_OR_NULL,
    "query_id": _TEXT_OR_NULL,
    "ack": Field((dict,), required=False, nullable=True),
    "escalation": _TEXT_OR_NULL,
    "timeline": Field((dict,), required=False, nullable=True, decode=object_of(float),
                      expected="seconds (a number) by phase, or null"),
    "detail": _TEXT_OR_NULL,
}, versions=(UNVERSIONED,))


# -- pure decisions ---------------------------------------------------------------------------------


def heartbeat_alive(
    heartbeat: Heartbeat | None, now: datetime | None = None, missed_beats: float = DEFAULT_MISSED_BEATS
) -> bool:
    """A heartbeat in state running, refreshed within ``missed_beats`` of its intervals."""
    return heartbeat is not None and heartbeat.is_alive(now, missed_beats)


def ack_answers(ack: StopAck | None, request_id: str, run_id: str = "") -> bool:
    """Whether ``ack`` answers our request: same request id, or written by the run we asked.

    The run id covers a concurrent second requester whose request replaced ours before the
    query read it: the query stopped once and acknowledged the request it saw.
    """
    if ack is None:
        return False
    return ack.request_id == request_id or bool(run_id) and ack.run_id == run_id


def wait_decision(
    *,
    ack: StopAck | None,
    heartbeat: Heartbeat | None,
    request_id: str,
    run_id: str,
    now: float,
    deadline: float,
    missed_beats: float = DEFAULT_MISSED_BEATS,
) -> StopReason | None:
    """One poll of the wait for an acknowledgement; None means keep waiting.

    ``run_id`` is the run whose live heartbeat we saw when we asked ("" if there was none: a
    driver that does not heartbeat can only acknowledge or time out). ``now`` and ``deadline``
    are epoch seconds. An acknowledgement wins over everything; then a heartbeat that stopped,
    went stale or belongs to another run means our query ended without acknowledging; then the
    deadline. A missing heartbeat file alone never ends the wait.
    """
    if ack_answers(ack, request_id, run_id):
        return StopReason.ACKNOWLEDGED
    if run_id and heartbeat is not None:  # a missing file is "not yet readable", not "gone"
        moment = datetime.fromtimestamp(now, timezone.utc)
        if heartbeat.run_id != run_id or not heartbeat_alive(heartbeat, moment, missed_beats):
            return StopReason.NOT_RUNNING
    if now >= deadline:
        return StopReason.TIMEOUT
    return None


class WithdrawalVerdict(StrEnum):
    """How the driver answered a withdrawn stop request (:func:`withdrawal_decision`)."""

    ACKNOWLEDGED = "acknowledged"  # it was past its last look at the request: it stopped
    CONTINUING = "continuing"  # it answered "withdrawn": its query goes on
    DRIVER_GONE = "driver gone"  # no answer, and its heartbeat stopped or went stale: it does not run
    NO_ANSWER = "no answer"  # no answer by the deadline, its heartbeat still live: whether it stops is unknown

    @property
    def old_stopped(self) -> bool:
        """Whether to record that the old query stopped, so the rollback restarts it. Only its own
        answer says it goes on; without one the safe side is "stopped": a restart refuses a
        checkpoint whose heartbeat lives (``QueryStillRunning``), while a journal that says "runs"
        about a driver that did stop leaves the stream with none."""
        return self is not WithdrawalVerdict.CONTINUING


def withdrawal_decision(
    *,
    ack: StopAck | None,
    answer: StopWithdrawn | None,
    heartbeat: Heartbeat | None,
    request_id: str,
    now: float,
    deadline: float,
    missed_beats: float = DEFAULT_MISSED_BEATS,
) -> WithdrawalVerdict | None:
    """One poll of the wait for the answer to withdrawn request ``request_id``; None means keep
    waiting. The acknowledgement of that request wins (the driver stopped, whatever else it
    wrote), then the driver's "withdrawn" answer to it, then a heartbeat that stopped or went stale
    (a missing heartbeat file is "not readable yet"), then the deadline (``now`` and ``deadline``:
    epoch seconds)."""
    if ack is not None and ack.request_id == request_id:
        return WithdrawalVerdict.ACKNOWLEDGED
    if answer is not None and answer.request_id == request_id:
        return WithdrawalVerdict.CONTINUING
    if heartbeat is not None and not heartbeat_alive(heartbeat, datetime.fromtimestamp(now, timezone.utc),
                                                     missed_beats):
        return WithdrawalVerdict.DRIVER_GONE
    if now >= deadline:
        return WithdrawalVerdict.NO_ANSWER
    return None


def quiet_verdict(before: BatchState, after: BatchState, alive: bool, *, watch_commits: bool = False) -> str | None:
    """None when the checkpoint is quiet; else what is wrong, in words.

    Quiet means: no offsets file newer than ``before`` appeared, and no live heartbeat. With
    ``watch_commits`` (after a kill: a driver can outlive its manager's KILLED and commit the batch
    it had planned) a ``commits/N`` newer than ``before`` breaks the quiet too.
    """
    old = -1 if before.last_planned_batch is None else before.last_planned_batch
    if after.last_planned_batch is not None and after.last_planned_batch > old:
        return (f"offsets/{after.last_planned_batch} appeared after the stop "
                f"(last planned batch was {before.last_planned_batch})")
    committed = -1 if before.last_committed_batch is None else before.last_committed_batch
    if watch_commits and after.last_committed_batch is not None and after.last_committed_batch > committed:
        return (f"commits/{after.last_committed_batch} appeared after the stop "
                f"(last committed batch was {before.last_committed_batch})")
    if alive:
        return "the heartbeat is still being refreshed"
    return None


class QueryStatus(StrEnum):
    """What a checkpoint's heartbeat and commits say about the query on it."""

    RUNNING = "running"  # a live GracefulStop heartbeat (a query, or a standby waiting)
    RUNNING_WITHOUT_GRACEFUL_STOP = "running without GracefulStop"  # commits no heartbeat beats for
    STOPPED = "stopped"  # its heartbeat stopped or went stale, and nothing committed since
    NO_HEARTBEAT = "no heartbeat"  # none ever written and nothing seen committing: cannot tell


@dataclass(frozen=True)
class LastCommit:
    """The newest ``commits/N``: its batch id and modification time (epoch s; None if the store
    does not say)."""

    batch_id: int
    committed_at: float | None = None


#: What to do about a query the provider cannot ask to stop.
WITHOUT_GRACEFUL_STOP_ACTION = (
    "Add GracefulStop to the job (docs: spark-side.md) so it can stop between batches, or stop it with its "
    "launch handle (`ckpt stop --pid PGID`, or GracefulStopOperator's launch_handle, which kills it after "
    "stop_timeout) or by killing its driver."
)
#: What to do when no heartbeat was ever written and nothing commits.
NO_HEARTBEAT_ACTION = (
    "If a job runs on this checkpoint, it runs without GracefulStop: add GracefulStop to it (docs: "
    "spark-side.md), or stop it with its launch handle (`ckpt stop --pid PGID`, or GracefulStopOperator's "
    "launch_handle) or by killing its driver. If none runs, there is nothing to stop."
)


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{max(seconds, 0.0):.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class QueryLiveness:
    """A query's status (:func:`classify_query`) with its evidence, for logs, ``ckpt`` and XCom."""

    status: QueryStatus
    heartbeat: Heartbeat | None
    last_commit: LastCommit | None
    commit_age_s: float | None
    new_batches: bool = False  # batches appeared while the caller watched

    def _last_commit(self) -> str:
        if self.last_commit is None:
            return "no batch committed yet"
        age = "" if self.commit_age_s is None else f", {_age(self.commit_age_s)} ago"
        return f"last commit: batch {self.last_commit.batch_id}{age}"

    def describe(self) -> str:
        """The status in one line, with its evidence."""
        beat = self.heartbeat
        if self.status is QueryStatus.RUNNING:
            assert beat is not None
            return f"running with GracefulStop (run {beat.run_id}, {beat.state}, heartbeat {beat.updated_at})"
        if self.status is QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP:
            seen = "new batches appeared while watching" if self.new_batches else self._last_commit()
            why = ("no heartbeat was ever written under _ckpt/" if beat is None else
                   f"its last heartbeat (run {beat.run_id}, {beat.state}) dates from {beat.updated_at}, before them")
            return f"running without GracefulStop: {seen}; {why}"
        if self.status is QueryStatus.NO_HEARTBEAT:
            return ("no heartbeat was ever written under _ckpt/, so whether a query runs without GracefulStop "
                    f"cannot be seen (nothing committed while watching); {self._last_commit()}")
        assert beat is not None
        return (f"not running: the heartbeat of run {beat.run_id} is {beat.state}, last updated {beat.updated_at}; "
                f"{self._last_commit()}")

    def action(self) -> str:
        """What to do ("" when there is nothing to do)."""
        if self.status is QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP:
            return WITHOUT_GRACEFUL_STOP_ACTION
        if self.status is QueryStatus.NO_HEARTBEAT:
            return NO_HEARTBEAT_ACTION
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status.value, "detail": self.describe(), "action": self.action(),
                "last_committed_batch": self.last_commit.batch_id if self.last_commit else None,
                "last_commit_age_s": None if self.commit_age_s is None else round(self.commit_age_s, 1),
                "heartbeat": self.heartbeat.to_dict() if self.heartbeat else None}


def classify_query(
    heartbeat: Heartbeat | None,
    last_commit: LastCommit | None,
    *,
    now: float,
    new_batches: bool = False,
    recent_s: float | None = None,
    missed_beats: float = DEFAULT_MISSED_BEATS,
) -> QueryLiveness:
    """Classify the query on a checkpoint (``now`` in epoch seconds).

    * a live heartbeat: :attr:`QueryStatus.RUNNING`;
    * otherwise batches that commit with no heartbeat beating for them — ``new_batches`` seen
      while the caller watched, or (with ``recent_s``) a last commit at most ``recent_s`` old and
      newer than the last heartbeat's beats — :attr:`~QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP`;
    * otherwise no heartbeat file at all: :attr:`~QueryStatus.NO_HEARTBEAT` (a query without
      GracefulStop on an idle topic looks exactly like no query);
    * otherwise :attr:`~QueryStatus.STOPPED`.
    """
    moment = datetime.fromtimestamp(now, timezone.utc)
    committed_at = last_commit.committed_at if last_commit else None
    age = None if committed_at is None else now - committed_at

    def liveness(status: QueryStatus) -> QueryLiveness:
        return QueryLiveness(status, heartbeat, last_commit, age, new_batches)

    if heartbeat_alive(heartbeat, moment, missed_beats):
        return liveness(QueryStatus.RUNNING)
    recent = recent_s is not None and age is not None and age <= recent_s
    if recent and heartbeat is not None and committed_at is not None:
        beaten_until = epoch_seconds(heartbeat.updated_at)
        recent = beaten_until is None or committed_at > beaten_until + heartbeat.interval_s * missed_beats
    if new_batches or recent:
        return liveness(QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP)
    return liveness(QueryStatus.NO_HEARTBEAT if heartbeat is None else QueryStatus.STOPPED)


#: The stop's phases, in order, as :func:`stop_timeline` names them.
STOP_PHASES = ("driver saw the request", "batch boundary found", "query stopped and acknowledged",
               "requester noticed the acknowledgement", "no acknowledgement: waited, then killed", "quiet check")


def stop_timeline(request: StopRequest, ack: StopAck | None, noticed_at: float, ended_at: float) -> dict[str, float]:
    """Seconds spent in each phase of a stop, from the request to the end of the quiet check.

    The phases (:data:`STOP_PHASES`) come from the request's and the acknowledgement's times
    (the driver's clock for ``seen_at``/``boundary_at``/``stopped_at``) and this side's epoch
    seconds ``noticed_at`` (the acknowledgement read) and ``ended_at`` (the quiet check done).
    A phase whose times are unknown (an acknowledgement from an older driver, an escalation)
    is left out; negative spans from clock skew count as 0. Without an acknowledgement the wait
    is "no acknowledgement: waited, then killed" (the quiet check after it includes the kill),
    never an acknowledgement noticed.
    """
    marks: list[float | None] = [epoch_seconds(request.requested_at)]
    if ack is not None:
        marks += [epoch_seconds(ack.seen_at), epoch_seconds(ack.boundary_at), epoch_seconds(ack.stopped_at)]
    else:
        marks += [None, None, None]
    marks += [noticed_at, ended_at]
    names = [name for name in STOP_PHASES
             if name != ("no acknowledgement: waited, then killed" if ack is not None
                         else "requester noticed the acknowledgement")]
    timeline: dict[str, float] = {}
    previous = marks[0]
    for name, mark in zip(names, marks[1:], strict=True):
        if mark is None or previous is None:
            previous = mark if mark is not None else previous
            continue
        timeline[name] = round(max(0.0, mark - previous), 3)
        previous = mark
    return timeline


def describe_stop_timeline(timeline: Mapping[str, float]) -> str:
    """``"driver saw the request 0.4 s, batch boundary found 1.2 s, ..."`` in phase order."""
    return ", ".join(f"{name} {timeline[name]:.1f} s" for name in STOP_PHASES if name in timeline)


def new_request(requested_by: str, reason: str, timeout_s: float, now: datetime | None = None) -> StopRequest:
    """A fresh :class:`StopRequest` that expires ``timeout_s`` after ``now``."""
    moment = now or utc_now()
    return StopRequest(
        request_id=uuid.uuid4().hex,
        requested_at=moment.isoformat(timespec="milliseconds"),
        requested_by=requested_by,
        reason=reason,
        expires_at=(moment + timedelta(seconds=timeout_s)).isoformat(timespec="milliseconds"),
    )
