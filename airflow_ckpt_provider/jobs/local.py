"""Local job kind: spark-submit (client mode, any master) detached on the launching machine.

The driver runs under a supervisor (:mod:`airflow_ckpt_provider.jobs.supervise`) in a new
session, so its process group is the job; the supervisor records the driver's state in the
checkpoint (``_ckpt/driver.json``), readable from anywhere. The handle records the process
group id together with the launching process's :class:`ProcessScope` (host, boot id, PID
namespace): the pid is looked up and signalled only from that same scope. From any other
scope (a triggerer in another container or PID namespace, another host) :meth:`LocalJob.state`
answers :attr:`DriverState.UNKNOWN` and :meth:`LocalJob.kill` refuses, saying where to run it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

from airflow_ckpt_provider.checkpoint.errors import EscalationFailed, LaunchFailed
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.secrets import redact_command
from airflow_ckpt_provider.jobs.base import (
    STORAGE_OPTIONS_ENV,
    DriverState,
    JobOfKind,
    JobOptions,
    SubmitRequest,
    tail_file,
)
from airflow_ckpt_provider.records.control import ProcessScope
from airflow_ckpt_provider.storage.files import open_private

log = logging.getLogger(__name__)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid`` as seen from this process (Linux
    ``/proc``, else ``kill(-pgid, 0)``). Only meaningful in the scope that launched the group."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            return [pgid]
        return [pgid]
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _wait_gone(pgid: int, timeout: float, poll: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def kill_group(pgid: int, *, term_timeout: float = 10.0, kill_timeout: float = 10.0) -> str:
    """SIGTERM the process group ``pgid``, SIGKILL it after ``term_timeout``; wait until it is
    gone; returns what was done. Refuses pgid 0 and 1; raises :class:`EscalationFailed`."""
    if pgid < 2:
        raise EscalationFailed(found=f"process group {pgid}", expected="a launched driver's process group (> 1)")
    if not group_members(pgid):
        log.info("process group %d is gone already: nothing to kill", pgid)
        return f"process group {pgid} was gone already"
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return f"process group {pgid} was gone already"
    except PermissionError as exc:
        raise EscalationFailed(found=f"no permission to signal process group {pgid} ({exc})",
                               expected="the same user as the launched driver") from None
    log.info("sent SIGTERM to process group %d; waiting up to %.0f s", pgid, term_timeout)
    if _wait_gone(pgid, term_timeout):
        return f"SIGTERM to process group {pgid}"
    log.warning("process group %d still runs %.0f s after SIGTERM: sending SIGKILL", pgid, term_timeout)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if not _wait_gone(pgid, kill_timeout):
        raise EscalationFailed(found=f"process group {pgid} alive {kill_timeout:g} s after SIGKILL",
                               expected="the driver gone")
    return f"SIGTERM then SIGKILL to process group {pgid}"


class LocalJob(JobOfKind):
    """A detached local driver (see the module doc)."""

    kind: ClassVar[str] = LaunchMode.LOCAL.value
    #: Seconds between the supervisor's refreshes of ``_ckpt/driver.json``.
    record_interval_s: ClassVar[float] = 5.0

    def __init__(self, handle: LaunchHandle, options: JobOptions | None = None) -> None:
        super().__init__(handle, options)
        self._child: subprocess.Popen[bytes] | None = None

    @classmethod
    def launch(cls, request: SubmitRequest, options: JobOptions | None = None) -> LocalJob:
        launch_id = request.launch_id
        argv = [sys.executable, "-m", "airflow_ckpt_provider.jobs.supervise", "--checkpoint", request.checkpoint_uri,
                "--launch-id", launch_id, "--log", str(request.log_path),
                "--interval", f"{cls.record_interval_s:g}", "--", *request.command]
        env = dict(request.env)
        if request.storage_options:
            env[STORAGE_OPTIONS_ENV] = json.dumps(dict(request.storage_options))
        scope = ProcessScope.current()
        try:
            with open_private(request.log_path) as out:
                process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           env=env, start_new_session=True)
        except OSError as exc:
            raise LaunchFailed(found=f"{argv[0]} could not start ({exc})", expected="a Python interpreter",
                               path=str(request.log_path)) from None
        log.info("driver runs as process group %d on %s (launch %s)", process.pid, scope.describe(), launch_id)
        handle = LaunchHandle(
            mode=LaunchMode.LOCAL, checkpoint_uri=request.checkpoint_uri, app_name=request.app_name,
            started_at=request.started_at, pid=process.pid, master=request.master, log_path=str(request.log_path),
            ui_url=request.ui_url, extra={"command": json.dumps(redact_command(list(request.command)))},
            launch_id=launch_id, host=scope.host, boot_id=scope.boot_id, pid_namespace=scope.pid_namespace,
        )
        job = cls(handle, options)
        job._child = process
        return job

    @property
    def visible(self) -> bool:
        """Whether this process runs in the scope the driver was launched in (its pid means the
        same process here)."""
        return self.handle.scope.same_as(ProcessScope.current())

    def state(self) -> DriverState:
        if not self.visible:
            return DriverState.UNKNOWN
        if self._child is not None:  # our own child: reap it so it does not linger as a zombie
            code = self._child.poll()
            if code is not None and not group_members(int(self.handle.pid or 0)):
                return DriverState.FINISHED if code == 0 else DriverState.FAILED
        else:
            try:
                os.waitpid(int(self.handle.pid or 0), os.WNOHANG)
            except (ChildProcessError, OSError):
                pass
        return DriverState.RUNNING if group_members(int(self.handle.pid or 0)) else DriverState.EXITED

    def log_tail(self, lines: int = 50) -> str:
        return tail_file(self.handle.log_path, lines)

    def kill(self, *, timeout: float = 60.0) -> str:
        here = ProcessScope.current()
        if not self.handle.scope.same_as(here):
            launched = self.handle.scope
            raise EscalationFailed(
                found=f"a local driver launched in {launched.describe()}, but this is {here.describe()}",
                expected="the kill to run where the driver was launched (same host, boot and PID namespace)",
                action=f"Run the step on the worker that launched the job (same queue and container), or kill "
                       f"process group {self.handle.pid} there by hand. Nothing was signalled.",
            )
        return kill_group(int(self.handle.pid or 0), term_timeout=min(10.0, timeout))
