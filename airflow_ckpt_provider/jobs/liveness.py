"""Whether a launched job lives, judged the same way wherever the asking process runs.

:func:`judge_liveness` is pure. It weighs, in this order:

1. the driver record of this launch (``_ckpt/driver.json``, written by a local launch's
   supervisor, matched by ``launch_id``): ``exited`` is final (with exit code and log tail);
   ``running`` and refreshed is alive; ``running`` but no longer refreshed means the supervisor
   died with its driver;
2. the job kind's own answer (:meth:`LaunchedJob.state`): the standalone master, the YARN
   ResourceManager, or the process group when asked from the scope that launched it;
3. the query's heartbeat (``_ckpt/heartbeat.json``) when it belongs to this launch (started
   after it): fresh is alive; stopped or stale is dead.

Anything else is :attr:`DriverState.UNKNOWN` (``alive`` None): callers keep waiting for what
they wait for (a commit, an acknowledgement) until their deadline instead of guessing.
:func:`observe` reads those inputs (control files through fsspec, the kind's state).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.jobs.base import DriverState, JobOptions, job_for
from airflow_ckpt_provider.records.control import DriverRecord, DriverStatus, Heartbeat, HeartbeatState, parse_time
from airflow_ckpt_provider.storage.stop import ControlFiles

#: A heartbeat started this long before the launch still counts as this launch's (clocks differ).
CLOCK_SKEW = timedelta(seconds=5)
DEFAULT_MISSED_BEATS = 3.0


@dataclass(frozen=True)
class Liveness:
    """The verdict: ``alive`` (None when unknown), the state in :class:`DriverState` words, the
    evidence in words, and the driver's log tail when the verdict came with one."""

    alive: bool | None
    state: DriverState
    evidence: str
    log_tail: str = ""


def started_after(moment: str, start: str) -> bool:
    """Whether ISO time ``moment`` is not before ``start`` (less :data:`CLOCK_SKEW`); False for odd values."""
    try:
        return parse_time(moment) >= parse_time(start) - CLOCK_SKEW
    except (TypeError, ValueError):
        return False


def _age(updated_at: str, now: datetime) -> float:
    return (now - parse_time(updated_at)).total_seconds()


def judge_liveness(
    handle: LaunchHandle,
    *,
    job_state: DriverState,
    driver: DriverRecord | None = None,
    heartbeat: Heartbeat | None = None,
    now: datetime | None = None,
    missed_beats: float = DEFAULT_MISSED_BEATS,
) -> Liveness:
    """The verdict for ``handle`` (see the module doc); never raises for odd records."""
    now = now or datetime.now(timezone.utc)
    record = driver if driver is not None and handle.launch_id and driver.launch_id == handle.launch_id else None
    if record is not None:
        if record.state == DriverStatus.EXITED:
            code = record.exit_code
            state = DriverState.FINISHED if code == 0 else DriverState.EXITED if code is None else DriverState.FAILED
            return Liveness(False, state, f"the driver exited with code {code} at {record.ended_at}", record.log_tail)
        if record.is_alive(now, missed_beats):
            return Liveness(True, DriverState.RUNNING,
                            f"its supervisor refreshed the driver record {_age(record.updated_at, now):.0f} s ago")
    if job_state is not DriverState.UNKNOWN:
        return Liveness(job_state.alive, job_state, f"the {handle.kind} job reports {job_state.value}")
    if record is not None:
        return Liveness(False, DriverState.EXITED,
                        f"its supervisor stopped refreshing the driver record at {record.updated_at} "
                        "(killed with the driver)")
    if heartbeat is not None and started_after(heartbeat.started_at, handle.started_at):
        if heartbeat.is_alive(now, missed_beats):
            return Liveness(True, DriverState.RUNNING, f"heartbeat of run {heartbeat.run_id} is fresh")
        ended = "stopped" if heartbeat.state == HeartbeatState.STOPPED else "went stale"
        return Liveness(False, DriverState.EXITED, f"heartbeat of run {heartbeat.run_id} {ended} at "
                                                   f"{heartbeat.updated_at}")
    return Liveness(None, DriverState.UNKNOWN,
                    f"no record of launch {handle.launch_id[:8] or handle.app_name} in the checkpoint and the "
                    f"{handle.kind} job cannot be seen from here")


def observe(handle: LaunchHandle, control: ControlFiles, *, options: JobOptions | None = None,
            missed_beats: float = DEFAULT_MISSED_BEATS) -> Liveness:
    """Read the job's records and its kind's state, and judge (I/O: the checkpoint's control
    files through fsspec, the kind's own calls). Storage errors propagate."""
    driver = control.driver()
    job = job_for(handle, options)
    settled = (driver is not None and handle.launch_id == driver.launch_id != ""
               and (driver.state == DriverStatus.EXITED or driver.is_alive(missed_beats=missed_beats)))
    state = DriverState.UNKNOWN if settled else job.state()
    heartbeat = control.heartbeat() if state is DriverState.UNKNOWN and not settled else None
    verdict = judge_liveness(handle, job_state=state, driver=driver, heartbeat=heartbeat, missed_beats=missed_beats)
    if verdict.alive is False and not verdict.log_tail:
        verdict = Liveness(verdict.alive, verdict.state, verdict.evidence, job.log_tail(60))
    return verdict
