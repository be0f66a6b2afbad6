"""Upgrade report: JSON round-trip, Markdown/HTML content, downtime, PNG timeline."""

from __future__ import annotations

from pathlib import Path

from airflow_ckpt_provider.checkpoint.history import BatchRecord
from airflow_ckpt_provider.checkpoint.report import (
    StepTiming,
    UpgradeReport,
    downtime_seconds,
)
from airflow_ckpt_provider.storage.timeline import render_timeline_png
from airflow_ckpt_provider.upgrade.steps import PATHS
from airflow_ckpt_provider.upgrade.steps import Path as StepPath

OLD = (BatchRecord(7, 1000, 100.0, 30), BatchRecord(8, 2000, 101.5, 12))
NEW = (BatchRecord(0, 3000, 104.0, 40), BatchRecord(1, 4000, 105.0, 20))


def report() -> UpgradeReport:
    return UpgradeReport(
        stream="orders", outcome="upgraded", run_id="manual__1",
        handover={"batch_id": 8, "in_flight_batch": None}, starting_offsets='{"t":{"0":42}}',
        steps=(StepTiming("graceful_stop", "success", 2.5), StepTiming("archive", "success", 0.7)),
        downtime_s=downtime_seconds(OLD, NEW), old_batches=OLD, new_batches=NEW,
        audit={"produced": 100, "in_sink": 100, "lost": 0, "duplicated": 0},
    )


def test_downtime_is_last_old_commit_to_first_new_commit() -> None:
    assert downtime_seconds(OLD, NEW) == 2.5
    assert downtime_seconds(OLD, ()) is None


def test_an_idle_old_query_counts_from_the_stop_request_and_an_idle_new_one_until_it_was_up() -> None:
    # the old query's last commit at 101.5, then nothing to do until the stop was asked at 130
    assert downtime_seconds(OLD, (BatchRecord(0, 3000, 133.0, 40),), stop_requested_at=130.0) == 3.0
    # a stop asked while the old query still committed: from its last commit after the request
    assert downtime_seconds(OLD, NEW, stop_requested_at=100.5) == 2.5
    # the new query committed nothing yet (caught up on an idle topic): until it was up
    assert downtime_seconds(OLD, (), stop_requested_at=130.0, ready_at=134.5) == 4.5
    assert downtime_seconds(OLD, (), stop_requested_at=130.0) is None
    idle = UpgradeReport(stream="s", outcome="upgraded", old_batches=OLD, stop_requested_at=130.0, ready_at=134.5,
                         steps=(StepTiming("graceful_stop", "success", 2.0, "1970-01-01T00:02:10+00:00",
                                           "1970-01-01T00:02:12+00:00"),))
    assert idle.window() == (130.0, 134.5) and idle.downtime_by_step()["graceful_stop"] == 2.0
    assert UpgradeReport.from_json(idle.to_json()) == idle


def test_json_round_trip() -> None:
    original = report()
    assert UpgradeReport.from_json(original.to_json()) == original


def test_markdown_and_html_name_the_facts() -> None:
    md = report().to_markdown("timeline.png")
    assert "| handed over at batch | 8 |" in md
    assert "| downtime | 2.5 s |" in md
    assert "| graceful_stop | success | 2.5 | - |" in md  # no step times: no share of the downtime
    assert "| 8 | 12 |" in md and "![input rows per batch](timeline.png)" in md
    page = report().to_html("timeline.png")
    assert "<th>lost</th><td>0</td>" in page and 'src="timeline.png"' in page


def test_png_timeline(tmp_path: Path) -> None:
    target = tmp_path / "timeline.png"
    assert render_timeline_png(report(), str(target))
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_png_timeline_marks_the_downtime(tmp_path: Path) -> None:
    """The shaded downtime band is drawn where the old query's last commit and the new one's first
    are: the red channel dominates there, not elsewhere on the plot's middle line."""
    import matplotlib.image

    target = tmp_path / "timeline.png"
    assert render_timeline_png(report(), str(target))
    pixels = matplotlib.image.imread(str(target))
    row = pixels[pixels.shape[0] // 2]
    reddish = [(r - (g + b) / 2) > 0.08 for r, g, b, *_ in row]
    assert any(reddish), "no downtime band"
    assert sum(reddish) < len(row) / 2, "the band covers only the downtime"


def _at(epoch: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(epoch, timezone.utc).isoformat()


def test_downtime_by_step_splits_the_window_between_steps_scheduling_and_the_first_batch() -> None:
    # downtime 101.5 -> 104.0 (2.5 s); the stop ends inside it, the release starts after a gap
    steps = (StepTiming("start_standby", "success", 20.0, _at(80.0), _at(100.0)),
             StepTiming("graceful_stop", "success", 2.0, _at(100.5), _at(102.0)),
             StepTiming("extract_handover", "success", 0.5, _at(102.2), _at(102.7)),
             StepTiming("relaunch", "success", 1.0, _at(102.9), _at(103.4)),
             StepTiming("archive", "success", 3.0, _at(106.0), _at(109.0)))
    parts = UpgradeReport(stream="s", outcome="upgraded", steps=steps, old_batches=OLD, new_batches=NEW).downtime_by_step()
    assert parts == {"graceful_stop": 0.5, "extract_handover": 0.5, "relaunch": 0.5, "between steps": 0.4,
                     "first batch": 0.6}
    assert abs(sum(parts.values()) - 2.5) < 1e-6, "the parts add up to the downtime"
    md = UpgradeReport(stream="s", outcome="upgraded", steps=steps, old_batches=OLD, new_batches=NEW).to_markdown()
    assert "| graceful_stop | success | 2.0 | 0.5 |" in md and "| (first batch) | | | 0.6 |" in md
    assert "| archive | success | 3.0 | - |" in md


def test_downtime_by_step_is_empty_without_a_downtime() -> None:
    assert UpgradeReport(stream="s", outcome="failed", old_batches=OLD).downtime_by_step() == {}
    assert "downtime_by_step" in report().to_dict()


def test_a_step_that_ends_after_the_first_commit_takes_the_rest_of_the_downtime() -> None:
    steps = (StepTiming("graceful_stop", "success", 2.0, _at(100.5), _at(102.0)),
             StepTiming("relaunch", "success", 2.5, _at(102.2), _at(104.4)))  # saw batch 0 at 104.4
    parts = UpgradeReport(stream="s", outcome="upgraded", steps=steps, old_batches=OLD, new_batches=NEW).downtime_by_step()
    assert parts == {"graceful_stop": 0.5, "relaunch": 1.8, "between steps": 0.2}


def test_a_stored_report_is_never_replaced_by_a_later_run(tmp_path: Path) -> None:
    from airflow_ckpt_provider.operators.report import UpgradeReportOperator

    op = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri="/a",
                               new_checkpoint_uri="/b", path=PATHS[StepPath.COLD])
    archive = tmp_path / "archive" / "orders" / "20261123T100000Z-up-1"
    first = op._store(report(), str(archive))
    stored = {p.name: p.read_bytes() for p in (archive / "report").iterdir() if p.is_file()}
    second = op._store(UpgradeReport(stream="orders", outcome="upgraded", run_id="manual__2"), str(archive))
    third = op._store(UpgradeReport(stream="orders", outcome="failed", run_id="manual__3"), str(archive))
    assert first == str(archive / "report")
    assert (second, third) == (str(archive / "report" / "run-2"), str(archive / "report" / "run-3"))
    assert {p.name: p.read_bytes() for p in (archive / "report").iterdir() if p.is_file()} == stored
    assert "manual__2" in (archive / "report" / "run-2" / "upgrade-report.md").read_text()


def test_a_chosen_start_is_in_the_report() -> None:
    from dataclasses import replace

    from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
    from airflow_ckpt_provider.checkpoint.rewind import StartChoice, plan_start

    plan = plan_start(StartChoice.parse("rewind_to_batch", "6"), KafkaOffsets({"t": {0: 42}}),
                      KafkaOffsets({"t": {0: 30}}))
    with_plan = replace(report(), start_plan=plan.to_dict())
    assert UpgradeReport.from_json(with_plan.to_json()) == with_plan
    md = with_plan.to_markdown()
    assert "## Where the new version started" in md and "| t-0 | 42 | 30 | 12 | 0 |" in md
    assert "## Where the new version started" not in report().to_markdown()


def test_a_failed_rollback_says_no_version_runs_and_what_to_do() -> None:
    from airflow_ckpt_provider.operators.report import UpgradeReportOperator

    op = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri="/ckpt/orders-v1",
                               new_checkpoint_uri="/ckpt/orders-v2", path=PATHS[StepPath.COLD])
    text = op._no_version_runs()
    assert text.startswith("NO VERSION OF STREAM 'orders' IS RUNNING")
    assert "/ckpt/orders-v1" in text and "ckpt launch" in text
    assert "`ckpt journal ARCHIVE_ROOT --name orders --release-lock`" in text, "no journal: a placeholder"
    journaled = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri="/ckpt/orders-v1",
                                      new_checkpoint_uri="/ckpt/orders-v2", path=PATHS[StepPath.COLD],
                                      journal="s3://archive/streams/orders/_upgrades/up-1.json")
    assert "`ckpt journal s3://archive/streams --name orders --release-lock`" in journaled._no_version_runs()


def test_a_switchover_report_shows_where_the_downtime_went_in_the_drivers() -> None:
    from airflow_ckpt_provider.checkpoint.report import UpgradeReport
    from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit

    split = DowntimeSplit(stop_s=1.5, notice_s=0.2, handover_read_s=0.3, state_wait_s=None, query_start_s=0.4,
                          first_batch_s=1.1, downtime_s=2.0)
    report = UpgradeReport(stream="orders", outcome="upgraded", switchover=split.to_dict())
    text = report.to_markdown()
    assert "| switchover in the drivers | downtime 2.0 s: notice 0.2 s, handover read 0.3 s, query start 0.4 s, " \
           "first batch 1.1 s (the old query took 1.5 s to stop) |" in text
    assert "## The switchover inside the drivers" in text and "| state wait | - |" in text
    assert "| handover read | 0.3 |" in text and "| downtime (acknowledgement to first commit) | 2.0 |" in text
    again = UpgradeReport.from_json(report.to_json())
    assert again.switchover == split.to_dict() and again.to_json() == report.to_json()
    assert "switchover" not in UpgradeReport(stream="orders", outcome="upgraded").to_dict(), \
        "written as the release before it wrote a report without one"


def test_a_stateful_switchover_report_says_the_standby_seeded_the_state_the_export_equals() -> None:
    from airflow_ckpt_provider.checkpoint.report import UpgradeReport
    from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit

    split = DowntimeSplit(stop_s=1.5, notice_s=0.2, handover_read_s=0.3, state_wait_s=1.25, query_start_s=0.0,
                          first_batch_s=2.0, downtime_s=3.8)
    export = {"location": "/arch/orders/_state/u", "batch_id": 70, "stores": 1, "rows": 50, "bytes": 2048,
              "seconds": 31.0}
    text = UpgradeReport(stream="orders", outcome="upgraded", switchover=split.to_dict(),
                         state_export=export).to_markdown()
    assert "after batch 70: 1 stores, 50 rows, 2,048 bytes in 31.0 s, verified, at /arch/orders/_state/u; seeded by " \
           "the standby in its own session in 1.2 s, before the export, which equals it store by store" in text
    assert "| state wait | 1.2 |" in text or "| state wait | 1.25 |" in text
    classic = UpgradeReport(stream="orders", outcome="upgraded", state_export=export).to_markdown()
    assert "seeded by the standby" not in classic, "the standby path's export is what the new version started from"
