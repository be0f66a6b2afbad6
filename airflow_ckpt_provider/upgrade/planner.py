"""Decisions over the upgrade journal's record: whether to ask for approval, whether and how to roll
back, how the upgrade ended, and each step's time. Pure: the record in, a decision out.

The record is the one account of an upgrade (:class:`~airflow_ckpt_provider.storage.journal.JournalRecord`):
every step records ``started`` before its side effect and ``done`` or ``failed`` after it, and the
decisions before any side effect (preflight, compatibility check, path, approval) are in its
``planning``. Airflow's task states are not read: a step whose task was killed, timed out while
deferred, or failed after recording ``done`` reads the same here on every executor.

The rollback and the outcome are read once the path's steps have ended (the DAG's gates and its
report run after them): a step then found ``started`` was interrupted and counts as failed, and an
upgrade whose old version this run stopped but whose verification is not ``done`` did not
complete, whatever step failed (a step that fails after recording ``done`` leaves its successors
not run, and the old version must still be restarted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_ckpt_provider.checkpoint.outcome import (
    REJECTED,
    ROLLBACK_FAILED,
    ROLLED_BACK,
    UPGRADED,
    RollbackMode,
    RollbackPlan,
    TaskState,
    UpgradeOutcome,
)
from airflow_ckpt_provider.checkpoint.report import StepTiming
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.storage.journal import DONE, FAILED, STARTED, JournalRecord, JournalStep

#: The approval's name in the journal's ``planning`` and the answer that stops the upgrade.
APPROVAL = "approve"
REJECT = "Reject"
APPROVE = "Approve"


class StepStatus(StrEnum):
    """A step as the journal records it, read after its task ended."""

    NOT_RUN = "not run"  # no record: never began (skipped, upstream failed, or refused before it began)
    DONE = "done"
    FAILED = "failed"  # recorded failed, or recorded started and never ended (interrupted)


@dataclass(frozen=True)
class PathSteps:
    """The steps of one path through an upgrade, by their names in the journal: ``steps`` in the
    order they run (all done: upgraded); the graceful ``stop`` of the old version, the
    ``handover``, the state export (``state_export``, None: the path exports none), the
    ``archive``, the ``launch`` that makes the new version run, and the ``verify`` that ends what
    a failure rolls back; the steps that start the new version (``new``: a standby, a release, a
    launch); the rollback's ``rollback_handover`` (what the new version processed), its
    ``restore`` of the old checkpoint and its ``restarts`` of the old version (one done is a
    rollback)."""

    steps: tuple[str, ...]
    stop: str
    handover: str
    archive: str
    launch: str
    verify: str
    state_export: str | None = None
    new: tuple[str, ...] = ()
    rollback_handover: str | None = None
    restore: tuple[str, ...] = ()
    restarts: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("steps", "new", "restore", "restarts"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        named = [self.stop, self.handover, self.archive, self.launch, self.verify, *self.new]
        missing = [s for s in (*named, self.state_export) if s is not None and s not in self.steps]
        if missing:
            raise ValueError(f"PathSteps names steps outside its path: {', '.join(missing)}")


def _entry(record: JournalRecord | None, name: str) -> JournalStep | None:
    if record is None:
        return None
    return record.steps.get(name) or record.planning.get(name)


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
    """The approval's recorded answer ("Approve", "Reject"), None when none was recorded."""
    entry = record.planning.get(APPROVAL) if record is not None else None
    if entry is None or entry.state != DONE or not isinstance(entry.result, Mapping):
        return None
    chosen = entry.result.get("chosen")
    return str(chosen) if chosen else None


def rejected(record: JournalRecord | None) -> bool:
    """A person (or the approval's timeout, whose default is "Reject") said no before anything
    was stopped."""
    return approval_answer(record) == REJECT and not (record is not None and record.started_side_effects)


def needs_approval(record: JournalRecord | None, *, require_approval: bool) -> bool:
    """Ask a person unless approval is off or a step with a side effect began: a resumed upgrade
    was approved before its stop, and asking again could not undo it. A journal where nothing
    began is started afresh by the preflight, so an earlier run's answer is never reused."""
    return require_approval and not (record is not None and record.started_side_effects)


def completed(record: JournalRecord | None, path: PathSteps) -> bool:
    """The new version runs verified: what a rollback would undo is over."""
    return status_of(record, path.verify) is StepStatus.DONE


def rollback_plan(record: JournalRecord | None, path: PathSteps,
                  mode: RollbackMode | str = RollbackMode.RESTORE) -> RollbackPlan:
    """The rollback once ``path``'s steps ended. Restart the old version only when the journal
    shows its stop done and the upgrade did not complete (the old version was stopped by this
    upgrade and no verified new version replaced it). Stop the new version then too, and also
    when a step that starts it began while the upgrade did not complete: a standby started
    before a stop that failed is stopped and the old version, which may still run, is left as it
    is. ``mode`` says how the old version restarts, never whether."""
    done = completed(record, path)
    restart_old = status_of(record, path.stop) is StepStatus.DONE and not done
    started_new = any(status_of(record, step) is not StepStatus.NOT_RUN for step in path.new)
    return RollbackPlan(stop_new=restart_old or (started_new and not done), restart_old=restart_old,
                        mode=RollbackMode(mode))


def outcome(record: JournalRecord | None, path: PathSteps) -> UpgradeOutcome:
    """``rejected`` (the recorded answer was "Reject"), ``upgraded`` (every step of ``path``
    done), ``rolled back`` (the upgrade needed a rollback and a restart of the old version is
    done), ``rollback failed`` (it needed one and no restart is done: no version runs), else
    ``failed`` (the old version was not stopped by this upgrade)."""
    if rejected(record):
        return REJECTED
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
    ``failed``, ``not run``; the approval ``rejected`` when its answer was "Reject"), its first
    start, its end and the seconds between."""
    rows = []
    for name in names:
        entry = _entry(record, name)
        state = _STATE_OF[status_of(record, name)].value
        if answer_state and name == APPROVAL and approval_answer(record) == REJECT:
            state = "rejected"
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


def result_of(record: JournalRecord | None, name: str) -> Any:  # noqa: ANN401 - a recorded JSON value
    """The result ``name`` recorded when done; None otherwise."""
    entry = _entry(record, name)
    return entry.result if entry is not None and entry.state == DONE else None


__all__ = ["APPROVAL", "APPROVE", "REJECT", "PathSteps", "StepStatus", "approval_answer", "completed",
           "errors", "needs_approval", "outcome", "rejected", "restart_attempted", "result_of", "rollback_plan",
           "status_of", "timings"]
