"""UpgradeApprovalOperator records the answer in the journal's planning before the approval acts
on it, in the shape Airflow 3.3 resumes it with (``HITLDetail.as_resume_event_payload``)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider.operators.approval import UpgradeApprovalOperator
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade import planner
from airflow_ckpt_provider.upgrade.record import DONE, FAILED, STARTED, UpgradeIntent

INTENT = UpgradeIntent(stream_name="orders", old_checkpoint="/cp/v1", new_checkpoint="/cp/v2")


def journal(tmp_path: Path) -> UpgradeJournal:
    made = UpgradeJournal(fsspec.filesystem("file"), str(tmp_path / "orders" / "_upgrades" / "u.json"))
    made.open(INTENT, "u", run_id="run-1")
    return made


def event(chosen: str) -> dict:
    return {"chosen_options": [chosen], "params_input": {}, "timedout": False,
            "responded_at": datetime(2026, 11, 27, 10, 0, tzinfo=timezone.utc),
            "responded_by_user": {"id": "7", "name": "alice"}}


@pytest.mark.parametrize("chosen", ["Approve", "Reject"])
def test_the_answer_is_recorded_before_the_approval_acts_on_it(tmp_path: Path, chosen: str) -> None:
    made = journal(tmp_path)
    op = UpgradeApprovalOperator(task_id="approve", subject="Upgrade?", journal=made.path)
    made.record_planning("approve", run_id="run-1", state=STARTED)  # what execute() records when it asks
    result = op.execute_complete({"run_id": "run-1"}, event(chosen))  # type: ignore[arg-type]
    assert result["chosen_options"] == [chosen]
    entry = made.read().planning["approve"]
    assert entry.state == DONE and entry.result["chosen"] == chosen
    assert entry.result["responded_by"] == {"id": "7", "name": "alice"}
    assert entry.result["responded_at"].startswith("2026-11-27 10:00")
    assert planner.rejected(made.read()) is (chosen == "Reject")


def test_a_timeout_without_a_default_is_recorded_failed(tmp_path: Path) -> None:
    made = journal(tmp_path)
    op = UpgradeApprovalOperator(task_id="approve", subject="Upgrade?", journal=made.path)
    with pytest.raises(Exception, match="timeout|Timeout"):
        op.execute_complete({"run_id": "run-1"}, {"error": "no answer", "error_type": "timeout"})  # type: ignore[arg-type]
    entry = made.read().planning["approve"]
    assert entry.state == FAILED and entry.error
    assert not planner.rejected(made.read())


def test_without_a_journal_it_is_the_plain_approval() -> None:
    op = UpgradeApprovalOperator(task_id="approve", subject="Upgrade?")
    assert op.execute_complete({"run_id": "r"}, event("Approve"))["chosen_options"] == ["Approve"]  # type: ignore[arg-type]


def test_a_reject_that_skips_the_steps_after_it_stays_recorded_as_the_answer(tmp_path: Path) -> None:
    """Airflow 3 skips the tasks after a "Reject" by raising DownstreamTasksSkipped: that is how
    the approval ends, not a failure of it."""
    from types import SimpleNamespace

    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG
    from airflow.sdk.exceptions import DownstreamTasksSkipped

    made = journal(tmp_path)
    with DAG(dag_id="approval_skip", schedule=None):
        op = UpgradeApprovalOperator(task_id="approve", subject="Upgrade?", journal=made.path)
        op >> EmptyOperator(task_id="graceful_stop")
    ti = SimpleNamespace(task_id="approve", dag_id="approval_skip", run_id="run-1", map_index=-1,
                         xcom_push=lambda **_: None)
    with pytest.raises(DownstreamTasksSkipped):
        op.execute_complete({"run_id": "run-1", "task": op, "ti": ti}, event("Reject"))  # type: ignore[arg-type]
    entry = made.read().planning["approve"]
    assert entry.state == DONE and entry.result["chosen"] == "Reject"
    assert planner.rejected(made.read())


@pytest.mark.parametrize(("require", "under_way", "why"), [
    ("False", False, "approval is switched off"),
    (True, True, "the upgrade is under way (approved before its stop)"),
    ("True", True, "the upgrade is under way (approved before its stop)"),
])
def test_it_asks_only_when_the_planner_says_so(tmp_path: Path, require: bool | str, under_way: bool,
                                               why: str) -> None:
    """Not asked: it returns at once (no deferral, no HITL request), records nothing, and the steps
    after it run; a resumed upgrade whose stop began was approved before it."""
    made = journal(tmp_path)
    if under_way:
        made.begin("graceful_stop", run_id="run-1")
    op = UpgradeApprovalOperator(task_id="approve", subject="Upgrade?", require_approval=require, journal=made.path)
    assert op.execute({"run_id": "run-2"}) == {"asked": False, "reason": why}  # type: ignore[arg-type]
    assert "approve" not in made.read().planning


def test_a_fresh_upgrade_is_asked_and_the_question_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    made = journal(tmp_path)
    asked = []
    monkeypatch.setattr(ApprovalOperator, "execute", lambda self, context: asked.append(self.task_id))
    UpgradeApprovalOperator(task_id="approve", subject="Upgrade?", require_approval="True",
                            journal=made.path).execute({"run_id": "run-1"})  # type: ignore[arg-type]
    assert asked == ["approve"] and made.read().planning["approve"].state == STARTED


def test_the_approver_reads_what_the_decisions_recorded_in_the_journal(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """No XCom and no template: the body is the decisions' notes for the approver, in the order
    they ran; a failed decision and one that noted nothing add nothing, and a recorded ``{{`` is
    shown as written."""
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    made = journal(tmp_path)
    made.record_planning("choose_path", run_id="run-1", result={"path": "cold"},
                         notes={planner.SUMMARY_NOTE: "**Path**: cold"})
    made.record_planning("preflight", run_id="run-1", result={"resuming": False},
                         notes={planner.SUMMARY_NOTE: "Stream `orders`: handover at batch 7 {{ not a template }}"})
    made.record_planning("compatibility_check", run_id="run-1", state=FAILED, error="boom",
                         notes={planner.SUMMARY_NOTE: "never shown"})
    bodies = []
    monkeypatch.setattr(ApprovalOperator, "execute", lambda self, context: bodies.append(self.body))
    UpgradeApprovalOperator(task_id="approve", subject="Upgrade?", journal=made.path).execute(
        {"run_id": "run-1"})  # type: ignore[arg-type]
    assert bodies == ["Stream `orders`: handover at batch 7 {{ not a template }}\n\n**Path**: cold"]

    given = []
    monkeypatch.setattr(ApprovalOperator, "execute", lambda self, context: given.append(self.body))
    UpgradeApprovalOperator(task_id="approve", subject="Upgrade?", body="as given", journal=made.path).execute(
        {"run_id": "run-1"})  # type: ignore[arg-type]
    assert given == ["as given"]


def test_an_approval_with_nothing_recorded_says_so() -> None:
    assert planner.approval_text(None) == ""
