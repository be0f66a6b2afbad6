"""The new version starts from the old query's exported state: real Kafka, real Spark, state
written and exported by Spark, and every customer's total compared with Kafka itself.

Version 1 of the demo's purchases job runs to a checkpoint; its state is exported as the
operator does it; more purchases arrive; version 2 starts from the handover with the export
(the seed-stream pattern, and transformWithStateInPandas with initialState). For EVERY customer
v2's total and count equal the sums over all purchases in the topic. The negative control — v2
from the same handover without the export — fails the same check.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.local.kafka import LocalKafka
from airflow_ckpt_provider.records.control import CONF_INITIAL_STATE_PATH
from airflow_ckpt_provider.spark.state import (
    StateMappingError,
    StateNotExported,
    aggregate_state,
    initial_state,
    initial_state_for,
    state_watermark_ms,
)
from airflow_ckpt_provider.spark.state_export import export_state
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.state import finish_export, plan_state_export
from tests.harness.records import purchase
from tests.harness.state_audit import compare_totals, kafka_totals
from tests.integration.streams import spark_conf

pytestmark = pytest.mark.integration

JOBS = Path(__file__).resolve().parents[2] / "dags" / "jobs"
sys.path.insert(0, str(JOBS))
import purchases_v1  # noqa: E402
import purchases_v2  # noqa: E402

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHECKPOINT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"


def produce(kafka: LocalKafka, topic: str, start: int, count: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all")
    try:
        for i in range(start, start + count):
            key, value = purchase(i)
            producer.send(topic, key=key, value=value)
        producer.flush()
    finally:
        producer.close()


def kafka_frame(spark: Any, kafka: LocalKafka, topic: str, starting: str = "earliest") -> Any:
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", topic).option("startingOffsets", starting).option("maxOffsetsPerTrigger", 400)
            .load())


def run_to_end(frame: Any, checkpoint: Path, *, collect: dict[int, tuple[int, int]] | None = None) -> None:
    """Run an aggregation in update mode until everything in Kafka now is read; ``collect`` gets
    each customer's latest (total, n)."""
    def keep(batch: Any, _batch_id: int) -> None:
        if collect is None:  # the batch must run: its stateful operator updates the state as it does
            batch.write.format("noop").mode("overwrite").save()
            return
        for row in batch.select("customer", "total", "n").collect():
            collect[int(row.customer)] = (int(row.total), int(row.n))

    query = (frame.writeStream.outputMode("update").foreachBatch(keep).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(300), "query did not finish within 300 s"
    assert query.exception() is None, query.exception()


@pytest.fixture(scope="module")
def upgraded(spark, kafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:  # noqa: ANN001
    """v1 over 1,500 purchases, stopped; its export; 900 more purchases."""
    work = tmp_path_factory.mktemp("seed")
    topic = "purchases-seed"
    kafka.create_topic(topic, 3)
    produce(kafka, topic, 0, 1500)
    v1_cp = work / "v1"
    run_to_end(purchases_v1.transform(spark, kafka_frame(spark, kafka, topic)), v1_cp)
    plan = plan_state_export(CheckpointReader(str(v1_cp)))
    assert plan.batch_id is not None and plan.batch_id >= 2
    export = work / "export"
    result = export_state(spark, str(v1_cp), plan.batch_id, str(export))
    finish_export(fsspec.filesystem("file"), str(export), plan, result, uri=str(export), upgrade_id="seed")
    handover = CheckpointReader(str(v1_cp)).handover().kafka_offsets().to_json()
    produce(kafka, topic, 1500, 900)
    yield {"topic": topic, "export": export, "handover": handover, "work": work, "v1": v1_cp}
    spark.conf.unset(CONF_INITIAL_STATE_PATH)


def v2_totals(spark: Any, kafka: LocalKafka, upgraded: dict[str, Any], name: str, export: Path | None) -> dict:
    if export is None:
        spark.conf.unset(CONF_INITIAL_STATE_PATH)
    else:
        spark.conf.set(CONF_INITIAL_STATE_PATH, str(export))
    seen: dict[int, tuple[int, int]] = {}
    frame = purchases_v2.transform(spark, kafka_frame(spark, kafka, upgraded["topic"], upgraded["handover"]))
    run_to_end(frame, upgraded["work"] / name, collect=seen)
    return seen


def test_v2_continues_every_total_from_the_export(spark, kafka, upgraded) -> None:  # noqa: ANN001
    truth = kafka_totals(kafka.bootstrap_servers, upgraded["topic"])
    assert len(truth) == 50 and sum(n for _, n in truth.values()) == 2400
    seeded = compare_totals(truth, v2_totals(spark, kafka, upgraded, "v2", upgraded["export"]))
    print(f"seeded: customers {seeded.customers}, mismatched {seeded.mismatched}")
    assert seeded.ok, seeded.examples
    # the negative control: the same upgrade without the export fails the same check
    control = compare_totals(truth, v2_totals(spark, kafka, upgraded, "v2-control", None))
    print(f"control: customers {control.customers}, mismatched {control.mismatched}")
    assert control.mismatched == control.customers == 50, control.examples


def test_the_seed_read_in_the_session_is_the_export_and_continues_every_total(spark, kafka, upgraded,  # noqa: ANN001
                                                                               tmp_path: Path) -> None:
    """A switchover's standby seeds the state in its own session (no export job): the same rows and
    checksum per store as the provider's export of the same batch, and v2 started from the seed
    continues every customer's total. A seed of another batch differs from the export, and the
    provider's check says so."""
    from airflow_ckpt_provider.checkpoint.errors import SeededStateMismatch
    from airflow_ckpt_provider.checkpoint.state import check_seeded_state
    from airflow_ckpt_provider.spark.state_seed import seed_state
    from airflow_ckpt_provider.storage.state import read_manifest

    fs = fsspec.filesystem("file")
    export = read_manifest(fs, str(upgraded["export"]))
    handover = CheckpointReader(str(upgraded["v1"])).handover()
    assert export is not None and export.batch_id == handover.batch_id and export.rows == 50
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    seed = seed_state(spark, handover, handover.batch_id, str(tmp_path / "seed"), upgrade_id="r1")
    assert seed is not None and spark.conf.get("spark.sql.shuffle.partitions") == partitions
    assert read_manifest(fs, str(tmp_path / "seed")) == seed, "the seed's manifest is written"
    assert [(s.operator_id, s.store_name, s.rows) for s in seed.stores] == \
        [(s.operator_id, s.store_name, s.rows) for s in export.stores]
    assert all(s.checksum and s.checksum != "0" for s in export.stores), export.stores
    check_seeded_state(seed, export, uri=str(tmp_path / "seed"))  # equal: no error

    truth = kafka_totals(kafka.bootstrap_servers, upgraded["topic"])
    seeded = compare_totals(truth, v2_totals(spark, kafka, upgraded, "v2-from-seed", tmp_path / "seed"))
    assert seeded.ok, seeded.examples

    earlier = seed_state(spark, handover, handover.batch_id - 1, str(tmp_path / "earlier"), upgrade_id="r2")
    assert earlier is not None and earlier.batch_id == handover.batch_id - 1
    with pytest.raises(SeededStateMismatch) as mismatch:
        check_seeded_state(earlier, export, uri=str(tmp_path / "earlier"))
    assert f"the seed of batch {handover.batch_id - 1}" in mismatch.value.found
    assert "checksum" in mismatch.value.found, "the state of another batch has other totals"


def test_aggregate_buffers_map_to_user_columns(spark, kafka, upgraded, tmp_path: Path) -> None:  # noqa: ANN001
    from pyspark.sql import functions as F

    # every mappable aggregate of one query, read back as user columns, equals a batch recomputation
    rows = purchases_v1.purchases(kafka_frame(spark, kafka, upgraded["topic"]))
    agg = rows.groupBy("customer").agg(F.sum("amount").alias("s"), F.count("*").alias("c"), F.min("amount"),
                                       F.max("amount"), F.avg("amount"))
    checkpoint, export = tmp_path / "all", tmp_path / "all-export"
    run_to_end(agg.withColumnRenamed("s", "total").withColumnRenamed("c", "n"), checkpoint)
    plan = plan_state_export(CheckpointReader(str(checkpoint)))
    result = export_state(spark, str(checkpoint), plan.batch_id, str(export))  # type: ignore[arg-type]
    finish_export(fsspec.filesystem("file"), str(export), plan, result, uri=str(export), upgrade_id="all")
    listed = [("total", "sum"), ("n", "count"), ("low", "min"), ("high", "max"), ("mean", "avg")]
    state = {r.customer: r for r in aggregate_state(spark, listed, key=["customer"], path=str(export)).collect()}
    batch = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("subscribe", upgraded["topic"]).load())
    truth = purchases_v1.purchases(batch).groupBy("customer").agg(
        F.sum("amount").alias("total"), F.count("*").alias("n"), F.min("amount").alias("low"),
        F.max("amount").alias("high"), F.sum("amount").alias("mean_sum")).collect()
    assert len(state) == len(truth) == 50
    for row in truth:
        got = state[row.customer]
        assert (got.total, got.n, got.low, got.high) == (row.total, row.n, row.low, row.high)
        assert (got.mean_sum, got.mean_count) == (row.mean_sum, row.n) and abs(got.mean - row.total / row.n) < 1e-9

    with pytest.raises(StateMappingError, match="collect_list"):
        aggregate_state(spark, [("x", "collect_list")], path=str(export))
    with pytest.raises(StateMappingError, match=r"found value buffers \(sum, count, min, max, sum, count\).*expected 'min' at position 1"):
        aggregate_state(spark, [("total", "sum"), ("low", "min")], path=str(export))
    with pytest.raises(StateMappingError, match="List every aggregation"):
        aggregate_state(spark, [("total", "sum"), ("n", "count")], path=str(export))
    with pytest.raises(StateNotExported, match="0/nope"):
        initial_state(spark, store="nope", path=str(export))
    with pytest.raises(StateNotExported, match="found no state-manifest.json under"):
        initial_state(spark, path=str(tmp_path / "missing"))
    assert state_watermark_ms(spark, path=str(export)) == 0


def test_transform_with_state_in_pandas_starts_from_the_export(spark, kafka, upgraded) -> None:  # noqa: ANN001
    """Pattern 1: a running total kept by a StatefulProcessor (RocksDB store), seeded with initialState."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
    from pyspark.sql.types import LongType, StructField, StructType

    totals_schema = StructType([StructField("total", LongType()), StructField("n", LongType())])
    output = StructType([StructField("customer", LongType()), StructField("total", LongType()),
                         StructField("n", LongType())])

    class RunningTotal(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.state = handle.getValueState("totals", totals_schema)

        def handleInitialState(self, key: Any, initial: pd.DataFrame, timer_values: Any) -> None:  # noqa: N802
            self.state.update((int(initial["total"].sum()), int(initial["n"].sum())))

        def handleInputRows(self, key: Any, rows: Any, timer_values: Any) -> Any:  # noqa: N802
            total, n = self.state.get() if self.state.exists() else (0, 0)
            for frame in rows:
                total, n = total + int(frame["amount"].sum()), n + len(frame)
            self.state.update((total, n))
            yield pd.DataFrame({"customer": [key[0]], "total": [total], "n": [n]})

        def close(self) -> None:
            pass

    seen: dict[int, tuple[int, int]] = {}
    with spark_conf(spark, {PROVIDER: ROCKSDB}):
        seed = initial_state_for(spark, purchases_v2.V1_AGGREGATES, key=["customer"], path=str(upgraded["export"]))
        rows = purchases_v1.purchases(kafka_frame(spark, kafka, upgraded["topic"], upgraded["handover"]))
        frame = rows.groupBy("customer").transformWithStateInPandas(
            statefulProcessor=RunningTotal(), outputStructType=output, outputMode="Update", timeMode="None",
            initialState=seed.groupBy("customer"))
        run_to_end(frame.select("customer", "total", "n"), upgraded["work"] / "v2-tws", collect=seen)
    truth = kafka_totals(kafka.bootstrap_servers, upgraded["topic"])
    # customers with a purchase since the upgrade are emitted; each carries its total from v1
    updated = {c: truth[c] for c in seen}
    assert len(seen) == 50, "900 purchases reach every customer"
    result = compare_totals(updated, seen)
    assert result.ok, result.examples


def test_a_rocksdb_checkpoint_format_v2_state_is_exported_and_seeds_every_total(spark, kafka,  # noqa: ANN001
                                                                                  tmp_path: Path) -> None:
    """State checkpoint format v2 (RocksDB, Spark 4.1+: state files named by unique ids that the
    commit log records): v1 writes it, the plan finds it, this Spark's state reader exports it, and
    v2 starts on a new checkpoint from the handover seeded with the export: every customer's total
    and count equal the sums over all purchases in Kafka. (The negative control, v2 from the same
    handover without the export, runs on the same code path in the first test of this module.)"""
    topic = "purchases-seed-format-v2"
    kafka.create_topic(topic, 3)
    produce(kafka, topic, 0, 1200)
    v1_cp, export = tmp_path / "v1", tmp_path / "export"
    with spark_conf(spark, {PROVIDER: ROCKSDB, CHECKPOINT_FORMAT: "2"}):
        run_to_end(purchases_v1.transform(spark, kafka_frame(spark, kafka, topic)), v1_cp)
    reader = CheckpointReader(str(v1_cp))
    plan = plan_state_export(reader, reader_spark=spark.version)
    assert plan.batch_id is not None and plan.batch_id >= 2 and plan.checkpoint_format_version == 2
    commit = (v1_cp / "commits" / str(plan.batch_id)).read_text()
    assert commit.startswith("v2") and "stateUniqueIds" in commit, f"Spark wrote no format v2 commit: {commit!r}"
    with spark_conf(spark, {CHECKPOINT_FORMAT: "2"}):  # as the export job's --checkpoint-format 2 sets it
        result = export_state(spark, str(v1_cp), plan.batch_id, str(export))
    manifest = finish_export(fsspec.filesystem("file"), str(export), plan, result, uri=str(export),
                             upgrade_id="format-v2")
    assert manifest.checkpoint_format_version == 2 and sum(store.rows for store in manifest.stores) == 50
    # a switchover's standby reads the same state in its own session: the format is set for the read
    # only (the new query this session starts next keeps its own), and the seed is the export
    from airflow_ckpt_provider.checkpoint.state import check_seeded_state
    from airflow_ckpt_provider.spark.state_seed import seed_state

    before = spark.conf.get(CHECKPOINT_FORMAT, None)
    seed = seed_state(spark, reader.handover(), plan.batch_id, str(tmp_path / "seed"), upgrade_id="format-v2")
    assert seed is not None and seed.checkpoint_format_version == 2 and spark.conf.get(CHECKPOINT_FORMAT, None) == before
    check_seeded_state(seed, manifest, uri=str(tmp_path / "seed"))
    handover = reader.handover().kafka_offsets().to_json()
    produce(kafka, topic, 1200, 600)

    seen: dict[int, tuple[int, int]] = {}
    with spark_conf(spark, {CONF_INITIAL_STATE_PATH: str(export)}):
        frame = purchases_v2.transform(spark, kafka_frame(spark, kafka, topic, handover))
        run_to_end(frame, tmp_path / "v2", collect=seen)
    truth = kafka_totals(kafka.bootstrap_servers, topic)
    assert len(truth) == 50 and sum(n for _, n in truth.values()) == 1800
    seeded = compare_totals(truth, seen)
    print(f"format v2 seeded: customers {seeded.customers}, mismatched {seeded.mismatched}")
    assert seeded.ok, seeded.examples
