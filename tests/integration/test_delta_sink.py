"""Delta Lake as the sink, for real: Kafka -> Spark (default trigger) -> Delta, moved to a new checkpoint.

Each case runs version 1 into a Delta table until the table's log has a Parquet checkpoint,
stops it between batches, hands its last committed batch over to version 2 on a NEW checkpoint
and counts every Kafka (partition, offset) in the table, with a producer writing while version 2
starts and runs:

* foreachBatch with Delta idempotent writes and a CONSTANT ``txnAppId`` (Delta's documented
  pattern): the naive upgrade loses records — the negative control; the provider's preflight
  refuses it before anything stops, and verify on the sink fails it;
* the same writes with :func:`~airflow_ckpt_provider.spark.delta_txn_options` (txnAppId = the
  checkpoint's query id): 0 lost, 0 duplicated, preflight and verify pass. These two foreachBatch
  writers run in one upgrade: its two versions write every batch to a table of each, so both
  tables see the same batches, the same stop and the same handover;
* the Delta streaming sink: the preflight reads the old query's last batch from the table's own
  log, verify finds every batch of the new query there; 0 lost, 0 duplicated;
* the Delta streaming sink with a batch cut after Delta's commit and before Spark's (a fault in
  the driver): the handover step's sink ledger hands over after it; 0 lost, 0 duplicated.

And a foreachBatch MERGE (upsert keyed by the record key) through the provider's path —
:func:`~airflow_ckpt_provider.spark.foreach_batch` and
:func:`~airflow_ckpt_provider.spark.delta_txn_conf` — stopped at the sink gate while the producer
runs: each key's row is its last record in Kafka and counts exactly its records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider import faults
from airflow_ckpt_provider.checkpoint import reconcile
from airflow_ckpt_provider.checkpoint.errors import CheckpointError, DeltaWritesSkipped, SinkNotDelivered
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator
from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator
from airflow_ckpt_provider.sinks import SinkKind, SinkSpec, inspect_sink, verify_sink
from airflow_ckpt_provider.sinks.delta import DeltaLog
from airflow_ckpt_provider.spark import delta_txn_conf, delta_txn_options, foreach_batch
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade.record import UpgradeIntent
from tests.harness.records import ContinuousProducer
from tests.integration.streams import batch_ids, fail_commit_of_a_coming_batch
from tests.integration.test_graceful_stop import start_job  # noqa: F401 - the old version's fixture
from tests.integration.test_standby import hook  # noqa: F401 - the launcher's fixture

pytestmark = pytest.mark.integration

LOCAL = fsspec.filesystem("file")
#: New tables here write a Parquet checkpoint every 4 commits (Delta's default: 10), and version 1
#: runs past one, so the log is read from a checkpoint and the commits after it.
CHECKPOINT_INTERVAL = 4
OLD_BATCHES = 6
#: Generous bounds for a loaded machine: they only end a broken run.
DEADLINE_S = 600.0
REPO = Path(__file__).resolve().parents[2]
#: The switchover step in a worker process of its own (argv[1]: its arguments as JSON), with a fault
#: point armed by the environment; prints the step's result as its last line when it completes.
SWITCHOVER_WORKER = """
import json, sys
from types import SimpleNamespace
from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator
from tests.integration.test_launch_real import _TI
step = StandbySwitchoverOperator(**json.loads(sys.argv[1]))
result = step.execute({"run_id": "run-1", "ti": _TI(), "dag": SimpleNamespace(dag_id="upgrade")})
print(json.dumps(result))
"""

Writer = Callable[[Any, str, Sequence[str]], Any]  # (frame, checkpoint, tables) -> a started query
BatchWrite = Callable[[Any, Any, int, str, str], None]  # (session, batch, batch id, checkpoint, table)


@pytest.fixture(autouse=True)
def delta_checkpoints_every_few_commits(spark) -> Iterator[None]:
    key = "spark.databricks.delta.properties.defaults.checkpointInterval"
    spark.conf.set(key, str(CHECKPOINT_INTERVAL))
    yield
    spark.conf.unset(key)


def constant_txn(app_id: str) -> BatchWrite:
    """Delta's documented idempotent writes, with a CONSTANT ``txnAppId``."""

    def write(spark: Any, batch: Any, batch_id: int, checkpoint: str, table: str) -> None:
        (batch.write.format("delta").option("txnAppId", app_id).option("txnVersion", batch_id)
         .mode("append").save(table))

    return write


def checkpoint_txn(spark: Any, batch: Any, batch_id: int, checkpoint: str, table: str) -> None:
    """The same writes with the provider's options: ``txnAppId`` = the checkpoint's query id."""
    batch.write.format("delta").options(**delta_txn_options(spark, checkpoint, batch_id)).mode("append").save(table)


def foreach_batch_to(*writes: BatchWrite) -> Writer:
    """A foreachBatch query writing each batch to every table, the i-th with ``writes[i]`` (the
    batch persisted once, as Spark's guide has it for writing a batch to several locations)."""

    def start(frame: Any, checkpoint: str, tables: Sequence[str]) -> Any:
        spark = frame.sparkSession

        def write(batch: Any, batch_id: int) -> None:
            batch.persist()
            try:
                for one, table in zip(writes, tables, strict=True):
                    one(spark, batch, batch_id, checkpoint, table)
            finally:
                batch.unpersist()

        return frame.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint).start()

    return start


def streaming_sink(frame: Any, checkpoint: str, tables: Sequence[str]) -> Any:
    (table,) = tables
    return frame.writeStream.format("delta").option("checkpointLocation", checkpoint).start(table)


def records(spark: Any, bootstrap: str, topic: str, starting_offsets: str = "earliest") -> Any:
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", starting_offsets)
            .option("failOnDataLoss", "true").load().selectExpr("topic", "partition", "offset"))


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {DEADLINE_S:.0f} s: {what}"
        time.sleep(0.2)


def committed(checkpoint: Path) -> list[int]:
    return batch_ids(checkpoint / "commits") if (checkpoint / "commits").is_dir() else []


def last_committed(checkpoint: Path) -> int:
    """The highest committed batch id (-1: none): batch ids, never a count of commit files, which
    Spark purges past minBatchesToRetain."""
    return max(committed(checkpoint), default=-1)


def stop_between_batches(query: Any, producer: ContinuousProducer) -> int:
    """Stop the producer, let the query process everything, then stop it: with no new data the
    default trigger plans no batch, so no batch is cut. Returns the records produced."""
    produced = producer.stop()
    query.processAllAvailable()
    query.stop()
    return produced


def audit(spark: Any, table: str, bootstrap: str, topic: str) -> tuple[int, int, int]:
    """(records in Kafka, lost, duplicated) of the table against the topic's log end."""
    ends = KafkaBroker(bootstrap).view([topic]).partitions(topic)
    expected = {(p, o) for p, (_, end) in ends.items() for o in range(end)}
    seen = Counter((row.partition, row.offset) for row in spark.read.format("delta").load(table).collect())
    return len(expected), len(expected - set(seen)), sum(n - 1 for n in seen.values() if n > 1)


@pytest.fixture
def kafka_connection(kafka, monkeypatch: pytest.MonkeyPatch) -> str:
    conn = {"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": kafka.bootstrap_servers}}
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_DELTA_KAFKA", json.dumps(conn))
    return "ckpt_delta_kafka"


def preflight(spec: SinkSpec, old_cp: Path, tmp: Path, kafka_conn_id: str) -> dict[str, Any]:
    """The provider's preflight, as the reference DAG runs it, while version 1 runs."""
    operator = UpgradePreflightOperator(
        task_id="preflight", stream_name="orders", old_checkpoint_uri=str(old_cp),
        new_checkpoint_uri=str(tmp / "new-cp"), archive_root=str(tmp / "archive"), kafka_conn_id=kafka_conn_id,
        sink=spec.to_json(), journal=False)
    return operator.execute({"run_id": "manual__delta"})  # type: ignore[arg-type]


def upgrade(spark: Any, kafka: Any, topic: str, tmp: Path, old: Writer, new: Writer,
            specs: Sequence[SinkSpec], kafka_conn_id: str) -> list[dict[str, Any]]:
    """Version 1 with ``old`` to the tables of ``specs``; the preflight of each (its sink finding,
    or its refusal) while version 1 runs; a clean stop; version 2 with ``new`` from the handover
    while a producer runs; then verify's sink finding (or its error) and the audit of each table.
    One outcome per spec, in order."""
    bootstrap = kafka.bootstrap_servers
    old_cp, new_cp, tables = tmp / "old-cp", tmp / "new-cp", [spec.location for spec in specs]
    producer = ContinuousProducer(bootstrap, topic, rate=300).start()
    v1 = old(records(spark, bootstrap, topic), str(old_cp), tables)
    wait_for(lambda: last_committed(old_cp) >= OLD_BATCHES - 1, f"{OLD_BATCHES} batches of version 1")
    outcomes: list[dict[str, Any]] = [{} for _ in specs]
    for spec, outcome in zip(specs, outcomes, strict=True):
        try:
            outcome["preflight"] = preflight(spec, old_cp, tmp, kafka_conn_id)
        except DeltaWritesSkipped as exc:
            outcome["refused"] = exc
        assert not (tmp / "new-cp").exists() and not (tmp / "archive").exists(), "the preflight changes nothing"
    stop_between_batches(v1, producer)
    reader = CheckpointReader(str(old_cp))
    handover = reader.handover()
    assert handover.in_flight_batch is None and handover.batch_id == committed(old_cp)[-1]
    for spec, outcome in zip(specs, outcomes, strict=True):
        outcome["handover"] = handover
        if "refused" not in outcome:
            outcome["finding"] = inspect_sink(LOCAL, spec.location, spec, old_query_id=handover.query_id)

    producer = ContinuousProducer(bootstrap, topic, rate=300).start()  # records arrive during the switch
    handed = handover.kafka_offsets()

    def arrived() -> bool:
        ranges = KafkaBroker(bootstrap).view([topic]).partitions(topic)
        return any(end > (handed.get(topic, p) or 0) for p, (_, end) in ranges.items())

    wait_for(arrived, "records after the handover")
    start = reconcile(handover.kafka_offsets(), KafkaBroker(bootstrap).view([topic])).starting_offsets
    v2 = new(records(spark, bootstrap, topic, start.to_json()), str(new_cp), tables)
    wait_for(lambda: last_committed(new_cp) >= 2, "3 batches of version 2")
    stop_between_batches(v2, producer)
    new_query_id = CheckpointReader(str(new_cp)).snapshot().query_id
    for spec, outcome in zip(specs, outcomes, strict=True):
        try:
            outcome["delivery"] = verify_sink(LOCAL, spec.location, spec, new_query_id=new_query_id,
                                              committed=committed(new_cp), old_query_id=handover.query_id,
                                              handover_batch=handover.batch_id)
        except SinkNotDelivered as exc:
            outcome["not_delivered"] = exc
        outcome["kafka"], outcome["lost"], outcome["duplicated"] = audit(spark, spec.location, bootstrap, topic)
    return outcomes


def test_constant_txn_app_id_loses_records_and_the_checkpoints_query_id_is_exact(
        kafka, kafka_connection, spark, new_topic, tmp_path) -> None:
    """One upgrade, two tables written by the same foreachBatch: a CONSTANT ``txnAppId`` (the
    negative control: records lost, the preflight refuses it, verify fails it) and the
    checkpoint's query id (0 lost, 0 duplicated, preflight and verify pass)."""
    topic = new_topic(3)
    constant_spec = SinkSpec(kind=SinkKind.DELTA_FOREACH_BATCH, location=str(tmp_path / "orders-constant"),
                             txn_app_id="orders-writer")
    spec = SinkSpec(kind=SinkKind.DELTA_FOREACH_BATCH, location=str(tmp_path / "orders"))
    writer = foreach_batch_to(constant_txn("orders-writer"), checkpoint_txn)
    constant, outcome = upgrade(spark, kafka, topic, tmp_path, writer, writer, [constant_spec, spec],
                                kafka_connection)

    for table in (constant_spec.location, spec.location):
        assert DeltaLog(LOCAL, table).listing().checkpoints, \
            f"version 1 ran past a Delta checkpoint of {table} (its txn is read from Parquet)"

    # the constant txnAppId
    refused = constant["refused"]
    assert "'orders-writer' at txnVersion" in refused.found and "Delta would skip its batches 0-" in refused.found
    # what the table recorded when the preflight ran, while version 1 still ran
    skipped_up_to = int(refused.found.split("batches 0-")[1])
    assert 0 < skipped_up_to <= constant["handover"].batch_id
    # the negative control: the same upgrade, run anyway, loses records and nothing else says so
    assert constant["kafka"] > 0 and constant["lost"] > 0, constant
    assert "batch(es) 0" in constant["not_delivered"].found, constant["not_delivered"]

    # the checkpoint's query id, on the same batches
    assert "refused" not in outcome and "not_delivered" not in outcome, outcome
    assert outcome["preflight"]["sink"]["exact"] and "exact" in outcome["preflight"]["summary_md"]
    load = next(line for line in outcome["preflight"]["summary_md"].splitlines() if line.startswith("**Load"))
    assert "behind the broker's log end" in load or "idle" in load, load  # from the real batch history

    finding = outcome["finding"]
    assert finding.exact and finding.old_app_id == outcome["handover"].query_id
    assert finding.old_last_batch == outcome["handover"].batch_id
    delivery = outcome["delivery"]
    assert delivery.checked and sorted(delivery.batches) == committed(tmp_path / "new-cp")
    assert outcome["kafka"] > 0 and (outcome["lost"], outcome["duplicated"]) == (0, 0), outcome


def test_delta_streaming_sink_is_read_from_its_log(kafka, kafka_connection, spark, new_topic, tmp_path) -> None:
    topic = new_topic(3)
    table = str(tmp_path / "events")
    spec = SinkSpec(kind=SinkKind.DELTA, location=table)
    (outcome,) = upgrade(spark, kafka, topic, tmp_path, streaming_sink, streaming_sink, [spec], kafka_connection)
    assert outcome["preflight"]["sink"]["old_app_id"] == outcome["handover"].query_id

    finding = outcome["finding"]
    assert finding.exact and finding.old_last_batch == outcome["handover"].batch_id
    assert DeltaLog(LOCAL, table).transactions()[outcome["handover"].query_id].version == outcome["handover"].batch_id
    delivery = outcome["delivery"]
    assert delivery.checked and sorted(delivery.batches) == committed(tmp_path / "new-cp")
    assert outcome["kafka"] > 0 and (outcome["lost"], outcome["duplicated"]) == (0, 0), outcome


def test_a_batch_cut_after_the_delta_commit_is_handed_over_after_it(kafka, kafka_connection, spark, new_topic,
                                                                    tmp_path) -> None:
    """The Delta streaming sink commits batch M to the table before Spark writes commits/M; the old
    query dies between the two. The ledger reads txn(old query id, M) in the table and hands over
    after M, so the new version writes none of M again: 0 lost, 0 duplicated. The negative control:
    the table holds every record of M's input, so a handover from the last commit (M-1) would have
    written all of them a second time."""
    topic = new_topic(3)
    bootstrap = kafka.bootstrap_servers
    old_cp, new_cp, table = tmp_path / "old-cp", tmp_path / "new-cp", str(tmp_path / "events")
    spec = SinkSpec(kind=SinkKind.DELTA, location=table)
    producer = ContinuousProducer(bootstrap, topic, rate=300).start()
    v1 = streaming_sink(records(spark, bootstrap, topic), str(old_cp), [table])
    wait_for(lambda: last_committed(old_cp) >= 2, "3 batches of version 1")
    cut = fail_commit_of_a_coming_batch(old_cp)
    wait_for(lambda: not v1.isActive, f"version 1 failing to commit batch {cut}")
    assert v1.exception() is not None, "version 1 ended by the injected fault"
    producer.stop()
    (old_cp / "commits" / str(cut)).rmdir()  # the fault, not Spark's data
    assert last_committed(old_cp) == cut - 1 and (old_cp / "offsets" / str(cut)).is_file()
    old_query_id = CheckpointReader(str(old_cp)).snapshot().query_id
    assert DeltaLog(LOCAL, table).transactions()[old_query_id].version == cut, "Delta committed the cut batch"

    extract = CheckpointHandoverOperator(task_id="extract_handover", checkpoint_uri=str(old_cp),
                                         kafka_conn_id=kafka_connection, sink=spec.to_json())
    result = HandoverResult.from_json(extract.execute({}))  # type: ignore[arg-type]
    assert result.handover.batch_id == cut and result.handover.held_by_sink, result.handover
    assert result.sink is not None and result.sink["disposition"] == "held" and result.sink["exact"]
    # negative control: the cut batch's input is in the table whole; from commit M-1 it would be written twice
    naive = CheckpointReader(str(old_cp)).handover().kafka_offsets()
    held = result.handover.kafka_offsets()
    cut_input = {(p, o) for _, p, end in held.items() for o in range(naive.get(topic, p) or 0, end)}
    in_table = {(r.partition, r.offset) for r in spark.read.format("delta").load(table).collect()}
    assert cut_input and cut_input <= in_table, "the table holds the cut batch, so a naive start duplicates it"

    producer = ContinuousProducer(bootstrap, topic, rate=300).start()  # records arrive during the switch
    v2 = streaming_sink(records(spark, bootstrap, topic, result.offsets().to_json()), str(new_cp), [table])
    wait_for(lambda: last_committed(new_cp) >= 2, "3 batches of version 2")
    stop_between_batches(v2, producer)
    delivery = verify_sink(LOCAL, table, spec, new_query_id=CheckpointReader(str(new_cp)).snapshot().query_id,
                           committed=committed(new_cp), old_query_id=old_query_id, handover_batch=cut)
    assert delivery.checked
    produced, lost, duplicated = audit(spark, table, bootstrap, topic)
    assert produced > 0 and (lost, duplicated) == (0, 0), (produced, lost, duplicated, len(cut_input))


# -- a foreachBatch MERGE (upsert), stopped at the sink gate -------------------------------------------

#: keys repeat: every key gets many records, so "the last record for the key" is a real choice
KEYS = 40
#: MERGE batches are slow (several Spark jobs each): version 1 runs to the table's first Delta
#: checkpoint (version 0 creates the table, with CHECKPOINT_INTERVAL MERGEs after it)
MERGE_OLD_BATCHES = CHECKPOINT_INTERVAL
MERGE_SQL = """
MERGE INTO delta.`{table}` t USING {view} s ON t.key = s.key
WHEN MATCHED THEN UPDATE SET t.`partition` = s.`partition`, t.`offset` = s.`offset`, t.value = s.value,
                             t.records = t.records + s.records
WHEN NOT MATCHED THEN INSERT *
"""


def keyed(prefix: str, keys: int, late: int = 0) -> Callable[[int], tuple[bytes, bytes]]:
    """Records whose keys repeat (``<prefix>-<i mod keys>``); with ``late``, every other record has
    one of ``late`` keys no earlier record had (``late-<i mod late>``)."""

    def record(i: int) -> tuple[bytes, bytes]:
        key = f"late-{i % late}" if late and i % 2 else f"{prefix}-{i % keys}"
        return key.encode(), f"{prefix}-record-{i}".encode()

    return record


def keyed_records(spark: Any, bootstrap: str, topic: str, starting_offsets: str = "earliest") -> Any:
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", starting_offsets)
            .option("failOnDataLoss", "true").load()
            .selectExpr("CAST(key AS STRING) AS key", "partition", "offset", "CAST(value AS STRING) AS value"))


def merge_upsert(frame: Any, checkpoint: str, table: str) -> Any:
    """The job's writer: per batch, the last record of each key (and how many the batch had) MERGEd
    into the table keyed by the record key — not idempotent by itself (``records`` adds up), so a
    batch applied twice or skipped shows. Behind the provider's gate (:func:`foreach_batch`), an
    idempotent Delta write with the checkpoint's query id (:func:`delta_txn_conf`)."""
    from pyspark.sql import functions as F

    def upsert(batch: Any, batch_id: int) -> None:
        latest = (batch.groupBy("key")
                  .agg(F.max_by(F.struct("partition", "offset", "value"), "offset").alias("last"),
                       F.count("*").alias("records"))
                  .selectExpr("key", "last.partition AS `partition`", "last.offset AS `offset`", "last.value AS value",
                              "records"))
        view = f"upserts_{batch_id}"
        latest.createOrReplaceTempView(view)
        session = batch.sparkSession
        with delta_txn_conf(session, checkpoint, batch_id):
            session.sql(MERGE_SQL.format(table=table, view=view))
        session.catalog.dropTempView(view)

    return (frame.writeStream.foreachBatch(foreach_batch(upsert, checkpoint))
            .option("checkpointLocation", checkpoint).start())


def create_keyed_table(spark: Any, table: str) -> None:
    spark.createDataFrame([], "key STRING, `partition` INT, `offset` BIGINT, value STRING, records BIGINT") \
        .write.format("delta").save(table)


def last_record_per_key(bootstrap: str, topic: str) -> tuple[dict[str, tuple[int, int, str]], Counter[str], int]:
    """Read the whole topic with kafka-python: each key's last record (partition, offset, value),
    each key's record count, and the records read."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        last: dict[str, tuple[int, int, str]] = {}
        counts: Counter[str] = Counter()
        read = 0
        deadline = time.monotonic() + DEADLINE_S
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            assert time.monotonic() < deadline, "the topic was not read to its end"
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                for m in messages:
                    if m.offset >= ends[tp]:
                        continue
                    key = m.key.decode()
                    if key in last:
                        assert last[key][0] == m.partition, f"key {key} in two partitions"
                        assert last[key][1] < m.offset
                    last[key] = (m.partition, m.offset, m.value.decode())
                    counts[key] += 1
                    read += 1
        assert read == sum(ends.values()), "every offset from 0 was read (no retention gap)"
        return last, counts, read
    finally:
        consumer.close()


def delta_versions(spark: Any, table: str) -> list[tuple[int, str]]:
    return sorted((row.version, row.operation)
                  for row in spark.sql(f"DESCRIBE HISTORY delta.`{table}`").select("version", "operation").collect())


def test_foreach_batch_merge_holds_each_keys_last_record(kafka, kafka_connection, spark, new_topic,
                                                        tmp_path) -> None:
    """A foreachBatch MERGE (upsert keyed by the record key) through the provider's path: v1 stopped
    at the sink gate while the producer runs, v2 on a new checkpoint from the handover, new keys
    arriving during the switch. Every key's row is its last record in Kafka, and its ``records``
    count is the key's record count in Kafka: no batch lost, none applied twice. Delta honours the
    txn pair for MERGE: each MERGE records the query id and batch id in the log (so preflight and
    verify read it), and a MERGE replayed with a recorded pair is skipped."""
    from airflow_ckpt_provider.spark import GracefulStop
    from airflow_ckpt_provider.storage.stop import ControlFiles

    bootstrap = kafka.bootstrap_servers
    topic = new_topic(3)
    old_cp, new_cp, table = tmp_path / "old-cp", tmp_path / "new-cp", str(tmp_path / "customers")
    spec = SinkSpec(kind=SinkKind.DELTA_FOREACH_BATCH, location=table)
    create_keyed_table(spark, table)
    producer = ContinuousProducer(bootstrap, topic, rate=300, record=keyed("k", KEYS)).start()
    v1 = merge_upsert(keyed_records(spark, bootstrap, topic), str(old_cp), table)
    stopped: dict[str, Any] = {}

    def run_v1() -> None:
        try:
            stopped["ack"] = GracefulStop(spark, v1, str(old_cp), heartbeat_interval=0.5, poll_interval=0.2).run()
        except Exception as exc:  # noqa: BLE001 - asserted below
            stopped["error"] = exc

    driver = threading.Thread(target=run_v1, name="v1-graceful-stop")
    driver.start()
    wait_for(lambda: last_committed(old_cp) >= MERGE_OLD_BATCHES - 1 or not driver.is_alive(),
             f"{MERGE_OLD_BATCHES} batches of version 1")
    assert preflight(spec, old_cp, tmp_path, kafka_connection)["sink"]["exact"]

    # the stop, producer running: the gate holds the next batch before it writes
    ControlFiles(LOCAL, str(old_cp)).request_stop("test", "merge upgrade", DEADLINE_S)
    driver.join(DEADLINE_S)
    assert not driver.is_alive() and "error" not in stopped, stopped
    ack = stopped["ack"]
    assert ack is not None and ack.outcome in ("held", "clean"), ack
    handover = CheckpointReader(str(old_cp)).handover()
    assert handover.in_flight_batch is None or ack.outcome == "held"
    assert handover.batch_id == ack.last_committed_batch == committed(old_cp)[-1]
    finding = inspect_sink(LOCAL, table, spec, old_query_id=handover.query_id)
    assert finding.exact and finding.old_last_batch == handover.batch_id, finding  # the held batch: nothing

    # v2 from the handover; new keys arrive during the switch
    late = ContinuousProducer(bootstrap, topic, rate=200, record=keyed("n", KEYS, late=7)).start()
    start = reconcile(handover.kafka_offsets(), KafkaBroker(bootstrap).view([topic])).starting_offsets
    v2 = merge_upsert(keyed_records(spark, bootstrap, topic, start.to_json()), str(new_cp), table)
    wait_for(lambda: last_committed(new_cp) >= 2, "3 batches of version 2")
    producer.stop()
    late.stop()
    v2.processAllAvailable()
    v2.stop()

    new_query_id = CheckpointReader(str(new_cp)).snapshot().query_id
    delivery = verify_sink(LOCAL, table, spec, new_query_id=new_query_id, committed=committed(new_cp),
                           old_query_id=handover.query_id, handover_batch=handover.batch_id)
    assert delivery.checked and sorted(delivery.batches) == committed(new_cp)[:len(delivery.batches)], delivery
    history = delta_versions(spark, table)
    assert {op for version, op in history if version > 0} == {"MERGE"}, history
    txns = DeltaLog(LOCAL, table).transactions()
    assert handover.query_id and new_query_id
    assert txns[handover.query_id].version == handover.batch_id
    assert txns[new_query_id].version == committed(new_cp)[-1]

    last, counts, read = last_record_per_key(bootstrap, topic)
    assert any(key.startswith("late-") for key in last), "keys first seen after the handover"
    rows = {row.key: row for row in spark.read.format("delta").load(table).collect()}
    assert set(rows) == set(last), (sorted(set(last) - set(rows)), sorted(set(rows) - set(last)))
    wrong = {key: ((r.partition, r.offset, r.value), last[key]) for key, r in rows.items()
             if (r.partition, r.offset, r.value) != last[key]}
    assert not wrong, wrong
    miscounted = {key: (r.records, counts[key]) for key, r in rows.items() if r.records != counts[key]}
    assert not miscounted, f"(table, Kafka) records per key; more = a batch applied twice, fewer = lost: {miscounted}"
    assert sum(r.records for r in rows.values()) == read > 0

    # Delta honours the pair for MERGE: a MERGE under a pair it recorded is skipped — a batch
    # replayed by the new query, and (the naive job's loss) a new checkpoint's batch 0 under the
    # OLD query's appId, which a constant txnAppId would present
    replay = spark.createDataFrame([(next(iter(rows)), 0, 0, "replayed", 1000)],
                                   "key STRING, `partition` INT, `offset` BIGINT, value STRING, records BIGINT")
    replay.createOrReplaceTempView("replayed")
    for checkpoint, batch in ((new_cp, committed(new_cp)[-1]), (old_cp, 0)):
        with delta_txn_conf(spark, str(checkpoint), batch):
            spark.sql(MERGE_SQL.format(table=table, view="replayed"))
        assert delta_versions(spark, table) == history, f"a MERGE as batch {batch} of {checkpoint.name} was skipped"
    spark.catalog.dropTempView("replayed")


# -- a switchover on a busy Delta stream: the stop cuts a batch, the provider takes over ----------


def test_a_switchover_whose_stop_cuts_a_delta_batch_is_taken_over_with_the_tables_own_record(
        kafka, kafka_connection, spark, start_job, hook, tmp_path) -> None:  # noqa: ANN001, F811
    """Real drivers: version 1 streams into a Delta table on Spark's default trigger with slow
    batches (one is almost always running), version 2 waits as a standby writing the SAME table.
    The switchover's stop cuts the running batch (acknowledged ``interrupted``); the standby refuses
    and the step takes over: the ledger reads the table's own record of the old query's batches
    (``txn`` of its query id), hands over after the cut batch when Delta committed it, and releases
    the standby there. The step runs in a worker process of its own that is killed (SIGKILL) right
    after that release (``switchover:taken_over``): the retry, on the same journal, releases nothing
    a second time and takes the standby's first commit from the release it noted. With the producer
    running throughout, the table holds every Kafka (partition, offset) exactly once."""
    from airflow_ckpt_provider.checkpoint.switchover import SwitchoverResult, TakenBy
    from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator
    from airflow_ckpt_provider.records.control import STANDBY_RELEASE, STOP_ACK, StopAck
    from tests.integration.test_launch_real import _TI, run_operator
    from tests.integration.test_standby import START_TIMEOUT_S, launch_standby, wait_standby

    launcher, handles = hook
    old = start_job("busy-delta-cut", rate=50, partitions=2)
    table, new_cp = str(old.sink), tmp_path / "v2-cp"
    # side by side: the standby needs nothing of the old query (nor of the table) until it is released
    standby = launch_standby(launcher, handles, new_cp, old.topic, kafka.bootstrap_servers, old.sink, args=["--delta"])
    old.wait_for_batches(3, heartbeat=True)
    wait_standby(new_cp, standby, launcher)
    spec = SinkSpec(kind=SinkKind.DELTA, location=table)
    journal = UpgradeJournal(fsspec.filesystem("file"), str(tmp_path / "archive" / "up-1.json"))
    journal.open(UpgradeIntent(stream_name="orders", old_checkpoint=str(old.checkpoint), new_checkpoint=str(new_cp)),
                 "up-1", run_id="run-1")
    journal.record_planning("preflight", run_id="run-1", result={"relaunch_mode": "switchover"})  # the path
    journal.begin("start_standby", run_id="run-1")  # the step before the switchover on that path: done
    journal.finish("start_standby", standby.to_dict())
    args: dict[str, Any] = {
        "task_id": "switchover", "application": "unused: the standby runs", "checkpoint_uri": str(new_cp),
        "old_checkpoint_uri": str(old.checkpoint), "standby_handle": standby.to_dict(), "stop_timeout": 180,
        "first_commit_timeout": START_TIMEOUT_S, "poll_interval": 0.5, "quiet_period": 2,
        "kafka_conn_id": kafka_connection, "sink": spec.to_json(), "journal": journal.path, "master": "local[2]"}
    old_query_id = CheckpointReader(str(old.checkpoint)).snapshot().query_id

    def logs() -> str:
        return f"{old.log.read_text()[-3000:]}\n--- standby ---\n{launcher.log_tail(standby, 60)}"

    # the first attempt, in a worker of its own, killed right after the provider's release (if it gets there)
    fired = tmp_path / "faults.log"
    env = {**os.environ, faults.ENV: "switchover:taken_over", faults.LOG_ENV: str(fired), "PYTHONPATH": str(REPO)}
    worker = subprocess.run([sys.executable, "-c", SWITCHOVER_WORKER, json.dumps(args)], env=env,
                            capture_output=True, text=True, timeout=1800, cwd=REPO)
    assert old.proc.wait(timeout=180) == 0
    ack = StopAck.from_json((old.checkpoint / STOP_ACK).read_bytes())
    if ack.outcome == "interrupted":  # the case this test is for (a batch runs almost all the time)
        assert worker.returncode == -9 and "switchover:taken_over" in fired.read_text(), worker.stderr[-3000:]
        noted = journal.step("switchover")
        assert noted is not None and noted.state == "started" and "fallback" in noted.notes, noted
        release_bytes = (new_cp / STANDBY_RELEASE).read_bytes()
        step = StandbySwitchoverOperator(**args)
        step.__dict__["launcher_hook"] = launcher
        try:
            result = SwitchoverResult.from_json(run_operator(step, {"run_id": "run-2", "ti": _TI()}))
        except Exception as exc:
            raise AssertionError(logs()) from exc
        assert (new_cp / STANDBY_RELEASE).read_bytes() == release_bytes, "no second release"
        done = journal.step("switchover")
        assert done is not None and done.state == "done" and done.attempts == 2, done
    else:
        assert worker.returncode == 0, f"{worker.stderr[-3000:]}\n{logs()}"
        result = SwitchoverResult.from_json(worker.stdout.strip().splitlines()[-1])
    taken = HandoverResult.from_json(result.handover)
    if ack.outcome == "interrupted":
        assert result.taken_by is TakenBy.PROVIDER and result.used["reason"] == "stop_not_clean", result
        assert taken.sink is not None and taken.sink["exact"], taken.sink
        in_table = DeltaLog(LOCAL, table).transactions()[old_query_id].version
        assert taken.handover.batch_id == in_table, "handed over after the old query's last batch in the table"
        print(f"cut batch {ack.last_planned_batch}: the table's own record says batch {in_table} is the last "
              f"written; handed over after it ({taken.sink['disposition']})")
    else:  # the stop found the gap between two batches after all: the standby took over by itself
        print(f"the stop found a batch boundary ({ack.outcome}): the standby took over, no fallback this run")
        assert result.taken_by is TakenBy.STANDBY, result
    (initial,) = CheckpointReader(str(new_cp)).snapshot(include_initial=True).initial_sources
    assert initial.kafka == taken.offsets(), "the standby started at the provider's handover"

    old.producer.stop()  # type: ignore[union-attr]
    ends = KafkaBroker(kafka.bootstrap_servers).view([old.topic]).partitions(old.topic)

    def caught_up() -> bool:
        try:
            last = CheckpointReader(str(new_cp)).handover()
        except CheckpointError:  # a batch file being written as we read
            return False
        return last.in_flight_batch is None and all(
            last.kafka_offsets().get(old.topic, p) == end for p, (_, end) in ends.items())

    wait_for(caught_up, "version 2 to commit the log end")
    produced, lost, duplicated = audit(spark, table, kafka.bootstrap_servers, old.topic)
    print(f"delta switchover: produced {produced}, lost {lost}, duplicated {duplicated}")
    assert produced > 0 and (lost, duplicated) == (0, 0), (produced, lost, duplicated)
