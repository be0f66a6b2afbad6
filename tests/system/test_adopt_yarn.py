"""The first upgrade of a stream the provider did not launch, on a real YARN (ResourceManager +
NodeManager from Maven's Hadoop 3.4.1, beside a real HDFS), with a producer running.

Version 1 is ``jobs/plain_v1_delta.py``: no import of the provider, no GracefulStop, submitted by
a plain ``spark-submit --master yarn --deploy-mode cluster`` (as another team's scheduler would),
reading Kafka into a Delta table on HDFS, its checkpoint on HDFS. The reference DAG (standby path)
adopts it by its application id (param ``old_job``), starts version 2 on YARN as a standby, stops
version 1 through the ResourceManager's REST API (a kill: the only stop it has), takes the handover
from the last committed batch with the Delta table's own record deciding the batch the kill cut,
and releases version 2 (``jobs/instrumented_v2_delta.py``, on YARN, with GracefulStop).

Proof: the kill is held until version 1 is inside a batch (planned in ``offsets/N``, not
committed), so it cuts one; every Kafka (partition, offset) is then in the table exactly once.
The negative control is the same kill's record read the naive way: the batch the kill cut names a
range of records that a handover from the planned batch would have lost (the table shows version 2
wrote them) or, had the table held that batch, a handover from the committed batch would have
written twice (version 1 wrote them): that range is non-empty.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.handover import kafka_offsets_of
from airflow_ckpt_provider.faults import PAUSE_DIR_ENV, PAUSE_ENV, pause_files
from airflow_ckpt_provider.hooks.kafka_admin import broker_ranges
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.local import jvm
from airflow_ckpt_provider.local.audit import audit
from airflow_ckpt_provider.local.spark import delta_spark_conf
from airflow_ckpt_provider.sinks.ledger import cut_ranges
from airflow_ckpt_provider.storage.journal import list_journals
from airflow_ckpt_provider.storage.listing import list_batch_ids
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.harness.records import ContinuousProducer
from tests.harness.upgrade_demo import kafka_connection, load_reference_dag

pytestmark = [pytest.mark.system, pytest.mark.yarn]

JOBS = Path(__file__).parent / "jobs"
PLAIN_V1 = JOBS / "plain_v1_delta.py"
INSTRUMENTED_V2 = JOBS / "instrumented_v2_delta.py"
STORAGE_CONN = "ckpt_hdfs"
KILL_PAUSE = "graceful_stop:before_kill"


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tests.harness.hdfs import LocalHdfs

    jvm.fetch((jvm.HDFS,))
    with LocalHdfs(tmp_path_factory.mktemp("hdfs")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def yarn(hdfs: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:  # noqa: ANN401
    """One ResourceManager and NodeManager for the module (jars: ``jvm fetch yarn``)."""
    from tests.harness.yarn import LocalYarn

    jvm.fetch((jvm.YARN,))
    with LocalYarn(tmp_path_factory.mktemp("yarn"), hdfs) as cluster:
        yield cluster


def job_jars() -> tuple[str, ...]:
    """Kafka's connector and Delta's jars, as every container on this machine reads them."""
    return tuple(str(path) for path in (*jvm.jars(jvm.SPARK_KAFKA), *jvm.jars(jvm.DELTA)))


def yarn_conf(yarn: Any) -> dict[str, str]:  # noqa: ANN401
    delta = delta_spark_conf()
    delta.pop("spark.jars")
    return {**yarn.spark_conf(jars=job_jars()), **delta}


def committed(fs: Any, path: str) -> int | None:  # noqa: ANN401
    return max(list_batch_ids(fs, f"{path}/commits"), default=None)


def planned(fs: Any, path: str) -> int | None:  # noqa: ANN401
    return max(list_batch_ids(fs, f"{path}/offsets"), default=None)


def wait_until(what: str, check: Any, timeout: float) -> Any:  # noqa: ANN401
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def release_the_kill_inside_a_batch(fs: Any, path: str, pause_dir: Path, seen: dict[str, Any],  # noqa: ANN401
                                    stop: threading.Event) -> None:
    """Hold the stop at its kill until version 1 has planned a batch it has not committed, then let
    it go: the kill cuts that batch (recorded in ``seen``)."""
    paused, go = pause_files(str(pause_dir), KILL_PAUSE)
    while not stop.is_set() and not paused.exists():
        time.sleep(0.2)
    while not stop.is_set():
        last_planned, last_committed = planned(fs, path), committed(fs, path)
        if last_planned is not None and last_committed is not None and last_planned > last_committed:
            seen["released_in_batch"] = last_planned
            go.write_text("go")
            return
        time.sleep(0.1)


def sink_rows(spark: Any, table: str) -> list[tuple[str, int, int, str | None]]:  # noqa: ANN401
    """(topic, partition, offset, version) of every row of the Delta table, read through its log."""
    frame = spark.read.format("delta").load(table)
    version = "version" if "version" in frame.columns else "CAST(NULL AS STRING) AS version"
    return [(r[0], r[1], r[2], r[3]) for r in frame.selectExpr("topic", "partition", "offset", version).collect()]


def test_an_uninstrumented_v1_on_yarn_is_adopted_by_its_application_id_and_upgraded_exactly(
        airflow_home: Any, kafka: Any, yarn: Any, hdfs: Any, spark: Any, tmp_path: Path,  # noqa: ANN401
        monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = uuid.uuid4().hex[:6]
    topic = f"orders-{run_id}"
    kafka.create_topic(topic, 3)
    root = f"{hdfs.url}/streams/orders-{run_id}"
    old_cp, new_cp, table, archive = f"{root}/checkpoints/v1", f"{root}/checkpoints/v2", f"{root}/table", \
        f"{root}/archive"
    fs = hdfs.filesystem()
    old_path = old_cp.removeprefix(hdfs.url)
    producer = ContinuousProducer(kafka.bootstrap_servers, topic, rate=60.0).start()
    try:
        conf = yarn_conf(yarn)
        # version 1, as its team submits it: nothing of the provider in it or in its command
        app_id = yarn.submit(PLAIN_V1, ["--bootstrap-servers", kafka.bootstrap_servers, "--topic", topic,
                                        "--checkpoint", old_cp, "--table", table, "--seconds-per-task", "1"],
                             name="orders-v1", conf=conf, tags=("orders",), log_path=tmp_path / "v1-submit.log")
        wait_until("version 1's second commit", lambda: (committed(fs, old_path) or 0) >= 1, 600)
        assert not fs.exists(f"{old_path}/_ckpt"), "version 1 writes no control files: it knows nothing of us"

        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_connection(kafka.bootstrap_servers))
        monkeypatch.setenv(f"AIRFLOW_CONN_{STORAGE_CONN.upper()}", json.dumps(
            {"conn_type": "ckpt_storage", "port": hdfs.http_port, "login": hdfs.user}))
        for name, value in yarn.client_env().items():
            monkeypatch.setenv(name, value)
        pause_dir = tmp_path / "pause"
        pause_dir.mkdir()
        monkeypatch.setenv(PAUSE_ENV, KILL_PAUSE)
        monkeypatch.setenv(PAUSE_DIR_ENV, str(pause_dir))
        seen: dict[str, Any] = {}
        stop_watching = threading.Event()
        watcher = threading.Thread(target=release_the_kill_inside_a_batch,
                                   args=(hdfs.filesystem(), old_path, pause_dir, seen, stop_watching), daemon=True)
        watcher.start()

        dag = load_reference_dag("stream_upgrade")
        job_args = ["--bootstrap-servers", kafka.bootstrap_servers, "--topic", topic, "--table", table]
        run_conf = {
            "stream_name": f"orders-{run_id}", "old_checkpoint": old_cp, "new_checkpoint": new_cp,
            "archive_root": archive, "kafka_conn_id": "kafka_default", "storage_conn_id": STORAGE_CONN,
            "spark_master": "yarn", "spark_deploy_mode": "cluster", "spark_conf": conf,
            "new_application": str(INSTRUMENTED_V2), "new_application_args": job_args,
            "old_application": str(PLAIN_V1), "old_application_args": job_args,
            "old_job": {"kind": "yarn", "application_id": app_id, "resource_manager": yarn.rm_url},
            "sink": {"kind": "delta", "location": table},
            "carry_state": False, "check_compatibility": False,
        }
        run = dag.test(run_conf={k: v for k, v in run_conf.items() if k in dag.params},
                       mark_success_pattern="approve")
        stop_watching.set()
        states = {ti.task_id: ti.state for ti in run.get_task_instances()}
        assert run.state == "success", states

        # version 1 was killed through its ResourceManager, once, inside a batch, with no request written
        app = yarn.application(app_id)
        assert (app["state"], app["finalStatus"]) == ("KILLED", "KILLED"), app
        assert "released_in_batch" in seen, "the kill was not held until version 1 was inside a batch"
        assert not fs.exists(f"{old_path}/_ckpt/stop-request.json"), "an un-instrumented job is never asked"
        cut = seen["released_in_batch"]
        reader = CheckpointReader(old_cp, fs=CheckpointStorageHook(storage_conn_id=STORAGE_CONN).filesystem(old_cp)[0])
        snapshot = reader.snapshot()
        (journal,) = list_journals(fs, archive.removeprefix(hdfs.url), f"orders-{run_id}")
        assert journal.closed and journal.outcome == "upgraded", journal
        stop = journal.steps["graceful_stop"].result
        assert stop is not None and stop["outcome"] == "killed", stop

        # producer on a while, then stopped; version 2 reads everything; audit the table
        time.sleep(8)
        producer.stop()
        ranges = broker_ranges(kafka.bootstrap_servers, [topic])
        ends = {p: end for (_, p), (_, end) in ranges.items()}
        new_path = new_cp.removeprefix(hdfs.url)
        wait_until("version 2 caught up", lambda: CheckpointReader(
            new_cp, fs=hdfs.filesystem()).handover().kafka_offsets().to_dict().get(topic) ==
            {str(p): e for p, e in ends.items()}, 600)
        assert committed(fs, new_path) is not None
        rows = sink_rows(spark, table)
        result = audit(Counter((t, p, o) for t, p, o, _ in rows), ranges)
        print(f"adoption on YARN: {result.describe()}; the kill cut batch {snapshot.in_flight_batch}")
        assert result.produced > 1000, "the producer must have run through the upgrade"
        assert (result.lost, result.duplicated, result.unexpected) == (0, 0, 0), (
            result.lost_examples, result.duplicated_examples)

        # the negative control: the cut batch's range, read from the killed checkpoint
        cut_batch = snapshot.in_flight_batch
        assert cut_batch is not None, f"the kill must have cut a batch (released inside batch {cut})"
        committed_offsets = reader.handover_of(snapshot).kafka_offsets()
        cut_range = {(r.topic, r.partition, o) for r in cut_ranges(
            committed_offsets, kafka_offsets_of(reader.batch_sources(cut_batch))) for o in range(r.start, r.end)}
        assert cut_range, "the cut batch planned records"
        writers = {version for t, p, o, version in rows if (t, p, o) in cut_range}
        # not held: only version 2 wrote them (a handover from the planned batch loses all of them);
        # held: only version 1 did (a handover from the committed batch writes all of them twice)
        assert writers in ({"v2"}, {None}), writers
    finally:
        producer.stop()
