"""Decisions over the upgrade journal's record: what each step does when its task runs (run, skip
with the reason, or reuse its recorded result: :func:`next_action`), whether to ask for approval,
whether and how to roll back, how the upgrade ended, and each step's time. Pure: the record in, a
decision out.

The record is the one account of an upgrade (:class:`~airflow_ckpt_provider.upgrade.record.JournalRecord`):
every step records ``started`` before its side effect and ``done`` or ``failed`` after it, and the
decisions before any side effect (preflight, compatibility check, path, approval) are in its
``planning``; a step's result and notes are read through its row of the step table
(:mod:`airflow_ckpt_provider.upgrade.table`), never picked out of the JSON. Airflow's task states
are not read: a step whose task was killed, timed out while deferred, or failed after recording
``done`` reads the same here on every executor.

The rollback and the outcome are read once the path's steps have ended (the DAG's gates and its
report run after them): a step then found ``started`` was interrupted and counts as failed, and an
upgrade whose old version this run stopped but whose verification is not ``done`` did not
complete, whatever step failed (a step that fails after recording ``done`` leaves its successors
not run, and the old version must still be restarted).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import PathNotRecorded
from airflow_ckpt_provider.checkpoint.outcome import (
    REFUSED,
    REJECTED,
    ROLLBACK_FAILED,
    ROLLED_BACK,
    UPGRADED,
    RollbackMode,
    RollbackPlan,
    TaskState,
    UpgradeOutcome,
)
from airflow_ckpt_provider.checkpoint.path import PathChoice
from airflow_ckpt_provider.checkpoint.report import StepTiming
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.upgrade.notes import (
    OLD_STOPPED_NOTE,
    REFUSAL_NOTE,
    SUMMARY_NOTE,
    DecisionNotes,
    SwitchoverNotes,
)
from airflow_ckpt_provider.upgrade.record import DONE, FAILED, STARTED, JournalRecord, JournalStep
from airflow_ckpt_provider.upgrade.results import ApprovalAnswer, PreflightPlanning
from airflow_ckpt_provider.upgrade.steps import (
    APPROVAL,
    COMPATIBILITY_CHECK,
    IN_PLACE_ROLLBACK,
    PATH_CHOICE,
    PATHS,
    PLANNING,
    PREFLIGHT,
    REFUSING,
    REJECT,
    ROLLBACK,
    ROLLBACK_SEQUENCE,
    Path,
    PathSteps,
    refuse_unknown_kind,
)
from airflow_ckpt_provider.upgrade.table import noted, recorded


class StepStatus(StrEnum):
    """A step as the journal records it, read after its task ended."""

    NOT_RUN = "not run"  # no record: never began (skipped, upstream failed, or refused before it began)
    DONE = "done"
    FAILED = "failed"  # recorded failed, or recorded started and never ended (interrupted)


def _entry(record: JournalRecord | None, name: str) -> JournalStep | None:
    """The record of the step of kind ``name``, whatever task id it ran under (:meth:`JournalRecord.entry`)."""
    return record.entry(name) if record is not None else None


def status_of(record: JournalRecord | None, name: str) -> StepStatus:
    """``name`` once its task ended: done, failed (also: started and never ended) or not run."""
    entry = _entry(record, name)
    if entry is None:
        return StepStatus.NOT_RUN
    if entry.state == DONE:
        return StepStatus.DONE
    if entry.state in (FAILED, STARTED):
        return StepStatus.FAILED
    raise ValueError(f"step {name} has the unknown journal state {entry.state!r}")


def approval_answer(record: JournalRecord | None) -> str | None:
    """The approval's recorded answer ("Approve", "Reject"), None when none was recorded;
    :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult` when what it recorded is not
    an answer (:class:`~airflow_ckpt_provider.upgrade.results.ApprovalAnswer`)."""
    answer = recorded(record, APPROVAL, as_type=ApprovalAnswer)
    return answer.chosen if answer is not None and answer.chosen else None


def rejected(record: JournalRecord | None) -> bool:
    """A person (or the approval's timeout, whose default is "Reject") said no before anything
    was stopped."""
    return approval_answer(record) == REJECT and not (record is not None and record.started_side_effects)


@dataclass(frozen=True)
class Refusal:
    """A decision before any side effect (``step``: the preflight, the compatibility check, the path choice) that
    refused the upgrade, and why in the user's words (``reason``: what it noted as
    :data:`REFUSAL_NOTE`, else the first line of its recorded error; the whole error, a driver's log
    tail with it, is in the journal's planning and the step's log)."""

    step: str
    reason: str

    def describe(self) -> str:
        return f"{self.step} refused the upgrade before anything was stopped: {self.reason}"


def refusal(record: JournalRecord | None) -> Refusal | None:
    """The refusal that ends the upgrade: the first of :data:`~airflow_ckpt_provider.upgrade.steps.REFUSING`
    recorded ``failed`` in the planning while no step with a side effect began (nothing was stopped,
    copied or started); None otherwise (a failure once the upgrade is under way is not a refusal)."""
    if record is None or record.started_side_effects:
        return None
    for name in REFUSING:
        entry = record.planning.get(name)
        if entry is not None and entry.state == FAILED:
            notes = noted(record, name, as_type=DecisionNotes)
            said = notes.refusal if notes is not None else None
            lines = [line.strip() for line in entry.error.splitlines() if line.strip()]
            reason = said if said and said.strip() else lines[0] if lines else "its error was not recorded; see its log"
            return Refusal(name, reason.strip())
    return None


def needs_approval(record: JournalRecord | None, *, require_approval: bool) -> bool:
    """Ask a person unless approval is off or a step with a side effect began: a resumed upgrade
    was approved before its stop, and asking again could not undo it. A journal where nothing
    began is started afresh by the preflight, so an earlier run's answer is never reused."""
    return require_approval and not (record is not None and record.started_side_effects)


def approval_text(record: JournalRecord | None) -> str:
    """What the approver reads: the Markdown each decision before the approval (the preflight,
    the compatibility check, the path) noted in the record's ``planning`` when it finished
    (:class:`~airflow_ckpt_provider.upgrade.notes.DecisionNotes`), in that order, blank-line
    separated; "" when none did."""
    if record is None:
        return ""
    texts = []
    for name in PLANNING[:PLANNING.index(APPROVAL)]:
        entry = record.planning.get(name)
        notes = noted(record, name, as_type=DecisionNotes) if entry is not None and entry.state == DONE else None
        text = notes.summary_md if notes is not None else None
        if text and text.strip():
            texts.append(text.strip())
    return "\n\n".join(texts)


def completed(record: JournalRecord | None, path: PathSteps) -> bool:
    """The new version runs verified: what a rollback would undo is over."""
    return status_of(record, path.verify) is StepStatus.DONE


def old_stopped(record: JournalRecord | None, path: PathSteps) -> bool:
    """This upgrade stopped the old version: its stop step is done, or (a switchover, which is the
    stop, the handover and the launch in one step) the step failed after noting that the old query
    acknowledged its stop request (:class:`~airflow_ckpt_provider.upgrade.notes.SwitchoverNotes`)."""
    if status_of(record, path.stop) is StepStatus.DONE:
        return True
    notes = noted(record, path.switchover, as_type=SwitchoverNotes) if path.switchover else None
    return notes is not None and notes.old_stopped is True


def rollback_plan(record: JournalRecord | None, path: PathSteps,
                  mode: RollbackMode | str = RollbackMode.RESTORE) -> RollbackPlan:
    """The rollback once ``path``'s steps ended. Restart the old version only when the journal
    shows that this upgrade stopped it (:func:`old_stopped`) and the upgrade did not complete (no
    verified new version replaced it). Stop the new version then too, and also
    when a step that starts it began while the upgrade did not complete: a standby started
    before a stop that failed is stopped and the old version, which may still run, is left as it
    is. ``mode`` says how the old version restarts, never whether."""
    done = completed(record, path)
    restart_old = old_stopped(record, path) and not done
    started_new = any(status_of(record, step) is not StepStatus.NOT_RUN for step in path.new)
    return RollbackPlan(stop_new=restart_old or (started_new and not done), restart_old=restart_old,
                        mode=RollbackMode(mode))


def outcome(record: JournalRecord | None, path: PathSteps) -> UpgradeOutcome:
    """``rejected`` (the recorded answer was "Reject"), ``refused`` (a decision before any side
    effect failed: :func:`refusal`), ``upgraded`` (every step of ``path`` done), ``rolled back``
    (the upgrade needed a rollback and a restart of the old version is done), ``rollback failed``
    (it needed one and no restart is done: no version runs), else ``failed`` (the old version was
    not stopped by this upgrade)."""
    if rejected(record):
        return REJECTED
    if refusal(record) is not None:
        return REFUSED
    if all(status_of(record, step) is StepStatus.DONE for step in path.steps):
        return UPGRADED
    if rollback_plan(record, path).restart_old:
        if any(status_of(record, step) is StepStatus.DONE for step in path.restarts):
            return ROLLED_BACK
        return ROLLBACK_FAILED
    return UpgradeOutcome.FAILED


def restart_attempted(record: JournalRecord | None, path: PathSteps) -> bool:
    """A restart of the old version (or the restore before it) began."""
    return any(status_of(record, step) is not StepStatus.NOT_RUN for step in (*path.restore, *path.restarts))


_STATE_OF = {StepStatus.DONE: TaskState.SUCCESS, StepStatus.FAILED: TaskState.FAILED,
             StepStatus.NOT_RUN: TaskState.NOT_RUN}


def timings(record: JournalRecord | None, names: Iterable[str], *, answer_state: bool = True) -> list[StepTiming]:
    """Each of ``names`` as the journal records it: its state in the report's words (``success``,
    ``failed``, ``not run``; the approval ``rejected`` when its answer was "Reject", the decision
    that refused the upgrade ``refused``), its first start, its end and the seconds between."""
    rows = []
    refused = refusal(record)
    for name in names:
        entry = _entry(record, name)
        state = _STATE_OF[status_of(record, name)].value
        if answer_state and name == APPROVAL and approval_answer(record) == REJECT:
            state = "rejected"
        if refused is not None and name == refused.step:
            state = REFUSED.value
        started = entry.started_at if entry is not None and entry.started_at else None
        ended = entry.finished_at if entry is not None and entry.finished_at else None
        seconds = (datetime.fromisoformat(ended) - datetime.fromisoformat(started)).total_seconds() \
            if started and ended else None
        rows.append(StepTiming(name, state, seconds, started, ended))
    return rows


def errors(record: JournalRecord | None, names: Iterable[str]) -> dict[str, str]:
    """What each failed step of ``names`` recorded as its error ("" when it was interrupted)."""
    found = {}
    for name in names:
        entry = _entry(record, name)
        if entry is not None and status_of(record, name) is StepStatus.FAILED:
            found[name] = entry.error or ("interrupted: it began and never recorded an end (its process died or "
                                          "its wait timed out); see its log")
    return found


class Act(StrEnum):
    """What a step does when its task runs (:func:`next_action`)."""

    RUN = "run"  # act, recording started, then done or failed
    SKIP = "skip"  # do nothing: the record says this step is not called for (the reason says why)
    REUSE = "reuse"  # do nothing again: return the result the step recorded when it was done


@dataclass(frozen=True)
class NextAction:
    """The planner's answer for one step: ``act``, in words ``reason``, and for ``reuse`` the
    recorded ``result``."""

    act: Act
    reason: str
    result: Any = None


def path_taken(record: JournalRecord | None) -> Path | None:
    """The path this upgrade takes, from its planning: in place when ``choose_path`` chose it,
    else the preflight's relaunch mode (standby, cold or switchover); None when the record does not say
    (no preflight of the reference upgrade recorded one). Both are read through their rows
    (:class:`~airflow_ckpt_provider.checkpoint.path.PathChoice`,
    :class:`~airflow_ckpt_provider.upgrade.results.PreflightPlanning`):
    :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult` for a record that is not theirs."""
    choice = recorded(record, PATH_CHOICE, as_type=PathChoice)
    if choice is not None and choice.in_place:
        return Path.IN_PLACE
    preflight = recorded(record, PREFLIGHT, as_type=PreflightPlanning)
    return preflight.path if preflight is not None else None


def recorded_rollback_mode(record: JournalRecord | None) -> RollbackMode:
    """The rollback mode the preflight checked and recorded (``restore`` when none was);
    :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult` for a mode it does not know."""
    preflight = recorded(record, PREFLIGHT, as_type=PreflightPlanning)
    return preflight.rollback if preflight is not None else RollbackMode.RESTORE


def _called_for(step: str, plan: RollbackPlan) -> bool:
    """Whether the rollback ``plan`` calls for the rollback step ``step``."""
    if step in ("rollback_stop_new", "in_place_rollback_stop"):
        return plan.stop_new
    if step in ("rollback_restore", "rollback_restart_old"):
        return plan.restore
    if step == "rollback_restart_forward":
        return plan.forward
    return plan.restart_old  # rollback_handover, in_place_rollback_restart


def next_action(record: JournalRecord | None, step: str) -> NextAction:
    """What the step of kind ``step`` (its name in the step table, :mod:`~airflow_ckpt_provider.upgrade.steps`,
    whatever task id it runs under) does now, decided from the record alone:

    - ``skip`` every step once the upgrade ended (the journal is closed: upgraded, rejected, refused,
      rolled back);
    - ``skip`` the compatibility check once a step with a side effect began (an upgrade under way
      tried its new version before its stop; nothing is tried again);
    - ``reuse`` its recorded result when it is done (a retried task, a re-triggered run);
    - ``run`` without a journal (an operator used on its own), and for a decision before any side
      effect (it decides for itself and records itself in the planning);
    - ``skip`` when a person rejected the upgrade, when a decision before any side effect refused it
      (:func:`refusal`: the compatibility check or the path choice failed), when the approval was
      asked and has no answer, when the upgrade takes another path (in place or the migration),
      when an earlier step of its path is not done (it failed, or never ran), and for a rollback
      step the rollback plan does not call for (:func:`rollback_plan` in the recorded rollback mode: nothing to roll
      back, the other mode's restart, or the step before it in the rollback not done).

    Otherwise ``run``. A step of an upgrade that is rolling back is not decided here: the
    journal refuses it when it begins (:class:`~airflow_ckpt_provider.checkpoint.errors.UpgradeRolledBack`).
    Refuses (nothing decided, nothing recorded) a kind the step table does not name
    (:class:`~airflow_ckpt_provider.checkpoint.errors.UnknownStepKind`) and a step of a path or a
    rollback over a record that names no path (:func:`path_taken`:
    :class:`~airflow_ckpt_provider.checkpoint.errors.PathNotRecorded`), which no step could plan."""
    refuse_unknown_kind(step)
    if record is None:
        return NextAction(Act.RUN, "no journal: the step runs on its own")
    if record.closed:
        closing = record.closing_entry() or {}
        by = f" in run {closing['run_id']}" if closing.get("run_id") else ""
        return NextAction(Act.SKIP, f"the upgrade ended {record.outcome}{by} at {record.closed_at}: "
                                    "nothing runs again")
    if step == COMPATIBILITY_CHECK and record.started_side_effects:
        begun = sorted(record.steps.values(), key=lambda e: e.started_at)[0]
        return NextAction(Act.SKIP, f"the upgrade is under way ({begun.name} began in run {begun.run_id or '?'} at "
                                    f"{begun.started_at or '?'}): its new version was tried before that; no trial "
                                    "runs again")
    if step in PLANNING:
        return NextAction(Act.RUN, f"{step} is a decision before any side effect: it decides for itself")
    entry = _entry(record, step)
    if entry is not None and entry.state == DONE:
        return NextAction(Act.REUSE, f"done in run {entry.run_id or '?'} at {entry.finished_at or '?'}: "
                                     "its recorded result is returned, nothing is repeated", entry.result)
    in_path = step not in ROLLBACK and step not in IN_PLACE_ROLLBACK
    if rejected(record):
        return NextAction(Act.SKIP, "the approval answered Reject: nothing is stopped or started")
    refused = refusal(record)
    if refused is not None:
        return NextAction(Act.SKIP, f"{refused.describe()}; nothing is stopped or started")
    approval = record.planning.get(APPROVAL)
    if approval is not None and approval.state != DONE and not record.started_side_effects:
        return NextAction(Act.SKIP, f"the approval is {approval.state} without an answer: nothing runs before one")
    path = path_taken(record)
    if path is None:
        raise PathNotRecorded(
            found=f"upgrade {record.upgrade_id}'s record with no relaunch mode in its preflight's planning and no "
                  f"in-place choice, asked about step {step}",
            expected="the path the preflight (and the path choice) recorded: standby, cold, switchover or in place")
    if in_path:
        steps = PATHS[path].steps
        if step not in steps:
            return NextAction(Act.SKIP, f"the upgrade takes the {path.value} path, which has no step {step}")
        for before in steps[:steps.index(step)]:
            status = status_of(record, before)
            if status is not StepStatus.DONE:
                return NextAction(Act.SKIP, f"{before}, before it on the {path.value} path, is {status.value}")
        return NextAction(Act.RUN, f"every step before it on the {path.value} path is done")
    own = IN_PLACE_ROLLBACK if path is Path.IN_PLACE else ROLLBACK
    if step not in own:
        return NextAction(Act.SKIP, f"the upgrade takes the {path.value} path, whose rollback has no step {step}")
    mode = recorded_rollback_mode(record)
    plan = rollback_plan(record, PATHS[path], mode)
    if not _called_for(step, plan):
        why = ("the upgrade completed (verified)" if completed(record, PATHS[path])
               else "the old version was not stopped by this upgrade" if not plan.restart_old and not plan.stop_new
               else "the rollback does not call for it"
               if not plan.restart_old else f"the rollback restarts the old version in mode {plan.mode.value}")
        return NextAction(Act.SKIP, f"{why}: {step} is not part of this rollback")
    sequence = ROLLBACK_SEQUENCE[path if path is Path.IN_PLACE else Path.COLD][plan.mode]
    for before in sequence[:sequence.index(step)] if step in sequence else ():
        status = status_of(record, before)
        if status is not StepStatus.DONE:
            return NextAction(Act.SKIP, f"{before}, before it in the rollback, is {status.value}")
    return NextAction(Act.RUN, f"the rollback calls for it ({plan.mode.value})")


__all__ = ["OLD_STOPPED_NOTE", "REFUSAL_NOTE", "SUMMARY_NOTE", "Act", "NextAction", "Refusal", "StepStatus",
           "approval_answer", "approval_text", "completed", "errors", "needs_approval", "next_action", "old_stopped",
           "outcome", "path_taken", "recorded_rollback_mode", "refusal", "refuse_unknown_kind",
           "rejected", "restart_attempted", "rollback_plan", "status_of", "timings"]
