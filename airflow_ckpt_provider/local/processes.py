"""What the embedded stack's servers (Kafka, S3, HDFS, Spark standalone, Airflow) share: loopback
ports, the tail of a server's log for an error, stopping a server's process group, and their
shape as a context manager (:class:`LocalServer`).

Each server runs in its own session (``start_new_session=True``), so its process group holds the
JVM or Python process and every child it started.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import TypeVar

from airflow_ckpt_provider.local.errors import PortInUse

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(port: int, what: str) -> None:
    """Raise :class:`PortInUse` if ``port`` on 127.0.0.1 cannot be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            raise PortInUse(
                found=f"127.0.0.1:{port} already bound ({exc.strerror})",
                expected=f"a free port for the {what}",
                action="Stop whatever listens there (`ss -ltnp`) or pass another port, "
                "or leave the port unset to pick a free one.",
            ) from exc


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a server's log ('' when it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop_process_group(proc: subprocess.Popen[bytes] | None, what: str, timeout: float = 30.0) -> None:
    """Stop the server ``proc`` leads (``what`` names it in the log): SIGTERM to its process group,
    SIGKILL after ``timeout`` seconds. Nothing to do for None or a process that has exited."""
    if proc is None or proc.poll() is not None:
        return
    log.info("stopping %s", what)
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        log.warning("%s did not stop in %.0f s; killing it", what, timeout)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


S = TypeVar("S", bound="LocalServer")


class LocalServer:
    """A server of the embedded stack, run by one or more processes, each in its own process group:
    ``with`` starts it and stops it on the way out, and it is ``running`` while every process it
    started lives. A subclass starts its processes in ``start`` (returning itself), names them in
    ``processes`` and stops them in ``stop`` (:func:`stop_process_group`; idempotent)."""

    def start(self: S) -> S:
        raise NotImplementedError

    def stop(self, timeout: float = 30.0) -> None:
        raise NotImplementedError

    def processes(self) -> list[subprocess.Popen[bytes] | None]:
        """The processes this server started (None: not started, or stopped)."""
        raise NotImplementedError

    @property
    def running(self) -> bool:
        started = self.processes()
        return bool(started) and all(proc is not None and proc.poll() is None for proc in started)

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["LOOPBACK", "LocalServer", "ensure_port_free", "free_port", "log_tail", "stop_process_group"]
