"""Decisions over the steps' recorded states: whether to roll back, and how the upgrade ended.
Pure: no I/O.

``states`` maps a step (task id) to what it recorded: ``success``, ``failed``, ``running`` or
``not run`` (see :mod:`airflow_ckpt_provider.operators.timing`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from airflow_ckpt_provider.enums import StrEnum


class TaskState(StrEnum):
    """What a step's task recorded (Airflow's task states, plus ``not run``)."""

    SUCCESS = "success"
    FAILED = "failed"
    SKIPPED = "skipped"
    RUNNING = "running"
    NOT_RUN = "not run"


class UpgradeOutcome(StrEnum):
    """How an upgrade ended (the report's and the journal's word for it)."""

    UPGRADED = "upgraded"
    ROLLED_BACK = "rolled back"
    REJECTED = "rejected"
    FAILED = "failed"


UPGRADED, ROLLED_BACK, REJECTED, FAILED = (UpgradeOutcome.UPGRADED, UpgradeOutcome.ROLLED_BACK,
                                           UpgradeOutcome.REJECTED, UpgradeOutcome.FAILED)


def should_roll_back(states: Mapping[str, str], stop_step: str, after_stop: Sequence[str]) -> bool:
    """Roll back only when THIS run stopped the old job and a later step failed.

    A failure before or during the stop (preflight refusal, approval timeout, a stop that did not
    complete) must not restart the old version: it may still be running, and two queries must
    never share a checkpoint.
    """
    return states.get(stop_step) == TaskState.SUCCESS and any(states.get(s) == TaskState.FAILED for s in after_stop)


def upgrade_outcome(
    states: Mapping[str, str],
    *,
    upgrade_steps: Sequence[str],
    rollback_step: str | None = None,
    rejected: bool = False,
) -> str:
    """``rejected`` (a person said no), ``upgraded`` (every upgrade step succeeded), ``rolled
    back`` (the old version was restarted), else ``failed``."""
    if rejected:
        return REJECTED
    if all(states.get(step) == TaskState.SUCCESS for step in upgrade_steps):
        return UPGRADED
    if rollback_step and states.get(rollback_step) == TaskState.SUCCESS:
        return ROLLED_BACK
    return FAILED
