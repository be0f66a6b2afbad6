"""Decisions over the steps' recorded states: whether to roll back, and how the upgrade ended.
Pure: no I/O.

``states`` maps a step (task id) to what it recorded: ``success``, ``failed``, ``running`` or
``not run`` (see :mod:`airflow_ckpt_provider.operators.timing`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_ckpt_provider.enums import StrEnum


class TaskState(StrEnum):
    """What a step's task recorded (Airflow's task states, plus ``not run``)."""

    SUCCESS = "success"
    FAILED = "failed"
    SKIPPED = "skipped"
    RUNNING = "running"
    UPSTREAM_FAILED = "upstream_failed"
    NOT_RUN = "not run"


class UpgradeOutcome(StrEnum):
    """How an upgrade ended (the report's and the journal's word for it)."""

    UPGRADED = "upgraded"
    ROLLED_BACK = "rolled back"
    REJECTED = "rejected"
    FAILED = "failed"
    #: the old version was stopped, the upgrade failed, and the rollback could not restart it:
    #: NO version runs (the journal stays open and the stream locked; the report says what to do)
    ROLLBACK_FAILED = "rollback failed"
    #: a run of an upgrade id that an earlier run finished: it did nothing (not a final outcome of
    #: the journal, which keeps the first run's)
    ALREADY_DONE = "already done"


UPGRADED, ROLLED_BACK, REJECTED, FAILED = (UpgradeOutcome.UPGRADED, UpgradeOutcome.ROLLED_BACK,
                                           UpgradeOutcome.REJECTED, UpgradeOutcome.FAILED)
ALREADY_DONE = UpgradeOutcome.ALREADY_DONE
ROLLBACK_FAILED = UpgradeOutcome.ROLLBACK_FAILED


class RollbackMode(StrEnum):
    """How a rollback restarts the old version.

    ``restore``: on its old checkpoint (restored from the archive if it was removed); it resumes
    at its last committed batch and processes again what the new version processed after it.
    ``forward`` (stateless queries only): on a fresh, empty checkpoint, from where the new
    version stopped (see :mod:`airflow_ckpt_provider.checkpoint.rollback`): nothing twice.
    """

    RESTORE = "restore"
    FORWARD = "forward"


def should_roll_back(states: Mapping[str, str], stop_step: str, after_stop: Sequence[str]) -> bool:
    """Roll back only when THIS run stopped the old job and a later step failed.

    A failure before or during the stop (preflight refusal, approval timeout, a stop that did not
    complete) must not restart the old version: it may still be running, and two queries must
    never share a checkpoint.
    """
    return states.get(stop_step) == TaskState.SUCCESS and any(states.get(s) == TaskState.FAILED for s in after_stop)


@dataclass(frozen=True)
class RollbackPlan:
    """What the rollback must do: stop the new version (a standby, or the released or launched
    job), and restart the old version: on its old checkpoint (``restore``) or on a fresh one from
    the new version's handover (``forward``)."""

    stop_new: bool
    restart_old: bool
    mode: RollbackMode = RollbackMode.RESTORE

    @property
    def restore(self) -> bool:
        """Restore the old checkpoint and restart the old version on it."""
        return self.restart_old and self.mode is RollbackMode.RESTORE

    @property
    def forward(self) -> bool:
        """Restart the old version on a fresh checkpoint from the new version's handover."""
        return self.restart_old and self.mode is RollbackMode.FORWARD


def rollback_plan(
    states: Mapping[str, str],
    *,
    stop_step: str,
    after_stop: Sequence[str],
    new_steps: Sequence[str],
    done_step: str,
    mode: RollbackMode | str = RollbackMode.RESTORE,
) -> RollbackPlan:
    """The rollback for these step states.

    ``restart_old`` is :func:`should_roll_back` over ``after_stop``: this run stopped the old
    version and a later step failed. ``stop_new`` also holds when a step that starts the new
    version (``new_steps``: the standby launch, the release or the cold launch) ran while
    ``done_step`` (the verification) did not succeed: a standby started before a stop that
    failed, or was refused, is stopped, and the old version is left as it is (it may still run).
    ``mode`` (:class:`RollbackMode`, ``ValueError`` for anything else) says how the old version
    restarts; it changes nothing about whether it does.
    """
    restart_old = should_roll_back(states, stop_step, after_stop)
    ran = {TaskState.SUCCESS, TaskState.FAILED, TaskState.RUNNING}
    started_new = any(states.get(step) in ran for step in new_steps)
    return RollbackPlan(stop_new=restart_old or (started_new and states.get(done_step) != TaskState.SUCCESS),
                        restart_old=restart_old, mode=RollbackMode(mode))


def upgrade_outcome(
    states: Mapping[str, str],
    *,
    upgrade_steps: Sequence[str],
    rollback_step: str | Sequence[str] | None = None,
    rejected: bool = False,
) -> str:
    """``rejected`` (a person said no), ``upgraded`` (every upgrade step succeeded), ``rolled
    back`` (the old version was restarted: ``rollback_step``, or any of several, succeeded),
    ``rollback failed`` (a restart was attempted, or its restore before it, and none succeeded:
    no version runs), else ``failed``."""
    if rejected:
        return REJECTED
    if all(states.get(step) == TaskState.SUCCESS for step in upgrade_steps):
        return UPGRADED
    restarts = [rollback_step] if isinstance(rollback_step, str) else list(rollback_step or ())
    if any(states.get(step) == TaskState.SUCCESS for step in restarts):
        return ROLLED_BACK
    if any(states.get(step) in (TaskState.FAILED, TaskState.UPSTREAM_FAILED) for step in restarts):
        return ROLLBACK_FAILED
    return FAILED


@dataclass(frozen=True)
class UpgradeSteps:
    """The task ids of one path through an upgrade, for its report: ``steps`` in the order they
    run (all succeeded: upgraded), the graceful ``stop``, the ``handover`` (its HandoverResult),
    the ``archive``, the ``state_export`` (None: the path exports none), the ``launch`` of the new
    version and the restarts of the old version a ``rollback`` runs (one succeeded: rolled back)."""

    steps: tuple[str, ...]
    stop: str | None = "graceful_stop"
    handover: str = "extract_handover"
    archive: str = "archive"
    state_export: str | None = "export_state"
    rollback: tuple[str, ...] = ()
    launch: str | None = "relaunch"

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "rollback", tuple(self.rollback))
        if not self.steps:
            raise ValueError("UpgradeSteps needs at least one step")
