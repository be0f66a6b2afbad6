"""A journal as the previous release (0.1.0) wrote it, kept literally in ``previous_release/``: its steps
name no kind, its step results carry no format number (a Handover inside them does, as it always did),
its planning holds the preflight's modes and locations, the skipped check, the path and the approval.
Read through the step table's rows it still plans and reports the same: every step is reused, the
rollback skips, the record's inputs are its values, and the report shows its handover, archive, state
export and stop. A result the report reads that is not its row's type fails the report with
InvalidStepResult before anything is stored or closed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.checkpoint.state import StateExport
from airflow_ckpt_provider.checkpoint.stop import describe_stop_timeline
from airflow_ckpt_provider.operators.report import UpgradeReportOperator
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade import planner
from airflow_ckpt_provider.upgrade.inputs import RecordInput, resolve
from airflow_ckpt_provider.upgrade.record import JournalRecord
from airflow_ckpt_provider.upgrade.steps import PATHS, ROLLBACK, all_steps
from airflow_ckpt_provider.upgrade.steps import Path as StepPath
from tests.unit.test_journaled_operators import ReportTI, context

TEXT = (Path(__file__).parent / "previous_release" / "journal-cold.json").read_text()
RAW = json.loads(TEXT)
STEPS = RAW["steps"]


def test_the_literal_is_what_the_previous_release_wrote() -> None:
    assert RAW["format"] == 2 and RAW["release"] == "0.1.0"
    assert all("kind" not in step for step in (*STEPS.values(), *RAW["planning"].values())), "no kinds then"
    assert all("format" not in step["result"] for step in STEPS.values()), "no format numbers on step results then"


def test_it_plans_as_before() -> None:
    record = JournalRecord.from_json(TEXT)
    cold = PATHS[StepPath.COLD]
    assert planner.path_taken(record) is StepPath.COLD
    assert planner.recorded_rollback_mode(record) is RollbackMode.RESTORE
    assert planner.approval_answer(record) == "Approve" and not planner.rejected(record)
    assert planner.approval_text(record) == "### Upgrade of `orders`\n\n**upgrade path: the new version on a new " \
                                            "checkpoint**"
    assert planner.refusal(record) is None and planner.completed(record, cold)
    assert planner.outcome(record, cold) == "upgraded" and not planner.old_stopped(record, PATHS[StepPath.SWITCHOVER])
    for step in all_steps(StepPath.COLD):
        decision = planner.next_action(record, step)
        if step in cold.steps:
            assert (decision.act, decision.result) == (planner.Act.REUSE, STEPS[step]["result"]), step
        elif step in ROLLBACK or step.startswith("in_place"):
            assert decision.act is planner.Act.SKIP, (step, decision)
    # what later steps took from the record, as before
    assert resolve(record, RecordInput.STATE_EXPORT_LOCATION) == RAW["planning"]["preflight"]["result"]["state_export"]
    assert resolve(record, RecordInput.ROLLBACK_CHECKPOINT) == RAW["planning"]["preflight"]["result"][
        "rollback_checkpoint"]
    assert resolve(record, RecordInput.ARCHIVE_LOCATION) == STEPS["archive"]["result"]["location"]
    handed = resolve(record, RecordInput.HANDOVER)
    assert handed["handover"] == STEPS["extract_handover"]["result"]["handover"]
    assert handed["starting_offsets"] == STEPS["extract_handover"]["result"]["starting_offsets"]
    assert StateExport.from_json(resolve(record, RecordInput.STATE_EXPORT)) == \
        StateExport.from_json(STEPS["export_state"]["result"])
    assert {k: v for k, v in resolve(record, RecordInput.NEW_HANDLE).items() if k != "format"} == \
        STEPS["relaunch"]["result"]
    assert resolve(record, RecordInput.COMPATIBILITY_VERDICT)["skipped"] == "switched off"


def journal_at(tmp_path: Path, text: str) -> UpgradeJournal:
    target = tmp_path / "archive" / "orders" / "_upgrades" / "up-0123456789ab.json"
    target.parent.mkdir(parents=True)
    target.write_text(text)
    return UpgradeJournal(fsspec.filesystem("file"), str(target))


def report_of(tmp_path: Path, text: str) -> tuple[dict[str, Any], Path]:
    archive = tmp_path / "archive-root" / "orders" / "a1"
    archive.mkdir(parents=True)
    data = json.loads(text)
    data["steps"]["archive"]["result"]["location"] = str(archive)  # where this test stores the report
    journal = journal_at(tmp_path, json.dumps(data, indent=2, sort_keys=True))
    op = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                               new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.COLD],
                               in_place=PATHS[StepPath.IN_PLACE], journal=journal.path)
    result = op.execute(context("manual__1", ReportTI({})))  # type: ignore[arg-type]
    return result, archive


def test_it_reports_as_before(tmp_path: Path) -> None:
    result, archive = report_of(tmp_path, TEXT)
    handover = STEPS["extract_handover"]["result"]
    assert result["outcome"] == "upgraded" and result["archive"] == str(archive)
    assert result["handover"] == handover["handover"] and result["starting_offsets"] == handover["starting_offsets"]
    assert StateExport.from_json(result["state_export"]) == StateExport.from_json(STEPS["export_state"]["result"])
    assert result["path"].startswith("upgrade path: the new version on a new checkpoint")
    assert result["compatibility"] is None and result["rollback"] is None and result["start_plan"] is None
    timeline = STEPS["graceful_stop"]["result"]["timeline"]
    assert f"graceful_stop: {describe_stop_timeline(timeline)}" in result["notes"]
    assert [s["name"] for s in result["steps"] if s["state"] == "success"] == \
        ["preflight", "compatibility_check", "choose_path", "approve", *PATHS[StepPath.COLD].steps]
    assert (archive / "report" / "upgrade-report.json").exists()


@pytest.mark.parametrize(("step", "result", "found"), [
    ("archive", {"location": ["/a"]}, "the result archive recorded"),
    ("extract_handover", {"handover": {"batch_id": 41}}, "the result extract_handover recorded"),
    ("graceful_stop", {"outcome": "graceful"}, "the result graceful_stop recorded"),
    ("export_state", {"location": "/s", "rows": "many"}, "the result export_state recorded"),
])
def test_a_malformed_result_fails_the_report_before_it_stores_or_closes(tmp_path: Path, step: str,
                                                                       result: Any, found: str) -> None:  # noqa: ANN401
    data = json.loads(TEXT)
    data["steps"][step]["result"] = result
    if step != "archive":
        data["steps"]["archive"]["result"]["location"] = str(tmp_path / "archive-root" / "orders" / "a1")
    text = json.dumps(data, indent=2, sort_keys=True)
    journal = journal_at(tmp_path, text)
    op = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                               new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.COLD],
                               journal=journal.path)
    with pytest.raises(InvalidStepResult) as refused:
        op.execute(context("manual__1", ReportTI({})))  # type: ignore[arg-type]
    assert found in refused.value.found and refused.value.expected and refused.value.action
    assert journal.read().outcome is None, "the journal stays open"
    assert not list(tmp_path.rglob("upgrade-report.*")), "nothing stored"
