"""The graceful stop's I/O: the control files and batch listings of one checkpoint read and
written through an fsspec filesystem (:class:`ControlFiles`), the bounded post-stop check
(:func:`wait_quiet`), and the steps every requester takes (:func:`begin_stop`, :func:`wait_for_ack`,
:func:`finish_stop`, :func:`not_running_result`) and the withdrawal's handshake
(:func:`withdraw_and_wait`), which poll and wait.

The values and decisions they use (:class:`StopResult`, :class:`StopReason`, :func:`wait_decision`,
:func:`quiet_verdict`, :func:`classify_query`, ...) are the pure core's,
:mod:`airflow_ckpt_provider.checkpoint.stop`. Imports neither Airflow nor Spark.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointNotQuiet,
    QueryStillRunning,
    RunningWithoutGracefulStop,
    StopTimeout,
)
from airflow_ckpt_provider.checkpoint.stop import (
    DEFAULT_EXIT_GRACE_S,
    DEFAULT_MISSED_BEATS,
    BatchState,
    LastCommit,
    QueryLiveness,
    QueryStatus,
    StopOutcome,
    StopReason,
    StopResult,
    WithdrawalVerdict,
    ack_answers,
    classify_query,
    heartbeat_alive,
    new_request,
    quiet_verdict,
    stop_timeline,
    wait_decision,
    withdrawal_decision,
)
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.records.control import (
    DELIVERED,
    DRIVER,
    HEARTBEAT,
    STOP_ACK,
    STOP_REQUEST,
    STOP_WITHDRAWAL,
    STOP_WITHDRAWN,
    STOPPED_OUTCOMES,
    Delivery,
    DriverRecord,
    Heartbeat,
    R,
    StopAck,
    StopRequest,
    StopWithdrawal,
    StopWithdrawn,
    parse_record,
    pending_request,
)
from airflow_ckpt_provider.storage.files import read_file, write_atomic
from airflow_ckpt_provider.storage.listing import list_batch_ids

log = logging.getLogger(__name__)


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

    def record(self, rel: str, cls: type[R]) -> R | None:
        """The control record ``rel`` (a path under the checkpoint, e.g. ``_ckpt/...``) as ``cls``
        (a control record class with ``from_json``); None when missing or not readable yet."""
        return self._record(rel, cls)

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

    def withdrawn(self) -> StopWithdrawn | None:
        """The driver's answer to a stop request it did not carry out (``_ckpt/stop-withdrawn.json``)."""
        return self._record(STOP_WITHDRAWN, StopWithdrawn)

    def withdraw(self, request_id: str, withdrawn_by: str) -> bool:
        """Take stop request ``request_id`` back: write ``_ckpt/stop-withdrawal.json`` naming it (the
        driver answers it even if it never read the request), then remove the request when it is
        still that one. Whether the request file was removed."""
        withdrawal = StopWithdrawal(request_id=request_id, withdrawn_at=utc_iso(timespec="milliseconds"),
                                    withdrawn_by=withdrawn_by)
        self.write_record(STOP_WITHDRAWAL, withdrawal.to_json().encode())
        return self.remove_request(request_id)

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
    watch_commits: bool = False,
) -> BatchState:
    """Check for ``quiet_period`` seconds that nothing writes to the checkpoint any more.

    Raises :class:`CheckpointNotQuiet` as soon as a new ``offsets/N`` appears (with
    ``watch_commits``, after a kill, a new ``commits/N`` too), and
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
        problem = quiet_verdict(before, after, alive=False, watch_commits=watch_commits)
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


_Decided = TypeVar("_Decided")


def poll_until(
    decide: Callable[[float], _Decided | None],
    *,
    deadline: float,
    poll_interval: float,
    progress: Callable[[float], None],
    progress_every_s: float,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> _Decided:
    """Call ``decide(now)`` every ``poll_interval`` seconds until it returns a value, and
    ``progress(now)`` every ``progress_every_s`` seconds meanwhile. ``decide`` owns the deadline
    (every decision here ends at it); ``deadline`` only keeps the last sleep from overshooting it."""
    next_progress = clock() + progress_every_s
    while True:
        now = clock()
        decided = decide(now)
        if decided is not None:
            return decided
        if now >= next_progress:
            next_progress = now + progress_every_s
            progress(now)
        sleep(max(0.01, min(poll_interval, deadline - now)))


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
    request_id = start.request.request_id

    def decide(now: float) -> tuple[StopReason, StopAck | None] | None:
        ack, heartbeat = control.ack(), control.heartbeat()
        reason = wait_decision(ack=ack, heartbeat=heartbeat, request_id=request_id, run_id=start.run_id, now=now,
                               deadline=deadline, missed_beats=missed_beats)
        if reason is StopReason.NOT_RUNNING:  # the ack is written just before the stopped beat
            ack = control.ack()
            if ack_answers(ack, request_id, start.run_id):
                reason = StopReason.ACKNOWLEDGED
        return None if reason is None else (reason, ack if reason is StopReason.ACKNOWLEDGED else None)

    def progress(now: float) -> None:
        log.info("waiting for query on %s to acknowledge stop request %s: %.0f s of at most %.0f s; "
                 "last committed batch %s", control.uri, request_id, now - start.requested_at,
                 deadline - start.requested_at, control.batch_state().last_committed_batch)

    return poll_until(decide, deadline=deadline, poll_interval=poll_interval, progress=progress,
                      progress_every_s=progress_every_s)


@dataclass(frozen=True)
class Withdrawal:
    """How a withdrawn stop request ended (:func:`withdraw_and_wait`): the verdict, the
    acknowledgement or the answer that gave it, the heartbeat last read, and whether this call
    removed the request file."""

    verdict: WithdrawalVerdict
    ack: StopAck | None
    answer: StopWithdrawn | None
    heartbeat: Heartbeat | None
    removed: bool
    waited_s: float


def withdraw_and_wait(
    control: ControlFiles,
    request_id: str,
    *,
    withdrawn_by: str,
    timeout_s: float,
    poll_interval: float = 0.5,
    missed_beats: float = DEFAULT_MISSED_BEATS,
    progress_every_s: float = 15.0,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> Withdrawal:
    """Withdraw stop request ``request_id`` unless it was acknowledged already, and wait at most
    ``timeout_s`` seconds for the driver's answer (:func:`withdrawal_decision`): its
    acknowledgement (it was past its last look: it stopped), its "withdrawn" answer (it goes on),
    or its heartbeat ending. A progress line every ``progress_every_s`` seconds."""
    started = clock()
    ack = control.ack()
    if ack is not None and ack.request_id == request_id:
        return Withdrawal(WithdrawalVerdict.ACKNOWLEDGED, ack, None, control.heartbeat(), False, 0.0)
    removed = control.withdraw(request_id, withdrawn_by)
    deadline = started + timeout_s
    log.info("withdrew stop request %s on %s; waiting up to %.0f s for the query to answer (withdrawn, or "
             "acknowledged if it was already stopping)", request_id, control.uri, timeout_s)

    def decide(now: float) -> Withdrawal | None:
        ack, answer, heartbeat = control.ack(), control.withdrawn(), control.heartbeat()
        verdict = withdrawal_decision(ack=ack, answer=answer, heartbeat=heartbeat, request_id=request_id, now=now,
                                      deadline=deadline, missed_beats=missed_beats)
        if verdict is WithdrawalVerdict.DRIVER_GONE:  # the ack is written just before the stopped beat
            ack = control.ack()
            if ack is not None and ack.request_id == request_id:
                verdict = WithdrawalVerdict.ACKNOWLEDGED
        if verdict is None:
            return None
        return Withdrawal(verdict, ack if verdict is WithdrawalVerdict.ACKNOWLEDGED else None,
                          answer if verdict is WithdrawalVerdict.CONTINUING else None, heartbeat, removed,
                          round(now - started, 3))

    def progress(now: float) -> None:
        log.info("waiting for the query on %s to answer the withdrawal of stop request %s: %.0f s of at most "
                 "%.0f s", control.uri, request_id, now - started, timeout_s)

    return poll_until(decide, deadline=deadline, poll_interval=poll_interval, progress=progress,
                      progress_every_s=progress_every_s, clock=clock, sleep=sleep)


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
        ack=ack.to_dict() if ack is not None else None,
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
        ack=ack.to_dict() if ack is not None else None,
        detail=liveness.describe(),
    )


def kill_stop(
    control: ControlFiles,
    *,
    kill: Callable[[], str],
    quiet_period: float,
    poll_interval: float = 0.5,
    missed_beats: float = DEFAULT_MISSED_BEATS,
    detail: str | None = None,
) -> StopResult:
    """Stop a job that runs without GracefulStop: ``kill`` it (through its cluster manager; it
    returns what it did once the manager says the job ended), then check for ``quiet_period``
    seconds that nothing plans or commits a batch any more (a driver can outlive its manager's
    "killed" by a moment). No stop request is written: the job would never read it.

    Outcome ``killed``; ``interrupted_batch`` is the batch the kill cut (planned, not committed),
    whose fate the sink ledger decides at the handover. Raises what ``kill`` raises
    (:class:`EscalationFailed`) and :class:`CheckpointNotQuiet` / :class:`QueryStillRunning`
    from :func:`wait_quiet`.
    """
    started = time.time()
    before = control.batch_state()
    log.warning("killing the job on %s (no GracefulStop): last planned batch %s, last committed %s", control.uri,
                before.last_planned_batch, before.last_committed_batch)
    escalation = kill()
    log.info("%s; checking that %s stays quiet for %g s", escalation, control.uri, quiet_period)
    state = wait_quiet(control, quiet_period, poll_interval=poll_interval, missed_beats=missed_beats,
                       watch_commits=True)
    result = StopResult(
        checkpoint_uri=control.uri, outcome=StopOutcome.KILLED,
        last_committed_batch=state.last_committed_batch, interrupted_batch=state.interrupted_batch,
        waited_s=round(time.time() - started, 3), last_planned_batch=state.last_planned_batch,
        escalation=escalation, detail=detail,
    )
    log.info("stop killed after %.1f s: last committed batch %s, batch cut by the kill %s", result.waited_s,
             result.last_committed_batch, result.interrupted_batch)
    return result
