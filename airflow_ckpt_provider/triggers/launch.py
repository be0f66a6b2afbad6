"""Deferrable wait for a launched job's first committed batch (runs in the triggerer).

The triggerer may run on another host, in another container or PID namespace than the worker
that launched the job: the job's liveness is judged only from what works from anywhere
(:func:`airflow_ckpt_provider.jobs.observe`: the job's records in its checkpoint and what its
kind can ask remotely), never from a process id seen from the wrong place.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_ckpt_provider.checkpoint.errors import CheckpointError, InvalidTriggerEvent
from airflow_ckpt_provider.checkpoint.handover import handover_from_snapshot
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.verify import unread_partitions
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.jobs import DriverState, observe
from airflow_ckpt_provider.jobs.base import tail_text
from airflow_ckpt_provider.jobs.liveness import started_after as _after
from airflow_ckpt_provider.records.codec import FORMAT_KEY, UNVERSIONED, Codec, Field, one_of
from airflow_ckpt_provider.records.control import SWITCHOVER_REFUSAL, HeartbeatState
from airflow_ckpt_provider.spark.switchover import SwitchoverRefusal
from airflow_ckpt_provider.storage.listing import list_batch_ids
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.stop import ControlFiles
from airflow_ckpt_provider.triggers.checks import bounded_check

__all__ = ["EVENT_KEYS", "LaunchEvent", "LaunchTrigger", "LaunchTriggerEvent", "LaunchWait", "committed_batches"]


class LaunchEvent(StrEnum):
    """Why the trigger fired; shared with the operators that resume on it."""

    COMMITTED = "committed"  # commits/N with N >= min_batch exists
    CAUGHT_UP = "caught_up"  # no such commit, but the query runs and has read everything the broker has (idle topic)
    STANDBY = "standby"  # waiting for a standby: its standby heartbeat is there (the launch's own)
    NOT_STANDBY = "not_standby"  # waiting for a standby: the job started a query instead of waiting
    REFUSED = "refused"  # a standby released for a switchover refused it (it did not start; evidence says why)
    DIED = "died"  # the job ended before that
    TIMEOUT = "timeout"  # neither happened before the deadline


class LaunchWait(StrEnum):
    """What a :class:`LaunchTrigger` waits for."""

    COMMIT = "commit"  # a committed batch >= min_batch
    STANDBY = "standby"  # the launch's standby heartbeat (a driver waiting in await_handover)


def committed_batches(fs: Any, root: str) -> list[int]:  # noqa: ANN401 - an fsspec filesystem
    """Sorted batch ids in ``<root>/commits`` (none when the folder does not exist yet)."""
    return list_batch_ids(fs, f"{root.rstrip('/')}/commits")


@dataclass(frozen=True)
class LaunchTriggerEvent:
    """The one event :class:`LaunchTrigger` fires: why, the newest committed batch (None if
    none), the job's state in :class:`DriverState` words, the evidence for it in words, the
    driver log tail (when it died), the handle (dict, or None when only the checkpoint was
    watched) and the seconds waited."""

    reason: LaunchEvent
    batch: int | None
    state: DriverState
    log_tail: str
    handle: Mapping[str, Any] | None
    waited_s: float
    evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(reason=self.reason.value, state=self.state.value,
                    handle=dict(self.handle) if self.handle is not None else None)
        return _EVENT.encode(data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any] | None) -> LaunchTriggerEvent:
        """Decode a trigger event (dict or JSON) through its codec (format 1; an event of an
        earlier release, without a format number or ``evidence``, still reads; a state this
        release does not know reads as unknown); :class:`InvalidTriggerEvent` naming what is wrong."""
        if data is None:
            raise _EVENT.refuse("no trigger event (None)", "the launch trigger's event")
        values = _EVENT.decode(data)
        return cls(**{**values, "log_tail": values["log_tail"] or "", "evidence": values["evidence"] or ""})


def _state(value: str) -> DriverState:
    state = value.lower()
    return DriverState(state) if state in DriverState._value2member_map_ else DriverState.UNKNOWN


_EVENT = Codec("launch trigger event", InvalidTriggerEvent, {
    "reason": Field((str,), decode=one_of(*(e.value for e in LaunchEvent), decode=LaunchEvent)),
    "batch": Field((int,), nullable=True),
    "state": Field((str,), decode=_state),
    "log_tail": Field((str,), nullable=True, decode=str),
    "handle": Field((dict,), nullable=True, decode=lambda handle: dict(handle) or None),
    "waited_s": Field((float,), decode=float),
    "evidence": Field((str,), required=False, nullable=True),
}, versions=(UNVERSIONED,))
#: Keys of every event this trigger fires; the operators check them on resume.
EVENT_KEYS = frozenset({FORMAT_KEY, *_EVENT.fields})
#: Keys an event from an earlier version of this trigger (still deferred during an upgrade) has.
REQUIRED_KEYS = EVENT_KEYS - {"evidence", FORMAT_KEY}


class LaunchTrigger(BaseTrigger):
    """Poll the checkpoint's ``commits/`` (and the job's liveness) until batch ``min_batch`` or a
    later one is committed, the job is known to have ended, or ``deadline`` (epoch seconds)
    passes. Fires one :class:`LaunchTriggerEvent` (as a dict).

    With ``wait_for="standby"`` it waits instead for the launch's standby heartbeat (a heartbeat
    in state standby that started after the launch): ``standby``; a commit or a running query's
    heartbeat on the checkpoint is ``not_standby`` (the job does not wait for its handover).

    With ``kafka_conn_id``, a commit wait also ends on an IDLE topic: ``caught_up`` when the job's
    query runs (its running heartbeat, started after the launch), no batch is in flight, and its
    position — the last committed batch's end, else the start Spark recorded in ``sources/`` — is
    the broker's log end on every partition: there is nothing to commit until records arrive.

    Without a ``handle`` only the checkpoint is watched. A job whose liveness cannot be told from
    where the triggerer runs is waited for until the deadline (see :mod:`airflow_ckpt_provider.jobs.
    liveness`). Storage and status errors are retried until the deadline; blocking I/O runs in a
    thread.
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
        wait_for: str = LaunchWait.COMMIT,
        kafka_conn_id: str | None = None,
        switchover_release: str = "",
    ) -> None:
        super().__init__()
        self.switchover_release = switchover_release
        self.kafka_conn_id = kafka_conn_id or None
        self.wait_for = LaunchWait(wait_for)
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
                # only when not the default: a commit wait serializes as it did before standbys
                **({"wait_for": self.wait_for.value} if self.wait_for is not LaunchWait.COMMIT else {}),
                **({"kafka_conn_id": self.kafka_conn_id} if self.kafka_conn_id else {}),
                **({"switchover_release": self.switchover_release} if self.switchover_release else {}),
            },
        )

    # blocking helpers, run in a thread

    def _control(self) -> ControlFiles:
        from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook

        fs, path = CheckpointStorageHook(storage_conn_id=self.storage_conn_id).filesystem(self.checkpoint_uri)
        return ControlFiles(fs, path, uri=self.checkpoint_uri)

    def _event(self, reason: LaunchEvent, batch: int | None, state: DriverState, log_tail: str = "",
               evidence: str = "") -> LaunchTriggerEvent:
        return LaunchTriggerEvent(reason=reason, batch=batch, state=state, log_tail=log_tail, handle=self.handle,
                                  waited_s=round(time.time() - self.started_at, 3), evidence=evidence)

    def _standby(self, control: ControlFiles, batches: list[int]) -> LaunchTriggerEvent | None:
        """The standby wait's answer, or None to keep polling."""
        if batches:
            return self._event(LaunchEvent.NOT_STANDBY, batches[-1], DriverState.RUNNING,
                               evidence=f"commits/{batches[-1]} appeared: the job started its query without "
                                        "waiting for the handover")
        beat = control.heartbeat()
        started = self.handle.get("started_at", "") if self.handle else ""
        if beat is None or not beat.is_alive() or (started and not _after(beat.started_at, started)):
            return None
        if beat.is_standby:
            return self._event(LaunchEvent.STANDBY, None, DriverState.RUNNING,
                               evidence=f"standby heartbeat of run {beat.run_id} (pid {beat.pid} on {beat.host})")
        return self._event(LaunchEvent.NOT_STANDBY, None, DriverState.RUNNING,
                           evidence=f"a running query's heartbeat (query {beat.query_id}): the job started its query "
                                    "without waiting for the handover")

    def _kafka_hook(self) -> Any:  # noqa: ANN401 - KafkaBrokerHook, imported where Airflow runs
        """One hook (its connection looked up, its client kept) for every poll of this trigger."""
        if getattr(self, "_kafka", None) is None:
            from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook

            self._kafka = KafkaBrokerHook(kafka_conn_id=str(self.kafka_conn_id))
        return self._kafka

    def _caught_up(self, control: ControlFiles) -> LaunchTriggerEvent | None:
        """The idle-topic answer of a commit wait (see the class docstring), or None."""
        beat = control.heartbeat()
        started = self.handle.get("started_at", "") if self.handle else ""
        if beat is None or not beat.is_alive() or beat.state != HeartbeatState.RUNNING or (
                started and not _after(beat.started_at, started)):
            return None
        reader = CheckpointReader(self.checkpoint_uri, fs=control.fs)
        try:
            snapshot = reader.snapshot(include_initial=True)
            if snapshot.in_flight_batch is not None:
                return None
            position = handover_from_snapshot(snapshot).kafka_offsets()
        except CheckpointError:  # nothing recorded yet (the query has not planned), or not Kafka
            return None
        broker = self._kafka_hook().broker_view(position.topics)
        if unread_partitions(position, broker):
            return None
        where = f"batch {snapshot.last_committed_batch}" if snapshot.last_committed_batch is not None \
            else "the start recorded in sources/"
        return self._event(LaunchEvent.CAUGHT_UP, snapshot.last_committed_batch, DriverState.RUNNING,
                           evidence=f"query {beat.query_id} runs (run {beat.run_id}) and has read everything the "
                                    f"broker has: its position ({where}) {position.to_json()} is the log end")

    def _refused(self, control: ControlFiles) -> LaunchTriggerEvent | None:
        """The standby's refusal of this trigger's switchover release, or None."""
        refusal = control.record(SWITCHOVER_REFUSAL, SwitchoverRefusal)
        if refusal is None or refusal.release_id != self.switchover_release:
            return None
        return self._event(LaunchEvent.REFUSED, None, DriverState.RUNNING,
                           evidence=f"{refusal.reason}: found {refusal.found}; expected {refusal.expected}")

    def _poll(self, control: ControlFiles) -> LaunchTriggerEvent | None:
        batches = committed_batches(control.fs, control.root)
        if self.switchover_release and not batches and (event := self._refused(control)) is not None:
            return event
        if self.wait_for is LaunchWait.STANDBY:
            if (event := self._standby(control, batches)) is not None:
                return event
        elif batches and batches[-1] >= self.min_batch:
            return self._event(LaunchEvent.COMMITTED, batches[-1], DriverState.RUNNING)
        elif self.kafka_conn_id and (event := self._caught_up(control)) is not None:
            return event
        state, evidence = DriverState.UNKNOWN, "no launch handle: only the checkpoint is watched"
        if self.handle is not None:
            verdict = observe(LaunchHandle.from_json(self.handle), control)
            state, evidence = verdict.state, verdict.evidence
            if verdict.alive is False:
                batches = committed_batches(control.fs, control.root)  # it may have committed just before it ended
                if batches and batches[-1] >= self.min_batch and self.wait_for is LaunchWait.COMMIT:
                    return self._event(LaunchEvent.COMMITTED, batches[-1], state, evidence=evidence)
                return self._event(LaunchEvent.DIED, batches[-1] if batches else None, state,
                                   tail_text(verdict.log_tail, self.log_lines), evidence)
        if time.time() >= self.deadline:
            return self._event(LaunchEvent.TIMEOUT, batches[-1] if batches else None, state, evidence=evidence)
        return None

    def check_now(self) -> dict[str, Any] | None:
        """One look now, as the trigger's first poll: the event it would fire (its JSON dict) when
        the wait is already over, else None (a storage error too: the deferred trigger retries it)."""
        try:
            event = self._poll(self._control())
        except (OSError, ValueError) as exc:
            self.log.info("checking %s before deferring failed (%s); the trigger retries", self.checkpoint_uri, exc)
            return None
        return event.to_dict() if event is not None else None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        control: ControlFiles | None = None
        while True:
            event: LaunchTriggerEvent | None = None
            try:
                if control is None:
                    control = await bounded_check(self._control, deadline=self.deadline)
                event = await bounded_check(self._poll, control, deadline=self.deadline)
            except (OSError, ValueError) as exc:  # storage, HTTP (URLError) or a garbled status
                self.log.warning("checking %s failed (%s); retrying", self.checkpoint_uri, exc)
                if time.time() >= self.deadline:
                    event = self._event(LaunchEvent.TIMEOUT, None, DriverState.UNKNOWN, evidence=str(exc))
            if event is not None:
                self.log.info("%s: %s (batch %s) after %.1f s; job %s (%s)", self.checkpoint_uri, event.reason.value,
                              event.batch, event.waited_s, event.state.value, event.evidence or "no evidence")
                yield TriggerEvent(event.to_dict())
                return
            await asyncio.sleep(max(0.05, min(self.poll_interval, self.deadline - time.time())))
