"""Named fault points, for crash tests of the upgrade: kill this process with SIGKILL where asked.

``CKPT_FAULT_POINT`` lists the points to fire (comma-separated, e.g.
``relaunch:launched``). Points are ``<task id>:<where>``: ``done`` after a step's side effect
and before the journal records it, plus the mid-step points the operators name
(``graceful_stop:requested``, ``archive:copying``, ``relaunch:launched`` ...). When a point fires,
a line is appended to the file named by ``CKPT_FAULT_LOG`` (if set) first, so a test can prove
which fault was injected. Unset (production), a fault point is one environment lookup.
"""

from __future__ import annotations

import logging
import os
import signal

from airflow_ckpt_provider.clock import utc_iso

ENV = "CKPT_FAULT_POINT"
LOG_ENV = "CKPT_FAULT_LOG"

log = logging.getLogger(__name__)


def armed(name: str) -> bool:
    wanted = os.environ.get(ENV, "")
    return bool(wanted) and name in {w.strip() for w in wanted.split(",")}


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
