"""GracefulStopTrigger and GracefulStopOperator on control files written by the test.

The trigger polls real files (a local tmp dir or memory://); the operator's escalation is
faked at the hook boundary (``SparkLauncherHook.kill``) only.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import fsspec
import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointNotQuiet,
    QueryNotRunning,
    RunningWithoutGracefulStop,
    StopTimeout,
)
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.operators.stop import DEFER_GRACE_S, GracefulStopOperator
from airflow_ckpt_provider.records.control import HEARTBEAT, STOP_ACK, Heartbeat, ProcessScope, StopAck, StopRequest
from airflow_ckpt_provider.storage.stop import ControlFiles
from airflow_ckpt_provider.triggers.stop import EVENT_KEYS, GracefulStopTrigger, StopReason
from tests.unit.conftest import write_checkpoint

RUN = "run-1"


def iso(seconds_ago: float = 0.0) -> str:
    return (datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)).isoformat(timespec="milliseconds")


def heartbeat(state: str = "running", age: float = 0.0, run_id: str = RUN, interval: float = 1.0) -> Heartbeat:
    return Heartbeat(query_id="q-1", run_id=run_id, state=state, started_at=iso(60), updated_at=iso(age),
                     interval_s=interval, pid=4242)


def ack(request_id: str, run_id: str = RUN, outcome: str = "clean", batch: int = 2) -> StopAck:
    return StopAck(request_id=request_id, query_id="q-1", run_id=run_id, outcome=outcome,
                   last_committed_batch=batch, last_planned_batch=batch, stopped_at=iso())


def put(control: ControlFiles, rel: str, text: str) -> None:
    path = f"{control.root}/{rel}"
    control.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    control.fs.pipe_file(path, text.encode())


@pytest.fixture(params=["local", "memory"])
def control(request: pytest.FixtureRequest, tmp_path: Path) -> ControlFiles:
    uri = str(tmp_path / "ck") if request.param == "local" else f"memory://stop-{uuid.uuid4().hex}/ck"
    write_checkpoint(uri, batches=range(3))
    fs, root = fsspec.core.url_to_fs(uri)
    return ControlFiles(fs, root, uri=uri)


def trigger_for(control: ControlFiles, request_id: str = "req-1", timeout: float = 30.0,
                run_id: str = RUN) -> GracefulStopTrigger:
    now = time.time()
    return GracefulStopTrigger(checkpoint_uri=control.uri, request_id=request_id, deadline=now + timeout,
                               requested_at=now, run_id=run_id, poll_interval=0.05)


def first_event(trigger: GracefulStopTrigger, within: float = 10.0) -> dict[str, Any]:
    async def collect() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(asyncio.wait_for(collect(), within))


# -- trigger --------------------------------------------------------------------------------------


def test_serialize_lists_every_argument_and_round_trips() -> None:
    trigger = GracefulStopTrigger(checkpoint_uri="s3://b/cp", request_id="r", deadline=123.5, requested_at=100.0,
                                  run_id="x", poll_interval=3.0, storage_conn_id="aws", missed_beats=4.0)
    path, kwargs = trigger.serialize()
    assert path == "airflow_ckpt_provider.triggers.stop.GracefulStopTrigger"
    import inspect

    params = set(inspect.signature(GracefulStopTrigger.__init__).parameters) - {"self"}
    assert set(kwargs) == params
    again = GracefulStopTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)


def test_acknowledged_event_carries_the_ack(control: ControlFiles) -> None:
    put(control, HEARTBEAT, heartbeat("stopped").to_json())
    answer = ack("req-1")
    put(control, STOP_ACK, answer.to_json())
    event = first_event(trigger_for(control))
    assert set(event) == EVENT_KEYS
    assert event["reason"] == StopReason.ACKNOWLEDGED.value
    assert StopAck.from_json(event["ack"]) == answer


def test_ack_arriving_later_is_seen(control: ControlFiles) -> None:
    put(control, HEARTBEAT, heartbeat().to_json())
    trigger = trigger_for(control)

    async def scenario() -> dict[str, Any]:
        async def answer() -> None:
            await asyncio.sleep(0.3)
            put(control, STOP_ACK, ack("req-1").to_json())

        task = asyncio.create_task(answer())
        async for event in trigger.run():
            await task
            return event.payload
        raise AssertionError("no event")

    event = asyncio.run(asyncio.wait_for(scenario(), 10))
    assert event["reason"] == "acknowledged" and event["waited_s"] >= 0.25


def test_ack_of_the_same_run_answers_a_replaced_request(control: ControlFiles) -> None:
    put(control, STOP_ACK, ack("someone-elses-request").to_json())
    assert first_event(trigger_for(control, request_id="mine"))["reason"] == "acknowledged"


def test_stale_ack_of_an_earlier_run_does_not_answer(control: ControlFiles) -> None:
    put(control, HEARTBEAT, heartbeat().to_json())
    put(control, STOP_ACK, ack("old-request", run_id="old-run").to_json())
    event = first_event(trigger_for(control, request_id="mine", timeout=0.3))
    assert event["reason"] == "timeout" and event["ack"] is None


def test_timeout_when_the_driver_never_answers(control: ControlFiles) -> None:
    put(control, HEARTBEAT, heartbeat().to_json())
    started = time.monotonic()
    event = first_event(trigger_for(control, timeout=0.4))
    assert event["reason"] == "timeout"
    assert 0.3 <= time.monotonic() - started < 5


def test_timeout_without_heartbeat_when_none_was_seen(control: ControlFiles) -> None:
    event = first_event(trigger_for(control, run_id="", timeout=0.3))
    assert event["reason"] == "timeout" and event["heartbeat"] is None


@pytest.mark.parametrize("beat", [heartbeat("stopped"), heartbeat(age=30.0), heartbeat(run_id="other")],
                         ids=["stopped", "stale", "other-run"])
def test_not_running_when_the_heartbeat_ends_without_ack(control: ControlFiles, beat: Heartbeat) -> None:
    put(control, HEARTBEAT, beat.to_json())
    event = first_event(trigger_for(control))
    assert event["reason"] == "not_running" and event["ack"] is None
    assert Heartbeat.from_json(event["heartbeat"]) == beat


# -- operator -------------------------------------------------------------------------------------


def operator(control: ControlFiles, **kwargs: Any) -> GracefulStopOperator:
    kwargs.setdefault("quiet_period", 0.2)
    kwargs.setdefault("stop_timeout", 30)
    return GracefulStopOperator(task_id="stop", checkpoint_uri=control.uri, poll_interval=0.05, **kwargs)


def local_handle(control: ControlFiles, pid: int = 999_999) -> LaunchHandle:
    scope = ProcessScope.current()
    return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=control.uri, app_name="job",
                        started_at=iso(), pid=pid, host=scope.host, boot_id=scope.boot_id,
                        pid_namespace=scope.pid_namespace)


def test_operator_defers_with_trigger_and_timeout(control: ControlFiles) -> None:
    put(control, HEARTBEAT, heartbeat().to_json())
    op = operator(control, stop_timeout=42, quiet_period=5)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context={})
    trigger = deferred.value.trigger
    assert isinstance(trigger, GracefulStopTrigger)
    assert deferred.value.method_name == "execute_complete"
    assert deferred.value.timeout == timedelta(seconds=42 + 5 + DEFER_GRACE_S)
    request = control.request()
    assert request is not None and trigger.request_id == request.request_id
    assert trigger.run_id == RUN and trigger.checkpoint_uri == control.uri
    assert trigger.deadline - trigger.requested_at == pytest.approx(42)
    assert not request.is_expired() and request.requested_by.startswith("airflow:")


def test_second_caller_joins_the_pending_request(control: ControlFiles) -> None:
    put(control, HEARTBEAT, heartbeat().to_json())
    with pytest.raises(TaskDeferred) as first:
        operator(control).execute(context={})
    with pytest.raises(TaskDeferred) as second:
        operator(control).execute(context={})
    assert first.value.trigger.request_id == second.value.trigger.request_id


def test_operator_not_running_returns_without_deferring(control: ControlFiles) -> None:
    put(control, HEARTBEAT, heartbeat("stopped").to_json())
    result = StopResult.from_json(operator(control).execute(context={}))
    assert result.outcome.value == "not_running" and result.last_committed_batch == 2
    assert control.request() is None, "nothing runs: no request must be written"
    with pytest.raises(QueryNotRunning):
        operator(control, fail_if_not_running=True).execute(context={})


def test_operator_not_running_but_batches_appear_fails(control: ControlFiles) -> None:
    """No heartbeat, yet something plans batches: a hidden query must not pass as stopped."""
    def planner() -> None:
        time.sleep(0.2)
        put(control, "offsets/3", 'v1\n{}\n{"events":{"0":1}}')

    thread = threading.Thread(target=planner)
    thread.start()
    with pytest.raises(RunningWithoutGracefulStop) as error:
        operator(control, quiet_period=3).execute(context={})
    thread.join()
    assert isinstance(error.value, CheckpointNotQuiet)
    assert str(error.value).startswith("query running without GracefulStop")
    assert "no heartbeat was ever written" in str(error.value) and "launch_handle" in str(error.value)
    assert control.request() is None, "nothing asked, nothing stopped"


def test_operator_without_any_heartbeat_does_not_claim_nothing_runs(control: ControlFiles) -> None:
    """No heartbeat ever and nothing commits (an idle job without GracefulStop looks the same)."""
    result = StopResult.from_json(operator(control).execute(context={}))
    assert result.outcome.value == "no_heartbeat" and result.last_committed_batch == 2
    assert result.detail is not None and "no heartbeat was ever written" in result.detail
    assert "last commit: batch 2" in result.detail and control.request() is None
    with pytest.raises(QueryNotRunning, match="no heartbeat was ever written"):
        operator(control, fail_if_not_running=True).execute(context={})
    from airflow_ckpt_provider.checkpoint.errors import QueryStateUnknown

    with pytest.raises(QueryStateUnknown) as unknown:  # the reference DAG's stop: never go on blind
        operator(control, fail_if_no_heartbeat=True).execute(context={})
    assert "last commit: batch 2" in unknown.value.found and "old_launch_handle" in str(unknown.value)
    assert control.request() is None, "nothing asked, nothing stopped"


def event(reason: StopReason, request_id: str = "req-1", the_ack: StopAck | None = None) -> dict[str, Any]:
    return {"reason": reason.value, "request_id": request_id, "run_id": RUN,
            "ack": the_ack.to_json() if the_ack else None, "heartbeat": None,
            "requested_at": time.time() - 1.5, "waited_s": 1.5}


def test_complete_on_acknowledged_is_graceful(control: ControlFiles) -> None:
    put(control, HEARTBEAT, heartbeat("stopped").to_json())
    result = StopResult.from_json(
        operator(control).execute_complete({}, event(StopReason.ACKNOWLEDGED, the_ack=ack("req-1")))
    )
    assert result.outcome.value == "graceful"
    assert (result.last_committed_batch, result.interrupted_batch) == (2, None)
    assert result.ack is not None and result.ack["outcome"] == "clean"
    assert result.waited_s >= 1.5


def test_complete_on_timeout_escalates_through_the_hook(control: ControlFiles,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[LaunchHandle] = []

    def fake_kill(self: SparkLauncherHook, handle: LaunchHandle, **kwargs: object) -> str:
        killed.append(handle)
        return f"SIGTERM to process group {handle.pid}"

    monkeypatch.setattr(SparkLauncherHook, "kill", fake_kill)
    control.write_request(StopRequest(request_id="req-1", requested_at=iso()))
    handle = local_handle(control)
    op = operator(control, launch_handle=handle.to_dict())
    assert op.launch_handle == handle.to_dict(), "a template field is stored as given"
    result = StopResult.from_json(op.execute_complete({}, event(StopReason.TIMEOUT)))
    assert killed == [handle]
    assert result.outcome.value == "escalated" and result.escalation == "SIGTERM to process group 999999"
    assert control.request() is None, "the request is withdrawn after escalation"


def test_complete_on_timeout_without_handle_says_what_to_do(control: ControlFiles) -> None:
    with pytest.raises(StopTimeout) as error:
        operator(control).execute_complete({}, event(StopReason.TIMEOUT))
    assert "launch_handle" in str(error.value)


def test_complete_on_not_running(control: ControlFiles) -> None:
    result = StopResult.from_json(operator(control).execute_complete({}, event(StopReason.NOT_RUNNING)))
    assert result.outcome.value == "not_running" and result.ack is None


@pytest.mark.parametrize("bad", [None, {}, {"reason": "acknowledged"},
                                 {**event(StopReason.TIMEOUT), "extra": 1},
                                 event(StopReason.ACKNOWLEDGED)])
def test_complete_rejects_malformed_events(control: ControlFiles, bad: Any) -> None:
    with pytest.raises(ValueError):
        operator(control).execute_complete({}, bad)


def test_template_fields_are_strings() -> None:
    op = GracefulStopOperator(task_id="x", checkpoint_uri="{{ params.cp }}",
                              launch_handle="{{ ti.xcom_pull('launch') | tojson }}")
    assert all(isinstance(getattr(op, name), (str, type(None))) for name in op.template_fields)
    assert set(op.template_fields) >= {"checkpoint_uri", "launch_handle"}


@pytest.mark.parametrize("kwargs", [{"stop_timeout": 0}, {"poll_interval": -1}, {"quiet_period": -1}])
def test_rejects_bad_numbers(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        GracefulStopOperator(task_id="x", checkpoint_uri="/cp", **kwargs)


def test_the_wait_logs_progress_at_a_steady_interval(control: ControlFiles, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import airflow_ckpt_provider.triggers.stop as trigger_module

    monkeypatch.setattr(trigger_module, "PROGRESS_EVERY_S", 0.2)
    put(control, HEARTBEAT, heartbeat().to_json())
    capsys.readouterr()
    event = first_event(trigger_for(control, timeout=1.0))
    assert event["reason"] == StopReason.TIMEOUT.value
    lines = [line for line in capsys.readouterr().out.splitlines() if "to acknowledge stop request req-1" in line]
    assert 2 <= len(lines) <= 8, lines
    assert "of at most 1 s; last committed batch 2, last planned 2; heartbeat running" in lines[0], lines[0]
