"""Batches cut after their output was written, for real: the sink ledger decides from the sink's record.

In each case a fault in the driver makes version 1 fail right after its sink wrote batch M and
before Spark committed it (an empty directory where ``commits/M`` goes), the provider's handover
step is asked about the sink, and version 2 starts from its result with a producer running.

* foreachBatch through the provider's wrapper (:func:`airflow_ckpt_provider.spark.foreach_batch`),
  appending Parquet: the wrapper recorded M as delivered, so the handover moves past M; the audit
  by Kafka (partition, offset) finds 0 lost, 0 duplicated.
* Spark's Kafka sink: version 1 reads a topic and writes each record to an output topic through Spark's Kafka sink,
naming its input record in the ``ckpt-source`` header (:func:`airflow_ckpt_provider.spark.with_source_header`).
A fault in the driver makes it fail right after the sink wrote batch M and before Spark committed
it (an empty directory where ``commits/M`` goes). The provider's handover step, asked about a Kafka
sink, reads the output topic and names per partition the input records of M already there. Version
2 starts from the handover with a producer running; the audit of the output topic by source
(partition, offset) finds 0 lost and exactly those records twice — no more, no fewer.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator
from airflow_ckpt_provider.source_header import source_of
from airflow_ckpt_provider.spark import foreach_batch, with_source_header
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.records import ContinuousProducer
from tests.integration.streams import batch_ids, fail_commit_of_a_coming_batch

pytestmark = pytest.mark.integration

#: Generous bound for a loaded machine: it only ends a broken run.
DEADLINE_S = 600.0


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {DEADLINE_S:.0f} s: {what}"
        time.sleep(0.2)


def last_committed(checkpoint: Path) -> int:
    return max(batch_ids(checkpoint / "commits"), default=-1) if (checkpoint / "commits").is_dir() else -1


def cut_after_output(query: Any, checkpoint: Path, producer: ContinuousProducer) -> int:
    """Run ``query`` to 3 committed batches, inject the fault, wait for the query to fail on it,
    stop the producer and remove the fault. Returns the cut batch M (planned, not committed)."""
    wait_for(lambda: last_committed(checkpoint) >= 2, "3 batches of version 1")
    cut = fail_commit_of_a_coming_batch(checkpoint)
    wait_for(lambda: not query.isActive, f"version 1 failing to commit batch {cut}")
    producer.stop()
    (checkpoint / "commits" / str(cut)).rmdir()  # the fault, not Spark's data
    assert last_committed(checkpoint) == cut - 1 and (checkpoint / "offsets" / str(cut)).is_file()
    return cut


def run_version_2(start: Callable[[], Any], checkpoint: Path, bootstrap: str, source: str) -> None:
    """Start version 2 while a producer writes (records arrive during the switch), run it to 3
    committed batches, stop the producer, let it read everything, stop it."""
    producer = ContinuousProducer(bootstrap, source, rate=300).start()
    query = start()
    wait_for(lambda: last_committed(checkpoint) >= 2, "3 batches of version 2")
    producer.stop()
    query.processAllAvailable()
    query.stop()


def kafka_connection(monkeypatch: pytest.MonkeyPatch, bootstrap: str) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_CUT_KAFKA", json.dumps(
        {"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": bootstrap}}))
    return "ckpt_cut_kafka"


def handover_step(checkpoint: Path, conn_id: str, sink: dict[str, Any]) -> HandoverResult:
    extract = CheckpointHandoverOperator(task_id="extract_handover", checkpoint_uri=str(checkpoint),
                                         kafka_conn_id=conn_id, sink=sink)
    return HandoverResult.from_json(extract.execute({}))  # type: ignore[arg-type]


def kafka_records(spark: Any, bootstrap: str, source: str, starting: str = "earliest") -> Any:
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source).option("startingOffsets", starting).option("failOnDataLoss", "true").load())


def to_parquet(spark: Any, bootstrap: str, source: str, out: Path, checkpoint: Path, starting: str = "earliest") -> Any:
    def write(batch: Any, batch_id: int) -> None:
        batch.selectExpr("partition", "offset").write.mode("append").parquet(str(out))

    return (kafka_records(spark, bootstrap, source, starting).writeStream
            .foreachBatch(foreach_batch(write, str(checkpoint))).option("checkpointLocation", str(checkpoint)).start())


def test_a_foreach_batch_cut_after_the_function_returned_is_handed_over_after_it(
        kafka, spark, new_topic, tmp_path, monkeypatch) -> None:
    bootstrap = kafka.bootstrap_servers
    source, out = new_topic(3), tmp_path / "out"
    conn_id = kafka_connection(monkeypatch, bootstrap)
    old_cp, new_cp = tmp_path / "old-cp", tmp_path / "new-cp"

    producer = ContinuousProducer(bootstrap, source, rate=300).start()
    cut = cut_after_output(to_parquet(spark, bootstrap, source, out, old_cp), old_cp, producer)
    result = handover_step(old_cp, conn_id, {"kind": "foreach_batch"})
    assert result.handover.batch_id == cut and result.handover.held_by_sink, result.handover
    assert result.sink is not None and result.sink["disposition"] == "held" and result.sink["exact"]
    naive = CheckpointReader(str(old_cp)).handover().kafka_offsets()
    cut_input = {(p, o) for _, p, end in result.handover.kafka_offsets().items()
                 for o in range(naive.get(source, p) or 0, end)}
    written = {(r.partition, r.offset) for r in spark.read.parquet(str(out)).collect()}
    assert cut_input and cut_input <= written, "negative control: a start from the last commit writes them twice"

    run_version_2(lambda: to_parquet(spark, bootstrap, source, out, new_cp, result.offsets().to_json()),
                  new_cp, bootstrap, source)
    ends = KafkaBroker(bootstrap).view([source]).partitions(source)
    expected = {(p, o) for p, (_, end) in ends.items() for o in range(end)}
    seen = Counter((r.partition, r.offset) for r in spark.read.parquet(str(out)).collect())
    lost, duplicated = expected - set(seen), sum(n - 1 for n in seen.values() if n > 1)
    assert expected and (len(lost), duplicated) == (0, 0), (len(expected), len(lost), duplicated)


def to_kafka(spark: Any, bootstrap: str, source: str, out: str, checkpoint: Path, starting: str = "earliest") -> Any:
    return (with_source_header(kafka_records(spark, bootstrap, source, starting)).selectExpr("CAST(offset AS STRING) AS value", "headers")
            .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", out)
            .option("checkpointLocation", str(checkpoint)).start())


def output_sources(bootstrap: str, topic: str) -> Counter[tuple[str, int, int]]:
    """Every output record's source (from its header), counted, up to the topic's log end."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = consumer.end_offsets(parts)
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        seen: Counter[tuple[str, int, int]] = Counter()
        deadline = time.monotonic() + DEADLINE_S
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            assert time.monotonic() < deadline, "the output topic was not read to its end"
            for messages in consumer.poll(timeout_ms=1000).values():
                for message in messages:
                    source = source_of(message.headers or ())
                    assert source is not None, f"output record {message.offset} without its source header"
                    seen[source] += 1
        return seen
    finally:
        consumer.close()


def test_a_kafka_sink_batch_cut_after_its_writes_is_counted_as_processed_twice(
        kafka, spark, new_topic, tmp_path, monkeypatch) -> None:
    bootstrap = kafka.bootstrap_servers
    source, out = new_topic(3), new_topic(2)
    conn_id = kafka_connection(monkeypatch, bootstrap)
    old_cp, new_cp = tmp_path / "old-cp", tmp_path / "new-cp"

    producer = ContinuousProducer(bootstrap, source, rate=300).start()
    cut = cut_after_output(to_kafka(spark, bootstrap, source, out, old_cp), old_cp, producer)
    result = handover_step(old_cp, conn_id, {"kind": "kafka", "location": out})
    assert result.handover.batch_id == cut - 1 and result.handover.in_flight_batch == cut
    account = result.sink
    assert account is not None and account["disposition"] == "counted", account
    reported = {(r["topic"], r["partition"], o) for r in account["twice"] for o in range(r["start"], r["end"])}
    assert reported, "the cut batch's records reached the output topic before the fault"

    run_version_2(lambda: to_kafka(spark, bootstrap, source, out, new_cp, result.offsets().to_json()),
                  new_cp, bootstrap, source)

    ends = KafkaBroker(bootstrap).view([source]).partitions(source)
    expected = {(source, p, o) for p, (_, end) in ends.items() for o in range(end)}
    seen = output_sources(bootstrap, out)
    lost = expected - set(seen)
    twice = {s for s, n in seen.items() if n > 1}
    assert not lost and all(n <= 2 for n in seen.values()), (len(lost), max(seen.values()))
    assert twice == reported, (len(twice), len(reported), sorted(twice ^ reported)[:10])
    CheckpointReader(str(new_cp)).snapshot()  # the new checkpoint reads
