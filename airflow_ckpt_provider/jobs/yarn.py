"""YARN cluster job kind: the driver runs in the application master; the ResourceManager knows.

Submitted with ``spark.yarn.submit.waitAppCompletion=false`` (spark-submit returns once the
application is accepted); state by ``yarn application -status``, kill by
``yarn application -kill`` — both work from any host with the cluster's client configuration.
The log tail is the spark-submit output (``yarn logs`` needs log aggregation and a finished
application). Command building and parsing are unit-tested; no real YARN runs here.
"""

from __future__ import annotations

import logging
import re
from typing import ClassVar

from airflow_ckpt_provider.checkpoint.errors import EscalationFailed, LaunchFailed
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.old_job import YARN_APPLICATION_ID, yarn_state
from airflow_ckpt_provider.jobs.base import (
    DriverState,
    JobOfKind,
    JobOptions,
    SubmitRequest,
    resolve_binary,
    run_command,
    tail_file,
    tail_text,
)
from airflow_ckpt_provider.jobs.standalone import submit

log = logging.getLogger(__name__)

_STATE = re.compile(r"\bState\s*:\s*(\w+)")
_FINAL = re.compile(r"\bFinal-State\s*:\s*(\w+)")


class YarnJob(JobOfKind):
    """A YARN application (see the module doc)."""

    kind: ClassVar[str] = LaunchMode.YARN_CLUSTER.value

    @classmethod
    def launch(cls, request: SubmitRequest, options: JobOptions | None = None) -> YarnJob:
        output = submit(request, options or JobOptions(), what="YARN submission")
        match = YARN_APPLICATION_ID.search(output)
        if not match:
            raise LaunchFailed(found="no application id in the spark-submit output",
                               expected="application_<cluster>_<n>", log_tail=tail_text(output, 40),
                               path=str(request.log_path))
        handle = LaunchHandle(mode=LaunchMode.YARN_CLUSTER, checkpoint_uri=request.checkpoint_uri,
                              app_name=request.app_name, started_at=request.started_at,
                              application_id=match.group(0), master=request.master, log_path=str(request.log_path))
        return cls(handle, options)

    def _yarn(self, *args: str, what: str) -> tuple[int, str]:
        yarn = resolve_binary("yarn", self.options.env, homes=("HADOOP_HOME",))
        done = run_command([yarn, "application", *args], self.options, what=what)
        return done.returncode, "\n".join(part for part in (done.stdout, done.stderr) if part)

    def state(self) -> DriverState:
        try:
            code, output = self._yarn("-status", str(self.handle.application_id), what="YARN status")
        except OSError as exc:
            log.warning("cannot ask YARN for %s: %s", self.handle.application_id, exc)
            return DriverState.UNKNOWN
        match = _STATE.search(output)
        if code != 0 or not match:
            return DriverState.UNKNOWN
        final = _FINAL.search(output)
        return yarn_state(match.group(1), final.group(1) if final else "")

    def log_tail(self, lines: int = 50) -> str:
        return tail_file(self.handle.log_path, lines)

    def kill(self, *, timeout: float = 60.0) -> str:
        command = f"yarn application -kill {self.handle.application_id}"
        try:
            code, output = self._yarn("-kill", str(self.handle.application_id), what="YARN kill")
        except OSError as exc:
            raise EscalationFailed(found=f"{command} could not run ({exc})", expected=f"{command} to succeed") from None
        if code != 0:
            tail = output.strip().splitlines()[-3:]
            raise EscalationFailed(found=f"exit code {code} from {command}: {' / '.join(tail)}",
                                   expected="exit code 0")
        return command
