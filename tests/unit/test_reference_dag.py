"""dags/stream_upgrade.py parses cleanly and is wired so a failure can never restart v1 twice."""

from __future__ import annotations

from pathlib import Path

import pytest

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "stream_upgrade.py"


@pytest.fixture(scope="module")
def dags() -> dict:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAG_FILE))
    assert bag.import_errors == {}
    return bag.dags


def test_manual_and_asset_triggered_variants(dags: dict) -> None:
    from airflow.sdk.definitions.timetables.assets import AssetTriggeredTimetable
    from airflow.sdk.definitions.timetables.simple import NullTimetable

    manual, on_artifact = dags["stream_upgrade"], dags["stream_upgrade_on_artifact"]
    assert isinstance(manual.timetable, NullTimetable)
    assert isinstance(on_artifact.timetable, AssetTriggeredTimetable)
    assert manual.params["require_approval"] is True
    assert on_artifact.params["require_approval"] is False  # scheduled runs cannot wait for a person
    assert manual.max_active_runs == 1


def test_upgrade_chain_and_rollback_wiring(dags: dict) -> None:
    dag = dags["stream_upgrade"]
    chain = ["preflight", "approval_gate", "approve", "graceful_stop", "extract_handover", "archive",
             "relaunch", "verify"]
    for upstream, downstream in zip(chain, chain[1:], strict=False):
        assert downstream in dag.get_task(upstream).downstream_task_ids, (upstream, downstream)
    assert dag.get_task("graceful_stop").trigger_rule == "none_failed_min_one_success"
    gate = dag.get_task("rollback_gate")
    assert gate.trigger_rule == "all_done"
    assert gate.upstream_task_ids == {"graceful_stop", "extract_handover", "archive", "relaunch", "verify"}
    assert gate.downstream_task_ids == {"rollback_stop_new"}, "a branch skips every direct child"
    assert dag.get_task("rollback_restart_old").allow_existing_checkpoint is True
    report = dag.get_task("report")
    assert report.trigger_rule == "all_done"
    assert {"verify", "rollback_restart_old"} <= report.upstream_task_ids


def test_approval_shows_the_preflight_summary_and_rejects_without_answer(dags: dict) -> None:
    approve = dags["stream_upgrade"].get_task("approve")
    assert "preflight" in approve.body and "summary_md" in approve.body
    assert approve.defaults == ["Reject"]
