"""Escalation: kill a launched streaming job that did not stop when asked.

One function per launch mode behind :func:`kill_launched_job`:

* local — ``SIGTERM`` to the process group ``handle.pid`` (the launcher starts the driver in a
  new session, so the group is the driver and its JVM), then ``SIGKILL`` after ``term_timeout``;
  refused when ``handle.extra["host"]`` names another machine (that pid is not ours to kill);
* standalone cluster — ``spark-submit --master <master> --kill <driver_id>``;
* YARN — ``yarn application -kill <application_id>``.

Commands run as argument lists (never through a shell). No Airflow import: the ``ckpt stop``
command uses this module too. Failures raise :class:`EscalationFailed` saying what to do.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from airflow_ckpt_provider.checkpoint.errors import EscalationFailed
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode

log = logging.getLogger(__name__)

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class KillResult:
    """What the escalation did: ``action`` in words, ``forced`` when SIGKILL was needed."""

    mode: LaunchMode
    action: str
    waited_s: float
    forced: bool = False
    already_gone: bool = False


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``; Linux /proc, else kill(-pgid, 0)."""
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


def local_job_alive(pid: int) -> bool:
    """Whether any live process remains in the process group ``pid``."""
    return bool(_group_members(pid))


def _wait_gone(pgid: int, timeout: float, poll: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while _group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def kill_local(pid: int, *, term_timeout: float = 10.0, kill_timeout: float = 10.0) -> KillResult:
    """SIGTERM the process group ``pid``, SIGKILL it after ``term_timeout``; wait until it is gone."""
    start = time.monotonic()
    if not _group_members(pid):
        log.info("process group %d is gone already: nothing to kill", pid)
        return KillResult(LaunchMode.LOCAL, f"process group {pid} was gone already", 0.0, already_gone=True)
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return KillResult(LaunchMode.LOCAL, f"process group {pid} was gone already", 0.0, already_gone=True)
    except PermissionError as exc:
        raise EscalationFailed(found=f"no permission to signal process group {pid} ({exc})",
                               expected="the same user as the launched driver") from None
    log.info("sent SIGTERM to process group %d; waiting up to %.0f s", pid, term_timeout)
    if _wait_gone(pid, term_timeout):
        return KillResult(LaunchMode.LOCAL, f"SIGTERM to process group {pid}", time.monotonic() - start)
    log.warning("process group %d still runs %.0f s after SIGTERM: sending SIGKILL", pid, term_timeout)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if not _wait_gone(pid, kill_timeout):
        raise EscalationFailed(found=f"process group {pid} alive {kill_timeout:g} s after SIGKILL",
                               expected="the driver gone")
    return KillResult(LaunchMode.LOCAL, f"SIGTERM then SIGKILL to process group {pid}",
                      time.monotonic() - start, forced=True)


def _binary(name: str, explicit: str | None, env_home: str | None) -> str:
    if explicit:
        return explicit
    home = os.environ.get(env_home) if env_home else None
    if home and (Path(home) / "bin" / name).exists():
        return str(Path(home) / "bin" / name)
    return shutil.which(name) or name


def _run(command: Sequence[str], runner: Runner, timeout: float, mode: LaunchMode) -> KillResult:
    start = time.monotonic()
    log.info("escalating: %s", " ".join(command))
    try:
        done = runner(list(command), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EscalationFailed(found=f"{command[0]} could not run ({exc})",
                               expected=f"{' '.join(command)} to succeed") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:]
        raise EscalationFailed(found=f"exit code {done.returncode} from {' '.join(command)}: {' / '.join(tail)}",
                               expected="exit code 0")
    return KillResult(mode, " ".join(command), time.monotonic() - start)


def kill_launched_job(
    handle: LaunchHandle,
    *,
    term_timeout: float = 10.0,
    command_timeout: float = 120.0,
    spark_submit: str | None = None,
    yarn: str | None = None,
    runner: Runner = subprocess.run,
) -> KillResult:
    """Kill the job ``handle`` describes (see module doc); raises :class:`EscalationFailed`.

    ``spark_submit`` / ``yarn`` default to ``$SPARK_HOME/bin/spark-submit`` /
    ``$HADOOP_HOME/bin/yarn`` when present, else the name on ``PATH``.
    """
    if handle.mode is LaunchMode.LOCAL:
        assert handle.pid is not None
        host = _foreign_host(handle)
        if host:
            raise EscalationFailed(
                found=f"a local driver launched on host {host}, but this is {socket.gethostname()}",
                expected="the kill to run on the machine that launched the driver",
                action=f"Run the stop on {host} (the same worker queue as the launch), or kill process "
                       f"group {handle.pid} there by hand.",
            )
        return kill_local(int(handle.pid), term_timeout=term_timeout)
    if handle.mode is LaunchMode.STANDALONE_CLUSTER:
        command = [_binary("spark-submit", spark_submit, "SPARK_HOME"), "--master", str(handle.master),
                   "--kill", str(handle.driver_id)]
        return _run(command, runner, command_timeout, handle.mode)
    if handle.mode is LaunchMode.YARN_CLUSTER:
        command = [_binary("yarn", yarn, "HADOOP_HOME"), "application", "-kill", str(handle.application_id)]
        return _run(command, runner, command_timeout, handle.mode)
    raise EscalationFailed(found=f"launch mode {handle.mode!r}", expected="local, standalone-cluster or yarn-cluster")


def _foreign_host(handle: LaunchHandle) -> str | None:
    """The launching host named in ``handle.extra["host"]`` when it is not this machine."""
    host = handle.extra.get("host") if handle.extra else None
    if host and host not in (socket.gethostname(), socket.getfqdn()):
        return host
    return None


def job_alive(handle: LaunchHandle) -> bool | None:
    """True/False for a local launch on this machine (its process group); None when unknown
    (cluster modes, or a local launch on another host per ``extra["host"]``)."""
    if handle.mode is LaunchMode.LOCAL and handle.pid is not None and not _foreign_host(handle):
        return local_job_alive(int(handle.pid))
    return None
