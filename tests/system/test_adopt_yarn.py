"""The first upgrade of a stream the provider did not launch, on a real YARN (ResourceManager +
NodeManager from Maven's Hadoop 3.4.1, beside a real HDFS), with a producer running.

Version 1 has no import of the provider and no GracefulStop; it is submitted by a plain
``spark-submit --master yarn --deploy-mode cluster`` (as another team's scheduler would), its
checkpoint and its output on HDFS. The reference DAG (standby path) adopts it by its application
id (param ``old_job``), starts version 2 (``jobs/instrumented_v2.py``, with GracefulStop) on YARN as
a standby, stops version 1 through the ResourceManager's REST API (a kill: the only stop it has),
takes the handover from the last committed batch with the sink ledger deciding the batch the kill
cut, and releases version 2. The kill is held until version 1 is inside a batch (planned in
``offsets/N``, not committed), so it always cuts one.

- Delta sink (``jobs/plain_v1_delta.py``): the first run's Airflow worker dies right after the
  kill (fault point ``graceful_stop:killed``); the re-run finds version 1 ended, kills nothing
  again and converges. Every Kafka (partition, offset) is in the table exactly once. Negative
  control, on the same kill: the cut batch's records were written by version 2 only (a handover
  from the planned batch would have lost them) or, had the table held the batch, by version 1
  only (a handover from the committed batch would have written them twice).
- A plain foreachBatch Parquet sink (``jobs/plain_v1_foreach.py``): refused before anything stops
  without ``accept_cut_batch`` (version 1 runs on); with it, the kill is held until version 1 wrote
  batch N and has not committed it, and the records the sink then holds twice are exactly the
  report's "may be processed twice" range, record for record.

One HDFS and one YARN for the module; each test kills what it left running on YARN.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.handover import kafka_offsets_of
from airflow_ckpt_provider.faults import ENV as FAULT_ENV
from airflow_ckpt_provider.faults import PAUSE_DIR_ENV, PAUSE_ENV, pause_files
from airflow_ckpt_provider.hooks.kafka_admin import broker_ranges
from airflow_ckpt_provider.local import jvm
from airflow_ckpt_provider.local.audit import audit
from airflow_ckpt_provider.records.control import CONF_STANDBY_REHEARSAL
from airflow_ckpt_provider.sinks.ledger import cut_ranges
from airflow_ckpt_provider.storage.journal import list_journals
from airflow_ckpt_provider.storage.listing import list_batch_ids
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.harness.records import ContinuousProducer
from tests.harness.upgrade_demo import kafka_connection, load_reference_dag

pytestmark = [pytest.mark.system, pytest.mark.yarn]

JOBS = Path(__file__).parent / "jobs"
REPO = Path(__file__).parents[2]
PLAIN_V1_DELTA = JOBS / "plain_v1_delta.py"
PLAIN_V1_FOREACH = JOBS / "plain_v1_foreach.py"
INSTRUMENTED_V2 = JOBS / "instrumented_v2.py"
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


def release_the_kill(fs: Any, path: str, pause_dir: Path, seen: dict[str, Any], stop: threading.Event,  # noqa: ANN401
                     written: Any = None) -> None:  # noqa: ANN401
    """Hold the stop at its kill until version 1 has planned a batch it has not committed (and,
    with ``written``, until ``written(batch)`` says the sink holds that batch), then let it go:
    the kill cuts that batch (recorded in ``seen``)."""
    paused, go = pause_files(str(pause_dir), KILL_PAUSE)
    while not stop.is_set() and not paused.exists():
        time.sleep(0.2)
    while not stop.is_set():
        last_planned, last_committed = planned(fs, path), committed(fs, path)
        if last_planned is not None and last_committed is not None and last_planned > last_committed \
                and (written is None or written(last_planned, last_committed)):
            seen["released_in_batch"] = last_planned
            go.write_text("go")
            return
        time.sleep(0.1)


def delta_rows(spark: Any, table: str) -> list[tuple[str, int, int, str | None]]:  # noqa: ANN401
    """(topic, partition, offset, version) of every row of the Delta table, read through its log."""
    frame = spark.read.format("delta").load(table)
    version = "version" if "version" in frame.columns else "CAST(NULL AS STRING) AS version"
    return [(r[0], r[1], r[2], r[3]) for r in frame.selectExpr("topic", "partition", "offset", version).collect()]


class Adoption:
    """One stream of a test: its topic and producer, its folders on HDFS, version 1 submitted to
    YARN by hand, and the reference DAG run on it."""

    def __init__(self, kafka: Any, yarn: Any, hdfs: Any, work: Path,  # noqa: ANN401
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.kafka, self.yarn, self.hdfs, self.work = kafka, yarn, hdfs, work
        self.name = f"orders-{uuid.uuid4().hex[:6]}"
        self.topic = self.name
        kafka.create_topic(self.topic, 3)
        self.root = f"{hdfs.url}/streams/{self.name}"
        self.old_cp, self.new_cp = f"{self.root}/checkpoints/v1", f"{self.root}/checkpoints/v2"
        self.archive = f"{self.root}/archive"
        self.fs = hdfs.filesystem()
        self.v1: tuple[Path, list[str]] = (Path(), [])
        self.conf = yarn.kafka_delta_conf()
        self.producer = ContinuousProducer(kafka.bootstrap_servers, self.topic, rate=60.0).start()
        monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", kafka_connection(kafka.bootstrap_servers))
        monkeypatch.setenv(f"AIRFLOW_CONN_{STORAGE_CONN.upper()}", json.dumps(
            {"conn_type": "ckpt_storage", "port": hdfs.http_port, "login": hdfs.user}))
        for name, value in yarn.client_env().items():
            monkeypatch.setenv(name, value)
        self.pause_dir = work / "pause"
        self.pause_dir.mkdir()
        monkeypatch.setenv(PAUSE_ENV, KILL_PAUSE)
        monkeypatch.setenv(PAUSE_DIR_ENV, str(self.pause_dir))

    def path(self, uri: str) -> str:
        return uri.removeprefix(self.hdfs.url)

    def submit_v1(self, application: Path, args: list[str]) -> str:
        """Version 1, as its team submits it: nothing of the provider in it or in its command; once
        it committed two batches."""
        self.v1 = (application, ["--bootstrap-servers", self.kafka.bootstrap_servers, "--topic", self.topic,
                                 "--checkpoint", self.old_cp, *args])
        app_id = self.yarn.submit(*self.v1,
                                  name="orders-v1", conf=self.conf, tags=("orders",),
                                  log_path=self.work / "v1-submit.log")
        old = self.path(self.old_cp)
        wait_until("version 1's second commit", lambda: (committed(self.fs, old) or 0) >= 1, 600)
        assert not self.fs.exists(f"{old}/_ckpt"), "version 1 writes no control files: it knows nothing of us"
        return app_id

    def run_conf(self, app_id: str, v2_args: list[str], sink: dict[str, Any], **params: Any) -> dict[str, Any]:  # noqa: ANN401
        """The reference DAG's conf: ``old_job`` names ``app_id``, version 2 runs on YARN too."""
        job_args = ["--bootstrap-servers", self.kafka.bootstrap_servers, "--topic", self.topic, *v2_args]
        return {
            "stream_name": self.name, "old_checkpoint": self.old_cp, "new_checkpoint": self.new_cp,
            "archive_root": self.archive, "kafka_conn_id": "kafka_default", "storage_conn_id": STORAGE_CONN,
            "spark_master": "yarn", "spark_deploy_mode": "cluster", "spark_conf": self.conf,
            "new_application": str(INSTRUMENTED_V2), "new_application_args": job_args,
            # what a rollback relaunches: version 1 as its team submits it
            "old_application": str(self.v1[0]), "old_application_args": self.v1[1],
            "old_job": {"kind": "yarn", "application_id": app_id, "resource_manager": self.yarn.rm_url},
            "sink": sink, "carry_state": False, "check_compatibility": False, **params,
        }

    def upgrade(self, conf: dict[str, Any], written: Any = None, fault: str | None = None) -> tuple[Any, dict[str, Any]]:  # noqa: ANN401
        """The reference DAG (standby path) with ``conf``; the kill is held until version 1 is
        inside a batch (see :func:`release_the_kill`). With ``fault``, the run goes in a process of
        its own (``tests/system/dag_child.py``) that the fault point ``fault`` kills: its exit code
        instead of the run. Returns the run (or exit code) and what the kill saw."""
        seen: dict[str, Any] = {}
        stop = threading.Event()
        watcher = threading.Thread(target=release_the_kill, daemon=True, args=(
            self.hdfs.filesystem(), self.path(self.old_cp), self.pause_dir, seen, stop, written))
        watcher.start()
        try:
            if fault is not None:
                request = self.work / "request.json"
                request.write_text(json.dumps({"conf": conf, "result": str(self.work / "result.json"),
                                               "kafka_connection": os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"]}))
                with open(self.work / "killed-run.log", "wb") as out:
                    done = subprocess.run([sys.executable, "-m", "tests.system.dag_child", str(request)],
                                          env={**os.environ, FAULT_ENV: fault}, stdout=out,
                                          stderr=subprocess.STDOUT, cwd=REPO, check=False)
                return done.returncode, seen
            dag = load_reference_dag("stream_upgrade")
            run = dag.test(run_conf={k: v for k, v in conf.items() if k in dag.params}, mark_success_pattern="approve")
        finally:
            stop.set()
        return run, seen

    def journals(self) -> list[Any]:
        return list_journals(self.fs, self.path(self.archive), self.name)

    def drain(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Produce a while longer, stop the producer, wait until version 2 read everything; the
        topic's ranges."""
        time.sleep(8)
        self.producer.stop()
        ranges = broker_ranges(self.kafka.bootstrap_servers, [self.topic])
        ends = {str(p): end for (_, p), (_, end) in ranges.items()}
        wait_until("version 2 caught up", lambda: CheckpointReader(
            self.new_cp, fs=self.hdfs.filesystem()).handover().kafka_offsets().to_dict().get(self.topic) == ends, 600)
        return ranges

    def close(self) -> None:
        self.producer.stop()
        self.yarn.kill_running()  # version 2 (and a version 1 a failed test left): the next test's room


@pytest.fixture
def adoption(kafka: Any, yarn: Any, hdfs: Any, tmp_path: Path,  # noqa: ANN401
             monkeypatch: pytest.MonkeyPatch) -> Iterator[Adoption]:
    stream = Adoption(kafka, yarn, hdfs, tmp_path, monkeypatch)
    yield stream
    stream.close()


def cut_batch_range(stream: Adoption) -> tuple[int, set[tuple[str, int, int]]]:
    """The batch the kill cut in version 1's checkpoint, and every record it planned."""
    reader = CheckpointReader(stream.old_cp, fs=stream.hdfs.filesystem())
    snapshot = reader.snapshot()
    cut = snapshot.in_flight_batch
    assert cut is not None, "the kill must have cut a batch"
    ranges = cut_ranges(reader.handover_of(snapshot).kafka_offsets(), kafka_offsets_of(reader.batch_sources(cut)))
    return cut, {(r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end)}


def test_an_uninstrumented_v1_on_yarn_is_adopted_by_its_application_id_and_upgraded_exactly(
        airflow_home: Any, adoption: Adoption, spark: Any) -> None:  # noqa: ANN401
    stream = adoption
    table = f"{stream.root}/table"
    app_id = stream.submit_v1(PLAIN_V1_DELTA, ["--table", table, "--seconds-per-task", "1"])
    conf = stream.run_conf(app_id, ["--table", table], {"kind": "delta", "location": table})
    # the first run's worker dies right after the kill (SIGKILL at graceful_stop:killed)
    code, seen = stream.upgrade(conf, fault="graceful_stop:killed")
    assert code == -signal.SIGKILL, (stream.work / "killed-run.log").read_text()[-3000:]
    assert "released_in_batch" in seen, "the kill was not held until version 1 was inside a batch"
    app = stream.yarn.application(app_id)
    assert (app["state"], app["finalStatus"]) == ("KILLED", "KILLED"), app
    assert not stream.fs.exists(f"{stream.path(stream.old_cp)}/_ckpt/stop-request.json"), \
        "an un-instrumented job is never asked"

    # the re-run resumes the journal: version 1 has ended, nothing is killed again, and it converges
    run, _ = stream.upgrade(conf)
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    (journal,) = stream.journals()
    assert journal.closed and journal.outcome == "upgraded", journal
    assert len(journal.run_log) >= 2, "the journal saw both runs"
    stop = journal.steps["graceful_stop"]
    assert stop.attempts == 2 and stop.result["outcome"] == "not_running", stop
    assert "ended (killed)" in stop.result["detail"], stop.result
    assert len(stream.yarn.rest(f"/ws/v1/cluster/apps/{app_id}/appattempts")["appAttempts"]["appAttempt"]) == 1, \
        "killed through the ResourceManager: no second attempt"

    ranges = stream.drain()
    rows = delta_rows(spark, table)
    result = audit(Counter((t, p, o) for t, p, o, _ in rows), ranges)
    cut, cut_range = cut_batch_range(stream)
    print(f"adoption on YARN, Delta sink: {result.describe()}; the kill cut batch {cut} ({len(cut_range)} records)")
    assert result.produced > 1000, "the producer must have run through the upgrade"
    assert (result.lost, result.duplicated, result.unexpected) == (0, 0, 0), (
        result.lost_examples, result.duplicated_examples)

    # the negative control: the cut batch's records, and who wrote them
    assert cut_range, "the cut batch planned records"
    writers = {version for t, p, o, version in rows if (t, p, o) in cut_range}
    # not held: only version 2 wrote them (a handover from the planned batch loses all of them);
    # held: only version 1 did (a handover from the committed batch writes all of them twice)
    assert writers in ({"v2"}, {None}), writers


def test_a_foreach_batch_v1_is_refused_without_consent_and_with_it_its_duplicates_are_the_reports_range(
        airflow_home: Any, adoption: Adoption, spark: Any) -> None:  # noqa: ANN401
    """A plain foreachBatch sink is at-least-once: the kill may cut a batch the sink already holds.
    Without ``accept_cut_batch`` the upgrade is refused before anything stops (version 1 runs on);
    with it, the kill is held until version 1 wrote batch N and has not committed it, and the
    records the sink then holds twice are exactly the report's "may be processed twice" range."""
    stream = adoption
    output = f"{stream.root}/output"
    app_id = stream.submit_v1(PLAIN_V1_FOREACH, ["--output", output, "--seconds-after-write", "4"])
    sink = {"kind": "foreach_batch"}

    refused, _ = stream.upgrade(stream.run_conf(app_id, ["--parquet-output", output], sink))
    assert refused.state == "failed"
    (journal,) = stream.journals()
    assert journal.closed and journal.outcome == "refused", journal
    assert "a cut batch may be processed twice" in journal.planning["preflight"].error, journal.planning["preflight"]
    assert stream.yarn.application(app_id)["state"] == "RUNNING", "a refusal stops nothing"

    success = f"{stream.path(output)}/_SUCCESS"

    def wrote(batch: int, last_committed: int) -> bool:
        """Whether version 1 wrote ``batch``: the output's _SUCCESS is newer than the commit of the
        batch before it (each write of a batch rewrites it)."""
        try:
            return bool(stream.fs.info(success)["modificationTime"] >
                        stream.fs.info(f"{stream.path(stream.old_cp)}/commits/{last_committed}")["modificationTime"])
        except FileNotFoundError:
            return False

    conf = stream.run_conf(app_id, ["--parquet-output", output], sink, accept_cut_batch=True,
                           upgrade_id=f"{stream.name}-consented")
    # the standby's rehearsal on HDFS is the first scenario's; here it would only load the machine
    conf["spark_conf"] = {**conf["spark_conf"], CONF_STANDBY_REHEARSAL: "false"}
    run, seen = stream.upgrade(conf, written=wrote)
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    assert "released_in_batch" in seen
    journals = {j.outcome: j for j in stream.journals()}
    account = journals["upgraded"].steps["extract_handover"].result["sink"]
    assert account["disposition"] == "may_repeat", account
    reported = {(r["topic"], r["partition"], o) for r in account["twice"] for o in range(r["start"], r["end"])}

    ranges = stream.drain()
    frame = spark.read.parquet(output).selectExpr("topic", "partition", "offset")
    seen_records = Counter((r[0], r[1], r[2]) for r in frame.collect())
    result = audit(seen_records, ranges)
    cut, cut_range = cut_batch_range(stream)
    print(f"adoption on YARN, foreachBatch sink with consent: {result.describe()}; the kill cut batch {cut}; "
          f"the report's range: {len(reported)} records")
    assert result.lost == 0 and result.unexpected == 0, result.lost_examples
    assert reported and reported == cut_range
    twice = {record for record, n in seen_records.items() if n > 1}
    assert twice == reported, f"{len(twice)} records written twice, {len(reported)} in the report's range"
    assert result.duplicated == len(reported)
