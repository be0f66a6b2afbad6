"""Deferrable wait for a launched job's first committed batch (runs in the triggerer)."""

from __future__ import annotations

import asyncio
import posixpath
import re
import time
from collections.abc import AsyncIterator
from enum import Enum
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ckpt_provider.checkpoint.launch import LaunchHandle

__all__ = ["EVENT_KEYS", "LaunchEvent", "LaunchTrigger", "committed_batches"]

_BATCH = re.compile(r"(0|[1-9][0-9]*)\Z")


class LaunchEvent(str, Enum):
    """Why the trigger fired; shared with the operators that resume on it."""

    COMMITTED = "committed"  # commits/N with N >= min_batch exists
    DIED = "died"  # the job ended before that
    TIMEOUT = "timeout"  # neither happened before the deadline


#: Keys of every event this trigger fires; the operators check them on resume.
EVENT_KEYS = frozenset({"reason", "batch", "state", "log_tail", "handle", "waited_s"})


def committed_batches(fs: Any, root: str) -> list[int]:
    """Sorted batch ids in ``<root>/commits`` (none when the folder does not exist yet)."""
    from airflow_ckpt_provider.checkpoint.logs import list_batch_ids

    return list_batch_ids(fs, posixpath.join(root.rstrip("/"), "commits"))


class LaunchTrigger(BaseTrigger):
    """Poll the checkpoint's ``commits/`` (and the job's liveness) until batch ``min_batch`` or a
    later one is committed, the job dies, or ``deadline`` (epoch seconds) passes.

    Fires one event ``{"reason": LaunchEvent value, "batch": newest committed batch or None,
    "state": the job's last known state, "log_tail": driver log tail (when it died),
    "handle": the LaunchHandle dict or None, "waited_s"}``. Without a ``handle`` only the
    checkpoint is watched. Storage and status errors are retried until the deadline; blocking
    I/O runs in a thread.
    """

    def __init__(
        self,
        checkpoint_uri: str,
        deadline: float,
        handle: dict[str, Any] | None = None,
        min_batch: int = 0,
        poll_interval: float = 2.0,
        storage_conn_id: str | None = None,
        log_lines: int = 60,
        started_at: float | None = None,
    ) -> None:
        super().__init__()
        self.checkpoint_uri = checkpoint_uri
        self.deadline = float(deadline)
        self.handle = dict(handle) if handle else None
        self.min_batch = int(min_batch)
        self.poll_interval = float(poll_interval)
        self.storage_conn_id = storage_conn_id
        self.log_lines = int(log_lines)
        self.started_at = float(started_at) if started_at is not None else time.time()

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "checkpoint_uri": self.checkpoint_uri,
                "deadline": self.deadline,
                "handle": self.handle,
                "min_batch": self.min_batch,
                "poll_interval": self.poll_interval,
                "storage_conn_id": self.storage_conn_id,
                "log_lines": self.log_lines,
                "started_at": self.started_at,
            },
        )

    # blocking helpers, run in a thread

    def _filesystem(self) -> tuple[Any, str]:
        from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook

        return CheckpointStorageHook(storage_conn_id=self.storage_conn_id).filesystem(self.checkpoint_uri)

    def _launcher(self) -> Any:
        from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook

        return SparkLauncherHook(master="local")  # follows a handle: needs no connection

    def _event(self, reason: LaunchEvent, batch: int | None, state: str, log_tail: str = "") -> dict[str, Any]:
        return {"reason": reason.value, "batch": batch, "state": state, "log_tail": log_tail,
                "handle": self.handle, "waited_s": round(time.time() - self.started_at, 3)}

    def _poll(self, fs: Any, root: str) -> dict[str, Any] | None:
        batches = committed_batches(fs, root)
        if batches and batches[-1] >= self.min_batch:
            return self._event(LaunchEvent.COMMITTED, batches[-1], "RUNNING")
        if self.handle is not None:
            launcher, handle = self._launcher(), LaunchHandle.from_json(self.handle)
            state = launcher.driver_state(handle)
            if not launcher.is_alive(handle):
                batches = committed_batches(fs, root)  # it may have committed just before it ended
                if batches and batches[-1] >= self.min_batch:
                    return self._event(LaunchEvent.COMMITTED, batches[-1], state)
                return self._event(LaunchEvent.DIED, batches[-1] if batches else None, state,
                                   launcher.log_tail(handle, self.log_lines))
        if time.time() >= self.deadline:
            return self._event(LaunchEvent.TIMEOUT, batches[-1] if batches else None, "RUNNING")
        return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        fs_root: tuple[Any, str] | None = None
        while True:
            event: dict[str, Any] | None = None
            try:
                if fs_root is None:
                    fs_root = await asyncio.to_thread(self._filesystem)
                event = await asyncio.to_thread(self._poll, *fs_root)
            except (OSError, ValueError) as exc:  # storage, HTTP (URLError) or a garbled status
                self.log.warning("checking %s failed (%s); retrying", self.checkpoint_uri, exc)
                if time.time() >= self.deadline:
                    event = self._event(LaunchEvent.TIMEOUT, None, "UNKNOWN")
            if event is not None:
                self.log.info("%s: %s (batch %s) after %.1f s", self.checkpoint_uri, event["reason"],
                              event["batch"], event["waited_s"])
                yield TriggerEvent(event)
                return
            await asyncio.sleep(max(0.05, min(self.poll_interval, self.deadline - time.time())))
