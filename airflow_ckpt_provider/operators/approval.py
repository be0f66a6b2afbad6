"""The upgrade's one human gate: Airflow's HITL approval, with the answer recorded in the journal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import Context

from airflow_ckpt_provider.operators.handover import flag
from airflow_ckpt_provider.operators.journaled import journal_at, recorded
from airflow_ckpt_provider.upgrade.planner import approval_text, needs_approval
from airflow_ckpt_provider.upgrade.record import FAILED, STARTED
from airflow_ckpt_provider.upgrade.results import ApprovalAnswer
from airflow_ckpt_provider.upgrade.steps import APPROVAL


class UpgradeApprovalOperator(ApprovalOperator):
    """:class:`ApprovalOperator` ("Approve" / "Reject") that records itself in the upgrade journal's
    ``planning`` under ``approve``: ``started`` when it asks, then the answer (``chosen``, who and
    when) BEFORE "Reject" skips the steps after it, so the report, the rollback gates and the next
    run read the answer from the journal, never from Airflow's task states. A failed wait (an
    error event) is recorded ``failed``. It asks only when the planner says so
    (:func:`~airflow_ckpt_provider.upgrade.planner.needs_approval`): not with ``require_approval``
    off, and not once a step with a side effect began (a resumed or finished upgrade was approved
    before its stop); then it returns at once, records nothing, and the steps after it run (they
    decide for themselves from the journal).

    Without ``body`` the approver reads what the decisions before it recorded in the journal for
    the approver (:func:`~airflow_ckpt_provider.upgrade.planner.approval_text`: the preflight's
    summary, the compatibility check's verdict, the path chosen), taken when it asks, never
    rendered as a template; a given ``body`` is shown instead.

    :param body: the Markdown the approver reads (templated; None: from the journal, see above)
    :param require_approval: ask a person (templated: a bool or "True"/"False")
    :param journal: the upgrade journal's URI (templated; empty: nothing is recorded)
    :param journal_conn_id: Airflow connection of the journal's storage (templated)
    """

    template_fields: Sequence[str] = (*ApprovalOperator.template_fields, "require_approval", "journal",
                                      "journal_conn_id")

    def __init__(self, *, require_approval: bool | str = True, journal: str | None = None,
                 journal_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.require_approval = require_approval
        self.journal = journal
        self.journal_conn_id = journal_conn_id

    def execute(self, context: Context) -> Any:  # noqa: ANN401 - the HITL operator's own result
        journal = journal_at(self.journal, self.journal_conn_id)
        record = journal.read() if journal is not None and journal.exists() else None
        if not needs_approval(record, require_approval=flag(self.require_approval, "require_approval")):
            why = "approval is switched off" if record is None or not record.started_side_effects else \
                "the upgrade is under way (approved before its stop)"
            self.log.info("not asking: %s", why)
            return {"asked": False, "reason": why}
        if self.body is None and record is not None:
            self.body = approval_text(record) or (
                f"The decisions before the approval recorded no summary in the record of upgrade {record.upgrade_id}.")
        if journal is not None:
            journal.record_planning(APPROVAL, run_id=str(context.get("run_id") or ""), state=STARTED)
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:  # noqa: ANN401
        journal = journal_at(self.journal, self.journal_conn_id)
        run_id = str(context.get("run_id") or "")
        chosen = [str(o) for o in event.get("chosen_options") or []] if "error" not in event else []
        if journal is not None and chosen and set(chosen) <= set(self.options):
            answer = ApprovalAnswer(chosen=chosen[0], responded_by=event.get("responded_by_user"),
                                    responded_at=str(event.get("responded_at") or ""))
            journal.record_planning(APPROVAL, run_id=run_id, result=answer.to_dict())
            self.log.info("answer %r recorded in the upgrade journal %s", chosen[0], journal.uri)
        return recorded(lambda: super(UpgradeApprovalOperator, self).execute_complete(context, event),
                        failed=lambda exc: journal.record_planning(APPROVAL, run_id=run_id, state=FAILED, error=exc)
                        if journal is not None else None,
                        finished=lambda _: None)  # a "Reject" skips the steps after it by raising: not a failure
