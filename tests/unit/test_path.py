"""The upgrade's path (checkpoint/path.py, UpgradePathOperator), the in-place resume check
(verify_resume) and the report of an in-place upgrade, on synthetic checkpoints."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.compat import CompatibilityVerdict, Rule
from airflow_ckpt_provider.checkpoint.errors import InvalidUpgradePath, InvalidVerdict, NotStartedYet, StartMismatch
from airflow_ckpt_provider.checkpoint.handover import Handover, handover_from_snapshot
from airflow_ckpt_provider.checkpoint.path import PathChoice, UpgradeMode, UpgradePath, choose_path
from airflow_ckpt_provider.checkpoint.verify import EXACT, OVERLAP, verify_resume
from airflow_ckpt_provider.operators.compat import UpgradePathOperator
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade.inputs import FromRecord, RecordInput
from airflow_ckpt_provider.upgrade.planner import approval_text
from airflow_ckpt_provider.upgrade.steps import PATHS
from airflow_ckpt_provider.upgrade.steps import Path as UpgradePathSteps
from tests.unit.conftest import kafka_json, write_checkpoint
from tests.unit.step_results import handle, stop
from tests.unit.test_journaled_operators import INTENT, ReportTI, context

IN_PLACE_OK = CompatibilityVerdict(in_place_ok=True, migrated_ok=True)
NEEDS_NEW = CompatibilityVerdict(in_place_ok=False, migrated_ok=True, rule=Rule.STATE_KEY_SCHEMA, operator="0 agg")
NOT_PROVEN = CompatibilityVerdict(in_place_ok=None, migrated_ok=True)


@pytest.mark.parametrize(("mode", "verdict", "start", "path", "said"), [
    ("new_checkpoint", IN_PLACE_OK, "resume", UpgradePath.NEW_CHECKPOINT, "always a new checkpoint"),
    ("auto", IN_PLACE_OK, "resume", UpgradePath.IN_PLACE, "in place OK"),
    ("auto", NEEDS_NEW, "resume", UpgradePath.NEW_CHECKPOINT, "state key schema changed (grouping"),
    ("auto", NOT_PROVEN, "resume", UpgradePath.NEW_CHECKPOINT, "in place not proven"),
    ("auto", None, "resume", UpgradePath.NEW_CHECKPOINT, "did not run"),
    ("auto", IN_PLACE_OK, "rewind_to_batch", UpgradePath.NEW_CHECKPOINT, "rewind_to_batch start needs a new"),
    ("auto", IN_PLACE_OK, "at_time", UpgradePath.NEW_CHECKPOINT, "at_time start needs a new checkpoint"),
])
def test_auto_restarts_in_place_only_when_the_check_proved_it(mode: str, verdict: CompatibilityVerdict | None,
                                                              start: str, path: UpgradePath, said: str) -> None:
    choice = choose_path(mode, verdict, start_mode=start)
    assert choice.path is path and said in choice.reason, choice.reason
    assert choice.mode is UpgradeMode(mode)
    assert PathChoice.from_json(choice.to_json()) == choice
    assert ("plain restart" in choice.describe()) is (path is UpgradePath.IN_PLACE)


def test_bad_modes_and_choices_are_refused() -> None:
    with pytest.raises(ValueError, match="'sometimes' is not a valid UpgradeMode"):
        choose_path("sometimes", IN_PLACE_OK)
    with pytest.raises(InvalidUpgradePath, match="path: one of new checkpoint, in place") as caught:
        PathChoice.from_json('{"path": "sideways", "reason": "?"}')
    assert "sideways" in caught.value.found


def test_the_path_step_reads_the_check_and_a_resumed_upgrade_keeps_its_path(tmp_path: Path) -> None:
    """The check's verdict decides a fresh upgrade; a resumed one goes on along the path its
    journal records (its check does not run again); the choice itself writes nothing, so a
    rejected upgrade (nothing recorded) starts afresh."""
    journal = UpgradeJournal(fsspec.filesystem("file"), UpgradeJournal.location(str(tmp_path), "orders", "up-1"))
    journal.open(INTENT, "up-1", run_id="run-1")
    in_place = ["in_place_stop", "in_place_restart"]

    def step(verdict: Any) -> dict[str, Any]:
        op = UpgradePathOperator(task_id="choose_path", mode="auto", verdict=verdict, start="",
                                 in_place_steps=in_place, journal=journal.uri)
        return op.execute(context("run-1"))  # type: ignore[arg-type]

    assert step({"skipped": "switched off", "summary_md": ""})["path"] == "new checkpoint"
    assert step(FromRecord(RecordInput.COMPATIBILITY_VERDICT))["path"] == "new checkpoint", "no check recorded"
    journal.record_planning("compatibility_check", run_id="run-1", result=IN_PLACE_OK.to_dict())
    assert step(FromRecord(RecordInput.COMPATIBILITY_VERDICT))["path"] == "in place", "the recorded verdict"
    journal.record_planning("compatibility_check", run_id="run-1", result={"skipped": "switched off"})
    assert step(json.dumps({"skipped": "switched off"}))["path"] == "new checkpoint", "the XCom as rendered JSON"
    assert step(json.dumps(IN_PLACE_OK.to_dict()))["path"] == "in place"
    with pytest.raises(InvalidVerdict, match="not JSON"):
        step("{'in_place_ok': True}")
    first = step({**IN_PLACE_OK.to_dict(), "summary_md": "..."})
    assert first["path"] == "in place" and first["in_place"] is True and "plain restart" in first["summary_md"]
    assert approval_text(journal.read()) == first["summary_md"].strip(), "the approver reads the path chosen"
    assert journal.read().steps == {}, "a choice is not a side effect: a rejection starts afresh"
    journal.begin("in_place_stop", run_id="run-1")
    again = step(json.dumps({"skipped": "resuming"}))
    assert again["path"] == "in place" and "resuming the in-place restart" in again["reason"]
    other = UpgradeJournal(fsspec.filesystem("file"), UpgradeJournal.location(str(tmp_path), "other", "up-2"))
    other.open(INTENT, "up-2", run_id="run-1")
    other.begin("graceful_stop", run_id="run-1")
    op = UpgradePathOperator(task_id="choose_path", mode="auto", verdict={**IN_PLACE_OK.to_dict()},
                             in_place_steps=in_place, journal=other.uri)
    assert op.execute(context("run-2"))["path"] == "new checkpoint", "a migration under way goes on"  # type: ignore[arg-type]


def resumed_checkpoint(root: Path, *, last: int = 5, rewrite: dict[int, int] | None = None,
                       query_id: str | None = None) -> str:
    """A checkpoint with batches 0..``last`` committed; ``rewrite`` changes offsets/3's end per partition."""
    def sources(batch: int) -> list[str | None]:
        ends = {0: 10 * (batch + 1), 1: 20 * (batch + 1)}
        if batch == 3 and rewrite:
            ends.update(rewrite)
        return [kafka_json({"events": ends})]

    kwargs = {"query_id": query_id} if query_id else {}
    write_checkpoint(str(root), batches=range(last + 1), sources=sources, **kwargs)
    return str(root)


def handover_at(uri: str, batch: int) -> Handover:
    """The handover of the checkpoint as it was when batch ``batch`` was the last committed."""
    reader = CheckpointReader(uri)
    return replace(handover_from_snapshot(reader.snapshot()), batch_id=batch, sources=reader.offset_entry(batch).sources)


def test_an_in_place_restart_is_verified_by_the_batch_after_the_handover(tmp_path: Path) -> None:
    uri = resumed_checkpoint(tmp_path / "cp")
    result = verify_resume(CheckpointReader(uri), handover_at(uri, 3))
    assert result.ok and result.last_committed_batch == 5
    assert [(p.partition, p.recorded, p.status) for p in result.partitions] == [(0, 40, EXACT), (1, 80, EXACT)]


def test_no_batch_after_the_handover_is_not_started(tmp_path: Path) -> None:
    uri = resumed_checkpoint(tmp_path / "cp", last=3)
    with pytest.raises(NotStartedYet, match="last committed batch 3, the handover's is 3"):
        verify_resume(CheckpointReader(uri), handover_at(uri, 3))


def test_a_rewritten_offset_log_or_another_query_is_refused(tmp_path: Path) -> None:
    before = handover_at(resumed_checkpoint(tmp_path / "before"), 3)
    rewritten = resumed_checkpoint(tmp_path / "rewritten", rewrite={1: 70})
    with pytest.raises(StartMismatch) as caught:
        verify_resume(CheckpointReader(rewritten), before)
    assert caught.value.details == (("events", 1, 80, 70, OVERLAP),)
    other = resumed_checkpoint(tmp_path / "other", query_id="3f0c2b1e-0000-4000-8000-00000000abcd")
    with pytest.raises(StartMismatch, match="query id 3f0c2b1e-0000-4000-8000-00000000abcd"):
        verify_resume(CheckpointReader(other), before)


def test_the_report_of_an_in_place_upgrade(tmp_path: Path) -> None:
    """Its steps decide the outcome; one checkpoint, its batches after the handover's the new
    version's; the path is a fact; the migration's steps (skipped) do not count."""
    from airflow_ckpt_provider.operators.report import UpgradeReportOperator

    uri = resumed_checkpoint(tmp_path / "cp")
    steps = PATHS[UpgradePathSteps.IN_PLACE].steps
    archive = tmp_path / "archive" / "orders" / "a1"
    fs = fsspec.filesystem("file")
    journal = UpgradeJournal(fs, str(tmp_path / "archive" / "orders" / "_upgrades" / "u.json"))
    journal.open(replace(INTENT, old_checkpoint=uri), "u", run_id="run-1")
    journal.record_planning("choose_path", run_id="run-1", result=choose_path("auto", IN_PLACE_OK).to_dict())
    results = {"in_place_stop": stop().to_dict(), "in_place_handover": {"handover": handover_at(uri, 3).to_dict()},
               "in_place_archive": {"location": str(archive)}, "in_place_restart": handle(checkpoint=uri).to_dict()}
    for step in steps:
        journal.begin(step, run_id="run-1")
        journal.finish(step, results.get(step))
    op = UpgradeReportOperator(
        task_id="report", stream_name="orders", old_checkpoint_uri=uri, new_checkpoint_uri=str(tmp_path / "v2"),
        path=PATHS[UpgradePathSteps.COLD], in_place=PATHS[UpgradePathSteps.IN_PLACE], journal=journal.path)
    xcoms: dict[tuple[str, str], Any] = {}
    result = op.execute(context("run-1", ReportTI(xcoms)))  # type: ignore[arg-type]
    assert result["outcome"] == "upgraded" and result["new_checkpoint"] == uri == result["old_checkpoint"]
    assert [b["batch_id"] for b in result["old_batches"]] == [0, 1, 2, 3]
    assert [b["batch_id"] for b in result["new_batches"]] == [4, 5]
    assert result["archive"] == str(archive) and result["handover"]["batch_id"] == 3
    md = (archive / "report" / "upgrade-report.md").read_text()
    assert "| upgrade path | upgrade path: a plain restart of the new version on the old checkpoint" in md
