"""Graceful stop without Spark: pure value objects and decisions, and the control files and batch
listings, which it reads and writes through an fsspec filesystem.

The running query (see :mod:`airflow_ckpt_provider.spark.graceful_stop`) and the requester (the
Airflow operator and trigger, or ``ckpt stop``) talk through three small JSON files under the
checkpoint's ``_ckpt/`` folder (:mod:`airflow_ckpt_provider.spark.control`). This module holds:

* :class:`StopResult` — what a stop achieved (graceful, escalated, not running), as XCom JSON;
* :class:`StopReason` — why waiting ended (shared by the trigger, the operator and the CLI);
* pure decisions: :func:`heartbeat_alive`, :func:`ack_answers`, :func:`wait_decision`,
  :func:`quiet_verdict`, and :func:`classify_query` (:class:`QueryLiveness`: running with or
  without GracefulStop, stopped, or no heartbeat ever written so nobody can tell);
* :class:`ControlFiles` — read/write the control files and list ``offsets/`` and ``commits/``
  through any fsspec filesystem, and :func:`wait_quiet`, the bounded post-stop check;
* the steps every requester takes: :func:`begin_stop` (write or join the request, or find
  nothing running), :func:`wait_for_ack` (the synchronous twin of the trigger),
  :func:`finish_stop` (escalate through an injected ``kill`` on timeout, then check the quiet).

Protocol rules: a request carries ``expires_at`` (request time + stop timeout) so a driver
started later never honours a request its requester gave up on; a pending request is joined,
not replaced, so concurrent callers wait for the same acknowledgement; after an escalation the
request is withdrawn.

Imports neither Airflow nor Spark.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointNotQuiet,
    InvalidStopResult,
    QueryStillRunning,
    RunningWithoutGracefulStop,
    StopTimeout,
)
from airflow_ckpt_provider.checkpoint.files import read_file, write_atomic
from airflow_ckpt_provider.checkpoint.jsonin import load_json
from airflow_ckpt_provider.checkpoint.logs import list_batch_ids
from airflow_ckpt_provider.clock import epoch_seconds, utc_now
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.spark.control import (
    DELIVERED,
    DRIVER,
    HEARTBEAT,
    STOP_ACK,
    STOP_REQUEST,
    STOPPED_OUTCOMES,
    Delivery,
    DriverRecord,
    Heartbeat,
    StopAck,
    StopRequest,
    parse_record,
    pending_request,
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
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> StopResult:
        """Rebuild from :meth:`to_json` output or its dict; :class:`InvalidStopResult` otherwise."""
        try:
            raw = load_json(data) if isinstance(data, (str, bytes)) else dict(data)
        except (TypeError, ValueError) as exc:
            raise InvalidStopResult(found=f"unreadable JSON ({exc})", expected="a StopResult JSON object") from None
        if not isinstance(raw, dict):
            raise InvalidStopResult(found=f"a JSON {type(raw).__name__}", expected="a StopResult JSON object")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise InvalidStopResult(found=f"unknown keys {unknown}", expected=f"only {sorted(known)}")
        try:
            return cls(**raw)
        except TypeError as exc:
            raise InvalidStopResult(found=str(exc), expected=f"keys {sorted(known)}") from None


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


def quiet_verdict(before: BatchState, after: BatchState, alive: bool) -> str | None:
    """None when the checkpoint is quiet; else what is wrong, in words.

    Quiet means: no offsets file newer than ``before`` appeared, and no live heartbeat.
    """
    old = -1 if before.last_planned_batch is None else before.last_planned_batch
    if after.last_planned_batch is not None and after.last_planned_batch > old:
        return (f"offsets/{after.last_planned_batch} appeared after the stop "
                f"(last planned batch was {before.last_planned_batch})")
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
                "heartbeat": json.loads(self.heartbeat.to_json()) if self.heartbeat else None}


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


# -- I/O edge: control files and batch listings through fsspec ---------------------------------------


class ControlFiles:
    """The ``_ckpt/`` control files and the batch listings of one checkpoint, through fsspec.

    Reads return None for a missing file and log (then return None) for an unparsable one,
    so a half-visible file on an eventually consistent store reads as "not yet". I/O errors
    other than a missing file propagate.
    """

    def __init__(self, fs: AbstractFileSystem, root: str, uri: str | None = None) -> None:
        self.fs = fs
        self.root = root.rstrip("/") or "/"
        self.uri = uri or root

    def _path(self, rel: str) -> str:
        return posixpath.join(self.root, rel)

    def _read(self, rel: str) -> bytes | None:
        path = self._path(rel)
        try:
            self.fs.invalidate_cache(posixpath.dirname(path))
            return read_file(self.fs, path)
        except FileNotFoundError:
            return None

    def _record(self, rel: str, cls: type[Any]) -> Any:
        return parse_record(self._read(rel), cls, f"{rel} in {self.uri}")

    def heartbeat(self) -> Heartbeat | None:
        return self._record(HEARTBEAT, Heartbeat)

    def request(self) -> StopRequest | None:
        return self._record(STOP_REQUEST, StopRequest)

    def ack(self) -> StopAck | None:
        return self._record(STOP_ACK, StopAck)

    def delivery(self) -> Delivery | None:
        """The ``foreach_batch`` wrapper's last delivered batch (``_ckpt/delivered.json``), None when absent."""
        return self._record(DELIVERED, Delivery)

    def driver(self) -> DriverRecord | None:
        """The supervised local driver's record (``_ckpt/driver.json``), None when absent."""
        return self._record(DRIVER, DriverRecord)

    def write_record(self, rel: str, data: bytes) -> None:
        """Write a control file whole (:func:`write_atomic`: one object write on an object store; on a
        local disk readable by the job's user, writable by nobody else)."""
        write_atomic(self.fs, self._path(rel), data, mode=0o644, dir_mode=0o755)

    def write_request(self, request: StopRequest) -> None:
        """Write the stop request whole (see :meth:`write_record`)."""
        self.write_record(STOP_REQUEST, request.to_json().encode())

    def remove_request(self, request_id: str) -> bool:
        """Delete the request if it is still ``request_id`` (a later caller's request is kept)."""
        current = self.request()
        if current is None or current.request_id != request_id:
            return False
        try:
            self.fs.rm(self._path(STOP_REQUEST))
        except FileNotFoundError:
            return False
        return True

    def request_stop(self, requested_by: str, reason: str, timeout_s: float) -> tuple[StopRequest, bool]:
        """Ask the query to stop; returns (the request in force, whether this call wrote it).

        A request that is pending already (not acknowledged, not expired) is adopted instead of
        replaced, so two concurrent callers wait for the same acknowledgement.
        """
        existing = self.request()
        if pending_request(existing, self.ack()):
            assert existing is not None
            log.info("a stop request is pending already (%s, by %s): waiting for it too",
                     existing.request_id, existing.requested_by or "unknown")
            return existing, False
        request = new_request(requested_by, reason, timeout_s)
        self.write_request(request)
        return request, True

    def _last_batch(self, folder: str) -> int | None:
        ids = list_batch_ids(self.fs, self._path(folder))
        return ids[-1] if ids else None

    def last_commit(self) -> LastCommit | None:
        """The newest ``commits/N`` and its modification time (None when nothing committed)."""
        batch = self._last_batch("commits")
        if batch is None:
            return None
        try:
            committed_at: float | None = self.fs.modified(self._path(f"commits/{batch}")).timestamp()
        except (NotImplementedError, OSError, KeyError, AttributeError):
            committed_at = None
        return LastCommit(batch, committed_at)

    def liveness(self, *, new_batches: bool = False, recent_s: float | None = None,
                 missed_beats: float = DEFAULT_MISSED_BEATS) -> QueryLiveness:
        """:func:`classify_query` of this checkpoint now (see there for ``new_batches``, ``recent_s``)."""
        return classify_query(self.heartbeat(), self.last_commit(), now=time.time(), new_batches=new_batches,
                              recent_s=recent_s, missed_beats=missed_beats)

    def batch_state(self) -> BatchState:
        """List ``offsets/`` and ``commits/`` once each (names only, :func:`list_batch_ids`)."""
        return BatchState(last_planned_batch=self._last_batch("offsets"),
                          last_committed_batch=self._last_batch("commits"))


def wait_quiet(
    control: ControlFiles,
    quiet_period: float,
    *,
    poll_interval: float = 0.5,
    missed_beats: float = DEFAULT_MISSED_BEATS,
    exit_grace: float = DEFAULT_EXIT_GRACE_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> BatchState:
    """Check for ``quiet_period`` seconds that nothing writes to the checkpoint any more.

    Raises :class:`CheckpointNotQuiet` as soon as a new ``offsets/N`` appears, and
    :class:`QueryStillRunning` if a heartbeat is still alive at the end. A heartbeat that merely
    has not aged yet (the writer was killed) is given up to ``missed_beats`` intervals more.
    A supervised local driver (``_ckpt/driver.json``) still running after its query stopped is
    given ``exit_grace`` seconds to exit (its supervisor writes the record once more when it
    does); still running then is :class:`QueryStillRunning` too. Returns the batch state at the
    end.
    """
    before = control.batch_state()
    start = clock()
    end = start + max(quiet_period, 0.0)
    last_update: str | None = None
    waiting_for_exit = False
    while True:
        now = clock()
        after = control.batch_state()
        problem = quiet_verdict(before, after, alive=False)
        if problem:
            raise CheckpointNotQuiet(found=problem, expected=f"no new batch for {quiet_period:g} s after the stop",
                                     path=control.uri)
        heartbeat = control.heartbeat()
        alive = heartbeat_alive(heartbeat, missed_beats=missed_beats)
        if now >= end and not alive:
            driver = control.driver()
            if driver is None or not driver.is_alive(missed_beats=missed_beats):
                return after
            if not waiting_for_exit:
                log.info("the query stopped; waiting up to %.0f s for its driver process (group %d on %s) to exit",
                         exit_grace, driver.pid, driver.host or "?")
                waiting_for_exit = True
            if now >= end + exit_grace:
                raise QueryStillRunning(
                    found=f"the driver process of launch {driver.launch_id} (process group {driver.pid} on "
                          f"{driver.host or '?'}) still running {exit_grace:g} s after its query stopped",
                    expected="the driver to exit once its query stopped",
                    action="Look at the driver log; kill the process group on that host if it hangs.",
                    path=control.uri,
                )
        elif now >= end and heartbeat is not None:
            refreshed = last_update is not None and heartbeat.updated_at != last_update
            grace = end + heartbeat.interval_s * missed_beats + poll_interval
            if refreshed or now >= grace:
                raise QueryStillRunning(
                    found=f"heartbeat of run {heartbeat.run_id} updated at {heartbeat.updated_at}, "
                          f"{quiet_period:g} s after the stop",
                    expected="no live heartbeat once the query stopped",
                    action="Another driver runs on this checkpoint (or the kill did not reach it); stop it "
                           "by hand before the handover.",
                    path=control.uri,
                )
            last_update = heartbeat.updated_at
        elif heartbeat is not None:
            last_update = heartbeat.updated_at
        sleep(poll_interval)


# -- the stop, step by step (shared by the operator, the trigger and ``ckpt stop``) ------------------


@dataclass(frozen=True)
class StopStart:
    """The first step's answer: the request in force (None: nothing runs) and the run asked."""

    request: StopRequest | None
    run_id: str
    wrote_request: bool
    heartbeat: Heartbeat | None
    requested_at: float  # epoch seconds when this caller asked (or found nothing running)


def begin_stop(
    control: ControlFiles,
    *,
    requested_by: str,
    timeout_s: float,
    launched_job_running: bool = False,
    reason: str = "graceful stop",
    missed_beats: float = DEFAULT_MISSED_BEATS,
) -> StopStart:
    """Write (or adopt) a stop request if a query runs; ``request`` None when nothing runs.

    A query runs when its heartbeat is alive, or when the caller knows a launched job still
    runs (``launched_job_running``: a driver without :class:`GracefulStop` never heartbeats;
    the request is written anyway, and the wait will end in a timeout and an escalation).
    """
    heartbeat = control.heartbeat()
    alive = heartbeat_alive(heartbeat, missed_beats=missed_beats)
    requested_at = time.time()
    if not alive and not launched_job_running:
        return StopStart(None, "", False, heartbeat, requested_at)
    if not alive:
        why = ("it runs without GracefulStop (no heartbeat was ever written)" if heartbeat is None else
               f"its last heartbeat (run {heartbeat.run_id}) is {heartbeat.state}, from {heartbeat.updated_at}")
        log.warning("no live heartbeat on %s but the launched job still runs: %s; it cannot acknowledge a stop "
                    "request: asking anyway, escalation (kill through its launch handle) after %.0f s", control.uri,
                    why, timeout_s)
    request, wrote = control.request_stop(requested_by, reason, timeout_s)
    run_id = heartbeat.run_id if alive and heartbeat is not None else ""
    if alive and heartbeat is not None:
        log.info("asked query %s (run %s) to stop between batches (request %s); waiting up to %.0f s",
                 heartbeat.query_id, run_id, request.request_id, timeout_s)
    return StopStart(request, run_id, wrote, heartbeat, requested_at)


def wait_for_ack(
    control: ControlFiles,
    start: StopStart,
    deadline: float,
    *,
    poll_interval: float = 0.5,
    missed_beats: float = DEFAULT_MISSED_BEATS,
    progress_every_s: float = 15.0,
) -> tuple[StopReason, StopAck | None]:
    """Synchronous twin of the trigger: poll until acknowledged, not running or ``deadline`` (epoch);
    a progress line every ``progress_every_s`` seconds."""
    assert start.request is not None
    next_progress = time.time() + progress_every_s
    while True:
        if time.time() >= next_progress:
            next_progress = time.time() + progress_every_s
            state = control.batch_state()
            log.info("waiting for query on %s to acknowledge stop request %s: %.0f s of at most %.0f s; "
                     "last committed batch %s", control.uri, start.request.request_id,
                     time.time() - start.requested_at, deadline - start.requested_at, state.last_committed_batch)
        ack, heartbeat = control.ack(), control.heartbeat()
        reason = wait_decision(ack=ack, heartbeat=heartbeat, request_id=start.request.request_id,
                               run_id=start.run_id, now=time.time(), deadline=deadline, missed_beats=missed_beats)
        if reason is StopReason.NOT_RUNNING:  # the ack is written just before the stopped beat
            ack = control.ack()
            if ack_answers(ack, start.request.request_id, start.run_id):
                reason = StopReason.ACKNOWLEDGED
        if reason is not None:
            return reason, ack if reason is StopReason.ACKNOWLEDGED else None
        time.sleep(max(0.01, min(poll_interval, deadline - time.time())))


def finish_stop(
    control: ControlFiles,
    *,
    reason: StopReason,
    request_id: str,
    requested_at: float,
    ack: StopAck | None,
    kill: Callable[[], str] | None,
    timeout_s: float,
    quiet_period: float,
    poll_interval: float = 0.5,
    missed_beats: float = DEFAULT_MISSED_BEATS,
    acknowledged_quiet_period: float | None = None,
) -> StopResult:
    """After the wait: escalate on timeout (``kill`` returns what it did), then check the quiet.

    The quiet check lasts ``quiet_period`` seconds, or ``acknowledged_quiet_period`` (when
    given) after a clean (or held) acknowledgement whose last planned batch is still the checkpoint's:
    the driver wrote it after ``query.stop()`` returned, so that query writes nothing more, and
    the check only looks for an unknown second writer. Either way it waits for a supervised
    driver's exit.

    Raises :class:`StopTimeout` on a timeout without ``kill`` (the request is withdrawn),
    :class:`CheckpointNotQuiet` / :class:`QueryStillRunning` from :func:`wait_quiet`.
    """
    escalation = None
    noticed_at = time.time()
    request = control.request()
    if reason is StopReason.ACKNOWLEDGED:
        outcome = StopOutcome.GRACEFUL
        assert ack is not None
        log.info("query %s acknowledged: stopped %s at batch %s (last planned %s)",
                 ack.query_id, ack.outcome, ack.last_committed_batch, ack.last_planned_batch)
    elif reason is StopReason.TIMEOUT:
        control.remove_request(request_id)  # a late driver must not stop a later run
        if kill is None:
            raise StopTimeout(found=f"no acknowledgement of request {request_id} within {timeout_s:g} s",
                              expected="the query to stop between batches and acknowledge", path=control.uri)
        log.warning("no acknowledgement within %.0f s: escalating", timeout_s)
        escalation = kill()
        outcome = StopOutcome.ESCALATED
    else:
        log.warning("the query ended without acknowledging request %s", request_id)
        outcome = StopOutcome.NOT_RUNNING
    quiet = quiet_period
    if acknowledged_quiet_period is not None and ack is not None and ack.outcome in STOPPED_OUTCOMES \
            and ack.last_planned_batch == control.batch_state().last_planned_batch:
        quiet = min(quiet_period, acknowledged_quiet_period)
    state = wait_quiet(control, quiet, poll_interval=poll_interval, missed_beats=missed_beats)
    if ack is not None and ack.last_planned_batch != state.last_planned_batch:
        log.warning("the ack says last planned batch %s but the checkpoint shows %s",
                    ack.last_planned_batch, state.last_planned_batch)
    result = StopResult(
        checkpoint_uri=control.uri,
        outcome=outcome,
        last_committed_batch=state.last_committed_batch,
        interrupted_batch=state.interrupted_batch,
        waited_s=round(time.time() - requested_at, 3),
        last_planned_batch=state.last_planned_batch,
        request_id=request_id,
        query_id=ack.query_id if ack is not None else None,
        ack=json.loads(ack.to_json()) if ack is not None else None,
        escalation=escalation,
        timeline=stop_timeline(request, ack, noticed_at, time.time())
        if request is not None and request.request_id == request_id else None,
    )
    log.info("stop %s after %.1f s: last committed batch %s, interrupted batch %s; checkpoint quiet for %g s",
             outcome.value, result.waited_s, result.last_committed_batch, result.interrupted_batch, quiet)
    if result.timeline:
        log.info("where the stop's %.1f s went: %s", result.waited_s, result.describe_timeline())
    return result


def not_running_result(
    control: ControlFiles,
    heartbeat: Heartbeat | None,
    *,
    quiet_period: float = 0.0,
    poll_interval: float = 0.5,
    missed_beats: float = DEFAULT_MISSED_BEATS,
) -> StopResult:
    """The result when no live heartbeat asks to be stopped: the checkpoint as it is after
    ``quiet_period`` of quiet, and what that says (:func:`classify_query`).

    Batches planned during the quiet check with no live heartbeat mean a query runs without
    GracefulStop: :class:`RunningWithoutGracefulStop` (other :class:`CheckpointNotQuiet` cases
    are raised as they are). A quiet checkpoint that never had a heartbeat gives outcome
    ``no_heartbeat`` (whether a query idles there cannot be seen); one whose heartbeat stopped or
    went stale gives ``not_running``. ``detail`` says which, with the last commit's batch and age.
    When the last run ended by acknowledging a stop request (a caller arriving just after another
    caller's graceful stop), that ack is included. ``heartbeat`` is what the caller saw before;
    the verdict reads the heartbeat again after the quiet check.
    """
    started = time.time()
    try:
        state = wait_quiet(control, quiet_period, poll_interval=poll_interval, missed_beats=missed_beats)
    except CheckpointNotQuiet as exc:
        liveness = control.liveness(new_batches=True, missed_beats=missed_beats)
        if liveness.status is not QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP:
            raise
        raise RunningWithoutGracefulStop(found=f"{exc.found}: {liveness.describe()}",
                                         expected="a live GracefulStop heartbeat to ask, or a quiet checkpoint",
                                         path=control.uri) from None
    liveness = control.liveness(missed_beats=missed_beats)
    ack = control.ack()
    beat = liveness.heartbeat
    if ack is None or beat is None or ack.run_id != beat.run_id:
        ack = None
    if liveness.status is QueryStatus.NO_HEARTBEAT:
        outcome = StopOutcome.NO_HEARTBEAT
        log.warning("nothing stopped on %s: %s. %s", control.uri, liveness.describe(), liveness.action())
    else:
        outcome = StopOutcome.NOT_RUNNING
        log.info("no query runs on %s (%s): nothing to stop%s", control.uri, liveness.describe(),
                 f"; its last run stopped {ack.outcome} on request {ack.request_id}" if ack is not None else "")
    return StopResult(
        checkpoint_uri=control.uri, outcome=outcome,
        last_committed_batch=state.last_committed_batch, interrupted_batch=state.interrupted_batch,
        waited_s=round(time.time() - started, 3), last_planned_batch=state.last_planned_batch,
        request_id=ack.request_id if ack is not None else None,
        query_id=beat.query_id if beat is not None else None,
        ack=json.loads(ack.to_json()) if ack is not None else None,
        detail=liveness.describe(),
    )
