"""The withdrawal of a stop request is a two-sided handshake: every interleaving of the provider's
withdrawal and the old driver's last look at the request, made deterministic with the driver's pause
point ``driver:stopping`` (between its last look and ``query.stop()``).

The driver is :class:`GracefulStop`'s own code over a fake query (the boundary of the driver: no
Spark), its control files on the local disk; the provider is :func:`withdraw_and_wait` and the
switchover step's ``_settle_old_query`` over the same files. The real driver is proven in
tests/integration/test_graceful_stop.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider import faults
from airflow_ckpt_provider.checkpoint.stop import WithdrawalVerdict, new_request, withdrawal_decision
from airflow_ckpt_provider.records.control import (
    HEARTBEAT,
    STOP_ACK,
    STOP_REQUEST,
    STOP_WITHDRAWAL,
    STOP_WITHDRAWN,
    Heartbeat,
    StopAck,
    StopRequest,
    StopWithdrawal,
    StopWithdrawn,
)
from airflow_ckpt_provider.spark.gate import BatchGate
from airflow_ckpt_provider.spark.graceful_stop import STOPPING_PAUSE, GracefulStop
from airflow_ckpt_provider.storage.stop import ControlFiles, withdraw_and_wait

# -- the pure decision ------------------------------------------------------------------------------

T0 = datetime(2026, 5, 4, 12, 0, tzinfo=timezone.utc)


def beat(state: str = "running", age_s: float = 0.0, interval_s: float = 1.0) -> Heartbeat:
    at = (T0 - timedelta(seconds=age_s)).isoformat(timespec="milliseconds")
    return Heartbeat(query_id="q-old", run_id="old-run", state=state, started_at=at, updated_at=at,
                     interval_s=interval_s)


def an_ack(request_id: str = "req-1") -> StopAck:
    return StopAck(request_id=request_id, query_id="q-old", run_id="old-run", outcome="clean", last_committed_batch=4,
                   last_planned_batch=4, stopped_at=T0.isoformat())


def an_answer(request_id: str = "req-1") -> StopWithdrawn:
    return StopWithdrawn(request_id=request_id, run_id="old-run", query_id="q-old", reason="withdrawn",
                         answered_at=T0.isoformat())


@pytest.mark.parametrize(("ack", "answer", "heartbeat", "now", "verdict"), [
    pytest.param(an_ack(), None, beat(), 0.0, WithdrawalVerdict.ACKNOWLEDGED, id="acknowledged"),
    pytest.param(an_ack(), an_answer(), beat(), 0.0, WithdrawalVerdict.ACKNOWLEDGED, id="an-ack-wins"),
    pytest.param(None, an_answer(), beat(), 0.0, WithdrawalVerdict.CONTINUING, id="answered-withdrawn"),
    pytest.param(an_ack("req-0"), an_answer("req-0"), beat(), 0.0, None, id="answers-to-another-request-wait"),
    pytest.param(None, None, beat("stopped"), 0.0, WithdrawalVerdict.DRIVER_GONE, id="heartbeat-stopped"),
    pytest.param(None, None, beat(age_s=30.0), 0.0, WithdrawalVerdict.DRIVER_GONE, id="heartbeat-stale"),
    pytest.param(None, None, None, 0.0, None, id="no-heartbeat-file-yet-waits"),
    pytest.param(None, None, beat(), 0.0, None, id="live-waits"),
    pytest.param(None, None, beat(interval_s=600), 10.0, WithdrawalVerdict.NO_ANSWER, id="deadline"),
    pytest.param(None, None, None, 10.0, WithdrawalVerdict.NO_ANSWER, id="deadline-without-heartbeat"),
])
def test_the_withdrawal_waits_for_the_driver_answer(ack: StopAck | None, answer: StopWithdrawn | None,
                                                    heartbeat: Heartbeat | None, now: float,
                                                    verdict: WithdrawalVerdict | None) -> None:
    t0 = T0.timestamp()
    assert withdrawal_decision(ack=ack, answer=answer, heartbeat=heartbeat, request_id="req-1", now=t0 + now,
                               deadline=t0 + 10.0) is verdict


def test_only_the_driver_answer_that_it_goes_on_records_it_running() -> None:
    assert [v for v in WithdrawalVerdict if not v.old_stopped] == [WithdrawalVerdict.CONTINUING]


# -- the driver and the provider over the same files --------------------------------------------------


class LocalFiles:
    """The driver's control files (graceful_stop.HadoopFiles' methods GracefulStop uses) on the local
    disk, the batch listings fixed by the test."""

    def __init__(self, root: Path, planned: int = 4, committed: int = 4) -> None:
        self.root = root
        self.planned, self.committed = planned, committed
        (root / "_ckpt").mkdir(parents=True, exist_ok=True)
        self.writes: list[str] = []

    def read(self, rel: str) -> bytes | None:
        path = self.root / rel
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        self.writes.append(rel)

    def last_batch(self, folder: str) -> int:
        return self.planned if folder == "offsets" else self.committed


class FakeQuery:
    """A query idle between batches (a boundary at once) unless ``busy`` (a trigger always active)."""

    id = "q-old"

    def __init__(self, busy: bool = False) -> None:
        self.isActive, self.busy, self.stopped = True, busy, False

    @property
    def status(self) -> dict[str, Any]:
        return {"isTriggerActive": self.busy}

    def stop(self) -> None:
        self.stopped, self.isActive = True, False


class OldDriver:
    """:class:`GracefulStop` of the old query on ``root`` (its own code, a fake query), with a live
    heartbeat that stays live however slow the machine is."""

    def __init__(self, root: Path, *, busy: bool = False) -> None:
        self.files = LocalFiles(root)
        self.query = FakeQuery(busy)
        stop = GracefulStop.__new__(GracefulStop)
        stop.query, stop.files, stop.gate, stop.run_id = self.query, self.files, BatchGate(), "old-run"
        stop.poll_interval, stop.boundary_timeout, stop.trigger_interval, stop.margin = 0.02, None, None, 0.15
        self.stop = stop
        at = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        self.files.write(HEARTBEAT, Heartbeat(query_id="q-old", run_id="old-run", state="running", started_at=at,
                                              updated_at=at, interval_s=600.0).to_json().encode())

    def ask(self, timeout_s: float = 600.0) -> StopRequest:
        request = new_request("test", "switchover", timeout_s)
        self.files.write(STOP_REQUEST, request.to_json().encode())
        return request

    def carry_out(self, request: StopRequest) -> StopAck | None:
        """What ``GracefulStop.run`` does with a request it read: stop at the boundary, then write the ack."""
        ack = self.stop._stop_at_boundary(request)
        if ack is not None:
            self.files.write(STOP_ACK, ack.to_json().encode())
        return ack

    def answer(self, name: str) -> Any:  # noqa: ANN401 - the record read, or None
        cls = {STOP_ACK: StopAck, STOP_WITHDRAWN: StopWithdrawn, STOP_WITHDRAWAL: StopWithdrawal}[name]
        data = self.files.read(name)
        return cls.from_json(data) if data is not None else None


class InThread:
    """Run ``action`` in a thread; :meth:`result` joins it and returns its value or raises its error."""

    def __init__(self, action: Any) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(action,), daemon=True)
        self.thread.start()

    def _run(self, action: Any) -> None:
        try:
            self.value = action()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc

    def result(self) -> Any:  # noqa: ANN401
        self.thread.join(timeout=600)
        assert not self.thread.is_alive(), "the thread did not end"
        if self.error is not None:
            raise self.error
        return self.value


def until(predicate: Any, what: str) -> None:  # noqa: ANN401
    """Wait for an observable condition (a generous bound only against a hang)."""
    deadline = time.monotonic() + 600
    while not predicate():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


@pytest.fixture
def paused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """The pause point ``driver:stopping`` armed: (the file the held driver writes, the file that lets it go).
    A driver still held when the test ends is let go."""
    folder = tmp_path / "pause"
    folder.mkdir()
    monkeypatch.setenv(faults.PAUSE_ENV, STOPPING_PAUSE)
    monkeypatch.setenv(faults.PAUSE_DIR_ENV, str(folder))
    held, go = faults.pause_files(folder, STOPPING_PAUSE)
    yield held, go
    if held.exists():
        go.touch()
        until(lambda: not held.exists(), "the held driver let go")


def control(root: Path) -> ControlFiles:
    import fsspec

    return ControlFiles(fsspec.filesystem("file"), str(root))


def test_a_request_withdrawn_while_the_driver_waits_for_a_boundary_is_answered_and_the_query_goes_on(
        tmp_path: Path) -> None:
    """Withdrawn before the driver's last look: it answers "withdrawn" and keeps running."""
    driver = OldDriver(tmp_path, busy=True)  # no boundary: it keeps looking at the request
    request = driver.ask()
    carrying = InThread(lambda: driver.carry_out(request))
    until(lambda: driver.stop.gate.armed, "the driver waiting for a boundary")
    settled = withdraw_and_wait(control(tmp_path), request.request_id, withdrawn_by="test", timeout_s=600,
                                poll_interval=0.01)
    assert carrying.result() is None and not driver.query.stopped and driver.query.isActive
    assert settled.verdict is WithdrawalVerdict.CONTINUING and not settled.verdict.old_stopped
    assert settled.removed and settled.answer is not None and settled.answer.request_id == request.request_id
    assert settled.answer.reason == "withdrawn" and settled.answer.seen_at, "it had read the request"
    assert driver.answer(STOP_ACK) is None and not driver.stop.gate.armed


def test_a_request_withdrawn_before_the_last_look_at_a_boundary_is_not_carried_out(tmp_path: Path) -> None:
    """At a boundary at once, the driver still looks at the request once more before ``stop()``."""
    driver = OldDriver(tmp_path)
    request = driver.ask()
    control(tmp_path).withdraw(request.request_id, "test")
    assert driver.carry_out(request) is None and not driver.query.stopped
    assert driver.answer(STOP_WITHDRAWN).request_id == request.request_id


def test_a_request_withdrawn_before_the_driver_read_it_is_answered_from_its_main_loop(tmp_path: Path) -> None:
    driver = OldDriver(tmp_path)
    request = driver.ask()
    waiting = InThread(lambda: withdraw_and_wait(control(tmp_path), request.request_id, withdrawn_by="test",
                                                 timeout_s=600, poll_interval=0.01))
    until(lambda: driver.answer(STOP_WITHDRAWAL) is not None and driver.files.read(STOP_REQUEST) is None,
          "the withdrawal written")
    driver.stop._answer_unseen_withdrawal()  # one round of GracefulStop.run's loop: no request there
    settled = waiting.result()
    assert settled.verdict is WithdrawalVerdict.CONTINUING and settled.answer.seen_at == ""
    written = len(driver.files.writes)
    driver.stop._answer_unseen_withdrawal()
    assert len(driver.files.writes) == written, "answered once"


def test_a_request_withdrawn_after_the_last_look_is_acknowledged_late_and_the_provider_waits_for_it(
        tmp_path: Path, paused: tuple[Path, Path]) -> None:
    """The driver passed its last look and is held before ``stop()``; the provider withdraws meanwhile
    and must wait: the driver stops and acknowledges, and the verdict is "stopped"."""
    held, go = paused
    driver = OldDriver(tmp_path)
    request = driver.ask()
    carrying = InThread(lambda: driver.carry_out(request))
    until(held.exists, "the driver held between its last look and stop()")
    waiting = InThread(lambda: withdraw_and_wait(control(tmp_path), request.request_id, withdrawn_by="test",
                                                 timeout_s=600, poll_interval=0.01))
    until(lambda: driver.files.read(STOP_REQUEST) is None, "the request withdrawn")
    assert waiting.thread.is_alive(), "no answer yet: the provider waits"
    go.touch()
    ack = carrying.result()
    settled = waiting.result()
    assert ack is not None and driver.query.stopped and ack.request_id == request.request_id
    assert settled.verdict is WithdrawalVerdict.ACKNOWLEDGED and settled.verdict.old_stopped
    assert settled.ack == ack and driver.answer(STOP_WITHDRAWN) is None


def test_no_answer_within_the_deadline_is_taken_for_stopped(tmp_path: Path, paused: tuple[Path, Path]) -> None:
    """The driver stays held (its heartbeat live): no answer by the deadline. The provider must not
    claim it runs: the verdict is "no answer", recorded as stopped (the restart refuses a live heartbeat)."""
    held, _ = paused
    driver = OldDriver(tmp_path)
    request = driver.ask()
    carrying = InThread(lambda: driver.carry_out(request))
    until(held.exists, "the driver held between its last look and stop()")
    settled = withdraw_and_wait(control(tmp_path), request.request_id, withdrawn_by="test", timeout_s=0.3,
                                poll_interval=0.01)
    assert settled.verdict is WithdrawalVerdict.NO_ANSWER and settled.verdict.old_stopped
    assert settled.heartbeat is not None and settled.heartbeat.state == "running"
    assert held.exists() and carrying.thread.is_alive(), "the driver is still held: nothing answered"


def test_an_acknowledged_request_is_not_withdrawn(tmp_path: Path) -> None:
    driver = OldDriver(tmp_path)
    request = driver.ask()
    assert driver.carry_out(request) is not None
    settled = withdraw_and_wait(control(tmp_path), request.request_id, withdrawn_by="test", timeout_s=600)
    assert settled.verdict is WithdrawalVerdict.ACKNOWLEDGED and not settled.removed
    assert driver.answer(STOP_WITHDRAWAL) is None and driver.files.read(STOP_REQUEST) is not None


def test_an_answer_that_cannot_be_written_is_retried_and_the_query_goes_on(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    driver = OldDriver(tmp_path, busy=True)
    request = driver.ask()
    control(tmp_path).withdraw(request.request_id, "test")
    written = driver.files.write
    failures: list[str] = []

    def failing(rel: str, data: bytes) -> None:
        if rel == STOP_WITHDRAWN:
            failures.append(rel)
            raise OSError("the store refuses writes")
        written(rel, data)

    driver.files.write = failing  # type: ignore[method-assign]
    assert driver.carry_out(request) is None and driver.query.isActive, "the query runs on"
    assert len(failures) == 3 and "could not answer the withdrawn stop request" in caplog.text
    assert driver.answer(STOP_WITHDRAWN) is None

    # the main loop writes it again on every poll, once: still refused, then the store takes it
    driver.stop._retry_unanswered()
    driver.stop._answer_unseen_withdrawal()  # the same withdrawal, seen in the same poll: not a second retry
    assert len(failures) == 4 and driver.answer(STOP_WITHDRAWN) is None
    driver.files.write = written  # type: ignore[method-assign]
    driver.stop._retry_unanswered()
    answer = driver.answer(STOP_WITHDRAWN)
    assert answer is not None and (answer.request_id, answer.run_id) == (request.request_id, "old-run")
    settled = withdraw_and_wait(control(tmp_path), request.request_id, withdrawn_by="test", timeout_s=600)
    assert settled.verdict is WithdrawalVerdict.CONTINUING and not settled.verdict.old_stopped
    driver.stop._retry_unanswered()  # answered: nothing more to write
    assert driver.stop._unanswered is None
