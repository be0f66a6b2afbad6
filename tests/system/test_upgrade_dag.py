"""The reference DAG, end to end, with producers running: the exactly-once proof and its control.

Every Kafka (partition, offset) the broker holds once producers stopped is looked up in the
sink that v1 and then v2 appended to: lost == 0 and duplicated == 0. The negative control runs
the same harness with a naive relaunch and must show loss or duplicates, proving the check
can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint import CheckpointReader
from airflow_ckpt_provider.local.upgrade_demo import UpgradeDemo, read_dag_report

pytestmark = pytest.mark.system

CRASHING_V2 = Path(__file__).parent / "jobs" / "crash_on_start.py"


def states(run) -> dict[str, str]:  # noqa: ANN001
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def test_upgrade_loses_and_duplicates_nothing(airflow_home, demo: UpgradeDemo) -> None:  # noqa: ANN001
    v1 = demo.start()
    run = demo.upgrade_with_dag(v1)
    assert run.state == "success", states(run)
    audit = demo.finish(demo.new_cp)

    assert audit.produced > 1000, "the producer must have run through the upgrade"
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
    assert audit.unexpected == 0

    report = read_dag_report(demo.archive_root)
    assert report is not None and report["outcome"] == "upgraded"
    handover = CheckpointReader(str(demo.old_cp)).handover()
    assert report["handover"]["batch_id"] == handover.batch_id
    assert report["downtime_s"] is not None and report["downtime_s"] > 0
    assert {s["name"] for s in report["steps"] if s["state"] == "success"} >= {
        "preflight", "graceful_stop", "extract_handover", "archive", "relaunch", "verify"}
    stored = Path(report["archive"]) / "report"
    assert (stored / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert "upgraded" in (stored / "upgrade-report.md").read_text()


@pytest.mark.parametrize(("starting_offsets", "expect"), [("latest", "lost"), ("earliest", "duplicated")])
def test_naive_relaunch_is_caught(demo: UpgradeDemo, starting_offsets: str, expect: str) -> None:
    """Negative control: the same audit fails when v2 starts from latest or earliest."""
    v1 = demo.start()
    demo.naive_upgrade(v1, starting_offsets)
    audit = demo.finish(demo.new_cp)
    assert audit.produced > 500
    assert getattr(audit, expect) > 0, audit
    assert not audit.ok


def test_rollback_when_new_version_crashes_on_start(airflow_home, demo: UpgradeDemo) -> None:  # noqa: ANN001
    v1 = demo.start()
    last_before = CheckpointReader(str(demo.old_cp)).snapshot().last_committed_batch
    run = demo.upgrade_with_dag(v1, new_application=str(CRASHING_V2))

    got = states(run)
    assert run.state == "failed", got
    assert got["relaunch"] == "failed"
    assert got["rollback_stop_new"] == got["rollback_restore"] == got["rollback_restart_old"] == "success"
    assert got["report"] == "failed", "a rolled-back upgrade must fail the run loudly"
    report = read_dag_report(demo.archive_root)
    assert report is not None and report["outcome"] == "rolled back"
    assert any("deliberate crash" in note for note in report["notes"]), report["notes"]

    # v1 runs again on its original checkpoint and keeps committing
    demo.wait_for_batch(demo.old_cp, (last_before or 0) + 3, timeout=120)
    assert CheckpointReader(str(demo.old_cp)).snapshot().last_committed_batch > last_before
    audit = demo.finish(demo.old_cp)
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples


def test_partitions_added_before_relaunch_are_read_from_earliest(airflow_home, demo: UpgradeDemo) -> None:  # noqa: ANN001
    from airflow_ckpt_provider.cli import main as ckpt

    v1 = demo.start()
    assert ckpt(["stop", str(demo.old_cp), "--timeout", "120", "--pid", str(v1.pid)]) == 0
    demo.kafka.add_partitions(demo.topic, 5)  # after v1's last commit, before the relaunch
    run = demo.upgrade_with_dag(v1)
    assert run.state == "success", states(run)
    audit = demo.finish(demo.new_cp)

    report = read_dag_report(demo.archive_root)
    assert report is not None
    starting = report["starting_offsets"]
    assert '"3":-2' in starting and '"4":-2' in starting, starting
    assert any(p in (3, 4) for _, p, _ in _records_seen(demo)), "keyed records should reach new partitions"
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples


def _records_seen(demo: UpgradeDemo) -> set[tuple[str, int, int]]:
    from airflow_ckpt_provider.local.audit import read_sink_records

    return set(read_sink_records(demo.sink))
