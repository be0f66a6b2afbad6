"""The switchover step: a waiting standby takes over from the old query inside the drivers.

One step instead of graceful stop -> handover -> release: with no Airflow task between the old
query's last commit and the new query's start, downtime does not depend on the scheduler.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from functools import cached_property
from typing import Any, ClassVar

from airflow.sdk import Context

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    NotACheckpoint,
    QueryNotRunning,
    StandbyNotWaiting,
    SwitchoverMismatch,
    SwitchoverNotTaken,
    SwitchoverStandbyDied,
    SwitchoverUnsupported,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.rewind import StartChoice, StartMode
from airflow_ckpt_provider.checkpoint.stop import (
    DEFAULT_MISSED_BEATS,
    StopAck,
    StopReason,
    StopResult,
    WithdrawalVerdict,
    heartbeat_alive,
    new_request,
)
from airflow_ckpt_provider.checkpoint.switchover import SwitchoverResult, TakenBy, downtime_split
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.faults import fault_point
from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook
from airflow_ckpt_provider.operators.handover import flag, start_choice, take_handover
from airflow_ckpt_provider.operators.journaled import control_flow
from airflow_ckpt_provider.operators.launch import DEFER_GRACE_S, HANDLE_XCOM_KEY, StandbyReleaseOperator
from airflow_ckpt_provider.records.control import (
    INTERRUPTED,
    STANDBY_RELEASE,
    SWITCHOVER_HANDOVER,
    SWITCHOVER_REFUSAL,
    SWITCHOVER_RELEASE,
    StandbyRelease,
    parse_time,
    pending_request,
)
from airflow_ckpt_provider.sinks import SinkSpec
from airflow_ckpt_provider.spark.state_seed import SEED_STATE_DIR
from airflow_ckpt_provider.spark.switchover import (
    RefusalReason,
    SwitchoverHandover,
    SwitchoverRefusal,
    SwitchoverRefused,
    SwitchoverRelease,
    plan_switchover,
)
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.state import read_manifest
from airflow_ckpt_provider.storage.stop import ControlFiles, finish_stop, withdraw_and_wait
from airflow_ckpt_provider.triggers.launch import LaunchEvent, LaunchTrigger, LaunchTriggerEvent
from airflow_ckpt_provider.upgrade.notes import FALLBACK_NOTE, OLD_STOPPED_NOTE
from airflow_ckpt_provider.upgrade.record import StepStart

__all__ = ["FALLBACK_NOTE", "StandbySwitchoverOperator"]

#: How long a failed switchover waits, by default, for the old query's answer to the withdrawal of its
#: stop request: a driver answers within its poll interval, or acknowledges once ``query.stop()`` returned.
DEFAULT_WITHDRAW_TIMEOUT_S = 120.0

class StandbySwitchoverOperator(StandbyReleaseOperator):
    """Switch from the old query to a waiting standby inside the drivers, and wait (deferred) for
    the new query's first commit.

    Checks that the standby (``standby_handle``: the standby launch's result) waits on
    ``checkpoint_uri`` and that the old query on ``old_checkpoint_uri`` runs under GracefulStop
    (its heartbeat alive), else fails before changing anything (:class:`StandbyNotWaiting`,
    :class:`QueryNotRunning`). Then writes ``_ckpt/switchover-release.json`` for that standby (the
    start to apply, the stop request it waits for) and, right after, the stop request on the old
    checkpoint (a pending one is joined). The standby starts its query by itself the moment the old
    query acknowledges a clean stop, at the old checkpoint's last committed batch
    (:mod:`airflow_ckpt_provider.spark.switchover`). The step waits for the new query's first commit
    (or, with ``kafka_conn_id``, for it to be caught up on an idle topic) for at most
    ``stop_timeout + first_commit_timeout`` seconds.

    Then it re-derives the handover from the old checkpoint with its own reader and the same rules
    and compares it with what the standby recorded (``_ckpt/switchover-handover.json``): a
    difference fails with :class:`SwitchoverMismatch`. It checks the old checkpoint's quiet as the
    graceful stop does (``quiet_period``, ``acknowledged_quiet_period``) and returns
    :meth:`~airflow_ckpt_provider.checkpoint.switchover.SwitchoverResult.to_dict`: the new version's
    handle, the stop result, the handover result (what later steps take), what the standby recorded
    and the downtime split into stop, handover read, query start and first batch.

    A refusal by the standby fails with :class:`SwitchoverNotTaken` naming the standby's reason (the
    stop request expired, the plan changed, the start is not in the checkpoint): the standby did not
    start and wrote no checkpoint file. One refusal the provider takes over instead, with
    ``kafka_conn_id``: the old query's stop cut a batch (a built-in sink without the gate, under load;
    acknowledgement ``interrupted``). The step then takes the handover as the handover step does (the
    sink ledger reads what the ``sink`` holds of the cut batch; reconciled with the broker), releases
    the still-waiting standby at it with a standby release, and waits for its first commit; the
    result says ``taken_by`` provider, and its split's handover read is the provider's. The new
    version's driver dying after the switchover release fails with :class:`SwitchoverStandbyDied` (a
    :class:`LaunchFailed`: whether the standby had taken the handover, what its checkpoint holds, an
    uncommitted batch being no handover, and whether the old query stopped); after the provider's
    own release, and no commit in time, fail as a launch does (:class:`LaunchFailed`,
    :class:`FirstCommitTimeout`). On any failure after the release, a stop
    request the old query has not acknowledged is withdrawn, the step waits (at most
    ``withdraw_timeout``) for the old driver's answer — "withdrawn, continuing", or its
    acknowledgement when it was already past its last look at the request — and the journal then notes
    whether it stopped: it stopped unless it answered that it goes on (acknowledged, its driver gone,
    or no answer in time: the safe side, since a restart refuses a live heartbeat). The reference
    DAG's rollback restarts the old version only then. With
    ``journal``, a retry after the release waits for that release again and never writes a second one.

    A stateful old query's state is carried with ``carry_state``: the release asks the standby to
    seed it (``seed_state``): it reads the state where it starts (after the handover batch; K-1 for
    a rewind to batch K) with Spark's state reader in its own warm session, writes it under the new
    checkpoint's ``_ckpt/seed-state/`` and gives the job that location as
    ``spark.ckpt.initialStatePath`` — no export job inside the downtime. The result records the seed
    (``used.state_path``, ``state_rows``) and the split its state wait; the provider's verified
    export runs after the switch and must agree with the seed
    (:class:`~airflow_ckpt_provider.operators.state.StateExportOperator` ``seeded_state``). A
    standby that cannot seed refuses and does not start (the step fails: the old query stopped, the
    rollback restarts it), and a stateful switchover whose stop cut a batch is not taken over by the
    provider (the state of a batch the sink ledger hands over is in no checkpoint): it fails the same
    way. Without ``carry_state`` a stateful old query is refused (:class:`SwitchoverUnsupported`)
    unless ``accept_empty_state``. Takes the arguments of
    :class:`StandbyReleaseOperator` except ``handover``, ``initial_state``, ``starting_offsets`` and
    ``handover_json`` (refused: the standby takes the handover itself), and:

    :param start: where the new version starts (a StartChoice, its dict or JSON; empty: resume at the
        old checkpoint's last committed batch); ``resume``, ``offsets`` or ``rewind_to_batch``
    :param source: the Kafka source of a checkpoint with several (index or name)
    :param accept_reprocessing: consent to a start that processes records again (rewind, offsets; a bool or "True")
    :param accept_data_loss: consent to a start that skips records (offsets; a bool or "True")
    :param stop_timeout: seconds the old query has to acknowledge the stop
    :param quiet_period: seconds the old checkpoint must stay quiet after the stop
    :param acknowledged_quiet_period: the shorter quiet check after a clean acknowledgement (None: ``quiet_period``)
    :param missed_beats: heartbeat intervals after which the old query's heartbeat is stale
    :param withdraw_timeout: seconds a failed switchover waits for the old query to answer the withdrawal
        of its stop request (withdrawn and going on, or acknowledged: it was already stopping)
    :param carry_state: carry a stateful old query's state: the standby seeds it in its own session (a bool or "True")
    :param accept_empty_state: consent to switch a stateful old query, whose new version starts with EMPTY state
    :param sink: the job's sink declaration, for the sink ledger when the old query's stop cut a batch
        (SinkSpec, mapping or JSON; default: not declared, at-least-once)
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("switchover",)

    template_fields: Sequence[str] = (*StandbyReleaseOperator.template_fields, "start", "source",
                                      "accept_reprocessing", "accept_data_loss", "carry_state", "accept_empty_state",
                                      "sink")
    ui_color = "#e8f0fd"

    def __init__(self, *, start: StartChoice | Mapping[str, Any] | str | None = None, source: int | str | None = None,
                 accept_reprocessing: bool | str = False, accept_data_loss: bool | str = False,
                 stop_timeout: float = 300.0,
                 quiet_period: float = 10.0, acknowledged_quiet_period: float | None = None,
                 missed_beats: float = DEFAULT_MISSED_BEATS, withdraw_timeout: float = DEFAULT_WITHDRAW_TIMEOUT_S,
                 carry_state: bool | str = False,
                 accept_empty_state: bool | str = False,
                 sink: SinkSpec | Mapping[str, Any] | str | None = None, **kwargs: Any) -> None:
        for taken in ("handover", "initial_state", "starting_offsets", "handover_json"):
            if kwargs.get(taken) not in (None, ""):
                raise ValueError(f"a switchover takes no {taken}: the standby reads the handover from the old "
                                 "checkpoint itself when the old query stops (the provider re-derives and compares "
                                 "it); say where the new version starts with start=")
        super().__init__(**kwargs)
        if stop_timeout <= 0 or quiet_period < 0 or missed_beats <= 0 or withdraw_timeout <= 0:
            raise ValueError("stop_timeout, missed_beats and withdraw_timeout must be > 0, quiet_period >= 0")
        self.start = start
        self.source = source
        self.accept_reprocessing = accept_reprocessing
        self.accept_data_loss = accept_data_loss
        self.stop_timeout = float(stop_timeout)
        self.quiet_period = float(quiet_period)
        self.acknowledged_quiet_period = acknowledged_quiet_period
        self.missed_beats = float(missed_beats)
        self.withdraw_timeout = float(withdraw_timeout)
        self.carry_state = carry_state
        self.accept_empty_state = accept_empty_state
        self.sink = sink.to_json() if isinstance(sink, SinkSpec) else sink

    @cached_property
    def kafka_hook(self) -> KafkaBrokerHook:
        """The broker of ``kafka_conn_id``: the handover the provider takes after a refusal is reconciled with it."""
        return KafkaBrokerHook(kafka_conn_id=self.kafka_conn_id or KafkaBrokerHook.default_conn_name)

    def _controls(self) -> tuple[ControlFiles, ControlFiles]:
        """The new checkpoint's control files and the old one's."""
        new_fs, new_path = self.storage_hook.filesystem(self.checkpoint_uri)
        old_fs, old_path = self.storage_hook.filesystem(str(self.old_checkpoint_uri))
        return (ControlFiles(new_fs, new_path, uri=self.checkpoint_uri),
                ControlFiles(old_fs, old_path, uri=str(self.old_checkpoint_uri)))

    def launch(self, context: Context, start: StepStart | None = None,
               journal: UpgradeJournal | None = None) -> dict[str, Any]:
        """Release the standby for the switchover, ask the old query to stop, and wait."""
        previous = start.previous if start is not None else None
        recorded = previous.notes.get("handle") if previous is not None else None
        new, old = self._controls()
        fallback = previous.notes.get(FALLBACK_NOTE) if previous is not None else None
        if isinstance(fallback, Mapping) and isinstance(recorded, Mapping):
            handle = self._standby_from(recorded)
            self.log.warning("resuming: an earlier attempt (run %s) released the standby %s itself after its refusal "
                             "(release %s); waiting for it", previous.run_id if previous else "?", handle.app_name,
                             fallback["release"]["release_id"])
            self._release_unless_written(new, fallback)
            context["ti"].xcom_push(key=HANDLE_XCOM_KEY, value=handle.to_dict())
            return self._wait_for_fallback(context, handle, dict(fallback))
        if previous is not None and previous.notes.get("released") and isinstance(recorded, Mapping) \
                and (written := self._written(new, str(previous.notes["released"]))) is not None:
            self._ask_if_unasked(old, written)
            handle = self._standby_from(recorded)
            self.log.warning("resuming: an earlier attempt (run %s) released the standby %s for a switchover "
                             "(release %s); waiting for it", previous.run_id, handle.app_name,
                             previous.notes["released"])
            context["ti"].xcom_push(key=HANDLE_XCOM_KEY, value=handle.to_dict())
            return self._wait_for_switch(context, handle, str(previous.notes["released"]))
        if not self.old_checkpoint_uri:
            raise ValueError("a switchover needs old_checkpoint_uri (the old query's checkpoint)")
        seed = self._seeds_state(old)
        choice = start_choice(self.start)
        standby = self._standby()
        waiting, why = self._waiting(standby, new)
        if standby is None or not waiting:
            raise StandbyNotWaiting(found=why, expected=f"a standby waiting on {self.checkpoint_uri}",
                                    path=self.checkpoint_uri)
        self._check_target(allow_existing_checkpoint=False)
        beat = old.heartbeat()
        if not heartbeat_alive(beat, missed_beats=self.missed_beats):
            state = "no heartbeat" if beat is None else f"heartbeat {beat.state}, updated {beat.updated_at}"
            raise QueryNotRunning(found=f"{state} on the old checkpoint",
                                  expected="the old query running under GracefulStop, to switch from",
                                  path=str(self.old_checkpoint_uri))
        standby_beat = new.heartbeat()
        assert standby_beat is not None  # _waiting saw it
        pending = old.request()
        request = pending if pending is not None and pending_request(pending, old.ack()) else \
            new_request(f"airflow:{self.dag_id}.{self.task_id}", "switchover", self.stop_timeout)
        release = SwitchoverRelease(
            release_id=uuid.uuid4().hex, released_at=utc_iso(timespec="milliseconds"),
            standby_run_id=standby_beat.run_id, old_checkpoint=str(self.old_checkpoint_uri),
            start_mode=choice.mode.value, start_value=choice.value() if choice.mode is not StartMode.RESUME else "",
            stop_request_id=request.request_id, source="" if self.source is None else str(self.source),
            expected_starting_offsets=choice.offsets.to_json() if choice.offsets is not None else "",
            accept_reprocessing=flag(self.accept_reprocessing, "accept_reprocessing"),
            accept_data_loss=flag(self.accept_data_loss, "accept_data_loss"),
            requested_by=f"{self.dag_id}.{self.task_id}", seed_state=seed)
        if journal is not None:  # before the writes: a re-run never releases twice
            journal.note(self.task_id, released=release.release_id, stop_request=request.request_id,
                         handle=standby.to_dict())
        new.write_record(SWITCHOVER_RELEASE, release.to_json().encode())
        fault_point(f"{self.task_id}:released")
        if request is not pending:
            old.write_request(request)
        self.log.info("switchover: released standby %s (run %s, release %s) to start %s once the old query on %s "
                      "acknowledges stop request %s; waiting up to %.0f s for its first committed batch",
                      standby.app_name, standby_beat.run_id, release.release_id, choice.describe(),
                      self.old_checkpoint_uri, request.request_id, self.stop_timeout + self.first_commit_timeout)
        context["ti"].xcom_push(key=HANDLE_XCOM_KEY, value=standby.to_dict())
        fault_point(f"{self.task_id}:requested")
        return self._wait_for_switch(context, standby, release.release_id)

    def _seeds_state(self, old: ControlFiles) -> bool:
        """Whether the standby is to seed the old query's state: it has state and ``carry_state``.
        :class:`SwitchoverUnsupported` for state not carried unless ``accept_empty_state`` (the
        standby would start with EMPTY state)."""
        operators = CheckpointReader(str(self.old_checkpoint_uri), fs=old.fs).snapshot().state_operators
        if not operators:
            return False
        if flag(self.carry_state, "carry_state"):
            self.log.info("the old query is stateful (operators %s): the standby seeds its state in its own session "
                          "when the old query stops", ", ".join(map(str, operators)))
            return True
        if not flag(self.accept_empty_state, "accept_empty_state"):
            raise SwitchoverUnsupported(
                found=f"a stateful old query (operators {', '.join(map(str, operators))}) with carry_state off: the "
                      "new version would start with EMPTY state",
                expected="carry_state=True (the standby seeds the state), or accept_empty_state=True",
                path=str(self.old_checkpoint_uri))
        return False

    def _written(self, new: ControlFiles, release_id: str) -> SwitchoverRelease | None:
        """The release an earlier attempt noted, when it is the one in the new checkpoint; None when
        that attempt died between noting it and writing it: it released nothing (nor asked the old
        query to stop, which comes after), and the step releases afresh."""
        release = new.record(SWITCHOVER_RELEASE, SwitchoverRelease)
        if release is not None and release.release_id == release_id:
            return release
        self.log.warning("the release %s an earlier attempt noted was never written: releasing afresh", release_id)
        return None

    def _ask_if_unasked(self, old: ControlFiles, release: SwitchoverRelease) -> None:
        """Write the stop request ``release`` names when the old checkpoint (``old``) has neither it
        nor its acknowledgement: the earlier attempt died between the release and the request, and
        the standby waits for exactly that request."""
        request, ack = old.request(), old.ack()
        if any(record is not None and record.request_id == release.stop_request_id for record in (request, ack)):
            return
        self.log.warning("the stop request %s the release names was never written: asking the old query on %s to "
                         "stop now", release.stop_request_id, self.old_checkpoint_uri)
        asked = new_request(f"airflow:{self.dag_id}.{self.task_id}", "switchover", self.stop_timeout)
        old.write_request(dataclasses.replace(asked, request_id=release.stop_request_id))

    def _standby_from(self, recorded: Mapping[str, Any]) -> Any:  # noqa: ANN401 - a LaunchHandle
        from airflow_ckpt_provider.checkpoint.launch import LaunchHandle

        return LaunchHandle.from_json(recorded)

    def _wait_for_switch(self, context: Context, handle: Any, release_id: str) -> dict[str, Any]:  # noqa: ANN401
        """Wait for the standby to take over (or refuse) ``release_id``, then :meth:`switched`."""
        return self._wait(handle, self.stop_timeout + self.first_commit_timeout,
                          finish=lambda event: self.switched(context, event), switchover_release=release_id)

    def _wait(self, handle: Any, seconds: float, *, finish: Callable[[dict[str, Any]], dict[str, Any]],  # noqa: ANN401
              switchover_release: str = "", kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Wait at most ``seconds`` for the new query's first commit (or, with ``kafka_conn_id``, for it
        to be caught up; with ``switchover_release``, for the standby's refusal of it), in the task
        then deferred; ``finish`` (or ``execute_complete`` with ``kwargs``) gets the event."""
        trigger = LaunchTrigger(
            checkpoint_uri=self.checkpoint_uri, deadline=time.time() + seconds, handle=handle.to_dict(),
            poll_interval=self.poll_interval, storage_conn_id=self.storage_conn_id, min_batch=0,
            kafka_conn_id=self.kafka_conn_id or None, switchover_release=switchover_release)
        return self.defer_unless_over(trigger, finish=finish, poll_interval=min(self.poll_interval, 1.0),
                                      kwargs=kwargs, timeout=timedelta(seconds=seconds + DEFER_GRACE_S))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None,
                         fallback: dict[str, Any] | None = None) -> dict[str, Any]:
        if fallback is not None:
            return self.complete_step(lambda: self.taken_over(context, event, fallback))
        return self.complete_step(lambda: self.switched(context, event))

    def complete_step(self, action: Callable[[], Any], journal: UpgradeJournal | None = None) -> Any:  # noqa: ANN401
        """As every step, and on a failure after the release: withdraw the stop request when the old
        query has not acknowledged it (it goes on running), and note in the journal whether it
        stopped (:data:`~airflow_ckpt_provider.upgrade.planner.OLD_STOPPED_NOTE`): the rollback
        restarts the old version only then."""
        journal = journal if journal is not None else self.open_journal()

        def noting() -> Any:  # noqa: ANN401 - the step's JSON result
            try:
                return action()
            except control_flow():
                raise
            except Exception:
                self._settle_old_query(journal)
                raise

        return super().complete_step(noting, journal)

    def _settle_old_query(self, journal: UpgradeJournal | None) -> None:
        """After a failed switchover: withdraw the stop request unless the old query acknowledged it,
        wait (at most ``withdraw_timeout``) for the old driver's answer (:func:`withdraw_and_wait`),
        and only then note whether it stopped (see :meth:`complete_step`). Only the driver's own
        "withdrawn, continuing" notes that it runs; no answer in time notes it stopped (the safe side:
        the rollback's restart refuses a live heartbeat). Logs and notes nothing when the control files
        cannot be read."""
        try:
            new, old = self._controls()
            release = new.record(SWITCHOVER_RELEASE, SwitchoverRelease)
            if release is None:
                return  # nothing released, nothing asked of the old query
            settled = withdraw_and_wait(old, release.stop_request_id,
                                        withdrawn_by=f"airflow:{self.dag_id}.{self.task_id}",
                                        timeout_s=self.withdraw_timeout, poll_interval=min(self.poll_interval, 0.5),
                                        missed_beats=self.missed_beats)
        except (CheckpointError, OSError) as exc:
            self.log.error("switchover failed and whether the old query on %s stopped cannot be read (%s): the "
                           "rollback will not restart it; check its heartbeat", self.old_checkpoint_uri, exc)
            return
        beat = settled.heartbeat
        state = "no heartbeat" if beat is None else f"heartbeat {beat.state}, updated {beat.updated_at}"
        verdict = settled.verdict
        if verdict is WithdrawalVerdict.ACKNOWLEDGED:
            assert settled.ack is not None
            self.log.warning("switchover failed after the old query on %s stopped (it acknowledged stop request %s %s "
                             "at batch %s): the rollback restarts it", self.old_checkpoint_uri,
                             settled.ack.request_id, settled.ack.outcome, settled.ack.last_committed_batch)
        elif verdict is WithdrawalVerdict.CONTINUING:
            assert settled.answer is not None
            self.log.warning("switchover failed before the old query on %s stopped: stop request %s withdrawn and the "
                             "old query answered that it goes on (%s, run %s)", self.old_checkpoint_uri,
                             settled.answer.request_id, settled.answer.reason, settled.answer.run_id)
        elif verdict is WithdrawalVerdict.DRIVER_GONE:
            self.log.warning("switchover failed and the old query on %s is not running (%s) and never answered the "
                             "withdrawal of stop request %s: the rollback restarts it", self.old_checkpoint_uri,
                             state, release.stop_request_id)
        else:
            self.log.error("switchover failed and the old query on %s answered the withdrawal of stop request %s "
                           "neither way within %.0f s (%s): whether it stopped is unknown, so the journal says it "
                           "stopped and the rollback tries to restart it; that restart refuses while its heartbeat "
                           "lives (check the old driver's log: a driver older than this provider never answers a "
                           "withdrawal)", self.old_checkpoint_uri, release.stop_request_id, self.withdraw_timeout,
                           state)
        if journal is not None:
            journal.note(self.task_id, **{OLD_STOPPED_NOTE: verdict.old_stopped})

    def switched(self, context: Context, event: dict[str, Any] | None) -> dict[str, Any]:
        """The switchover's result once the new query committed (see the class docstring)."""
        fired = LaunchTriggerEvent.from_json(event)
        noted = self._noted_fallback()
        if noted is not None:  # a retry that finds the release the provider wrote after the refusal
            return self.taken_over(context, event, noted)
        new, old = self._controls()
        release = new.record(SWITCHOVER_RELEASE, SwitchoverRelease)
        if fired.reason is LaunchEvent.REFUSED:
            refusal = new.record(SWITCHOVER_REFUSAL, SwitchoverRefusal)
            ack = old.ack()
            if release is not None and refusal is not None and ack is not None \
                    and self._can_take_over(release, refusal, ack):
                return self._take_over(context, release, refusal, ack, new, old)
            raise SwitchoverNotTaken(found=f"the standby refused its switchover release: {fired.evidence}",
                                     expected="the standby to start once the old query stopped clean",
                                     path=self.checkpoint_uri)
        if fired.reason is LaunchEvent.DIED and release is not None:
            raise self._died(fired, release, new, old)
        handle = self.first_commit(context, event)  # raises for a timeout, as a launch does
        used = new.record(SWITCHOVER_HANDOVER, SwitchoverHandover)
        if release is None or used is None or used.release_id != release.release_id:
            raise SwitchoverMismatch(found=f"the new query committed without {SWITCHOVER_HANDOVER} of release "
                                           f"{release.release_id if release is not None else '(none)'}",
                                     expected="the handover the standby started from, for the release it was given",
                                     path=self.checkpoint_uri)
        result, ack = self._check(release, used, old)
        # "" when the standby did not see the request file (gone or replaced after the ack): the release
        # was written just before the request
        requested_at = parse_time(used.stop_requested_at or release.released_at).timestamp()
        stop = self._stopped(old, ack, requested_at)
        self._check_seed(release, used)
        split = downtime_split(stop_requested_at=used.stop_requested_at, stop_acknowledged_at=used.stop_acknowledged_at,
                               ack_seen_at=used.ack_seen_at, handover_read_at=used.handover_read_at,
                               state_seeded_at=used.state_seeded_at, released_at=used.released_at,
                               first_commit_at=self._first_commit_time(new, fired.batch))
        self.log.info("switchover done: %s", split.describe())
        return SwitchoverResult(handle=handle, stop=stop.to_dict(), handover=result.to_dict(),
                                used=used.to_dict(), downtime=split.to_dict()).to_dict()

    def _check_seed(self, release: SwitchoverRelease, used: SwitchoverHandover) -> None:
        """The standby seeded the state the release asked for, in the release's folder under the new
        checkpoint (a location elsewhere is never read), its manifest there with the rows it recorded
        (the state export after the switch compares every store)."""
        if not release.seed_state:
            return
        if not used.state_seeded_at:
            raise SwitchoverMismatch(found="the standby started without seeding the state",
                                     expected="the state seeded, as the release asked", path=self.checkpoint_uri)
        if not used.state_path:
            self.log.info("the standby seeded no state: it starts before the old query's first committed batch")
            return
        fs, root = self.storage_hook.filesystem(used.state_path)
        _, new_root = self.storage_hook.filesystem(self.checkpoint_uri)
        expected = posixpath.join(new_root.rstrip("/"), SEED_STATE_DIR, release.release_id)
        if posixpath.normpath(root) != expected:  # never read (nor let the export read) outside the new checkpoint
            raise SwitchoverMismatch(found=f"a seed recorded at {used.state_path}",
                                     expected=f"the seed of release {release.release_id} under the new checkpoint's "
                                              f"{SEED_STATE_DIR}/", path=self.checkpoint_uri)
        seed = read_manifest(fs, root, uri=used.state_path)
        if seed is None or seed.rows != used.state_rows:
            raise SwitchoverMismatch(
                found=f"{'no seed manifest' if seed is None else f'a seed manifest of {seed.rows:,} rows'} at "
                      f"{used.state_path}", expected=f"the seed of {used.state_rows:,} rows the standby recorded",
                path=self.checkpoint_uri)
        self.log.info("the standby seeded %s rows of %d store(s) after batch %s at %s", f"{seed.rows:,}",
                      len(seed.stores), seed.batch_id, used.state_path)

    def _died(self, fired: LaunchTriggerEvent, release: SwitchoverRelease, new: ControlFiles,
              old: ControlFiles) -> SwitchoverStandbyDied:
        """The error for the new version's driver ending after ``release`` and before its first
        commit: whether the standby had taken the handover, what its checkpoint holds (an
        uncommitted batch is no handover), and whether the old query stopped (what the rollback does)."""
        used = new.record(SWITCHOVER_HANDOVER, SwitchoverHandover)
        if used is not None and used.release_id == release.release_id:
            took = f"after the standby took the handover (starting offsets {used.starting_offsets})"
        else:
            took = f"before the standby took the handover (no {SWITCHOVER_HANDOVER} of release {release.release_id})"
        try:
            snapshot = CheckpointReader(self.checkpoint_uri, fs=new.fs).snapshot()
            holds = (f"batch {snapshot.in_flight_batch} planned and not committed"
                     if snapshot.in_flight_batch is not None else "no batch planned")
        except NotACheckpoint:
            holds = "no Spark file (only the provider's _ckpt/)"
        except (CheckpointError, OSError) as exc:
            holds = f"what cannot be read ({exc})"
        ack = old.ack()
        if ack is not None and ack.request_id == release.stop_request_id:
            old_state = (f"the old query had stopped (it acknowledged stop request {ack.request_id} {ack.outcome} at "
                         f"batch {ack.last_committed_batch})")
            action = (f"The old version is stopped: the rollback restarts it from {self.old_checkpoint_uri}, where it "
                      "stopped (the standby only read that checkpoint). Nothing of the new checkpoint counts as a "
                      "handover; leave it for inspection. Read the driver log tail for why the new version died, then "
                      "upgrade again onto a new, empty checkpoint location.")
        else:
            old_state = f"the old query had not acknowledged stop request {release.stop_request_id}"
            action = ("The stop request is withdrawn: an old query that still runs goes on, and the rollback stops "
                      "only the standby (one whose driver is gone too is restarted; the journal notes which). Read "
                      "the driver log tail, then upgrade again onto a new, empty checkpoint location.")
        handle = self._standby_from(fired.handle) if fired.handle is not None else None
        return SwitchoverStandbyDied(
            found=f"the new version's driver ended ({fired.state.value}: {fired.evidence}) {took} and before its "
                  f"first commit; its checkpoint holds {holds}; {old_state}",
            expected=f"the new query's first committed batch in {self.checkpoint_uri}/commits",
            log_tail=fired.log_tail or (self.launcher_hook.log_tail(handle, 60) if handle is not None else ""),
            action=action, path=self.checkpoint_uri)

    def _stopped(self, old: ControlFiles, ack: StopAck, requested_at: float) -> StopResult:
        """The old query's stop result once it acknowledged ``ack`` (requested at ``requested_at``,
        epoch seconds): its checkpoint's quiet checked as the graceful stop does."""
        return finish_stop(old, reason=StopReason.ACKNOWLEDGED, request_id=ack.request_id, requested_at=requested_at,
                           ack=ack, kill=None, timeout_s=self.stop_timeout, quiet_period=self.quiet_period,
                           poll_interval=min(self.poll_interval, 0.5), missed_beats=self.missed_beats,
                           acknowledged_quiet_period=self.acknowledged_quiet_period)

    def _can_take_over(self, release: SwitchoverRelease, refusal: SwitchoverRefusal, ack: StopAck) -> bool:
        """Whether the provider takes over after ``refusal``: the standby refused because the old
        query's stop (of this release's request) cut a batch, which the provider's sink ledger
        decides; any other refusal fails the step."""
        return (refusal.release_id == release.release_id and refusal.reason == RefusalReason.STOP_NOT_CLEAN
                and ack.request_id == release.stop_request_id and ack.outcome == INTERRUPTED
                and bool(self.kafka_conn_id) and not release.seed_state)

    def _take_over(self, context: Context, release: SwitchoverRelease, refusal: SwitchoverRefusal, ack: StopAck,
                   new: ControlFiles, old: ControlFiles) -> dict[str, Any]:
        """The old query stopped with a batch cut: take the handover as the handover step does (the
        sink ledger decides what the sink holds of the cut batch), release the standby at it with a
        standby release, and wait for its first commit."""
        self.log.warning("the standby refused its switchover (%s: %s): the old query stopped %s at batch %s with "
                         "batch %s cut; taking the handover with the sink ledger and releasing the standby",
                         refusal.reason, refusal.found, ack.outcome, ack.last_committed_batch, ack.last_planned_batch)
        request = old.request()
        requested_at = parse_time(request.requested_at).timestamp() if request is not None \
            and request.request_id == ack.request_id else parse_time(release.released_at).timestamp()
        stop = self._stopped(old, ack, requested_at)
        result = take_handover(
            CheckpointReader(str(self.old_checkpoint_uri), fs=old.fs), SinkSpec.from_value(self.sink),
            self.storage_hook, self.kafka_hook, start_choice(self.start),
            source=self.source, accept_reprocessing=flag(self.accept_reprocessing, "accept_reprocessing"),
            accept_data_loss=flag(self.accept_data_loss, "accept_data_loss"), log=self.log)
        handed_over_at = utc_iso(timespec="milliseconds")
        standby = self._standby()
        waiting, why = self._waiting(standby, new)
        beat = new.heartbeat()
        if standby is None or not waiting or beat is None:
            raise SwitchoverNotTaken(found=f"the standby refused its switchover ({refusal.reason}) and is not waiting "
                                           f"for the provider's release: {why}",
                                     expected="the standby waiting after its refusal", path=self.checkpoint_uri)
        self._check_target(allow_existing_checkpoint=False)
        standby_release = StandbyRelease(
            release_id=uuid.uuid4().hex, released_at=utc_iso(timespec="milliseconds"),
            starting_offsets=result.offsets(self.source).to_json(), handover_json=result.handover.to_json(), conf={},
            requested_by=f"{self.dag_id}.{self.task_id}", standby_run_id=beat.run_id)
        fallback = {"release": standby_release.to_dict(), "stop": stop.to_dict(),
                    "handover": result.to_dict(), "refusal": refusal.to_dict(),
                    "stop_requested_at": utc_iso(datetime.fromtimestamp(requested_at, timezone.utc), "milliseconds"),
                    "stop_acknowledged_at": ack.stopped_at, "handed_over_at": handed_over_at}
        journal = self.open_journal()
        if journal is not None:  # before the write: a retry never releases twice
            journal.note(self.task_id, **{FALLBACK_NOTE: fallback})
        new.write_record(STANDBY_RELEASE, standby_release.to_json().encode())
        fault_point(f"{self.task_id}:taken_over")
        self.log.info("released standby %s (run %s) at the provider's handover %s (batch %s); waiting up to %.0f s "
                      "for its first committed batch", standby.app_name, beat.run_id, standby_release.starting_offsets,
                      result.handover.batch_id, self.first_commit_timeout)
        return self._wait_for_fallback(context, standby, fallback)

    def _release_unless_written(self, new: ControlFiles, fallback: Mapping[str, Any]) -> None:
        """Write the standby release ``fallback`` noted when the new checkpoint lacks it: the earlier
        attempt died between its note and its write (the same release, never a second one)."""
        release = StandbyRelease.from_json(json.dumps(fallback["release"]))
        written = new.record(STANDBY_RELEASE, StandbyRelease)
        if written is None or written.release_id != release.release_id:
            self.log.warning("the standby release %s an earlier attempt noted was never written: writing it",
                             release.release_id)
            new.write_record(STANDBY_RELEASE, release.to_json().encode())

    def _noted_fallback(self) -> dict[str, Any] | None:
        """The provider's release after a refusal, as this step's journal entry noted it (None without)."""
        journal = self.open_journal()
        entry = journal.step(self.task_id) if journal is not None else None
        noted = entry.notes.get(FALLBACK_NOTE) if entry is not None else None
        return dict(noted) if isinstance(noted, Mapping) else None

    def _wait_for_fallback(self, context: Context, handle: Any, fallback: dict[str, Any]) -> dict[str, Any]:  # noqa: ANN401
        """Wait for the standby the provider released after its refusal, then :meth:`taken_over`."""
        return self._wait(handle, self.first_commit_timeout, kwargs={"fallback": fallback},
                          finish=lambda event: self.taken_over(context, event, fallback))

    def taken_over(self, context: Context, event: dict[str, Any] | None,
                   fallback: Mapping[str, Any]) -> dict[str, Any]:
        """The result once the standby the provider released after its refusal committed."""
        fired = LaunchTriggerEvent.from_json(event)
        handle = self.first_commit(context, event)  # raises for a death or a timeout, as a launch does
        new, _ = self._controls()
        release = fallback["release"]
        split = downtime_split(stop_requested_at=str(fallback["stop_requested_at"]),
                               stop_acknowledged_at=str(fallback["stop_acknowledged_at"]),
                               ack_seen_at=str(fallback["refusal"].get("refused_at", "")),
                               handover_read_at=str(fallback["handed_over_at"]),
                               released_at=str(release["released_at"]),
                               first_commit_at=self._first_commit_time(new, fired.batch))
        self.log.info("switchover done by the provider after the standby's refusal: %s", split.describe())
        return SwitchoverResult(handle=handle, stop=fallback["stop"], handover=fallback["handover"],
                                used=fallback["refusal"], downtime=split.to_dict(),
                                taken_by=TakenBy.PROVIDER).to_dict()

    def _check(self, release: SwitchoverRelease, used: SwitchoverHandover,
               old: ControlFiles) -> tuple[HandoverResult, StopAck]:
        """The provider's own handover and start, from the old checkpoint, compared with the standby's;
        with the old query's acknowledgement it read."""
        ack = old.ack()
        if ack is None or ack.request_id != used.stop_request_id:
            raise SwitchoverMismatch(found=f"no acknowledgement of stop request {used.stop_request_id} on the old "
                                           "checkpoint", expected="the acknowledgement the standby started after",
                                     path=str(self.old_checkpoint_uri))
        reader = CheckpointReader(str(self.old_checkpoint_uri), fs=old.fs)
        handover = reader.handover()
        try:
            plan = plan_switchover(release, handover, ack, reader.batch_start)
        except SwitchoverRefused as refused:
            raise SwitchoverMismatch(found=f"the provider refuses what the standby took: {refused.found}",
                                     expected=refused.expected, path=str(self.old_checkpoint_uri)) from None
        theirs = used.handover()
        differences = _differences(handover, theirs, plan.starting_offsets.to_json(), used.starting_offsets,
                                   self.source)
        if differences:
            raise SwitchoverMismatch(found="the standby took " + "; ".join(f for f, _ in differences),
                                     expected="the provider's reading of the old checkpoint: "
                                              + "; ".join(e for _, e in differences),
                                     path=self.checkpoint_uri)
        self.log.info("the standby started where the provider reads the old checkpoint: %s, starting offsets %s",
                      f"batch {handover.batch_id} committed", plan.starting_offsets.to_json())
        return HandoverResult(handover, starting_offsets=plan.starting_offsets,
                              start_plan=plan if plan.choice.mode is not StartMode.RESUME else None), ack

    def _first_commit_time(self, new: ControlFiles, batch: int | None) -> float | None:
        """When the new query committed its first batch (the commit file's time), None if unknown."""
        if batch is None:
            return None
        try:
            info = new.fs.info(f"{new.root.rstrip('/')}/commits/0")
        except (OSError, ValueError):
            return None
        mtime = info.get("mtime") or info.get("LastModified") or info.get("modification_time")
        if hasattr(mtime, "timestamp"):
            return float(mtime.timestamp())
        return float(mtime) if isinstance(mtime, (int, float)) else None


def _differences(ours: Handover, theirs: Handover, our_start: str, their_start: str,
                 source: int | str | None) -> list[tuple[str, str]]:
    """(what the standby took, what the provider reads) for each difference."""
    found: list[tuple[str, str]] = []
    if ours.batch_id != theirs.batch_id:
        found.append((f"the handover of batch {theirs.batch_id}", f"batch {ours.batch_id}"))
    if ours.kafka_offsets(source) != theirs.kafka_offsets(source):
        found.append((f"handover offsets {theirs.kafka_offsets(source).to_json()}",
                      f"{ours.kafka_offsets(source).to_json()}"))
    if our_start != their_start:
        found.append((f"starting offsets {their_start}", f"starting offsets {our_start}"))
    return found

