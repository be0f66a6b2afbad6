"""The words of an upgrade's end, pure values: a step's state in the report, the outcome, the
rollback's mode and plan. The decisions over the journal that produce them are in
:mod:`airflow_ckpt_provider.upgrade.planner`."""

from __future__ import annotations

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
    #: a decision before any side effect (the compatibility check, the path choice) refused the
    #: upgrade: nothing was stopped, copied or started (the journal is closed, the stream unlocked)
    REFUSED = "refused"
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
REFUSED = UpgradeOutcome.REFUSED
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
