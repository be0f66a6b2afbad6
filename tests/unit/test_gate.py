"""The stop gate of foreach_batch, and GracefulStop's decision while it waits (no Spark: the query and
the checkpoint's control files are fakes at the driver's boundary; the real driver is proven in
tests/integration/test_graceful_stop.py on a busy default-trigger stream)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from airflow_ckpt_provider.records.control import STOP_REQUEST, STOP_WITHDRAWN, StopRequest, StopWithdrawn
from airflow_ckpt_provider.spark.gate import HELD_MARKER, BatchGate, BatchHeld, foreach_batch, gate_for
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop


def test_an_armed_gate_holds_the_next_batch_before_the_function_runs() -> None:
    written: list[int] = []
    wrapped = foreach_batch(lambda batch, batch_id: written.append(batch_id), "/cp/gate-a/")
    gate = gate_for("/cp/gate-a")
    wrapped(None, 0)
    assert written == [0] and gate.last_delivered == 0 and gate.used
    gate.arm("req-1")
    with pytest.raises(BatchHeld) as held:
        wrapped(None, 1)
    assert written == [0] and gate.held_batch == 1 and gate.last_delivered == 0
    assert HELD_MARKER in str(held.value) and "req-1" in str(held.value)
    gate.disarm()
    wrapped(None, 1)
    assert written == [0, 1]


def test_each_checkpoint_has_its_own_gate() -> None:
    assert gate_for("/cp/x") is gate_for("/cp/x/") is not gate_for("/cp/y")


class FakeQuery:
    """A query whose trigger is always active (batches back to back) unless ``idle``."""

    id = "q-1"

    def __init__(self, idle: bool = False) -> None:
        self.isActive = True
        self.idle = idle
        self.stopped = False

    @property
    def status(self) -> dict[str, Any]:
        return {"isTriggerActive": not self.idle}

    def stop(self) -> None:
        self.stopped, self.isActive = True, False


class FakeFiles:
    def __init__(self, request: StopRequest | None, planned: int, committed: int) -> None:
        self.request, self.planned, self.committed = request, planned, committed
        self.written: dict[str, bytes] = {}

    def read(self, rel: str) -> bytes | None:
        assert rel == STOP_REQUEST
        return self.request.to_json().encode() if self.request is not None else None

    def write(self, rel: str, data: bytes) -> None:
        self.written[rel] = data

    def last_batch(self, folder: str) -> int:
        return self.planned if folder == "offsets" else self.committed


def driver(query: FakeQuery, files: FakeFiles, gate: BatchGate) -> GracefulStop:
    stop = GracefulStop.__new__(GracefulStop)
    stop.query, stop.files, stop.gate, stop.run_id = query, files, gate, "run-1"
    stop.poll_interval, stop.boundary_timeout, stop.trigger_interval, stop.margin = 0.05, None, None, 0.15
    return stop


def request(expires_in: float | None = 600.0) -> StopRequest:
    now = datetime.now(timezone.utc)
    expires = (now + timedelta(seconds=expires_in)).isoformat() if expires_in is not None else ""
    return StopRequest(request_id="req-1", requested_at=now.isoformat(), expires_at=expires)


def test_a_busy_query_is_held_at_the_gate_and_acknowledged_held() -> None:
    query, gate, asked = FakeQuery(), BatchGate(), request()
    files = FakeFiles(asked, planned=6, committed=5)

    def next_batch_reaches_the_sink() -> None:
        while not gate.armed:
            pass
        with pytest.raises(BatchHeld):
            gate.enter(6)

    sink = threading.Thread(target=next_batch_reaches_the_sink)
    sink.start()
    ack = driver(query, files, gate)._stop_at_boundary(asked)
    sink.join()
    assert ack is not None and ack.outcome == "held" and query.stopped
    assert (ack.last_committed_batch, ack.last_planned_batch) == (5, 6)
    assert not gate.armed, "a query restarted in this process on the same checkpoint is not held"


def test_a_batch_boundary_still_stops_clean() -> None:
    query, asked = FakeQuery(idle=True), request()
    ack = driver(query, FakeFiles(asked, planned=5, committed=5), BatchGate())._stop_at_boundary(asked)
    assert ack is not None and ack.outcome == "clean" and query.stopped


def test_a_cut_batch_without_the_gate_is_interrupted() -> None:
    query, asked = FakeQuery(), request()
    stop = driver(query, FakeFiles(asked, planned=6, committed=5), BatchGate())
    stop.boundary_timeout = 0.2
    ack = stop._stop_at_boundary(asked)
    assert ack is not None and ack.outcome == "interrupted"


@pytest.mark.parametrize("now_there", ["withdrawn", "replaced", "expired"])
def test_a_request_withdrawn_replaced_or_expired_while_waiting_is_not_carried_out(now_there: str) -> None:
    query, gate, asked = FakeQuery(), BatchGate(), request()
    later = {"withdrawn": None, "replaced": StopRequest(request_id="req-2", requested_at=asked.requested_at),
             "expired": request(expires_in=-1.0)}[now_there]
    files = FakeFiles(later, planned=6, committed=5)
    assert driver(query, files, gate)._stop_at_boundary(asked) is None
    assert not query.stopped and query.isActive and not gate.armed, "the query keeps running, the gate is open"
    answer = StopWithdrawn.from_json(files.written[STOP_WITHDRAWN])
    assert (answer.request_id, answer.reason, answer.run_id) == ("req-1", now_there, "run-1") and answer.seen_at
