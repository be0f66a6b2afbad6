"""The embedded stack is real: Kafka -> Spark Structured Streaming -> files Spark wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harness.records import produce_records

pytestmark = pytest.mark.integration

RECORDS = 300


def _batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def test_kafka_to_spark_checkpoint_offsets_add_up(kafka, spark, new_topic, tmp_path: Path) -> None:
    topic = new_topic(3)
    produce_records(kafka.bootstrap_servers, topic, RECORDS)
    checkpoint, sink = tmp_path / "checkpoint", tmp_path / "sink"

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 120)  # several batches, not one
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "query did not finish within 180 s"
    assert query.exception() is None

    committed = _batch_ids(checkpoint / "commits")
    planned = _batch_ids(checkpoint / "offsets")
    assert committed, "Spark wrote no commit"
    last = committed[-1]
    assert last >= 2, f"expected several batches for {RECORDS} records at 120 per trigger"
    assert last in planned

    # offsets/K: v1, metadata, then one line per source; the Kafka line is the batch's end.
    lines = (checkpoint / "offsets" / str(last)).read_text().split("\n")
    assert lines[0] == "v1"
    end = json.loads(lines[2])
    assert sorted(end) == [topic]
    assert sorted(end[topic]) == ["0", "1", "2"]
    assert sum(end[topic].values()) == RECORDS

    rows = spark.read.parquet(str(sink)).select("partition", "offset").collect()
    assert len(rows) == RECORDS
    assert len({(r.partition, r.offset) for r in rows}) == RECORDS


def test_broker_reports_topic_partitions(kafka, new_topic) -> None:
    from kafka import KafkaConsumer

    topic = new_topic(3)
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)
    try:
        assert consumer.partitions_for_topic(topic) == {0, 1, 2}
    finally:
        consumer.close()


def test_connection_test_button_against_the_real_broker(kafka, new_topic, monkeypatch) -> None:  # noqa: ANN001
    """KafkaBrokerHook.test_connection (the connection form's Test button), on a connection made
    the way the form stores it (conn-fields in the extra), then on a port nothing listens on."""
    from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook
    from airflow_ckpt_provider.local.processes import free_port

    new_topic(1)
    form = json.dumps({"conn_type": "ckpt_kafka", "extra": {"bootstrap_servers": kafka.bootstrap_servers,
                                                              "security_protocol": "PLAINTEXT"}})
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_FORM", form)
    ok, message = KafkaBrokerHook("ckpt_form").test_connection()
    assert ok, message
    assert kafka.bootstrap_servers in message and "topic(s) visible" in message

    dead = json.dumps({"conn_type": "ckpt_kafka", "host": "127.0.0.1", "port": free_port(),
                       "extra": {"request.timeout.ms": 3000, "socket.connection.setup.timeout.ms": 1000}})
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_DEAD", dead)
    ok, message = KafkaBrokerHook("ckpt_dead").test_connection()
    assert not ok and "Kafka" in message and "expected" in message, message


def test_a_cluster_id_that_looks_like_an_option_still_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One random KRaft cluster id in 32 starts with '-': the broker must start with it too."""
    from airflow_ckpt_provider.local import kafka as local_kafka

    monkeypatch.setattr(local_kafka, "kraft_cluster_id", lambda: "-" + "Q" * 21)
    broker = local_kafka.LocalKafka(tmp_path / "kafka").start()
    try:
        assert broker.running
    finally:
        broker.stop()
