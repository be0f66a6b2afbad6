"""Named fault points, for crash tests of the upgrade: kill this process with SIGKILL where asked.

``CKPT_FAULT_POINT`` lists the points to fire (comma-separated, e.g.
``relaunch:launched``). Points are ``<task id>:<where>``: ``done`` after a step's side effect
and before the journal records it, plus the mid-step points the operators name
(``graceful_stop:requested``, ``archive:copying``, ``relaunch:launched`` ...). When a point fires,
a line is appended to the file named by ``CKPT_FAULT_LOG`` (if set) first, so a test can prove
which fault was injected. Unset (production), a fault point is one environment lookup.

Named pause points, for race tests: hold this process where asked until the test lets it go.
``CKPT_PAUSE_POINT`` lists the points to hold at, ``CKPT_PAUSE_DIR`` the folder through which the
process and the test talk: at a held point the process writes ``<name>.paused`` there (its pid)
and waits until ``<name>.go`` appears, then removes both and goes on (:func:`pause_files` names
them). The points: ``driver:stopping`` in :class:`~airflow_ckpt_provider.spark.graceful_stop.GracefulStop`,
after its last look at the stop request and before ``query.stop()`` (the withdrawal race). Unset
(production), a pause point is one environment lookup.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path

from airflow_ckpt_provider.clock import utc_iso

ENV = "CKPT_FAULT_POINT"
LOG_ENV = "CKPT_FAULT_LOG"
PAUSE_ENV = "CKPT_PAUSE_POINT"
PAUSE_DIR_ENV = "CKPT_PAUSE_DIR"
#: How often a held process looks for its go file.
PAUSE_POLL_S = 0.05

log = logging.getLogger(__name__)


def armed(name: str, env: str = ENV) -> bool:
    """Whether the comma-separated list in ``env`` names ``name``."""
    wanted = os.environ.get(env, "")
    return bool(wanted) and name in {w.strip() for w in wanted.split(",")}


def pause_files(folder: str | Path, name: str) -> tuple[Path, Path]:
    """The files of pause point ``name`` in ``folder``: (written while held, written to let it go)."""
    stem = name.replace(":", "-").replace("/", "-")
    return Path(folder) / f"{stem}.paused", Path(folder) / f"{stem}.go"


def pause_point(name: str) -> None:
    """Hold this thread at ``name`` while ``CKPT_PAUSE_POINT`` names it, until the test writes its go
    file (see the module doc); otherwise do nothing. ``ValueError`` when armed without
    ``CKPT_PAUSE_DIR``."""
    if not armed(name, PAUSE_ENV):
        return
    folder = os.environ.get(PAUSE_DIR_ENV, "")
    if not folder:
        raise ValueError(f"pause point {name} is armed ({PAUSE_ENV}) but {PAUSE_DIR_ENV} names no folder")
    paused, go = pause_files(folder, name)
    log.warning("pause point %s: holding process %d until %s exists (%s)", name, os.getpid(), go, PAUSE_ENV)
    paused.write_text(f"{os.getpid()}\n", encoding="ascii")
    while not go.exists():
        time.sleep(PAUSE_POLL_S)
    go.unlink(missing_ok=True)
    paused.unlink(missing_ok=True)
    log.warning("pause point %s: released", name)


def fault_point(name: str) -> None:
    """SIGKILL this process if ``CKPT_FAULT_POINT`` names ``name``; otherwise do nothing."""
    if not armed(name):
        return
    log.critical("fault point %s: killing process %d with SIGKILL (%s)", name, os.getpid(), ENV)
    record = os.environ.get(LOG_ENV)
    if record:
        with open(record, "a", encoding="utf-8") as handle:
            handle.write(f"{utc_iso()} {name} pid={os.getpid()}\n")
            handle.flush()
            os.fsync(handle.fileno())
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGKILL)
