"""Stop a running streaming query between batches: ask, wait (deferred), escalate, check quiet."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from functools import cached_property
from typing import Any, ClassVar

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint.errors import CheckpointNotQuiet, QueryNotRunning, QueryStateUnknown
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.old_job import OldJobKind, OldJobSpec
from airflow_ckpt_provider.checkpoint.stop import DEFAULT_MISSED_BEATS, StopOutcome, StopReason
from airflow_ckpt_provider.faults import fault_point, pause_point
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.jobs import job_for, observe
from airflow_ckpt_provider.jobs.adopt import adopt
from airflow_ckpt_provider.operators.journaled import JOURNAL_FIELDS, JournaledStep, given
from airflow_ckpt_provider.storage.stop import ControlFiles, begin_stop, finish_stop, kill_stop, not_running_result
from airflow_ckpt_provider.triggers.stop import GracefulStopTrigger, StopTriggerEvent
from airflow_ckpt_provider.upgrade.inputs import FromRecord
from airflow_ckpt_provider.upgrade.record import UPGRADE_PHASE

#: Airflow's own deferral timeout is a backstop past the trigger's deadline (which escalates).
DEFER_GRACE_S = 120.0


def _launch_handle(value: str | Mapping[str, Any] | LaunchHandle | None) -> LaunchHandle | None:
    """The (rendered) ``launch_handle`` argument as a handle; None when not given."""
    if value is None or isinstance(value, LaunchHandle):
        return value
    if isinstance(value, str) and value.strip() in ("", "None", "null"):
        return None
    if isinstance(value, (str, Mapping)):
        return LaunchHandle.from_json(value)
    raise TypeError(f"launch_handle must be a LaunchHandle, its dict or JSON string, not {type(value).__name__}")


class GracefulStopOperator(JournaledStep, BaseOperator):
    """Stop the query running on ``checkpoint_uri`` between two batches, for certain.

    Reads ``_ckpt/heartbeat.json``. Nothing alive (and no live launched job in ``launch_handle``)
    -> checks for ``quiet_period`` that nothing commits: batches appearing mean the query runs
    without GracefulStop (:class:`RunningWithoutGracefulStop`, saying what to do); a quiet
    checkpoint returns outcome ``not_running`` (its heartbeat ended) or ``no_heartbeat`` (none was
    ever written: whether a query idles there cannot be seen; ``detail`` gives the last commit's
    batch and age), or raises :class:`QueryNotRunning` if ``fail_if_not_running`` — and
    :class:`QueryStateUnknown` for ``no_heartbeat`` if ``fail_if_no_heartbeat`` (the reference DAG:
    it does not start a new version beside an old one it cannot see). Otherwise writes
    ``_ckpt/stop-request.json`` (or joins a pending one) and defers to
    :class:`GracefulStopTrigger` until the query acknowledges. On timeout (``stop_timeout``
    seconds) it kills the job through ``launch_handle`` (the launch operator's XCom: a
    LaunchHandle JSON string, dict or template); without one it raises :class:`StopTimeout`. In
    every case it then checks for ``quiet_period`` seconds that no new ``offsets/N`` appears and
    no heartbeat is alive (:class:`CheckpointNotQuiet`, :class:`QueryStillRunning`), and waits
    for a supervised driver to exit. ``acknowledged_quiet_period`` (default: ``quiet_period``)
    shortens that check after a clean acknowledgement: the query wrote it once ``query.stop()``
    had returned, so only an unknown second writer is left to look for.

    Returns (XCom) :meth:`StopResult.to_dict`: outcome (graceful | escalated | not_running | no_heartbeat),
    last committed batch, interrupted batch or None, seconds waited, the ack.

    ``old_job`` declares an old job the provider did not launch by what runs it
    (:class:`~airflow_ckpt_provider.checkpoint.old_job.OldJobSpec`; kind ``launched`` is the same
    as ``launch_handle``). While its GracefulStop heartbeat is live it is stopped as above (and
    killed through its manager if it does not acknowledge in time). Without
    one, it is found through its cluster manager: ended already -> the quiet check and outcome
    ``not_running`` (a re-run after a kill lands here, and kills nothing again); running -> it is
    KILLED through its manager (YARN's REST API, the standalone master, the pod's API server, the
    process group), the kill waits until the manager says it ended, then the checkpoint must stay
    quiet for ``quiet_period`` (no batch planned or committed): outcome ``killed``. No stop request
    is written into a checkpoint whose job never reads it. A kill may cut one batch; the handover's
    sink ledger decides what the sink holds of it (the preflight refused the sinks that cannot
    tell, unless the person accepted the cut batch). Kind ``external``: a person stopped it; the
    quiet check only.

    With ``journal`` (an upgrade journal's URI) a stop already done for this upgrade is not
    repeated: a re-triggered run after the relaunch never stops anything (not the old job again,
    and never the new one). An interrupted stop is simply asked again: it joins the pending
    request or finds the query stopped.
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("graceful_stop", "in_place_stop", "rollback_stop_new",
                                             "in_place_rollback_stop")

    template_fields: Sequence[str] = ("checkpoint_uri", "launch_handle", "old_job", "storage_conn_id", *JOURNAL_FIELDS)
    ui_color = "#fde8e8"

    def __init__(
        self,
        *,
        checkpoint_uri: str,
        launch_handle: str | Mapping[str, Any] | LaunchHandle | FromRecord | None = None,
        stop_timeout: float = 300.0,
        quiet_period: float = 10.0,
        storage_conn_id: str | None = None,
        poll_interval: float = 2.0,
        fail_if_not_running: bool = False,
        fail_if_no_heartbeat: bool = False,
        missed_beats: float = DEFAULT_MISSED_BEATS,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        journal_phase: str = UPGRADE_PHASE,
        acknowledged_quiet_period: float | None = None,
        old_job: OldJobSpec | Mapping[str, Any] | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.old_job = old_job.to_json() if isinstance(old_job, OldJobSpec) else old_job
        self.init_journal(journal, journal_conn_id, journal_phase)
        if stop_timeout <= 0 or poll_interval <= 0 or quiet_period < 0 or missed_beats <= 0 \
                or (acknowledged_quiet_period is not None and acknowledged_quiet_period < 0):
            raise ValueError("stop_timeout, poll_interval and missed_beats must be > 0, the quiet periods >= 0")
        self.acknowledged_quiet_period = None if acknowledged_quiet_period is None else float(acknowledged_quiet_period)
        if launch_handle is not None and not isinstance(launch_handle, (str, Mapping, LaunchHandle, FromRecord)) \
                and not hasattr(launch_handle, "resolve"):
            raise TypeError(f"launch_handle must be a LaunchHandle, its dict or JSON string, "
                            f"not {type(launch_handle).__name__}")
        self.checkpoint_uri = checkpoint_uri
        self.launch_handle = given(launch_handle)  # a template field: rendered or read from the record, then _handle()
        self.stop_timeout = float(stop_timeout)
        self.quiet_period = float(quiet_period)
        self.storage_conn_id = storage_conn_id
        self.poll_interval = float(poll_interval)
        self.fail_if_not_running = bool(fail_if_not_running)
        self.fail_if_no_heartbeat = bool(fail_if_no_heartbeat)
        self.missed_beats = float(missed_beats)

    @cached_property
    def storage_hook(self) -> CheckpointStorageHook:
        return CheckpointStorageHook(storage_conn_id=self.storage_conn_id)

    def _control(self) -> ControlFiles:
        fs, path = self.storage_hook.filesystem(self.checkpoint_uri)
        return ControlFiles(fs, path, uri=self.checkpoint_uri)

    def _handle(self) -> LaunchHandle | None:
        handle = _launch_handle(self.launch_handle)
        if handle is None:  # or an old job declared by its launch handle (kind ``launched``)
            declared = OldJobSpec.from_value(self.old_job)
            handle = declared.launch_handle if declared is not None else None
        if handle is None:
            return None
        if handle.checkpoint_uri and handle.checkpoint_uri.rstrip("/") != self.checkpoint_uri.rstrip("/"):
            self.log.warning("launch handle is for checkpoint %s, stopping %s", handle.checkpoint_uri,
                             self.checkpoint_uri)
        return handle

    def kill(self, handle: LaunchHandle) -> str:
        """Escalation: kill the launched job through its job kind (local process group from the
        launching scope only, standalone driver through the master, YARN application); say what
        was done."""
        from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook

        hook = SparkLauncherHook(master=handle.master or "local", master_ui_url=handle.extra.get("master_ui_url"))
        return hook.kill(handle)

    def execute(self, context: Context) -> dict[str, Any]:
        return self.run_step(context, lambda start, journal: self.request_stop())

    def _declared_old_job(self) -> OldJobSpec | None:
        """The ``old_job`` declaration, when it names a job the provider did not launch."""
        declared = OldJobSpec.from_value(self.old_job)
        return None if declared is None or declared.kind is OldJobKind.LAUNCHED else declared

    def stop_adopted(self, declared: OldJobSpec, control: ControlFiles) -> dict[str, Any]:
        """Stop an old job without a live GracefulStop heartbeat: through its cluster manager."""
        if declared.kind is OldJobKind.EXTERNAL:
            return self.wait_for_person(declared, control)
        adopted = adopt(declared, checkpoint_uri=self.checkpoint_uri)
        what = adopted.application.describe() if adopted.application is not None else declared.describe()
        state = adopted.application.state if adopted.application is not None else job_for(adopted.handle).state()
        self.log.info("old job: %s (%s)", what, state.value)
        if state.alive is False:
            self.log.info("the old job has ended (%s): nothing to kill; checking that the checkpoint is quiet",
                          state.value)
            result = not_running_result(control, None, quiet_period=self.quiet_period,
                                        poll_interval=min(self.poll_interval, 0.5), missed_beats=self.missed_beats)
            return replace(result, outcome=StopOutcome.NOT_RUNNING, detail=f"{what}: ended ({state.value})").to_dict()
        pause_point(f"{self.task_id}:before_kill")

        def kill() -> str:
            done = self.kill(adopted.handle)
            fault_point(f"{self.task_id}:killed")  # a re-run finds the job ended and kills nothing again
            return done

        return kill_stop(control, kill=kill,
                         quiet_period=max(self.quiet_period, declared.kill_grace_s),
                         poll_interval=min(self.poll_interval, 0.5), missed_beats=self.missed_beats,
                         detail=what).to_dict()

    def wait_for_person(self, declared: OldJobSpec, control: ControlFiles) -> dict[str, Any]:
        """An ``external`` old job: a person stops it (the approval said what to stop). Wait, up to
        ``stop_timeout``, until the checkpoint stays quiet for ``max(quiet_period, kill_grace_s)``:
        no batch planned or committed, no live heartbeat. Raises :class:`RunningWithoutGracefulStop`
        (or :class:`CheckpointNotQuiet`) when it still runs at the deadline: nothing was changed."""
        quiet = max(self.quiet_period, declared.kill_grace_s)
        deadline = time.monotonic() + self.stop_timeout
        self.log.info("old job %s: a person stops it; waiting up to %.0f s for the checkpoint to stay quiet for %g s",
                      declared.describe(), self.stop_timeout, quiet)
        while True:
            try:
                result = not_running_result(control, None, quiet_period=quiet,
                                            poll_interval=min(self.poll_interval, 0.5), missed_beats=self.missed_beats)
            except CheckpointNotQuiet as exc:
                if time.monotonic() >= deadline:
                    raise
                self.log.info("the old job still writes (%s); waiting for a person to stop it", exc.found)
                continue
            return replace(result, outcome=StopOutcome.NOT_RUNNING,
                           detail=f"stopped by a person ({declared.describe()}); {result.detail}").to_dict()

    def request_stop(self) -> dict[str, Any]:
        """Ask the query to stop and defer until it acknowledges (or return at once when nothing
        runs; or kill a declared old job that runs without GracefulStop)."""
        handle = self._handle()
        control = self._control()
        declared = self._declared_old_job()
        if declared is not None:
            heartbeat = control.heartbeat()
            if heartbeat is None or not heartbeat.is_alive(missed_beats=self.missed_beats):
                return self.stop_adopted(declared, control)
        launched = False
        if handle is not None:
            verdict = observe(handle, control)
            self.log.info("launched job %s: %s", handle.app_name or handle.kind, verdict.evidence)
            launched = verdict.alive is not False
        start = begin_stop(control, requested_by=f"airflow:{self.dag_id}.{self.task_id}", timeout_s=self.stop_timeout,
                           launched_job_running=launched, missed_beats=self.missed_beats)
        if start.request is None:
            result = not_running_result(control, start.heartbeat, quiet_period=self.quiet_period,
                                        poll_interval=min(self.poll_interval, 0.5), missed_beats=self.missed_beats)
            if self.fail_if_not_running:
                raise QueryNotRunning(found=f"no running launched job; {result.detail}",
                                      expected="a query running on this checkpoint", path=self.checkpoint_uri)
            if self.fail_if_no_heartbeat and result.outcome is StopOutcome.NO_HEARTBEAT:
                raise QueryStateUnknown(found=result.detail or "no heartbeat ever written, nothing committing",
                                        expected="a heartbeat under _ckpt/ (GracefulStop) or a launch handle of "
                                                 "the old job", path=self.checkpoint_uri)
            return result.to_dict()
        fault_point(f"{self.task_id}:requested")
        return self.defer_unless_over(
            GracefulStopTrigger(
                checkpoint_uri=self.checkpoint_uri,
                request_id=start.request.request_id,
                deadline=start.requested_at + self.stop_timeout,
                requested_at=start.requested_at,
                run_id=start.run_id,
                poll_interval=self.poll_interval,
                storage_conn_id=self.storage_conn_id,
                missed_beats=self.missed_beats,
            ),
            finish=self.finish, poll_interval=min(self.poll_interval, 0.5),
            timeout=timedelta(seconds=self.stop_timeout + self.quiet_period + DEFER_GRACE_S),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume after the trigger: validate the event, escalate if needed, check the quiet."""
        return self.complete_step(lambda: self.finish(event))

    def finish(self, event: dict[str, Any] | None) -> dict[str, Any]:
        fired = StopTriggerEvent.from_json(event)
        reason = fired.reason
        handle = self._handle() if reason is StopReason.TIMEOUT else None
        declared = self._declared_old_job() if reason is StopReason.TIMEOUT and handle is None else None
        if declared is not None and declared.kind is not OldJobKind.EXTERNAL:  # GracefulStop in a job we adopted
            handle = adopt(declared, checkpoint_uri=self.checkpoint_uri).handle
        return finish_stop(
            self._control(),
            reason=reason,
            request_id=fired.request_id,
            requested_at=fired.requested_at,
            ack=fired.ack,
            kill=(lambda: self.kill(handle)) if handle is not None else None,
            timeout_s=self.stop_timeout,
            quiet_period=self.quiet_period,
            poll_interval=min(self.poll_interval, 0.5),
            missed_beats=self.missed_beats,
            acknowledged_quiet_period=self.acknowledged_quiet_period,
        ).to_dict()


__all__ = ["GracefulStopOperator", "StopReason"]
