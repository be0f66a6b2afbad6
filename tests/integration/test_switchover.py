"""Driver-to-driver handover with real drivers and a real Kafka broker: a standby released for a
switchover starts by itself the moment the old query stopped clean, at the old checkpoint's last
committed batch end offsets, and the two versions' sinks hold every Kafka record exactly once.

The old version is ``jobs/stop_job.py`` (Kafka -> Parquet under GracefulStop, a producer
running); the new one is the standby of tests/integration/test_standby.py
(``jobs/kafka_to_parquet.py``). The provider's side is the switchover step itself
(:class:`StandbySwitchoverOperator`): it writes the switchover release in the new checkpoint, then
the stop request in the old one, and nothing else before the standby started; its result (the
handover it re-derived, the stop, the downtime split) is checked against the test's own reading.
The provider's take-over after a stop that cut a batch runs on a busy Delta stream, where users meet
it: tests/integration/test_delta_sink.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import CheckpointError, SwitchoverStandbyDied
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.rollback import rollback_result
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit, SwitchoverResult
from airflow_ckpt_provider.faults import ENV, LOG_ENV
from airflow_ckpt_provider.hooks.kafka_admin import broker_ranges
from airflow_ckpt_provider.local.audit import audit, read_sink_records
from airflow_ckpt_provider.operators.handover import RollbackHandoverOperator
from airflow_ckpt_provider.operators.launch import StreamLaunchOperator
from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator
from airflow_ckpt_provider.records.control import (
    STOP_ACK,
    STOP_REQUEST,
    SWITCHOVER_HANDOVER,
    SWITCHOVER_RELEASE,
    StopAck,
)
from airflow_ckpt_provider.spark.switchover import SwitchoverHandover, SwitchoverRelease
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade.planner import OLD_STOPPED_NOTE, rollback_plan
from airflow_ckpt_provider.upgrade.record import UpgradeIntent
from airflow_ckpt_provider.upgrade.steps import PATHS
from airflow_ckpt_provider.upgrade.steps import Path as UpgradePath
from tests.dags.launch_verify import CONF
from tests.harness.records import produce_records
from tests.integration.test_graceful_stop import JOB as OLD_JOB
from tests.integration.test_graceful_stop import start_job  # noqa: F401 - the old version's fixture
from tests.integration.test_launch_real import _TI as TI
from tests.integration.test_launch_real import run_operator
from tests.integration.test_standby import (  # noqa: F401 - hook is a fixture
    START_TIMEOUT_S,
    control,
    hook,
    launch_standby,
    wait_for,
    wait_standby,
)

pytestmark = pytest.mark.integration


def _without_time(handover: Handover) -> dict[str, object]:
    return {k: v for k, v in handover.to_dict().items() if k != "taken_at"}


def old_and_standby(start_job, hook, kafka, tmp_path: Path, mode: str,  # noqa: ANN001, F811
                    batches: int = 2, standby_args: tuple[str, ...] = ()) -> tuple[Any, Any, Path, Path, Any]:
    """The old version (``jobs/stop_job.py`` in ``mode``, a producer at 100 records/s) with ``batches``
    committed, and the new one (``jobs/kafka_to_parquet.py`` with ``standby_args``) waiting as a
    standby: (old job, launcher, new checkpoint, new sink, standby handle). The two drivers start
    side by side: a standby needs nothing of the old query until it is released."""
    launcher, handles = hook
    old = start_job(mode, rate=100, partitions=2)
    new_cp, new_sink = tmp_path / "v2-cp", tmp_path / "v2-sink"
    standby = launch_standby(launcher, handles, new_cp, old.topic, kafka.bootstrap_servers, new_sink,
                             args=standby_args)
    old.wait_for_batches(batches, heartbeat=True)
    wait_standby(new_cp, standby, launcher)
    return old, launcher, new_cp, new_sink, standby


#: The Airflow connection of the local broker that the steps here reconcile with.
KAFKA_CONN = "ckpt_switch_kafka"


def kafka_connection(monkeypatch, kafka) -> None:  # noqa: ANN001
    monkeypatch.setenv(f"AIRFLOW_CONN_{KAFKA_CONN.upper()}", json.dumps(
        {"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": kafka.bootstrap_servers}}))


def at_log_end(checkpoint: Path, ranges: dict[tuple[str, int], tuple[int, int]]) -> bool:
    """The query on ``checkpoint`` committed a batch ending at the log end of ``ranges`` (broker_ranges),
    nothing in flight: it has no more to write."""
    try:
        last = CheckpointReader(str(checkpoint)).handover()
    except CheckpointError:  # a batch file being written as we read
        return False
    ends = {key: end for key, (_, end) in ranges.items()}
    return last.in_flight_batch is None and {(t, p): o for t, p, o in last.kafka_offsets().items()} == ends


def test_a_standby_released_for_a_switchover_starts_at_the_old_last_commit_exactly_once(
        kafka, start_job, hook, tmp_path: Path) -> None:  # noqa: ANN001, F811
    # the old version: Kafka -> Parquet on a 3 s trigger, producer running; the standby beside it
    old, launcher, new_cp, new_sink, standby = old_and_standby(start_job, hook, kafka, tmp_path, "graceful")
    run_id = wait_standby(new_cp, standby, launcher)

    # the provider's switchover step: the release (naming the stop request it sends next), then the stop request;
    # it waits for the new query's first commit, re-derives the handover and checks the old checkpoint's quiet
    step = StandbySwitchoverOperator(
        task_id="switchover", application="unused: the standby runs", checkpoint_uri=str(new_cp),
        old_checkpoint_uri=str(old.checkpoint), standby_handle=standby.to_dict(), stop_timeout=180,
        first_commit_timeout=START_TIMEOUT_S, poll_interval=0.5, quiet_period=2)
    step.__dict__["launcher_hook"] = launcher
    ti = TI()

    def logs() -> str:
        return f"{old.log.read_text()[-3000:]}\n--- standby ---\n{launcher.log_tail(standby, 60)}"

    try:
        result = SwitchoverResult.from_json(run_operator(step, {"ti": ti}))
    except Exception as exc:
        raise AssertionError(logs()) from exc
    release = SwitchoverRelease.from_json((new_cp / SWITCHOVER_RELEASE).read_bytes())
    assert old.proc.wait(timeout=180) == 0, logs()
    ack = StopAck.from_json((old.checkpoint / STOP_ACK).read_bytes())
    assert (ack.request_id, ack.outcome) == (release.stop_request_id, "clean"), ack
    assert (new_cp / "commits" / "0").exists() and ti.xcom["launch_handle"] == standby.to_dict()

    # re-derived independently: the provider's reader on the old checkpoint, after the stop
    expected = CheckpointReader(str(old.checkpoint)).handover()
    assert expected.batch_id == ack.last_committed_batch is not None and expected.in_flight_batch is None
    start = expected.kafka_offsets()
    assert start.total() > 0, "the old version processed records before the switchover"
    (initial,) = CheckpointReader(str(new_cp)).snapshot(include_initial=True).initial_sources
    assert initial.kafka == start, f"the standby started at {initial.kafka}, not the old last commit's end {start}"

    used = SwitchoverHandover.from_json((new_cp / SWITCHOVER_HANDOVER).read_bytes())
    assert (used.release_id, used.standby_run_id, used.stop_request_id) == (release.release_id, run_id,
                                                                            release.stop_request_id)
    assert used.starting_offsets == start.to_json() and (used.start_mode, used.ack_outcome) == ("resume", "clean")
    assert _without_time(used.handover()) == _without_time(expected)
    assert used.stop_acknowledged_at == ack.stopped_at
    assert used.stop_acknowledged_at <= used.ack_seen_at <= used.handover_read_at <= used.released_at, used

    # the step's result: the provider's own handover (what later steps take), the stop, the downtime split
    taken = HandoverResult.from_json(result.handover)
    assert _without_time(taken.handover) == _without_time(expected) and taken.offsets() == start
    stop = StopResult.from_json(result.stop)
    assert (stop.outcome.value, stop.last_committed_batch, stop.interrupted_batch) == (
        "graceful", expected.batch_id, None)
    split = DowntimeSplit.from_json(result.downtime)
    assert split.downtime_s is not None and split.downtime_s > 0 and split.first_batch_s is not None, split
    assert split.notice_s is not None and split.handover_read_s is not None and split.query_start_s is not None

    # every record once across both versions: the producer stops, the new version catches up
    old.producer.stop()  # type: ignore[union-attr]
    ranges = broker_ranges(kafka.bootstrap_servers, [old.topic])

    wait_for(lambda: at_log_end(new_cp, ranges), START_TIMEOUT_S, "the new version to commit the log end", standby,
             launcher)
    result = audit(read_sink_records(old.sink, new_sink), ranges)
    assert result.ok and result.produced > 0, result.to_dict()
    old_only = audit(read_sink_records(old.sink), ranges)
    assert 0 < old_only.distinct < result.produced, "both versions wrote part of the stream"


#: The switchover step in a process of its own (an Airflow worker), with a fault point armed by the
#: environment: argv[1] is the step's arguments as JSON.
WORKER = """
import json, sys
from types import SimpleNamespace
from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator
from tests.integration.test_launch_real import _TI
step = StandbySwitchoverOperator(**json.loads(sys.argv[1]))
step.execute({"run_id": "run-1", "ti": _TI(), "dag": SimpleNamespace(dag_id="upgrade")})
"""


def test_a_worker_killed_between_the_release_and_the_stop_request_converges_on_the_retry_on_an_idle_topic(
        kafka, start_job, hook, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001, F811
    """An IDLE topic (the producer stopped, the old query read everything). The worker dies (SIGKILL)
    right after it wrote the standby's release and before the old query's stop request: nothing
    stopped, the standby waits for exactly that request. The retry (same journal) writes no second
    release, asks the old query to stop with the request the release names, and the standby takes
    over with nothing to read (an empty first batch, or caught up: either ends the step). The
    provider's handover matches; records produced afterwards reach the new version, and both sinks
    hold every record once."""
    old, launcher, new_cp, new_sink, standby = old_and_standby(start_job, hook, kafka, tmp_path, "graceful")
    old.producer.stop()  # type: ignore[union-attr]
    idle = broker_ranges(kafka.bootstrap_servers, [old.topic])
    wait_for(lambda: at_log_end(old.checkpoint, idle), START_TIMEOUT_S, "the old query to read the whole (now idle) topic")
    kafka_connection(monkeypatch, kafka)
    journal = UpgradeJournal(fsspec.filesystem("file"), str(tmp_path / "archive" / "up-1.json"))
    journal.open(UpgradeIntent(stream_name="events", old_checkpoint=str(old.checkpoint),
                               new_checkpoint=str(new_cp)), "up-1", run_id="run-1")
    journal.record_planning("preflight", run_id="run-1", result={"relaunch_mode": "switchover"})  # the path
    journal.begin("start_standby", run_id="run-1")  # the step before the switchover on that path: done
    journal.finish("start_standby", standby.to_dict())
    args: dict[str, Any] = {
        "task_id": "switchover", "application": "unused: the standby runs", "checkpoint_uri": str(new_cp),
        "old_checkpoint_uri": str(old.checkpoint), "standby_handle": standby.to_dict(), "stop_timeout": 180,
        "first_commit_timeout": START_TIMEOUT_S, "poll_interval": 0.5, "quiet_period": 2, "journal": journal.path,
        "master": "local[2]", "kafka_conn_id": KAFKA_CONN}
    fired = tmp_path / "faults.log"
    env = {**os.environ, ENV: "switchover:released", LOG_ENV: str(fired),
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    worker = subprocess.run([sys.executable, "-c", WORKER, json.dumps(args)], env=env, capture_output=True,
                            text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])
    assert worker.returncode == -9 and "switchover:released" in fired.read_text(), worker.stderr[-3000:]
    release_bytes = (new_cp / SWITCHOVER_RELEASE).read_bytes()
    release = SwitchoverRelease.from_json(release_bytes)
    assert not (old.checkpoint / STOP_REQUEST).exists(), "killed before the stop request"
    noted = journal.step("switchover")
    assert noted is not None and noted.state == "started" and noted.notes["released"] == release.release_id
    assert old.proc.poll() is None and (new_cp / "commits").exists() is False, "nothing stopped, nothing started"

    step = StandbySwitchoverOperator(**args)
    step.__dict__["launcher_hook"] = launcher
    try:
        result = SwitchoverResult.from_json(run_operator(step, {"run_id": "run-2", "ti": TI()}))
    except Exception as exc:
        raise AssertionError(f"{old.log.read_text()[-3000:]}\n--- standby ---\n"
                             f"{launcher.log_tail(standby, 60)}") from exc
    assert (new_cp / SWITCHOVER_RELEASE).read_bytes() == release_bytes, "no second release"
    assert old.proc.wait(timeout=180) == 0
    ack = StopAck.from_json((old.checkpoint / STOP_ACK).read_bytes())
    assert ack.request_id == release.stop_request_id, "the request the release named"
    expected = CheckpointReader(str(old.checkpoint)).handover()
    taken = HandoverResult.from_json(result.handover)
    assert _without_time(taken.handover) == _without_time(expected)
    done = journal.step("switchover")
    assert done is not None and done.state == "done"
    # an idle topic: the new query ran (Spark commits an empty first batch, else the step ends on the
    # caught-up query) and read nothing, for nothing came
    assert sum(read_sink_records(new_sink).values()) == 0

    produce_records(kafka.bootstrap_servers, old.topic, 200, start=10_000_000)  # what comes after the switch
    ranges = broker_ranges(kafka.bootstrap_servers, [old.topic])
    assert sum(end for _, end in ranges.values()) > sum(end for _, end in idle.values())
    wait_for(lambda: at_log_end(new_cp, ranges), START_TIMEOUT_S, "the new version to commit the log end", standby,
             launcher)
    audited = audit(read_sink_records(old.sink, new_sink), ranges)
    assert audited.ok and audited.produced > 0, audited.to_dict()


def spark_files_digest(checkpoint: Path) -> dict[str, bytes]:
    """Every file Spark wrote in ``checkpoint`` (outside the provider's ``_ckpt/``) with its bytes."""
    return {p.relative_to(checkpoint).as_posix(): p.read_bytes() for p in sorted(checkpoint.rglob("*"))
            if p.is_file() and p.relative_to(checkpoint).parts[0] != "_ckpt"}


def test_a_standby_killed_mid_switch_fails_the_step_and_the_old_version_resumes_from_its_untouched_checkpoint(
        kafka, start_job, hook, tmp_path: Path) -> None:  # noqa: ANN001, F811
    """The new version's driver is killed (SIGKILL to its process group) after it took the handover and
    started its query, in its first batch: ``offsets/0`` planned, nothing written, no ``commits/0``
    (``--hold-first-batch`` keeps batch 0 from ending). The step notices the driver is gone within
    its wait and fails with SwitchoverStandbyDied saying so; the journal notes that the old query
    stopped, so the rollback restarts it. The rollback's reading of the new checkpoint takes nothing
    of the uncommitted batch as a handover (restore and forward both resume at the old checkpoint's
    last commit), the old checkpoint is as the old query left it, and the old version restarted there
    by the rollback's launch step reads on: with the producer running throughout, the sinks hold
    every Kafka record exactly once."""
    old, launcher, new_cp, new_sink, standby = old_and_standby(start_job, hook, kafka, tmp_path, "graceful",
                                                               standby_args=("--hold-first-batch",))
    journal = UpgradeJournal(fsspec.filesystem("file"), str(tmp_path / "archive" / "up-1.json"))
    journal.open(UpgradeIntent(stream_name="events", old_checkpoint=str(old.checkpoint),
                               new_checkpoint=str(new_cp)), "up-1", run_id="run-1")
    journal.record_planning("preflight", run_id="run-1", result={"relaunch_mode": "switchover"})  # the path
    journal.begin("start_standby", run_id="run-1")  # the step before the switchover on that path: done
    journal.finish("start_standby", standby.to_dict())
    step = StandbySwitchoverOperator(
        task_id="switchover", application="unused: the standby runs", checkpoint_uri=str(new_cp),
        old_checkpoint_uri=str(old.checkpoint), standby_handle=standby.to_dict(), stop_timeout=180,
        first_commit_timeout=START_TIMEOUT_S, poll_interval=0.5, quiet_period=2, journal=journal.path)
    step.__dict__["launcher_hook"] = launcher
    outcome: dict[str, Any] = {}

    def run_step() -> None:
        try:
            outcome["result"] = run_operator(step, {"run_id": "run-1", "ti": TI(),
                                                    "dag": SimpleNamespace(dag_id="upgrade")})
        except Exception as exc:  # noqa: BLE001 - the failure is what this test looks at
            outcome["error"] = exc
        outcome["ended"] = time.monotonic()

    def logs() -> str:
        return f"{old.log.read_text()[-3000:]}\n--- standby ---\n{launcher.log_tail(standby, 60)}"

    def in_first_batch() -> bool:  # took the handover, started its query, holds batch 0 uncommitted
        return ((new_cp / SWITCHOVER_HANDOVER).exists() and Path(f"{new_sink}.holding").exists()
                and (new_cp / "offsets" / "0").exists() and not (new_cp / "commits" / "0").exists())

    worker = threading.Thread(target=run_step, name="switchover-step")
    worker.start()
    wait_for(lambda: in_first_batch() or "ended" in outcome, START_TIMEOUT_S,
             "the standby to take over and hold its first batch", standby, launcher)
    assert "ended" not in outcome, f"the step ended before the kill: {outcome}\n{logs()}"
    os.killpg(int(standby.pid or 0), signal.SIGKILL)  # the new version's whole driver: supervisor, JVM, Python
    killed = time.monotonic()
    worker.join(timeout=step.stop_timeout + step.first_commit_timeout + 120)
    assert not worker.is_alive(), f"the step did not end within its own wait\n{logs()}"

    # the step: a typed error saying what happened, noticed well within its wait; the old query's stop noted
    error = outcome.get("error")
    assert isinstance(error, SwitchoverStandbyDied), f"{outcome}\n{logs()}"
    print(f"the step noticed the killed standby {outcome['ended'] - killed:.1f} s after the kill")
    assert outcome["ended"] - killed < step.first_commit_timeout, "noticed by its liveness, not by a timeout"
    assert old.proc.wait(timeout=180) == 0, logs()
    ack = StopAck.from_json((old.checkpoint / STOP_ACK).read_bytes())
    release = SwitchoverRelease.from_json((new_cp / SWITCHOVER_RELEASE).read_bytes())
    assert (ack.request_id, ack.outcome) == (release.stop_request_id, "clean"), ack
    assert "after the standby took the handover" in error.found and "batch 0 planned and not committed" in error.found
    assert f"acknowledged stop request {ack.request_id} clean at batch {ack.last_committed_batch}" in error.found
    assert "the rollback restarts it from" in error.action, error.action
    entry = journal.step("switchover")
    assert entry is not None and entry.state == "failed" and entry.notes[OLD_STOPPED_NOTE] is True, entry
    plan = rollback_plan(journal.read(), PATHS[UpgradePath.SWITCHOVER])
    assert plan.restart_old and plan.stop_new, plan

    # the dead standby's checkpoint: a query started at the handover, batch 0 planned and never committed
    expected = CheckpointReader(str(old.checkpoint)).handover()
    assert expected.batch_id == ack.last_committed_batch and expected.in_flight_batch is None
    dead = CheckpointReader(str(new_cp)).snapshot(include_initial=True)
    assert (dead.last_committed_batch, dead.in_flight_batch) == (None, 0), dead
    (initial,) = dead.initial_sources
    assert initial.kafka == expected.kafka_offsets(), "the standby started at the old last commit's end"
    assert not any(read_sink_records(new_sink).values()), "the held batch wrote nothing"
    untouched, left_behind = spark_files_digest(old.checkpoint), spark_files_digest(new_cp)

    # the rollback: what the new version processed (nothing committed: the uncommitted batch is no
    # handover, in either mode), then the old version restarted on its own checkpoint by the launch step
    for mode, target in (("restore", old.checkpoint), ("forward", tmp_path / "rollback-cp")):
        reading = rollback_result(run_operator(RollbackHandoverOperator(
            task_id="rollback_handover", checkpoint_uri=str(new_cp), old_checkpoint_uri=str(old.checkpoint),
            rollback_mode=mode, rollback_checkpoint_uri=str(target)), {"ti": TI()}))
        assert getattr(reading, "resume", None) == expected.kafka_offsets(), (mode, reading)
        assert (reading.new_committed_batch, reading.new_planned_batch) == (None, 0), (mode, reading)
    assert spark_files_digest(old.checkpoint) == untouched, "the rollback's reading changed the old checkpoint"
    query_id = CheckpointReader(str(old.checkpoint)).snapshot().query_id
    launcher_handles = hook[1]
    restart = StreamLaunchOperator(
        task_id="rollback_restart_old", step="rollback_restart_old", application=str(OLD_JOB),
        application_args=[kafka.bootstrap_servers, old.topic, str(old.checkpoint), str(old.sink), "graceful"],
        checkpoint_uri=str(old.checkpoint), allow_existing_checkpoint=True, conf=CONF, master="local[2]",
        first_commit_timeout=START_TIMEOUT_S, poll_interval=0.5, log_dir=str(tmp_path / "logs"))
    ti = TI()
    try:
        run_operator(restart, {"ti": ti})
    finally:
        if "launch_handle" in ti.xcom:
            launcher_handles.append(LaunchHandle.from_json(ti.xcom["launch_handle"]))
    resumed = CheckpointReader(str(old.checkpoint)).snapshot()
    assert resumed.query_id == query_id is not None, "the same query resumed on its own checkpoint"
    assert resumed.last_committed_batch is not None and resumed.last_committed_batch > expected.batch_id

    # every record once: the producer ran throughout; it stops, the restarted old version catches up
    old.producer.stop()  # type: ignore[union-attr]
    ranges = broker_ranges(kafka.bootstrap_servers, [old.topic])
    wait_for(lambda: at_log_end(old.checkpoint, ranges), START_TIMEOUT_S, "the restarted old version to commit "
             "the log end")
    audited = audit(read_sink_records(old.sink, new_sink), ranges)
    assert audited.ok and audited.produced > 0, audited.to_dict()
    assert sum(end for _, end in ranges.values()) > expected.kafka_offsets().total(), "records came after the stop"
    assert spark_files_digest(new_cp) == left_behind, "nothing ran on the dead standby's checkpoint again"
