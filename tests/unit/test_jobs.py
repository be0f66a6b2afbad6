"""The jobs layer: liveness decisions, the local driver's supervisor (real processes), handle
compatibility, the job-kind registry, and the stored forms of trigger kwargs and events."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar

import pytest

from airflow_ckpt_provider.checkpoint.errors import InvalidTriggerEvent
from airflow_ckpt_provider.checkpoint.launch import InvalidLaunchHandle, LaunchHandle, LaunchMode
from airflow_ckpt_provider.jobs import (
    DriverState,
    JobOptions,
    LocalJob,
    SubmitRequest,
    UnknownJobKind,
    job_for,
    judge_liveness,
    register_job_kind,
)
from airflow_ckpt_provider.jobs.local import group_members
from airflow_ckpt_provider.records.control import DRIVER, DriverRecord, Heartbeat, ProcessScope
from airflow_ckpt_provider.triggers.launch import LaunchEvent, LaunchTrigger, LaunchTriggerEvent
from airflow_ckpt_provider.triggers.stop import GracefulStopTrigger

NOW = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)
LAUNCHED = "2026-11-23T11:59:00+00:00"


def at(seconds_before_now: float) -> str:
    return (NOW - timedelta(seconds=seconds_before_now)).isoformat(timespec="milliseconds")


def handle(launch_id: str = "L1", **fields: Any) -> LaunchHandle:
    return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri="/cp", app_name="v2", started_at=LAUNCHED, pid=4242,
                        launch_id=launch_id, host="worker-a", boot_id="b", pid_namespace="pid:[1]", **fields)


def record(state: str = "running", updated: float = 1.0, launch_id: str = "L1", code: int | None = None) -> DriverRecord:
    return DriverRecord(launch_id=launch_id, state=state, pid=4242, started_at=LAUNCHED, updated_at=at(updated),
                        interval_s=5.0, exit_code=code, ended_at=at(updated) if state == "exited" else "",
                        log_tail="Traceback: boom" if code else "")


def beat(state: str = "running", started: str = "2026-11-23T11:59:10+00:00", updated: float = 1.0) -> Heartbeat:
    return Heartbeat(query_id="q", run_id="r", state=state, started_at=started, updated_at=at(updated), interval_s=1.0)


@pytest.mark.parametrize(("driver", "job_state", "heartbeat", "alive", "state"), [
    pytest.param(record("exited", code=0), DriverState.UNKNOWN, None, False, DriverState.FINISHED, id="record-exit-0"),
    pytest.param(record("exited", code=3), DriverState.RUNNING, None, False, DriverState.FAILED,
                 id="record-exit-wins-over-a-stale-view"),
    pytest.param(record(updated=2), DriverState.UNKNOWN, None, True, DriverState.RUNNING, id="record-fresh"),
    pytest.param(record(updated=60), DriverState.UNKNOWN, None, False, DriverState.EXITED, id="record-stale"),
    pytest.param(record(updated=60), DriverState.RUNNING, None, True, DriverState.RUNNING,
                 id="record-stale-but-the-process-runs"),
    pytest.param(record("exited", code=3, launch_id="OTHER"), DriverState.UNKNOWN, None, None, DriverState.UNKNOWN,
                 id="another-launch-record-ignored"),
    pytest.param(None, DriverState.FAILED, None, False, DriverState.FAILED, id="cluster-manager-says-failed"),
    pytest.param(None, DriverState.SUBMITTED, None, True, DriverState.SUBMITTED, id="cluster-manager-says-submitted"),
    pytest.param(None, DriverState.UNKNOWN, beat(), True, DriverState.RUNNING, id="heartbeat-fresh"),
    pytest.param(None, DriverState.UNKNOWN, beat("stopped"), False, DriverState.EXITED, id="heartbeat-stopped"),
    pytest.param(None, DriverState.UNKNOWN, beat(updated=30), False, DriverState.EXITED, id="heartbeat-stale"),
    pytest.param(None, DriverState.UNKNOWN, beat("stopped", started="2026-11-20T08:00:00+00:00"), None,
                 DriverState.UNKNOWN, id="an-earlier-run-heartbeat-ignored"),
    pytest.param(None, DriverState.UNKNOWN, None, None, DriverState.UNKNOWN, id="nothing-known"),
])
def test_liveness_verdicts(driver: DriverRecord | None, job_state: DriverState, heartbeat: Heartbeat | None,
                           alive: bool | None, state: DriverState) -> None:
    verdict = judge_liveness(handle(), job_state=job_state, driver=driver, heartbeat=heartbeat, now=NOW)
    assert (verdict.alive, verdict.state) == (alive, state), verdict.evidence
    assert verdict.evidence
    if driver is not None and driver.exit_code and driver.launch_id == "L1":
        assert verdict.log_tail == "Traceback: boom"


def test_driver_state_vocabulary() -> None:
    alive = {s: s.alive for s in DriverState}
    assert alive == {DriverState.SUBMITTED: True, DriverState.RUNNING: True, DriverState.FINISHED: False,
                     DriverState.FAILED: False, DriverState.KILLED: False, DriverState.EXITED: False,
                     DriverState.UNKNOWN: None}
    assert DriverState("running") is DriverState.RUNNING and json.dumps(DriverState.RUNNING) == '"running"'


# -- handles: compatibility and safety -------------------------------------------------------------


def test_a_handle_recorded_before_the_scope_fields_still_loads() -> None:
    old = {"app_name": "v1", "application_id": None, "checkpoint_uri": "/cp", "driver_id": None,
           "extra": {"host": "worker-a", "adopted_from": "heartbeat"}, "log_path": "/tmp/v1.log", "master": "local[2]",
           "mode": "local", "pid": 31337, "started_at": "2026-11-01T00:00:00+00:00", "ui_url": None}
    loaded = LaunchHandle.from_json(json.dumps(old))
    assert loaded.host == "worker-a" and loaded.boot_id == "" and loaded.launch_id == ""
    assert not loaded.scope.same_as(ProcessScope.current()), "an unscoped pid is never looked up here"
    assert job_for(loaded).state() is DriverState.UNKNOWN
    assert LaunchHandle.from_json(loaded.to_json()) == loaded


def test_scope_of_this_process_is_complete_on_linux() -> None:
    scope = ProcessScope.current()
    assert scope.host and scope.boot_id and scope.pid_namespace.startswith("pid:[")
    assert scope.same_as(ProcessScope.current())
    assert not scope.same_as(ProcessScope(scope.host, scope.boot_id, "pid:[0]"))
    assert not ProcessScope().same_as(ProcessScope())


class KubernetesJob:
    """A stand-in for a team's own job kind (the registry contract, not Kubernetes)."""

    kind: ClassVar[str] = "kubernetes"

    def __init__(self, handle: LaunchHandle, options: JobOptions) -> None:
        self.handle = handle

    @classmethod
    def launch(cls, request: SubmitRequest, options: JobOptions | None = None) -> KubernetesJob:
        raise NotImplementedError

    def state(self) -> DriverState:
        return DriverState.RUNNING

    def log_tail(self, lines: int = 50) -> str:
        return ""

    def kill(self, *, timeout: float = 60.0) -> str:
        return f"deleted pod {self.handle.driver_id}"


def test_a_registered_job_kind_follows_its_handles() -> None:
    pod = LaunchHandle(mode="kubernetes", checkpoint_uri="s3://b/cp", app_name="v2", started_at=LAUNCHED,
                       driver_id="orders-v2-driver")
    assert pod.kind == "kubernetes" and LaunchHandle.from_json(pod.to_json()) == pod
    with pytest.raises(UnknownJobKind, match="nomad"):
        job_for(LaunchHandle(mode="nomad", checkpoint_uri="/cp", app_name="x", started_at=LAUNCHED))
    register_job_kind("kubernetes", KubernetesJob)
    job = job_for(pod)
    assert job.state() is DriverState.RUNNING and job.kill() == "deleted pod orders-v2-driver"
    with pytest.raises(InvalidLaunchHandle):
        LaunchHandle(mode="Not A Kind!", checkpoint_uri="/cp", app_name="x", started_at=LAUNCHED)


# -- the supervisor of a local driver (real processes) ---------------------------------------------


def fake_submit(tmp_path: Path, body: str) -> str:
    script = tmp_path / "spark-submit"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def submit(tmp_path: Path, body: str) -> LocalJob:
    request = SubmitRequest(command=[fake_submit(tmp_path, body)], env=dict(os.environ), log_path=tmp_path / "d.log",
                            checkpoint_uri=str(tmp_path / "cp"), app_name="v2", master="local[1]", started_at=LAUNCHED)
    return LocalJob.launch(request)


def read_record(tmp_path: Path) -> DriverRecord | None:
    path = tmp_path / "cp" / DRIVER
    return DriverRecord.from_json(path.read_bytes()) if path.exists() else None


def wait_for(predicate: Any, timeout: float = 60.0) -> Any:  # noqa: ANN401
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
    return value


def test_the_supervisor_records_a_crash_where_anyone_can_read_it(tmp_path: Path) -> None:
    job = submit(tmp_path, 'echo "py4j: deliberate crash"; exit 3')
    ended = wait_for(lambda: (r := read_record(tmp_path)) is not None and r.state == "exited" and r)
    assert (ended.launch_id, ended.exit_code, ended.pid) == (job.handle.launch_id, 3, job.handle.pid)
    assert ended.log_tail.endswith("py4j: deliberate crash") and ended.scope == ProcessScope.current()
    # judged from a scope that cannot see the process (another container, PID namespace, host)
    elsewhere = LaunchHandle.from_json({**job.handle.to_dict(), "pid_namespace": "pid:[0]"})
    verdict = judge_liveness(elsewhere, job_state=job_for(elsewhere).state(), driver=ended)
    assert (verdict.alive, verdict.state) == (False, DriverState.FAILED) and "code 3" in verdict.evidence


def test_the_supervisor_records_a_running_driver_and_its_end_on_sigterm(tmp_path: Path) -> None:
    job = submit(tmp_path, 'echo started; exec sleep 120')
    running = wait_for(lambda: read_record(tmp_path))
    assert running.state == "running" and running.is_alive()
    assert job.state() is DriverState.RUNNING and len(group_members(job.handle.pid or 0)) >= 2
    action = job.kill(timeout=30)
    assert "SIGTERM" in action
    ended = wait_for(lambda: (r := read_record(tmp_path)) is not None and r.state == "exited" and r)
    assert ended.exit_code == -signal.SIGTERM, "the supervisor outlived SIGTERM long enough to record the end"
    assert job.state().alive is False


def test_the_supervisor_refuses_to_run_nothing(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "airflow_ckpt_provider.jobs.supervise", "--checkpoint",
                           str(tmp_path / "cp"), "--launch-id", "x", "--log", str(tmp_path / "l"), "--"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no command" in done.stderr
    assert not (tmp_path / "cp").exists()


# -- stored forms: trigger kwargs and events from an earlier version stay loadable -----------------

#: LaunchTrigger.serialize() of this provider version before the jobs layer (pinned).
LAUNCH_TRIGGER_KWARGS = {
    "checkpoint_uri": "/data/cp/v2", "deadline": 1795000000.0,
    "handle": {"app_name": "v2", "application_id": None, "checkpoint_uri": "/data/cp/v2", "driver_id": None,
               "extra": {"command": "[\"spark-submit\"]"}, "log_path": "/tmp/v2.log", "master": "local[2]",
               "mode": "local", "pid": 4242, "started_at": "2026-11-01T00:00:00+00:00", "ui_url": None},
    "min_batch": 0, "poll_interval": 1.0, "storage_conn_id": None, "log_lines": 60, "started_at": 1794999000.0,
}
#: GracefulStopTrigger.serialize() of the same version (pinned).
STOP_TRIGGER_KWARGS = {
    "checkpoint_uri": "/data/cp/v1", "request_id": "0f3c", "deadline": 1795000000.0, "requested_at": 1794999700.0,
    "run_id": "r1", "poll_interval": 1.0, "storage_conn_id": None, "missed_beats": 3.0,
}


@pytest.mark.parametrize(("cls", "kwargs"), [(LaunchTrigger, LAUNCH_TRIGGER_KWARGS),
                                             (GracefulStopTrigger, STOP_TRIGGER_KWARGS)])
def test_stored_trigger_kwargs_still_load(cls: type, kwargs: dict[str, Any]) -> None:
    trigger = cls(**kwargs)
    path, again = trigger.serialize()
    assert path == f"{cls.__module__}.{cls.__qualname__}"
    assert again == kwargs, "today's serialized form is unchanged"


def test_an_event_of_the_earlier_launch_trigger_still_validates() -> None:
    earlier = {"reason": "died", "batch": None, "state": "EXITED", "log_tail": "boom",
               "handle": LAUNCH_TRIGGER_KWARGS["handle"], "waited_s": 3.5}
    event = LaunchTriggerEvent.from_json(earlier)
    assert (event.reason, event.state, event.evidence) == (LaunchEvent.DIED, DriverState.EXITED, "")
    assert LaunchTriggerEvent.from_json(event.to_json()) == event
    with pytest.raises(InvalidTriggerEvent, match="unknown key.*'surprise'"):
        LaunchTriggerEvent.from_json({**earlier, "surprise": 1})
    with pytest.raises(InvalidTriggerEvent, match="format 2 .written by a newer release"):
        LaunchTriggerEvent.from_json({**event.to_dict(), "format": 2})
    assert event.to_dict()["format"] == 1
    with pytest.raises(ValueError):
        LaunchTriggerEvent.from_json({**earlier, "reason": "exploded"})
