"""The preflight and the stop of an old job the provider did not launch (param ``old_job``): the
preflight finds it through its manager and refuses what a kill cannot make exact, before anything
stops; the stop kills it through its manager without writing a request, waits for the quiet, and
kills nothing again on a re-run. The ResourceManager is a replay server (a real HTTP server on
127.0.0.1); a process is a real process group; the checkpoints are real files."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointNotQuiet,
    CheckpointOnDriverDisk,
    CutBatchNotAccepted,
    KillNeedsSinkLedger,
    SwitchoverUnsupported,
)
from airflow_ckpt_provider.checkpoint.stop import StopOutcome, StopReason
from airflow_ckpt_provider.operators.stop import GracefulStopOperator
from airflow_ckpt_provider.triggers.stop import StopTriggerEvent
from tests.unit.cluster_replay import Replay, Reply, replay_server
from tests.unit.conftest import write_checkpoint
from tests.unit.test_journaled_operators import context
from tests.unit.test_preflight_refusals import _preflight

APP = "application_1735689600000_0007"


@pytest.fixture
def rm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Replay]:
    """A ResourceManager (replayed) that runs ``APP``; no yarn-site.xml and no ``yarn`` on the way."""
    empty = tmp_path / "conf"
    empty.mkdir()
    monkeypatch.setenv("HADOOP_CONF_DIR", str(empty))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    with replay_server() as replay:
        replay.on("GET", f"/ws/v1/cluster/apps/{APP}", Reply(body="yarn/app_running.json"))
        replay.on("GET", f"/ws/v1/cluster/apps/{APP}/appattempts", Reply(body="yarn/appattempts.json"))
        yield replay


def yarn_job(rm: Replay, **extra: Any) -> dict[str, Any]:  # noqa: ANN401
    return {"kind": "yarn", "application_id": APP, "resource_manager": rm.url, **extra}


def test_the_preflight_refuses_what_a_kill_cannot_make_exact_before_anything_stops(tmp_path: Path, rm: Replay) -> None:
    write_checkpoint(str(tmp_path / "v1"), batches=range(4), committed=range(3))
    with pytest.raises(KillNeedsSinkLedger) as undeclared:
        _preflight(tmp_path, old_job=yarn_job(rm, shared_mount=True), accept_undeclared_sink=True).execute(
            context("run-1"))
    assert "accept_undeclared_sink does not cover a kill" in undeclared.value.found
    with pytest.raises(CutBatchNotAccepted) as at_least_once:
        _preflight(tmp_path, old_job=yarn_job(rm, shared_mount=True), sink={"kind": "foreach_batch"}).execute(
            context("run-2"))
    assert "in flight now: events-" in at_least_once.value.found, "the cut batch's range is named"
    with pytest.raises(CheckpointOnDriverDisk):  # a local old checkpoint while the driver runs on a YARN node
        _preflight(tmp_path, old_job=yarn_job(rm), sink={"kind": "foreach_batch"}, accept_cut_batch=True).execute(
            context("run-3"))
    assert not any(a.method == "PUT" for a in rm.asked), "the preflight only reads"


def test_the_preflight_shows_the_job_as_its_manager_does_and_how_it_stops(tmp_path: Path, rm: Replay) -> None:
    write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    result = _preflight(tmp_path, old_job=yarn_job(rm, shared_mount=True), sink={"kind": "foreach_batch"},
                        accept_cut_batch="True").execute(context("run-1"))
    summary = result["summary_md"]
    assert f"**Old job:** YARN {APP} `orders-v1`" in summary and "killed through its ResourceManager" in summary
    assert "cut batch accepted (`accept_cut_batch`)" in summary
    assert result["old_query_running"] is True, "the manager says it runs, though no heartbeat does"
    switchover = _preflight(tmp_path, old_job=yarn_job(rm, shared_mount=True), sink={"kind": "kafka"}, accept_cut_batch="True",
                            upgrade_id="other")
    switchover.relaunch_mode = "switchover"
    with pytest.raises(SwitchoverUnsupported) as refused:
        switchover.execute(context("run-2"))
    assert "the switchover takes over inside the old driver" in refused.value.found


def _stop(tmp_path: Path, old_job: dict[str, Any]) -> GracefulStopOperator:
    """The reference DAG's stop of the old version (fail_if_no_heartbeat), on a local checkpoint."""
    return GracefulStopOperator(task_id="graceful_stop", checkpoint_uri=str(tmp_path / "v1"), old_job=old_job,
                                quiet_period=0.5, poll_interval=0.2, fail_if_no_heartbeat=True)


def test_a_yarn_job_without_graceful_stop_is_killed_through_its_resource_manager(tmp_path: Path, rm: Replay) -> None:
    write_checkpoint(str(tmp_path / "v1"), batches=range(4), committed=range(3))
    rm.on("PUT", f"/ws/v1/cluster/apps/{APP}/state", Reply(202, {"state": "KILLING"}), Reply(200, {"state": "KILLED"}))
    rm.on("GET", f"/ws/v1/cluster/apps/{APP}", Reply(body="yarn/app_running.json"), Reply(body="yarn/app_killed.json"))
    # its AM container, on a NodeManager (the same replay server) that no longer knows it: ended
    container = "container_1735689600000_0007_01_000001"
    rm.on("GET", f"/ws/v1/cluster/apps/{APP}/appattempts", Reply(body={"appAttempts": {"appAttempt": [
        {"id": 1, "containerId": container, "nodeHttpAddress": rm.url.removeprefix("http://")}]}}))
    rm.on("GET", f"/ws/v1/node/containers/{container}", Reply(404, "yarn/not_found.json"))
    result = _stop(tmp_path, yarn_job(rm, kill_grace_s=0.5, shared_mount=True)).execute(context("run-1"))
    assert result["outcome"] == StopOutcome.KILLED.value
    assert (result["last_committed_batch"], result["interrupted_batch"]) == (2, 3), "the kill cut batch 3"
    assert f"killed YARN application {APP} through {rm.url}" in result["escalation"]
    puts = [a for a in rm.asked if a.method == "PUT"]
    assert puts and puts[0].body == {"state": "KILLED"}
    assert not (tmp_path / "v1" / "_ckpt" / "stop-request.json").exists(), "a job without GracefulStop is not asked"

    # the re-run (a worker killed after the kill): the manager says KILLED, nothing is killed again
    rm.asked.clear()
    again = _stop(tmp_path, yarn_job(rm, kill_grace_s=0.5, shared_mount=True)).execute(context("run-2"))
    assert again["outcome"] == StopOutcome.NOT_RUNNING.value and "ended (killed)" in again["detail"]
    assert not any(a.method == "PUT" for a in rm.asked)


def test_a_process_without_graceful_stop_is_killed_by_its_process_group(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "v1"), batches=range(2))
    job = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        result = _stop(tmp_path, {"kind": "process", "pid": job.pid, "kill_grace_s": 0.5}).execute(context("run-1"))
        assert result["outcome"] == StopOutcome.KILLED.value and result["interrupted_batch"] is None
        deadline = time.monotonic() + 30
        while job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert job.poll() is not None, "the process group was killed"
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)


def test_an_external_job_is_waited_for_until_a_person_stopped_it(tmp_path: Path) -> None:
    """Kind ``external``: nothing is killed; the stop waits while the job still plans batches and
    returns once the checkpoint stayed quiet; at its deadline it raises and changes nothing."""
    checkpoint = tmp_path / "v1"
    write_checkpoint(str(checkpoint), batches=range(3))
    stopped = threading.Event()

    def still_running() -> None:  # the job plans two more batches, then a person stops it
        for batch in (3, 4):
            time.sleep(0.4)
            (checkpoint / "offsets" / str(batch)).write_bytes((checkpoint / "offsets" / "2").read_bytes())
        stopped.set()

    writer = threading.Thread(target=still_running)
    writer.start()
    op = _stop(tmp_path, {"kind": "external", "description": "orders-v1 on the batch cluster", "kill_grace_s": 1})
    result = op.execute(context("run-1"))
    writer.join()
    assert stopped.is_set() and result["outcome"] == StopOutcome.NOT_RUNNING.value
    assert result["last_planned_batch"] == 4 and "stopped by a person" in result["detail"]

    op = _stop(tmp_path, {"kind": "external", "description": "never stopped", "kill_grace_s": 1})
    op.stop_timeout = 1.0
    keep_going = threading.Event()

    def never_stops() -> None:
        batch = 5
        while not keep_going.is_set():
            (checkpoint / "offsets" / str(batch)).write_bytes((checkpoint / "offsets" / "2").read_bytes())
            batch += 1
            time.sleep(0.2)

    writer = threading.Thread(target=never_stops)
    writer.start()
    try:
        with pytest.raises(CheckpointNotQuiet):
            op.execute(context("run-2"))
    finally:
        keep_going.set()
        writer.join()


def test_an_adopted_job_with_graceful_stop_that_does_not_acknowledge_is_killed_through_its_manager(
        tmp_path: Path, rm: Replay) -> None:
    """A job declared by ``old_job`` that runs GracefulStop is asked first; when its stop times out,
    the escalation finds it through its manager (no launch handle needed) and kills it there."""
    write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    rm.on("PUT", f"/ws/v1/cluster/apps/{APP}/state", Reply(200, {"state": "KILLED"}))
    rm.on("GET", f"/ws/v1/cluster/apps/{APP}", Reply(body="yarn/app_running.json"), Reply(body="yarn/app_killed.json"))
    container = "container_1735689600000_0007_01_000001"
    rm.on("GET", f"/ws/v1/cluster/apps/{APP}/appattempts", Reply(body={"appAttempts": {"appAttempt": [
        {"id": 1, "containerId": container, "nodeHttpAddress": rm.url.removeprefix("http://")}]}}))
    rm.on("GET", f"/ws/v1/node/containers/{container}", Reply(404, "yarn/not_found.json"))
    timed_out = StopTriggerEvent(reason=StopReason.TIMEOUT, request_id="r-1", run_id="run-a", ack=None,
                                 heartbeat=None, requested_at=time.time() - 300, waited_s=300.0)
    result = _stop(tmp_path, yarn_job(rm)).finish(timed_out.to_dict())
    assert result["outcome"] == StopOutcome.ESCALATED.value
    assert f"killed YARN application {APP}" in result["escalation"]
    assert [a.body for a in rm.asked if a.method == "PUT"] == [{"state": "KILLED"}]
