"""The upgrade and its rollback with the triggerer in its own PID namespace.

Airflow's parts often run apart (containers, hosts): the triggerer then cannot see the
processes that tasks started. Here the API server, scheduler and DAG processor run as separate
processes and the triggerer under ``unshare --pid --fork --mount-proc`` (its own ``/proc``),
all on one SQLite home. The reference DAG must still upgrade the demo stream with nothing lost
and nothing duplicated, and roll back a new version that crashes on start, leaving v1 running
again on its checkpoint with nothing lost or duplicated.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.local.kafka import LocalKafka
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.airflow_server import LocalAirflow
from tests.harness.upgrade_demo import DAG_ID, DAGS, UpgradeDemo, read_dag_report, stop_jobs_under

pytestmark = pytest.mark.system

CRASHING_V2 = Path(__file__).parent / "jobs" / "crash_after_release.py"
ROLLBACK_STREAM = "demo-events-rollback"
RUN_TIMEOUT_S = 1800.0  # one DAG run on a loaded 2-core machine: minutes, not seconds


def assert_own_pid_namespace(af: LocalAirflow) -> None:
    """The triggerer runs as PID 1 of a PID namespace other than this test's."""
    pid = af.triggerer_pid()
    assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    nspid = next(line.split()[1:] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                 if line.startswith("NSpid:"))
    assert nspid == [str(pid), "1"], nspid


def task_states(af: LocalAirflow, run_id: str) -> dict[str, str | None]:
    tis = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
    return {ti["task_id"]: ti["state"] for ti in tis}


def run_dag(af: LocalAirflow, conf: dict[str, Any]) -> tuple[str, str, dict[str, str | None]]:
    """Trigger the reference DAG and wait for the run's end: (run id, state, task states)."""
    run_id = af.trigger(DAG_ID, conf, timeout=600)
    state = af.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT_S)
    return run_id, state, task_states(af, run_id)


@pytest.mark.timeout(2 * RUN_TIMEOUT_S + 1800)
def test_upgrade_and_rollback_with_the_triggerer_in_its_own_pid_namespace(
    kafka: LocalKafka, demo: UpgradeDemo, tmp_path: Path
) -> None:
    v1 = demo.start(timeout=600)
    env = {"AIRFLOW_CONN_KAFKA_DEFAULT": demo.kafka_connection()}
    with UpgradeDemo(tmp_path / "demo-rollback", kafka=kafka, rate=80.0) as second, \
            LocalAirflow(tmp_path / "airflow", DAGS, env=env, isolate_triggerer=True, startup_timeout=600) as af:
        logs = f"logs: {af.home}"
        try:
            assert_own_pid_namespace(af)

            # (1) v1 -> v2 with the producer running; approval off (the REST approval has its own test)
            _, state, states = run_dag(af, demo.dag_conf(v1, require_approval=False))
            report = read_dag_report(demo.archive_root)
            assert state == "success", (states, report and report.get("notes"), logs)
            assert report is not None and report["outcome"] == "upgraded", report
            audit = demo.finish(demo.new_cp)
            assert audit.produced > 500, "the producer must have run through the upgrade"
            assert audit.lost == 0, audit.lost_examples
            assert audit.duplicated == 0, audit.duplicated_examples

            # (2) a new version that crashes once released: rolled back, v1 runs again on its checkpoint
            v1_again = second.start(timeout=600)
            last_before = CheckpointReader(str(second.old_cp)).snapshot().last_committed_batch
            assert last_before is not None
            _, state, states = run_dag(af, second.dag_conf(
                v1_again, stream_name=ROLLBACK_STREAM, require_approval=False,
                new_application=str(CRASHING_V2)))
            assert state == "failed", (states, logs)  # a rolled-back upgrade fails the run loudly
            assert states["relaunch"] == "failed", states
            assert states["rollback_stop_new"] == states["rollback_restore"] == \
                states["rollback_restart_old"] == "success", (states, logs)
            report = read_dag_report(second.archive_root, ROLLBACK_STREAM)
            assert report is not None and report["outcome"] == "rolled back", report
            assert any("relaunch failed" in note and "exited with code 3" in note for note in report["notes"]), \
                report["notes"]
            second.wait_for_batch(second.old_cp, last_before + 3, timeout=600)
            audit = second.finish(second.old_cp)
            assert audit.lost == 0, audit.lost_examples
            assert audit.duplicated == 0, audit.duplicated_examples

            assert_own_pid_namespace(af)  # the same isolated triggerer served both runs
        finally:
            stop_jobs_under(demo.work, second.work)
