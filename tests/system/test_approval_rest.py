"""Approval through the real Airflow REST API: ``airflow standalone`` (SQLite), a HITL task
answered with ``PATCH .../hitlDetails``. A rejection skips the upgrade and leaves v1 running;
an approval upgrades with nothing lost and nothing duplicated."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint import CheckpointReader
from airflow_ckpt_provider.local.airflow_server import LocalAirflow
from airflow_ckpt_provider.local.upgrade_demo import DAG_ID, DAGS, UpgradeDemo, read_dag_report

pytestmark = pytest.mark.system


def answer(af: LocalAirflow, run_id: str, option: str) -> dict:
    af.wait_for_task_state(DAG_ID, run_id, "approve", {"awaiting_input"}, timeout=300)
    # Answer as a person would, not within seconds: the executor must first report the pausing
    # task process as finished. An answer that re-queues the task before that event is processed
    # makes the scheduler mark it failed ("state changed externally"), an Airflow race.
    time.sleep(20)
    details = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/approve/-1/hitlDetails")
    af.answer_hitl(DAG_ID, run_id, "approve", option)
    return details


def test_reject_then_approve_over_rest(demo: UpgradeDemo, tmp_path: Path) -> None:
    v1 = demo.start()
    env = {"AIRFLOW_CONN_KAFKA_DEFAULT": demo.kafka_connection()}
    with LocalAirflow(tmp_path / "airflow", DAGS, env=env) as af:
        rejected = af.trigger(DAG_ID, demo.dag_conf(v1))
        details = answer(af, rejected, "Reject")
        assert "Upgrade of stream" in details["body"] and "last committed batch" in details["body"]
        assert af.wait_for_run(DAG_ID, rejected) == "success"
        assert af.task_state(DAG_ID, rejected, "graceful_stop") == "skipped"
        assert af.task_state(DAG_ID, rejected, "report") == "success"

        # v1 was not touched: still running and committing on its checkpoint
        before = CheckpointReader(str(demo.old_cp)).snapshot().last_committed_batch
        demo.wait_for_batch(demo.old_cp, (before or 0) + 3, timeout=60, handle=v1)
        assert not demo.new_cp.exists()

        approved = af.trigger(DAG_ID, demo.dag_conf(v1))
        answer(af, approved, "Approve")
        assert af.wait_for_run(DAG_ID, approved, timeout=900) == "success"
        assert af.task_state(DAG_ID, approved, "verify") == "success"

    audit = demo.finish(demo.new_cp)
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
    report = read_dag_report(demo.archive_root)
    assert report is not None and report["outcome"] == "upgraded"
