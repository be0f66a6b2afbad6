"""External job kind (``external``): an old job no cluster manager the provider reaches runs, so a
person stops it.

Its state is always UNKNOWN (the provider judges by the checkpoint: no new batch planned or
committed); :meth:`ExternalJob.kill` raises :class:`EscalationFailed` saying a person stops it
(the approval said what to stop). It cannot be launched.
"""

from __future__ import annotations

from typing import ClassVar

from airflow_ckpt_provider.checkpoint.errors import EscalationFailed, LaunchFailed
from airflow_ckpt_provider.jobs.base import DriverState, JobOfKind, JobOptions, SubmitRequest

#: The job kind's name (a handle's mode).
KIND = "external"


class ExternalJob(JobOfKind):
    """A job a person stops (see the module doc); ``extra["description"]`` says what and how."""

    kind: ClassVar[str] = KIND

    @classmethod
    def launch(cls, request: SubmitRequest, options: JobOptions | None = None) -> ExternalJob:
        """Not supported: :class:`LaunchFailed`."""
        raise LaunchFailed(found="a launch of an external job", expected="a launch in local, standalone or YARN mode",
                           action="Launch the new version in a mode the provider runs (local, standalone, YARN).")

    def state(self) -> DriverState:
        """UNKNOWN: nothing here can ask."""
        return DriverState.UNKNOWN

    def log_tail(self, lines: int = 50) -> str:
        return ""

    def kill(self, *, timeout: float = 60.0) -> str:
        """Never kills: :class:`EscalationFailed` (a person stops it)."""
        what = self.handle.extra.get("description") or self.handle.app_name
        raise EscalationFailed(found=f"an external job ({what}): a person stops it, the provider cannot",
                               expected="the person to stop it as the approval says",
                               action="Stop the job by hand as the approval describes, then run the stop again: it "
                                      "checks that the checkpoint is quiet.")
