"""LaunchTrigger, StreamLaunchOperator and HandoverVerifyOperator without Spark.

The launcher hook is faked at its boundary (a subclass recording calls); checkpoints are real
directories written like Spark writes them; the trigger really runs (asyncio).
"""

from __future__ import annotations

import asyncio
import atexit
import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_ckpt_provider.checkpoint import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointNotEmpty,
    FileSinkHazard,
    FirstCommitTimeout,
    HandoverMissing,
    InvalidHandover,
    InvalidOffsets,
    InvalidTriggerEvent,
    LaunchFailed,
    NoProgress,
    SharedCheckpoint,
    StartMismatch,
)
from airflow_ckpt_provider.checkpoint.handover import handover_from_snapshot
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.operators.launch import (
    HANDLE_XCOM_KEY,
    HandoverVerifyOperator,
    SparkUILink,
    StreamLaunchOperator,
)
from airflow_ckpt_provider.records.control import ProcessScope
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.triggers.launch import EVENT_KEYS, LaunchEvent, LaunchTrigger
from tests.unit.conftest import kafka_json, write_checkpoint

T = "events"


def first_event(trigger: LaunchTrigger) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    return asyncio.run(run())


def dead_pid() -> int:
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait()
    return proc.pid


_RUNNING: list[subprocess.Popen[bytes]] = []


def running_pid() -> int:
    """A live process group (its leader's pid) like a just-launched spark-submit that has not
    committed yet: a step looks at its job once before deferring, and a dead one ended the wait.
    Killed when the test process exits."""
    if not _RUNNING:
        atexit.register(lambda: [proc.kill() for proc in _RUNNING])
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    _RUNNING.append(proc)
    return proc.pid


def local_handle(pid: int, log: Path, cp: str = "/cp") -> LaunchHandle:
    """A local handle as the launcher records it: the pid in this process's scope."""
    scope = ProcessScope.current()
    return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=cp, app_name="app",
                        started_at="2026-01-01T00:00:00+00:00", pid=pid, log_path=str(log),
                        host=scope.host, boot_id=scope.boot_id, pid_namespace=scope.pid_namespace)


# -- trigger ---------------------------------------------------------------------------------------


def test_trigger_serialize_lists_every_argument() -> None:
    trigger = LaunchTrigger(checkpoint_uri="s3://b/cp", deadline=123.5, handle={"mode": "local"}, min_batch=3,
                            poll_interval=0.5, storage_conn_id="aws", log_lines=10, started_at=100.0,
                            wait_for="standby", kafka_conn_id="kafka", switchover_release="sw-1")
    path, kwargs = trigger.serialize()
    assert path == "airflow_ckpt_provider.triggers.launch.LaunchTrigger"
    import inspect

    assert set(kwargs) == set(inspect.signature(LaunchTrigger.__init__).parameters) - {"self"}
    assert LaunchTrigger(**kwargs).serialize() == (path, kwargs)


def test_trigger_fires_committed(tmp_path: Path) -> None:
    cp = tmp_path / "cp"
    write_checkpoint(str(cp), batches=range(2))
    event = first_event(LaunchTrigger(str(cp), deadline=time.time() + 30, poll_interval=0.05))
    assert set(event) == EVENT_KEYS and event["reason"] == LaunchEvent.COMMITTED.value and event["batch"] == 1
    event = first_event(LaunchTrigger(str(cp), deadline=time.time() + 0.3, min_batch=2, poll_interval=0.05))
    assert event["reason"] == LaunchEvent.TIMEOUT.value and event["batch"] == 1


def running_heartbeat(cp: Path, *, state: str = "running") -> None:
    from airflow_ckpt_provider.clock import utc_iso
    from airflow_ckpt_provider.records.control import HEARTBEAT, Heartbeat

    now = utc_iso(timespec="milliseconds")
    beat = Heartbeat(query_id="q", run_id="r", state=state, started_at=now, updated_at=now, interval_s=60.0)
    (cp / HEARTBEAT).parent.mkdir(parents=True, exist_ok=True)
    (cp / HEARTBEAT).write_text(beat.to_json())


def test_trigger_fires_caught_up_when_an_idle_topic_has_nothing_to_commit(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_ckpt_provider.checkpoint.reconcile import BrokerView
    from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook

    cp = tmp_path / "cp"
    write_checkpoint(str(cp), batches=range(2))
    position = CheckpointReader(str(cp)).handover().kafka_offsets()
    ends: dict[str, dict[int, tuple[int, int]]] = {}
    for topic, partition, offset in position.items():
        ends.setdefault(topic, {})[partition] = (0, offset)
    monkeypatch.setattr(KafkaBrokerHook, "broker_view", lambda self, topics: BrokerView(ends))

    def wait(deadline_s: float) -> dict[str, Any]:
        return first_event(LaunchTrigger(str(cp), deadline=time.time() + deadline_s, min_batch=2, poll_interval=0.05,
                                         kafka_conn_id="kafka"))

    assert wait(0.3)["reason"] == LaunchEvent.TIMEOUT.value, "no running query yet: not caught up"
    running_heartbeat(cp, state="standby")
    assert wait(0.3)["reason"] == LaunchEvent.TIMEOUT.value, "a standby's query has not started"
    running_heartbeat(cp)
    event = wait(30)
    assert event["reason"] == LaunchEvent.CAUGHT_UP.value and event["batch"] == 1
    assert "has read everything the broker has" in event["evidence"]
    topic, partition, offset = next(iter(position.items()))
    ends[topic][partition] = (0, offset + 5)  # records arrived: the query must commit, not be caught up
    assert wait(0.3)["reason"] == LaunchEvent.TIMEOUT.value


def test_trigger_fires_died_with_log_tail(tmp_path: Path) -> None:
    log = tmp_path / "driver.log"
    log.write_text("starting\nRuntimeError: deliberate\n")
    handle = local_handle(dead_pid(), log, str(tmp_path / "cp"))
    event = first_event(LaunchTrigger(str(tmp_path / "cp"), deadline=time.time() + 30, handle=handle.to_dict(),
                                      poll_interval=0.05))
    assert event["reason"] == LaunchEvent.DIED.value and event["state"] == "exited"
    assert event["log_tail"].endswith("RuntimeError: deliberate") and event["batch"] is None


def test_trigger_times_out_on_missing_checkpoint(tmp_path: Path) -> None:
    event = first_event(LaunchTrigger(str(tmp_path / "nothing"), deadline=time.time() + 0.2, poll_interval=0.05))
    assert event["reason"] == LaunchEvent.TIMEOUT.value
    assert not (tmp_path / "nothing").exists()


# -- StreamLaunchOperator --------------------------------------------------------------------------


class TI:
    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        return self.xcom.get(key)


class FakeLauncher(SparkLauncherHook):
    """Records launches and kills; returns a local handle for ``pid``."""

    def __init__(self, pid: int, log: Path) -> None:
        super().__init__(master="local")
        self.pid, self.log_file = pid, log
        self.launches: list[dict[str, Any]] = []
        self.kills: list[LaunchHandle] = []

    def launch(self, application: str, **kwargs: Any) -> LaunchHandle:
        self.launches.append({"application": application, **kwargs})
        return local_handle(self.pid, self.log_file, kwargs["checkpoint_uri"])

    def kill(self, handle: LaunchHandle, *, timeout: float = 60.0) -> str:
        self.kills.append(handle)
        return "killed"


def launch_operator(tmp_path: Path, **kwargs: Any) -> tuple[StreamLaunchOperator, FakeLauncher]:
    defaults: dict[str, Any] = {"task_id": "launch", "application": "job.py",
                                "checkpoint_uri": str(tmp_path / "new-cp"),
                                "starting_offsets": '{"events":{"1":7,"0":5}}', "master": "local[1]",
                                "first_commit_timeout": 60}
    operator = StreamLaunchOperator(**{**defaults, **kwargs})
    log = tmp_path / "driver.log"
    log.write_text("INFO SparkUI: Bound SparkUI to 0.0.0.0, and started at http://127.0.0.1:4045\nline two\n")
    fake = FakeLauncher(running_pid(), log)
    operator.__dict__["launcher_hook"] = fake  # the cached_property's slot
    return operator, fake


def test_launch_defers_after_pushing_the_handle(tmp_path: Path) -> None:
    operator, fake = launch_operator(tmp_path)
    ti = TI()
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti})
    assert isinstance(deferred.value.trigger, LaunchTrigger) and deferred.value.method_name == "execute_complete"
    assert fake.launches[0]["starting_offsets"] == '{"events":{"0":5,"1":7}}'  # validated, normalised
    assert fake.launches[0]["checkpoint_uri"] == str(tmp_path / "new-cp")
    assert LaunchHandle.from_json(ti.xcom[HANDLE_XCOM_KEY]).pid == fake.pid
    assert deferred.value.trigger.handle == ti.xcom[HANDLE_XCOM_KEY]


def event(reason: LaunchEvent, handle: LaunchHandle, **extra: Any) -> dict[str, Any]:
    return {"reason": reason.value, "batch": None, "state": "RUNNING", "log_tail": "", "handle": handle.to_dict(),
            "waited_s": 3.0, **extra}


def test_launch_completes_on_first_commit(tmp_path: Path) -> None:
    operator, fake = launch_operator(tmp_path)
    handle = local_handle(fake.pid, fake.log_file)
    ti = TI()
    result = operator.execute_complete({"ti": ti}, event(LaunchEvent.COMMITTED, handle, batch=0))
    assert result["ui_url"] == "http://127.0.0.1:4045" and result["pid"] == fake.pid
    assert ti.xcom[SparkUILink().xcom_key] == "http://127.0.0.1:4045"
    assert fake.kills == []


def test_launch_fails_when_the_job_dies(tmp_path: Path) -> None:
    operator, fake = launch_operator(tmp_path)
    handle = local_handle(fake.pid, fake.log_file)
    with pytest.raises(LaunchFailed) as failed:
        operator.execute_complete({"ti": TI()}, event(LaunchEvent.DIED, handle, state="exited",
                                                      log_tail="Traceback\nValueError: bad conf"))
    assert "ValueError: bad conf" in str(failed.value) and "exited" in str(failed.value)


@pytest.mark.parametrize("kill_on_timeout", [True, False])
def test_launch_timeout_kills_unless_told(tmp_path: Path, kill_on_timeout: bool) -> None:
    operator, fake = launch_operator(tmp_path, kill_on_timeout=kill_on_timeout)
    with pytest.raises(FirstCommitTimeout) as timed_out:
        operator.execute_complete({"ti": TI()}, event(LaunchEvent.TIMEOUT, local_handle(fake.pid, fake.log_file)))
    assert len(fake.kills) == int(kill_on_timeout)
    assert ("left running" in str(timed_out.value)) is (not kill_on_timeout)


def test_launch_rejects_unexpected_events(tmp_path: Path) -> None:
    operator, fake = launch_operator(tmp_path)
    with pytest.raises(InvalidTriggerEvent, match="launch trigger event without 'batch'"):
        operator.execute_complete({"ti": TI()}, {"reason": "committed"})
    bad = {**event(LaunchEvent.COMMITTED, local_handle(fake.pid, fake.log_file)), "reason": "exploded"}
    with pytest.raises(InvalidTriggerEvent, match="'exploded' is not one of"):
        operator.execute_complete({"ti": TI()}, bad)


def test_launch_refusals_start_nothing(tmp_path: Path) -> None:
    old = tmp_path / "old-cp"
    write_checkpoint(str(old))
    sink = tmp_path / "sink"
    (sink / "_spark_metadata").mkdir(parents=True)
    cases = [
        ({"checkpoint_uri": str(old), "old_checkpoint_uri": str(old)}, SharedCheckpoint),
        ({"checkpoint_uri": str(old)}, CheckpointNotEmpty),
        ({"sink_path": str(sink)}, FileSinkHazard),
        ({"starting_offsets": '{"events":{"0":"x"}}'}, InvalidOffsets),
    ]
    for kwargs, error in cases:
        operator, fake = launch_operator(tmp_path, **kwargs)
        ti = TI()
        with pytest.raises(error):
            operator.execute({"ti": ti})
        assert fake.launches == [] and ti.xcom == {}
    assert not (tmp_path / "new-cp").exists()


@pytest.mark.parametrize("handover", [{"starting_offsets": None}, {"starting_offsets": ""},
                                      {"starting_offsets": None, "handover": ""}], ids=["none", "empty", "no handover"])
def test_a_launch_onto_a_new_checkpoint_without_a_handover_is_refused(tmp_path: Path,
                                                                    handover: dict[str, Any]) -> None:
    """It used to launch after a warning: Spark's default (latest) skips every record in between."""
    operator, fake = launch_operator(tmp_path, **handover)
    ti = TI()
    with pytest.raises(HandoverMissing, match="found a launch of job.py onto the new checkpoint .*new-cp with no "
                                              "handover and no starting_offsets"):
        operator.execute({"ti": ti})
    assert fake.launches == [] and ti.xcom == {}
    assert not (tmp_path / "new-cp").exists()


@pytest.mark.parametrize("kwargs", [{"starting_offsets": "earliest"}, {"starting_offsets": "latest"},
                                    {"starting_offsets": None, "allow_existing_checkpoint": True}],
                         ids=["earliest", "latest", "own checkpoint"])
def test_launches_that_need_no_handover_start(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    """A fresh stream that says where it starts, and a restart on the query's own checkpoint (the
    in-place restart, the rollback's restart of the old version: Spark resumes from it)."""
    if kwargs.get("allow_existing_checkpoint"):
        write_checkpoint(str(tmp_path / "new-cp"), batches=range(2))
    operator, fake = launch_operator(tmp_path, **kwargs)
    with pytest.raises(TaskDeferred):
        operator.execute({"ti": TI()})
    assert len(fake.launches) == 1 and fake.launches[0]["starting_offsets"] == kwargs["starting_offsets"]


def test_launch_argument_checks() -> None:
    with pytest.raises(ValueError):
        StreamLaunchOperator(task_id="t", application="a.py", checkpoint_uri="/c", first_commit_timeout=0)
    with pytest.raises(TypeError):
        StreamLaunchOperator(task_id="t", application="a.py", checkpoint_uri="/c", application_args="--x")


def test_each_launch_gets_its_own_spark(tmp_path: Path) -> None:
    """The Spark settings are templated (the reference DAG passes one version's from its plan);
    rendered empty they mean "not set": the Spark connection and the default Spark apply."""
    assert {"spark_conn_id", "spark_binary", "spark_home"} <= set(StreamLaunchOperator.template_fields)
    home = tmp_path / "spark-3.5"
    chosen = StreamLaunchOperator(task_id="t", application="a.py", checkpoint_uri="/c", master="local[1]",
                                  spark_home=str(home), spark_conn_id="", spark_binary="").launcher_hook
    assert (chosen.spark_home, chosen.spark_binary) == (str(home), str(home / "bin" / "spark-submit"))
    assert chosen.spark_conn_id is None and chosen.master == "local[1]"
    by_connection = StreamLaunchOperator(task_id="t", application="a.py", checkpoint_uri="/c", master="",
                                         deploy_mode="", spark_conn_id="spark_35", spark_home="").launcher_hook
    assert (by_connection.spark_conn_id, by_connection.master, by_connection.spark_home) == ("spark_35", None, None)


# -- HandoverVerifyOperator ------------------------------------------------------------------------


def handover_xcom(tmp_path: Path) -> dict[str, Any]:
    old = tmp_path / "old"
    write_checkpoint(str(old), sources=lambda b: [kafka_json({T: {0: 100, 1: 200}})])
    handover = handover_from_snapshot(CheckpointReader(str(old)).snapshot())
    return {"handover": handover.to_dict(), "starting_offsets": '{"events":{"0":100,"1":200,"2":-2}}',
            "reconciliation": {"expired": [], "acceptDataLoss": False}}


def started_checkpoint(tmp_path: Path, start: dict[int, int]) -> str:
    cp = tmp_path / "new"
    write_checkpoint(str(cp), batches=range(1),
                     sources=lambda b: [kafka_json({T: start if b < 0 else {p: o + 5 for p, o in start.items()}})])
    return str(cp)


def test_verify_operator_without_window(tmp_path: Path) -> None:
    cp = started_checkpoint(tmp_path, {0: 100, 1: 200, 2: 0})
    operator = HandoverVerifyOperator(task_id="verify", handover=json.dumps(handover_xcom(tmp_path)),
                                      checkpoint_uri=cp, progress_window_s=0)
    result = operator.execute({"ti": TI()})
    assert result["ok"] is True and result["recorded"] == {T: {"0": 100, "1": 200, "2": 0}}
    operator.handover = handover_xcom(tmp_path)  # what the XComArg renders to
    assert operator.execute({"ti": TI()}) == result
    # a plain "{{ ti.xcom_pull(...) }}" renders the dict's Python repr: refused, saying what to pass
    operator.handover = str(handover_xcom(tmp_path))
    with pytest.raises(InvalidHandover, match="tojson"):
        operator.execute({"ti": TI()})


def test_verify_operator_mismatch(tmp_path: Path) -> None:
    cp = started_checkpoint(tmp_path, {0: 100, 1: 210, 2: 0})
    operator = HandoverVerifyOperator(task_id="verify", handover=handover_xcom(tmp_path), checkpoint_uri=cp)
    with pytest.raises(StartMismatch, match=f"{T}-1: gap, given 200, recorded 210"):
        operator.execute({"ti": TI()})


def test_verify_operator_defers_for_progress(tmp_path: Path) -> None:
    cp = started_checkpoint(tmp_path, {0: 100, 1: 200, 2: 0})
    operator = HandoverVerifyOperator(task_id="verify", handover=handover_xcom(tmp_path), checkpoint_uri=cp,
                                      progress_window_s=5, poll_interval=0.05)
    ti = TI()
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti})
    trigger = deferred.value.trigger
    assert trigger.min_batch == 1 and trigger.handle is None
    quick = LaunchTrigger(**{**trigger.serialize()[1], "deadline": time.time() + 0.2})
    assert first_event(quick)["reason"] == LaunchEvent.TIMEOUT.value  # no batch after 0 yet
    with pytest.raises(NoProgress):
        operator.execute_complete({"ti": ti}, {"reason": "timeout", "batch": 0, "state": "RUNNING", "log_tail": "",
                                               "handle": None, "waited_s": 5.0})
    Path(cp, "commits", "1").write_text('v1\n{"nextBatchWatermarkMs":0}')
    payload = first_event(LaunchTrigger(**trigger.serialize()[1]))
    assert payload["reason"] == LaunchEvent.COMMITTED.value
    result = operator.execute_complete({"ti": ti}, payload)  # kwargs lost (as in dag.test): XCom is used
    assert result["progress_batches"] == [1] and result["last_committed_batch"] == 1 and result["ok"]


def test_verify_ends_in_the_task_when_the_next_batch_commits_while_it_looks(tmp_path: Path) -> None:
    """A busy stream commits its next batch within seconds: the step ends in its worker instead of
    deferring for a trigger that would fire at once (and race the executor's report)."""
    cp = started_checkpoint(tmp_path, {0: 100, 1: 200, 2: 0})
    operator = HandoverVerifyOperator(task_id="verify", handover=handover_xcom(tmp_path), checkpoint_uri=cp,
                                      progress_window_s=60, poll_interval=0.05, wait_in_task_s=30)
    timer = threading.Timer(0.3, lambda: Path(cp, "commits", "1").write_text('v1\n{"nextBatchWatermarkMs":0}'))
    timer.start()
    try:
        result = operator.execute({"ti": TI()})  # no TaskDeferred
    finally:
        timer.cancel()
    assert result["progress_batches"] == [1] and result["last_committed_batch"] == 1 and result["ok"]


def test_verify_defers_when_nothing_commits_while_it_looks(tmp_path: Path) -> None:
    cp = started_checkpoint(tmp_path, {0: 100, 1: 200, 2: 0})
    operator = HandoverVerifyOperator(task_id="verify", handover=handover_xcom(tmp_path), checkpoint_uri=cp,
                                      progress_window_s=60, poll_interval=0.05, wait_in_task_s=0.3)
    started = time.monotonic()
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": TI()})
    assert time.monotonic() - started >= 0.3  # it looked for its whole budget first
    assert deferred.value.trigger.min_batch == 1 and deferred.value.kwargs["after"] == 0
