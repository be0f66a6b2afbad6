"""Spark's Kafka sink, for real: a batch cut after its records reached the output topic is counted,
exactly, as processed twice.

Version 1 reads a topic and writes each record to an output topic through Spark's Kafka sink,
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

from airflow_ckpt_provider.checkpoint import CheckpointReader
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.local.records import ContinuousProducer
from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator
from airflow_ckpt_provider.source_header import source_of
from airflow_ckpt_provider.spark import with_source_header
from tests.integration.streams import batch_ids

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


def to_kafka(spark: Any, bootstrap: str, source: str, out: str, checkpoint: Path, starting: str = "earliest") -> Any:
    frame = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", starting).option("failOnDataLoss", "true").load())
    return (with_source_header(frame).selectExpr("CAST(offset AS STRING) AS value", "headers")
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
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_KAFKA_SINK", json.dumps(
        {"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": bootstrap}}))
    old_cp, new_cp = tmp_path / "old-cp", tmp_path / "new-cp"

    producer = ContinuousProducer(bootstrap, source, rate=300).start()
    v1 = to_kafka(spark, bootstrap, source, out, old_cp)
    wait_for(lambda: last_committed(old_cp) >= 2, "3 batches of version 1")
    while True:  # fault: Spark cannot write commits/M after the sink wrote batch M
        cut = last_committed(old_cp) + 2
        try:
            (old_cp / "commits" / str(cut)).mkdir()
            break
        except FileExistsError:
            continue
    wait_for(lambda: not v1.isActive, f"version 1 failing to commit batch {cut}")
    producer.stop()
    (old_cp / "commits" / str(cut)).rmdir()  # the fault, not Spark's data
    assert last_committed(old_cp) == cut - 1 and (old_cp / "offsets" / str(cut)).is_file()

    extract = CheckpointHandoverOperator(task_id="extract_handover", checkpoint_uri=str(old_cp),
                                         kafka_conn_id="ckpt_kafka_sink", sink={"kind": "kafka", "location": out})
    result = HandoverResult.from_json(extract.execute({}))  # type: ignore[arg-type]
    assert result.handover.batch_id == cut - 1 and result.handover.in_flight_batch == cut
    account = result.sink
    assert account is not None and account["disposition"] == "counted", account
    reported = {(r["topic"], r["partition"], o) for r in account["twice"] for o in range(r["start"], r["end"])}
    assert reported, "the cut batch's records reached the output topic before the fault"

    producer = ContinuousProducer(bootstrap, source, rate=300).start()  # records arrive during the switch
    v2 = to_kafka(spark, bootstrap, source, out, new_cp, result.offsets().to_json())
    wait_for(lambda: last_committed(new_cp) >= 2, "3 batches of version 2")
    producer.stop()
    v2.processAllAvailable()
    v2.stop()

    ends = KafkaBroker(bootstrap).view([source]).partitions(source)
    expected = {(source, p, o) for p, (_, end) in ends.items() for o in range(end)}
    seen = output_sources(bootstrap, out)
    lost = expected - set(seen)
    twice = {s for s, n in seen.items() if n > 1}
    assert not lost and all(n <= 2 for n in seen.values()), (len(lost), max(seen.values()))
    assert twice == reported, (len(twice), len(reported), sorted(twice ^ reported)[:10])
    CheckpointReader(str(new_cp)).snapshot()  # the new checkpoint reads
