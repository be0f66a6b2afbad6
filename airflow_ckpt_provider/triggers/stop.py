"""Deferrable wait for a graceful stop's acknowledgement (runs in the triggerer)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ckpt_provider.checkpoint.errors import InvalidTriggerEvent
from airflow_ckpt_provider.checkpoint.stop import DEFAULT_MISSED_BEATS, StopReason, ack_answers, wait_decision
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, one_of
from airflow_ckpt_provider.records.control import Heartbeat, StopAck, parse_time
from airflow_ckpt_provider.storage.stop import ControlFiles
from airflow_ckpt_provider.triggers.checks import bounded_check

__all__ = ["EVENT_KEYS", "GracefulStopTrigger", "StopReason", "StopTriggerEvent"]

#: Seconds between progress lines while waiting for the acknowledgement.
PROGRESS_EVERY_S = 15.0
#: Keys of every event this trigger fires; the operator checks them on resume.
EVENT_KEYS = frozenset({"format", "reason", "request_id", "run_id", "ack", "heartbeat", "requested_at", "waited_s"})


@dataclass(frozen=True)
class StopTriggerEvent:
    """The one event :class:`GracefulStopTrigger` fires: why waiting ended, the request and the
    run asked, the acknowledgement (when acknowledged), the last heartbeat seen, when the stop
    was asked (epoch seconds) and how long it waited."""

    reason: StopReason
    request_id: str
    run_id: str
    ack: StopAck | None
    heartbeat: Heartbeat | None
    requested_at: float
    waited_s: float

    def to_dict(self) -> dict[str, Any]:
        data = {
            "reason": self.reason.value, "request_id": self.request_id, "run_id": self.run_id,
            "ack": self.ack.to_json() if self.ack is not None else None,
            "heartbeat": self.heartbeat.to_json() if self.heartbeat is not None else None,
            "requested_at": self.requested_at, "waited_s": self.waited_s,
        }
        return _EVENT.encode(data)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | None) -> StopTriggerEvent:
        """Decode a trigger event (dict or JSON) through its codec (format 1; an event of an
        earlier release, without a format number, still reads); :class:`InvalidTriggerEvent`
        naming what is wrong, also for an acknowledgement without its ack."""
        if data is None:
            raise _EVENT.refuse("no trigger event (None)", "the graceful stop trigger's event")
        event = cls(**_EVENT.decode(data))
        if event.reason is StopReason.ACKNOWLEDGED and event.ack is None:
            raise _EVENT.refuse(f"an acknowledged event of request {event.request_id!r} without its ack",
                                "the ack that answered the request")
        return event


_EVENT = Codec("graceful stop trigger event", InvalidTriggerEvent, {
    "reason": Field((str,), decode=one_of(*(r.value for r in StopReason), decode=StopReason)),
    "request_id": Field((str,)),
    "run_id": Field((str,)),
    "ack": Field((str,), nullable=True, decode=lambda text: StopAck.from_json(text) if text else None),
    "heartbeat": Field((str,), nullable=True, decode=lambda text: Heartbeat.from_json(text) if text else None),
    "requested_at": Field((float,), decode=float),
    "waited_s": Field((float,), decode=float),
}, versions=(UNVERSIONED,))


class GracefulStopTrigger(BaseTrigger):
    """Poll ``_ckpt/stop-ack.json`` (and the heartbeat) until the query answers or time runs out.

    Fires exactly one event ``{"reason": StopReason value, "request_id", "run_id", "ack": StopAck
    JSON or None, "heartbeat": Heartbeat JSON or None, "requested_at" (epoch s), "waited_s"}``:
    ``acknowledged`` when an ack answers ``request_id`` (or comes from ``run_id``);
    ``not_running`` when the heartbeat of ``run_id`` stopped or went stale without an ack;
    ``timeout`` at ``deadline`` (epoch seconds, so a restarted triggerer keeps it).
    Storage errors are retried until the deadline; blocking I/O runs in a thread.
    """

    def __init__(
        self,
        checkpoint_uri: str,
        request_id: str,
        deadline: float,
        requested_at: float,
        run_id: str = "",
        poll_interval: float = 2.0,
        storage_conn_id: str | None = None,
        missed_beats: float = DEFAULT_MISSED_BEATS,
    ) -> None:
        super().__init__()
        self.checkpoint_uri = checkpoint_uri
        self.request_id = request_id
        self.deadline = float(deadline)
        self.requested_at = float(requested_at)
        self.run_id = run_id
        self.poll_interval = float(poll_interval)
        self.storage_conn_id = storage_conn_id
        self.missed_beats = float(missed_beats)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "checkpoint_uri": self.checkpoint_uri,
                "request_id": self.request_id,
                "deadline": self.deadline,
                "requested_at": self.requested_at,
                "run_id": self.run_id,
                "poll_interval": self.poll_interval,
                "storage_conn_id": self.storage_conn_id,
                "missed_beats": self.missed_beats,
            },
        )

    def _control(self) -> ControlFiles:
        from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook

        fs, path = CheckpointStorageHook(storage_conn_id=self.storage_conn_id).filesystem(self.checkpoint_uri)
        return ControlFiles(fs, path, uri=self.checkpoint_uri)

    def _poll(self, control: ControlFiles) -> dict[str, Any] | None:
        ack, heartbeat = control.ack(), control.heartbeat()
        now = time.time()
        reason = wait_decision(ack=ack, heartbeat=heartbeat, request_id=self.request_id, run_id=self.run_id,
                               now=now, deadline=self.deadline, missed_beats=self.missed_beats)
        if reason is StopReason.NOT_RUNNING:  # the ack is written just before the stopped beat
            ack = control.ack()
            if ack_answers(ack, self.request_id, self.run_id):
                reason = StopReason.ACKNOWLEDGED
        if reason is None:
            return None
        return self._event(reason, ack if reason is StopReason.ACKNOWLEDGED else None, heartbeat, now)

    def check_now(self) -> dict[str, Any] | None:
        """One look now, as the trigger's first poll: the event it would fire when the query already
        answered (or the deadline passed), else None (a storage error too: the trigger retries it)."""
        try:
            return self._poll(self._control())
        except OSError as exc:
            self.log.info("checking %s before deferring failed (%s); the trigger retries", self.checkpoint_uri, exc)
            return None

    def _event(self, reason: StopReason, ack: StopAck | None, heartbeat: Heartbeat | None,
               now: float) -> dict[str, Any]:
        return StopTriggerEvent(reason, self.request_id, self.run_id, ack, heartbeat, self.requested_at,
                                round(now - self.requested_at, 3)).to_dict()

    def _progress(self, control: ControlFiles) -> None:
        """One line on the wait: how long, how long at most, and where the query is."""
        now = time.time()
        heartbeat, state = control.heartbeat(), control.batch_state()
        beat = (f"heartbeat {heartbeat.state}, {now - parse_time(heartbeat.updated_at).timestamp():.0f} s old"
                if heartbeat is not None else "no heartbeat")
        self.log.info("waiting for query on %s to acknowledge stop request %s: %.0f s of at most %.0f s; last "
                      "committed batch %s, last planned %s; %s", self.checkpoint_uri, self.request_id,
                      now - self.requested_at, self.deadline - self.requested_at, state.last_committed_batch,
                      state.last_planned_batch, beat)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        control: ControlFiles | None = None
        next_progress = time.time() + PROGRESS_EVERY_S
        while True:
            try:
                if control is None:
                    control = await bounded_check(self._control, deadline=self.deadline)
                event = await bounded_check(self._poll, control, deadline=self.deadline)
            except OSError as exc:
                self.log.warning("reading the control files of %s failed (%s); retrying", self.checkpoint_uri, exc)
                event = None
                if time.time() >= self.deadline:
                    event = self._event(StopReason.TIMEOUT, None, None, time.time())
            if event is not None:
                self.log.info("stop request %s: %s after %.1f s", self.request_id, event["reason"], event["waited_s"])
                yield TriggerEvent(event)
                return
            if control is not None and time.time() >= next_progress:
                next_progress = time.time() + PROGRESS_EVERY_S
                try:
                    await bounded_check(self._progress, control, deadline=self.deadline)
                except OSError as exc:
                    self.log.warning("reading the progress of %s failed (%s)", self.checkpoint_uri, exc)
            await asyncio.sleep(max(0.0, min(self.poll_interval, self.deadline - time.time())) or 0.05)
