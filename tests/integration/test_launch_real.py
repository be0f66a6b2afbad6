"""Relaunch on a new checkpoint from a real handover, with real Spark (local mode and a real
standalone master + worker in cluster mode) reading a real Kafka broker.

Each exactness test: an old query drains a topic into a sink; a partition is added and more
records arrive; the handover is taken from the old checkpoint and reconciled; the reference
path StreamLaunchOperator -> (deferred) LaunchTrigger -> HandoverVerifyOperator runs in
``dag.test``; then the new job catches up and every Kafka (partition, offset) must be in the old
sink + new sink exactly once. Launched jobs are killed at the end of each test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint import Handover, KafkaOffsets, LaunchHandle, SourceOffsets, reconcile
from airflow_ckpt_provider.checkpoint.errors import CheckpointNotEmpty, FileSinkHazard, LaunchFailed
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.records import ContinuousProducer, produce_records
from tests.integration.streams import drain, kafka_reader, sink_records

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "kafka_to_parquet.py"


@pytest.fixture(scope="session")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Spark standalone master + worker on 127.0.0.1 (2 cores, 2g), shared by the session."""
    from tests.harness.standalone import LocalStandalone

    cluster = LocalStandalone(tmp_path_factory.mktemp("standalone"), cores=2, memory="2g")
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture
def kafka_connection(kafka, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: ANN001
    conn = {"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": kafka.bootstrap_servers}}
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_LAUNCH_KAFKA", json.dumps(conn))
    return "ckpt_launch_kafka"


@pytest.fixture
def launched() -> Iterator[list[LaunchHandle]]:
    """Handles to kill at the end of the test, whatever happened."""
    handles: list[LaunchHandle] = []
    yield handles
    hook = SparkLauncherHook(master="local")
    for handle in handles:
        try:
            hook.kill(handle)
        except Exception as exc:  # noqa: BLE001 - cleanup must try every handle
            print(f"cleanup: could not kill {handle}: {exc}")


EARLIEST_OF_NEW_PARTITION = 3


def old_query_and_handover(kafka, spark, new_topic, tmp_path: Path) -> tuple[str, dict[str, Any]]:  # noqa: ANN001
    """Old query drains 150 records of a 2-partition topic; then partition 2 is added, 90 more
    records arrive and retention deletes the first 3 of partition 2 (so "earliest" is 3, not 0).
    Returns (topic, the handover operator's XCom dict)."""
    from kafka import TopicPartition

    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 150)
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic], max_per_trigger=60),
          tmp_path / "old-cp", tmp_path / "old-sink")
    kafka.add_partitions(topic, 3)
    produce_records(kafka.bootstrap_servers, topic, 90, start=150)
    admin = kafka.admin()
    try:
        admin.delete_records({TopicPartition(topic, 2): EARLIEST_OF_NEW_PARTITION})
    finally:
        admin.close()
    handover = CheckpointReader(str(tmp_path / "old-cp")).handover()
    result = reconcile(handover.kafka_offsets(), KafkaBroker(kafka.bootstrap_servers).view([topic]))
    assert result.added_partitions == {(topic, 2)}
    return topic, {"handover": handover.to_dict(), "starting_offsets": result.starting_offsets.to_json(),
                   "reconciliation": result.to_dict()}


def wait_caught_up(kafka, topic: str, checkpoint: Path, timeout: float = 120) -> dict[int, int]:  # noqa: ANN001
    """Wait until the new checkpoint's last committed offsets reach the log end of every partition."""
    view = KafkaBroker(kafka.bootstrap_servers).view([topic])
    ends = {p: latest for p, (_, latest) in view.partitions(topic).items()}
    deadline = time.monotonic() + timeout
    while True:
        snap = CheckpointReader(str(checkpoint)).snapshot()
        offsets = snap.sources[0].kafka if snap.sources else None
        if offsets is not None and all(offsets.get(topic, p) == end for p, end in ends.items()):
            return ends
        assert time.monotonic() < deadline, f"new query did not catch up: {offsets} vs {ends}"
        time.sleep(1)


def assert_exactly_once(spark, topic: str, starts: dict[int, int], ends: dict[int, int],
                        *sinks: Path) -> None:  # noqa: ANN001
    seen = sink_records(spark, *sinks)
    expected = {(topic, p, o) for p, end in ends.items() for o in range(starts.get(p, 0), end)}
    assert set(seen) - expected == set(), "records that Kafka does not have"
    assert expected - set(seen) == set(), f"records lost: {sorted(expected - set(seen))[:10]}"
    assert max(seen.values()) == 1, "records duplicated"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def run_launch_dag(params: dict[str, str]) -> tuple[Any, dict[str, Any] | None]:
    from tests.dags.launch_verify import dag

    run = dag.test(run_conf=params)
    path = Path(params["result_file"])
    return run, json.loads(path.read_text()) if path.exists() else None


@pytest.mark.parametrize("mode", ["local", "standalone-cluster"])
def test_relaunch_starts_exactly_at_handover(mode: str, request, airflow_home, kafka, kafka_connection, spark,
                                             new_topic, launched, tmp_path: Path) -> None:  # noqa: ANN001
    topic, xcom = old_query_and_handover(kafka, spark, new_topic, tmp_path)
    new_cp, new_sink = tmp_path / "new-cp", tmp_path / "new-sink"
    params = {
        "bootstrap": kafka.bootstrap_servers, "topic": topic, "sink": str(new_sink),
        "checkpoint_uri": str(new_cp), "old_checkpoint_uri": str(tmp_path / "old-cp"),
        "handover": json.dumps(xcom), "starting_offsets": xcom["starting_offsets"],
        "kafka_conn_id": kafka_connection, "result_file": str(tmp_path / "result.json"),
        "log_dir": str(tmp_path / "launch-logs"),
    }
    if mode == "standalone-cluster":
        cluster = request.getfixturevalue("standalone")
        params.update({"master": cluster.master_url, "deploy_mode": "cluster", "master_ui_url": cluster.ui_url})

    producer = ContinuousProducer(kafka.bootstrap_servers, topic, rate=20).start()  # keeps batches coming
    try:
        run, result = run_launch_dag(params)
        if result is not None:
            launched.append(LaunchHandle.from_json(result["handle"]))
    finally:
        producer.stop()
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    handle = LaunchHandle.from_json(result["handle"])
    assert handle.mode.value == mode
    if mode == "local":
        assert handle.pid and Path(handle.log_path).is_file()
    else:
        assert handle.driver_id and handle.driver_id.startswith("driver-")
        assert any(d["id"] == handle.driver_id and d["state"] == "RUNNING" for d in cluster.drivers())

    # the recorded start is the handover; the added partition started at the broker's earliest (0)
    verified = result["verify"]
    assert verified["ok"] and verified["progress_batches"], verified
    handed = KafkaOffsets.from_json(xcom["starting_offsets"])
    recorded = KafkaOffsets.from_json(verified["recorded"])
    assert recorded.get(topic, 0) == handed.get(topic, 0) and recorded.get(topic, 1) == handed.get(topic, 1)
    # for -2 Spark records the offset it resolved: the broker's earliest (3 after the deletion)
    assert handed.get(topic, 2) == -2 and recorded.get(topic, 2) == EARLIEST_OF_NEW_PARTITION
    assert verified["partitions"][2]["broker_earliest"] == EARLIEST_OF_NEW_PARTITION
    raw = (new_cp / "sources" / "0" / "0").read_bytes()
    assert raw[:1] == b"\x00" and KafkaOffsets.from_json(raw[1:].decode().split("\n", 1)[1]) == recorded

    # the same check from a shell, on the real checkpoint; a handover off by one record is refused
    handover_file = tmp_path / "handover.json"
    handover_file.write_text(json.dumps(xcom))
    code, out, err = run_cli("verify-handover", str(handover_file), str(new_cp))
    assert code == 0 and out.startswith("OK:"), err
    old = Handover.from_json(xcom["handover"])
    shifted = {p: o + (1 if p == 0 else 0) for p, o in old.kafka_offsets().offsets[topic].items()}
    tampered = dataclasses.replace(old, sources=(SourceOffsets.parse(0, KafkaOffsets({topic: shifted}).to_json()),))
    handover_file.write_text(tampered.to_json())  # says the old query stopped one record later
    code, _, err = run_cli("verify-handover", str(handover_file), str(new_cp))
    assert code == 2 and f"{topic}-0: overlap" in err, err

    assert SparkLauncherHook(master="local").is_alive(handle), "the new job must keep running"
    ends = wait_caught_up(kafka, topic, new_cp)
    SparkLauncherHook(master="local").kill(handle)
    assert not SparkLauncherHook(master="local").is_alive(handle)
    assert_exactly_once(spark, topic, {2: EARLIEST_OF_NEW_PARTITION}, ends, tmp_path / "old-sink", new_sink)


class _TI:
    """The task instance seen by execute(): only XCom pushes are used."""

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcom[key] = value


def run_operator(operator, context: dict[str, Any]) -> Any:  # noqa: ANN001
    """execute -> TaskDeferred -> run the trigger to its event -> execute_complete (like the triggerer);
    a wait that ended in the task (``wait_in_task_s``) returns or raises from execute itself."""
    from airflow.sdk.exceptions import TaskDeferred

    try:
        return operator.execute(context)
    except TaskDeferred as raised:
        deferred = raised

    async def first_event() -> Any:
        async for event in deferred.trigger.run():
            return event.payload
        return None

    payload = asyncio.run(first_event())
    return getattr(operator, deferred.method_name)(context, payload, **(deferred.kwargs or {}))


@pytest.mark.parametrize("mode", ["local", "standalone-cluster"])
def test_job_crashing_on_start_fails_launch_with_log_tail(mode: str, request, kafka, new_topic, launched,
                                                          tmp_path: Path) -> None:  # noqa: ANN001
    from airflow_ckpt_provider.operators.launch import StreamLaunchOperator
    from tests.dags.launch_verify import CONF

    topic = new_topic(1)
    where: dict[str, str] = {"master": "local[1]"}
    if mode == "standalone-cluster":
        cluster = request.getfixturevalue("standalone")
        where = {"master": cluster.master_url, "deploy_mode": "cluster", "master_ui_url": cluster.ui_url}
    operator = StreamLaunchOperator(
        task_id="launch_crash", application=str(JOB),
        application_args=[kafka.bootstrap_servers, topic, str(tmp_path / "sink"), "--crash-on-start"],
        checkpoint_uri=str(tmp_path / "cp"), starting_offsets=json.dumps({topic: {"0": 0}}), conf=CONF,
        first_commit_timeout=120, poll_interval=0.5, log_dir=str(tmp_path / "logs"), **where,
    )
    ti = _TI()
    with pytest.raises(LaunchFailed) as failed:
        run_operator(operator, {"ti": ti})
    launched.append(LaunchHandle.from_json(ti.xcom["launch_handle"]))
    message = str(failed.value)
    assert "before committing a batch" in message
    assert "ended (failed" in message, message  # the same word for every kind of job
    if mode == "local":
        assert "exited with code" in message, "the supervisor's record gives the exit code"
    assert "deliberate crash on start" in message, message  # the driver log tail is in the error
    assert not (tmp_path / "cp" / "commits").exists()


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.parametrize("hazard", ["non-empty checkpoint", "file sink metadata"])
def test_refused_launch_starts_nothing(hazard: str, kafka, spark, new_topic, tmp_path: Path) -> None:  # noqa: ANN001
    from airflow_ckpt_provider.operators.launch import StreamLaunchOperator
    from tests.dags.launch_verify import CONF

    topic = new_topic(1)
    produce_records(kafka.bootstrap_servers, topic, 20)
    cp, sink = tmp_path / "target-cp", tmp_path / "target-sink"
    if hazard == "non-empty checkpoint":  # a real checkpoint of another query
        drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic]), cp, tmp_path / "other-sink")
        sink.mkdir()
        expected_error = CheckpointNotEmpty
    else:  # a real file sink written by an earlier query
        drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic]), tmp_path / "other-cp", sink)
        expected_error = FileSinkHazard
    before = _tree(tmp_path)
    operator = StreamLaunchOperator(
        task_id="launch_refused", application=str(JOB),
        application_args=[kafka.bootstrap_servers, topic, str(sink)], checkpoint_uri=str(cp),
        sink_path=str(sink), starting_offsets=json.dumps({topic: {"0": 0}}), conf=CONF, master="local[1]",
        log_dir=str(tmp_path / "logs"),
    )
    ti = _TI()
    with pytest.raises(expected_error) as refused:
        operator.execute({"ti": ti})
    assert "Nothing was started" in str(refused.value)
    assert ti.xcom == {}, "no launch handle: nothing was launched"
    assert _tree(tmp_path) == before, "a refused launch must not create or change any file"
    assert not (tmp_path / "logs").exists()
    assert _processes_mentioning(str(sink)) == [], "no spark-submit may run for a refused launch"
    assert os.path.isdir(sink)
