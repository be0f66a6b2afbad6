"""Graceful stop of real streaming jobs (Spark subprocess, Kafka -> Parquet, producer running).

No mocks: the jobs are ``tests/integration/jobs/stop_job.py`` started as their own process
group; the stop goes through GracefulStopOperator in ``dag.test()`` and through ``ckpt stop``.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import fsspec
import pyarrow.dataset as ds
import pytest

from airflow_ckpt_provider import cli, faults
from airflow_ckpt_provider.checkpoint import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.stop import StopResult, WithdrawalVerdict, new_request
from airflow_ckpt_provider.hooks.kafka_admin import broker_ranges
from airflow_ckpt_provider.jobs.local import group_members
from airflow_ckpt_provider.records.control import HEARTBEAT, STOP_ACK, STOP_REQUEST, Heartbeat, StopAck
from airflow_ckpt_provider.spark.graceful_stop import STOPPING_PAUSE
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.stop import ControlFiles, withdraw_and_wait
from tests.harness.records import ContinuousProducer
from tests.integration.streams import batch_ids, gaps_between_batches

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "stop_job.py"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Job:
    proc: subprocess.Popen[bytes]
    checkpoint: Path
    sink: Path
    topic: str
    log: Path
    producer: ContinuousProducer | None = None

    def handle(self) -> LaunchHandle:
        return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=str(self.checkpoint), app_name="stop-job",
                            started_at=datetime.now(timezone.utc).isoformat(), pid=self.proc.pid,
                            log_path=str(self.log))

    def committed(self) -> list[int]:
        folder = self.checkpoint / "commits"
        return batch_ids(folder) if folder.is_dir() else []

    def heartbeat(self) -> Heartbeat | None:
        path = self.checkpoint / HEARTBEAT
        return Heartbeat.from_json(path.read_text()) if path.exists() else None

    def wait_for_batches(self, count: int, *, heartbeat: bool, timeout: float = 900) -> None:
        """Until batch ``count - 1`` is committed (batch ids: Spark purges old commit files)."""
        deadline = time.monotonic() + timeout
        while max(self.committed(), default=-1) < count - 1 or (heartbeat and not (self.heartbeat() and self.heartbeat().is_alive())):
            assert self.proc.poll() is None, f"the job exited early:\n{self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no {count} committed batches within {timeout} s"
            time.sleep(0.2)


@pytest.fixture
def start_job(kafka, new_topic, tmp_path: Path) -> Iterator[Callable[..., Job]]:  # noqa: ANN001
    """Start stop_job.py in its own process group with a producer that keeps producing."""
    started: list[tuple[Job, ContinuousProducer]] = []

    def start(mode: str, rate: float = 100, partitions: int = 2) -> Job:
        topic = new_topic(partitions)
        producer = ContinuousProducer(kafka.bootstrap_servers, topic, rate=rate).start()
        base = tmp_path / mode
        base.mkdir()
        log = base / "job.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, str(JOB), kafka.bootstrap_servers, topic, str(base / "cp"), str(base / "sink"),
                 mode],
                start_new_session=True, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
            )
        job = Job(proc, base / "cp", base / "sink", topic, log, producer)
        started.append((job, producer))
        return job

    yield start
    for job, producer in started:
        producer.stop()
        if job.proc.poll() is None:
            os.killpg(job.proc.pid, signal.SIGKILL)
        job.proc.wait(timeout=30)


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def sink_rows(sink: Path) -> list[tuple[int, int]]:
    table = ds.dataset(str(sink), format="parquet").to_table(columns=["partition", "offset"])
    return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=False))


def test_operator_stops_a_running_job_between_batches(airflow_home, start_job, tmp_path: Path) -> None:  # noqa: ANN001
    from tests.dags.graceful_stop import dag

    job = start_job("graceful")
    job.wait_for_batches(2, heartbeat=True)

    # a second requester (an on-call engineer's `ckpt stop`) arriving once the operator asked
    second: dict[str, tuple[int, str, str]] = {}

    def on_call() -> None:
        deadline = time.monotonic() + 120
        while not (job.checkpoint / STOP_REQUEST).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        second["cli"] = run_cli("stop", str(job.checkpoint), "--timeout", "90", "--quiet-period", "1", "--json")

    thread = threading.Thread(target=on_call)
    thread.start()
    result_file = tmp_path / "result.json"
    run = dag.test(run_conf={"checkpoint_uri": str(job.checkpoint), "launch_handle": job.handle().to_json(),
                             "result_file": str(result_file)})
    thread.join(timeout=120)
    assert run.state == "success", job.log.read_text()[-3000:]

    result = StopResult.from_json(json.loads(result_file.read_text()))
    assert result.outcome.value == "graceful", result
    assert result.interrupted_batch is None and result.escalation is None
    assert job.proc.wait(timeout=60) == 0, "the driver exits by itself after the stop"

    ack = StopAck.from_json((job.checkpoint / STOP_ACK).read_text())
    assert ack.outcome == "clean"
    planned, committed = batch_ids(job.checkpoint / "offsets"), batch_ids(job.checkpoint / "commits")
    assert planned[-1] == committed[-1] == ack.last_committed_batch == result.last_committed_batch
    assert ack.last_planned_batch == planned[-1] and result.ack == json.loads(ack.to_json())
    heartbeat = job.heartbeat()
    assert heartbeat is not None and heartbeat.state == "stopped" and heartbeat.run_id == ack.run_id

    # it joined the pending request (exit 0, graceful) or came after the stop (exit 4): either
    # way it saw the one acknowledgement and did not stop anything twice
    code, out, err = second["cli"]
    other = StopResult.from_json(out)
    assert (code, other.outcome.value) in ((0, "graceful"), (4, "not_running")), err
    assert other.ack == result.ack and other.request_id == result.request_id

    # clean means the sink holds exactly the committed offsets: nothing in flight, nothing twice
    offsets = CheckpointReader(str(job.checkpoint)).handover().kafka_offsets()
    rows = sink_rows(job.sink)
    assert len(rows) == len(set(rows)) == offsets.total() > 0
    assert set(rows) == {(p, o) for (_, p) in offsets.partitions() for o in range(offsets.get(job.topic, p))}

    code, out, err = run_cli("stop", str(job.checkpoint), "--quiet-period", "1")
    assert code == 4 and "nothing to stop" in err


def stop_a_busy_job(start_job: Callable[..., Job], mode: str) -> tuple[Job, StopResult, StopAck]:
    """Start ``mode`` on a busy topic, let it commit 6 batches, ``ckpt stop`` it: acknowledged
    (graceful), never escalated. Returns the job, the stop's result and the driver's ack."""
    job = start_job(mode, rate=1500, partitions=3)
    job.wait_for_batches(6, heartbeat=True)
    code, out, err = run_cli("stop", str(job.checkpoint), "--timeout", "600", "--quiet-period", "1", "--json")
    assert code == 0, err + job.log.read_text()[-3000:]
    result = StopResult.from_json(out)
    assert result.outcome.value == "graceful" and result.escalation is None, result
    return job, result, StopAck.from_json((job.checkpoint / STOP_ACK).read_text())


def test_a_busy_default_trigger_stream_stops_at_the_sink_gate(start_job) -> None:  # noqa: ANN001
    """Spark's default trigger, batches back to back (the producer outpaces maxOffsetsPerTrigger):
    no idle moment between batches to stop in. The next batch is held at the job's foreachBatch
    gate: acknowledged, never escalated, and the sink holds exactly the committed batches."""
    job, result, ack = stop_a_busy_job(start_job, "busy")
    assert ack.outcome == "held", ack
    assert ack.last_planned_batch == ack.last_committed_batch + 1 == result.interrupted_batch
    assert job.proc.wait(timeout=60) == 0, "the driver exits by itself after the stop"
    log = job.log.read_text()
    assert f"holding batch {ack.last_planned_batch} at the sink" in log, "the driver logs the stop protocol"

    gaps = list(gaps_between_batches(job.checkpoint).values())
    assert sorted(gaps)[len(gaps) // 2] < 1.0, f"the batches did not run back to back: {gaps}"

    # the held batch wrote nothing: the sink holds exactly the committed offsets, once each
    offsets = CheckpointReader(str(job.checkpoint)).handover().kafka_offsets()
    rows = sink_rows(job.sink)
    assert len(rows) == len(set(rows)) == offsets.total() > 0
    assert set(rows) == {(p, o) for (_, p) in offsets.partitions() for o in range(offsets.get(job.topic, p))}


def file_sink_rows(sink: Path) -> list[tuple[int, int]]:
    """The rows of the files the file sink's own log (``_spark_metadata``) lists: what a reader of
    the sink sees (files of a cut batch are not in the log)."""
    log_dir = sink / "_spark_metadata"
    entries = sorted((p for p in log_dir.iterdir() if p.name.split(".")[0].isdigit() and not p.name.endswith(".crc")),
                     key=lambda p: int(p.name.split(".")[0]))
    start = max((i for i, p in enumerate(entries) if p.name.endswith(".compact")), default=0)
    files: set[str] = set()
    for entry in entries[start:]:
        for line in entry.read_text().splitlines()[1:]:
            record = json.loads(line)
            if record.get("action", "add") == "add":
                files.add(record["path"].removeprefix("file://"))
    table = ds.dataset(sorted(files), format="parquet").to_table(columns=["partition", "offset"])
    return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=False))


def test_a_busy_stream_into_a_built_in_sink_stops_within_a_few_batches(kafka, start_job, monkeypatch) -> None:  # noqa: ANN001
    """The default trigger, batches back to back, Spark's file sink: no gate can hold a batch. The
    driver waits about two batches for a gap, then stops (cutting one, perhaps) — acknowledged,
    never escalated — and the handover step's sink ledger reads the file sink's own log: the sink
    holds exactly what the handover says, once each."""
    from airflow_ckpt_provider.checkpoint.handover import HandoverResult
    from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator

    job, result, ack = stop_a_busy_job(start_job, "busy-file")
    assert ack.outcome in ("clean", "interrupted"), ack
    assert job.proc.wait(timeout=60) == 0, "the driver exits by itself after the stop"

    monkeypatch.setenv("AIRFLOW_CONN_CKPT_STOP_KAFKA", json.dumps(
        {"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": kafka.bootstrap_servers}}))
    extract = CheckpointHandoverOperator(task_id="extract_handover", checkpoint_uri=str(job.checkpoint),
                                         kafka_conn_id="ckpt_stop_kafka",
                                         sink={"kind": "file", "location": str(job.sink)})
    handed = HandoverResult.from_json(extract.execute({}))  # type: ignore[arg-type]
    assert handed.sink is not None and handed.sink["exact"], handed.sink
    offsets = handed.handover.kafka_offsets()
    rows = file_sink_rows(job.sink)
    assert len(rows) == len(set(rows)) == offsets.total() > 0
    assert set(rows) == {(p, o) for (_, p) in offsets.partitions() for o in range(offsets.get(job.topic, p))}


def test_driver_ignoring_the_request_is_escalated(start_job) -> None:  # noqa: ANN001
    job = start_job("ignore")
    job.wait_for_batches(1, heartbeat=False)
    assert job.heartbeat() is None, "this driver does not use GracefulStop"

    started = time.monotonic()
    code, out, err = run_cli("stop", str(job.checkpoint), "--timeout", "4", "--quiet-period", "3",
                             "--pid", str(job.proc.pid), "--json")
    assert code == 0, err
    result = StopResult.from_json(out)
    assert result.outcome.value == "escalated" and "SIGTERM" in (result.escalation or "")
    assert result.ack is None and result.waited_s >= 4 + 3
    assert time.monotonic() - started < 60
    assert job.proc.wait(timeout=30) != 0
    assert not group_members(job.proc.pid), "the driver's JVM must be gone too"
    assert not (job.checkpoint / STOP_REQUEST).exists(), "the request is withdrawn after the kill"

    # the driver's whole process group is gone (above; the kill waits for that before it reports):
    # nothing can write after the report, so the checkpoint now is the one the report describes
    planned, committed = batch_ids(job.checkpoint / "offsets"), batch_ids(job.checkpoint / "commits")
    assert planned[-1] == result.last_planned_batch and committed[-1] == result.last_committed_batch
    assert result.interrupted_batch == (planned[-1] if planned[-1] != committed[-1] else None)


def test_a_job_without_graceful_stop_is_named_by_stop_and_inspect(kafka, start_job) -> None:  # noqa: ANN001
    """A running job that never heartbeats: `ckpt inspect` and `ckpt stop` say "running without
    GracefulStop" (not "no query runs", not "a second query?"); once its topic is idle, `ckpt stop`
    says it cannot tell instead of claiming that nothing runs. Nothing is ever asked or stopped."""
    job = start_job("ignore")
    job.wait_for_batches(2, heartbeat=False)

    code, out, err = run_cli("inspect", str(job.checkpoint))
    assert code == 0, err
    assert "running without GracefulStop" in out and "no heartbeat was ever written" in out, out

    code, out, err = run_cli("stop", str(job.checkpoint), "--quiet-period", "20")
    assert code == 2, (code, out, err)
    assert "query running without GracefulStop" in err and "no heartbeat was ever written" in err, err
    assert "second query" not in err and "no query runs" not in err and "--pid" in err
    assert not (job.checkpoint / STOP_REQUEST).exists() and job.proc.poll() is None, "nothing asked, nothing stopped"

    # the topic goes idle: wait until the job has committed everything the broker holds
    assert job.producer is not None
    job.producer.stop()
    ends = {key: end for key, (_, end) in broker_ranges(kafka.bootstrap_servers, [job.topic]).items()}
    deadline = time.monotonic() + 180
    while True:
        snap = CheckpointReader(str(job.checkpoint)).snapshot()
        handed = CheckpointReader(str(job.checkpoint)).handover().kafka_offsets()
        if snap.in_flight_batch is None and all(handed.get(t, p) == end for (t, p), end in ends.items()):
            break
        assert job.proc.poll() is None, job.log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"the job did not catch up with {ends} within 180 s"
        time.sleep(0.5)
    last = snap.last_committed_batch

    code, out, err = run_cli("stop", str(job.checkpoint), "--quiet-period", "3", "--json")
    assert code == 5, (code, out, err)
    assert "no query runs" not in err and "no heartbeat was ever written" in err, err
    assert f"last commit: batch {last}, " in err and " ago" in err and "--pid" in err
    assert StopResult.from_json(out).outcome.value == "no_heartbeat"
    assert not (job.checkpoint / STOP_REQUEST).exists() and job.proc.poll() is None, "nothing asked, nothing stopped"


def test_a_withdrawn_request_is_answered_by_the_real_driver_in_every_interleaving(
        start_job, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """The withdrawal handshake against a real driver, each interleaving made deterministic:
    withdrawn before the driver read it (its process group stopped meanwhile): it answers
    "withdrawn" and runs on; then a request it carries out, the driver held at ``driver:stopping``
    (past its last look, before ``query.stop()``) while the provider withdraws: no answer while
    held (the provider's bounded wait ends "no answer", never "runs"), then, let go, it stops and
    acknowledges, and the provider's wait takes the acknowledgement."""
    pause = tmp_path / "pause"
    pause.mkdir()
    monkeypatch.setenv(faults.PAUSE_ENV, STOPPING_PAUSE)
    monkeypatch.setenv(faults.PAUSE_DIR_ENV, str(pause))
    held, go = faults.pause_files(pause, STOPPING_PAUSE)
    job = start_job("graceful")
    job.wait_for_batches(2, heartbeat=True)
    control = ControlFiles(fsspec.filesystem("file"), str(job.checkpoint))
    # a heartbeat is never taken for gone here: the driver is stopped (SIGSTOP) or held on purpose
    wait = {"withdrawn_by": "test", "poll_interval": 0.05, "missed_beats": 10_000}

    # 1. withdrawn before the driver read it
    first = new_request("test", "switchover", 600)
    os.killpg(job.proc.pid, signal.SIGSTOP)
    try:
        control.write_request(first)
        assert control.withdraw(first.request_id, "test")
    finally:
        os.killpg(job.proc.pid, signal.SIGCONT)
    settled = withdraw_and_wait(control, first.request_id, timeout_s=600, **wait)
    assert settled.verdict is WithdrawalVerdict.CONTINUING, job.log.read_text()[-3000:]
    assert settled.answer is not None and settled.answer.seen_at == "" and settled.answer.run_id == job.heartbeat().run_id
    running_at = max(job.committed())
    job.wait_for_batches(running_at + 3, heartbeat=True)  # it goes on committing
    assert not (job.checkpoint / STOP_ACK).exists() and job.proc.poll() is None

    # 2. withdrawn after its last look: held before stop(), no answer within the deadline
    second, _ = control.request_stop("test", "switchover", 600)
    deadline = time.monotonic() + 600
    while not held.exists():
        assert job.proc.poll() is None and time.monotonic() < deadline, job.log.read_text()[-3000:]
        time.sleep(0.05)
    unanswered = withdraw_and_wait(control, second.request_id, timeout_s=1.0, **wait)
    assert unanswered.verdict is WithdrawalVerdict.NO_ANSWER and unanswered.verdict.old_stopped
    assert unanswered.removed and control.request() is None and held.exists()

    # 3. let go: it stops and acknowledges the withdrawn request late; the provider's wait sees it
    waiting: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: waiting.update(settled=withdraw_and_wait(
        control, second.request_id, timeout_s=600, **wait)))
    thread.start()
    go.touch()
    thread.join(timeout=600)
    late = waiting["settled"]
    assert late.verdict is WithdrawalVerdict.ACKNOWLEDGED and late.ack is not None
    # held for a while before stop(), the 3 s trigger may have started a batch: clean or cut, it stopped
    assert late.ack.request_id == second.request_id and late.ack.outcome in ("clean", "interrupted")
    assert job.proc.wait(timeout=120) == 0, "the driver exits by itself after the stop"
    assert not held.exists() and not go.exists(), "the driver went on from its pause point"
