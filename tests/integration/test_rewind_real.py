"""Where the new version starts, on checkpoints written by real Spark and a real broker.

The rewind is proven with a second query on a new checkpoint: the records of the rewound batches
land twice in the sinks, exactly as many as the plan predicts, and none is lost.
"""

from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint import KafkaOffsets
from tests.harness.records import produce_records
from tests.integration.streams import batch_ids, drain, kafka_reader, raw_source_line, sink_records

pytestmark = pytest.mark.integration


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_rewind_to_batch_reprocesses_exactly_the_predicted_records(kafka, spark, new_topic, tmp_path: Path) -> None:
    topic = new_topic(3)
    produce_records(kafka.bootstrap_servers, topic, 600)
    old_cp, old_sink = tmp_path / "old-cp", tmp_path / "old-sink"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic], max_per_trigger=100), old_cp, old_sink)
    last = batch_ids(old_cp / "commits")[-1]
    assert last >= 4, "expected several batches of at most 100 records"
    rewind_to = last - 2  # reprocess the last three batches

    code, out, err = run_cli("offsets", str(old_cp), "--rewind-to-batch", str(rewind_to),
                             "--bootstrap-servers", kafka.bootstrap_servers)
    assert code == 0, err
    start = KafkaOffsets.from_json(out)
    assert start == KafkaOffsets.from_json(raw_source_line(old_cp, rewind_to - 1))
    predicted = {int(m[1]): int(m[2]) for m in re.finditer(rf"{topic}-(\d+): offsets \d+\.\.\d+ processed again "
                                                            r"\((\d+) records\)", err)}
    assert len(predicted) == 3, err

    new_cp, new_sink = tmp_path / "new-cp", tmp_path / "new-sink"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic], start.to_json()), new_cp, new_sink)
    seen = sink_records(spark, old_sink, new_sink)
    resume = KafkaOffsets.from_json(raw_source_line(old_cp, last))
    assert set(seen) == {(topic, p, o) for p in range(3) for o in range(resume.get(topic, p) or 0)}, "records lost"
    assert resume.total() == 600
    twice = {key for key, count in seen.items() if count == 2}
    assert max(seen.values()) == 2
    assert twice == {(topic, p, o) for p in range(3)
                     for o in range(start.get(topic, p) or 0, resume.get(topic, p) or 0)}, "batches K..N, twice"
    assert dict(Counter(p for _, p, _ in twice)) == predicted, "the plan's counts are what was processed twice"


def test_at_time_starts_at_the_first_record_at_or_after_the_time(kafka, spark, new_topic, tmp_path: Path) -> None:
    from kafka import KafkaProducer

    topic = new_topic(2)
    base = 1_790_000_000_000
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all")
    sent = []
    for i in range(40):  # partition i % 2, timestamps one second apart
        meta = producer.send(topic, value=b"v", partition=i % 2, timestamp_ms=base + i * 1000).get(timeout=60)
        sent.append((meta.partition, meta.offset, base + i * 1000))
    producer.close()
    cp, sink = tmp_path / "cp", tmp_path / "sink"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic]), cp, sink)

    at = base + 25_500  # between the records 25 and 26
    expected = {p: min(o for q, o, ts in sent if q == p and ts >= at) for p in (0, 1)}
    code, out, err = run_cli("offsets", str(cp), "--at-time", "2026-09-21T14:13:45.500Z",
                             "--bootstrap-servers", kafka.bootstrap_servers)
    assert at == 1_790_000_000_000 + 25_500 and code == 0, err
    assert KafkaOffsets.from_json(out) == KafkaOffsets({topic: expected})
    assert "processed again" in err

    code, out, _ = run_cli("offsets", str(cp), "--at-time", "2030-01-01T00:00:00Z",
                           "--bootstrap-servers", kafka.bootstrap_servers)
    assert code == 0 and KafkaOffsets.from_json(out) == KafkaOffsets({topic: {0: 20, 1: 20}}), "no record: log end"


def test_the_preflight_shows_the_rewind_and_its_purge_horizon(kafka, spark, new_topic, tmp_path: Path,  # noqa: ANN001
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator

    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 200)
    cp, sink = tmp_path / "cp", tmp_path / "sink"
    spark.conf.set("spark.sql.streaming.minBatchesToRetain", "4")
    try:
        drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic], max_per_trigger=20), cp, sink)
    finally:
        spark.conf.unset("spark.sql.streaming.minBatchesToRetain")
    planned = batch_ids(cp / "offsets")
    assert planned[0] > 0, "Spark purged the offset log down to its last entries"
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_REWIND",
                       json.dumps({"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": kafka.bootstrap_servers}}))
    k = planned[0] + 1  # the oldest batch whose start is still there
    op = UpgradePreflightOperator(task_id="preflight", stream_name="orders", old_checkpoint_uri=str(cp),
                                  new_checkpoint_uri=str(tmp_path / "v2"), archive_root=str(tmp_path / "archive"),
                                  kafka_conn_id="ckpt_rewind", journal=False, accept_reprocessing="True",
                                  sink={"kind": "foreach_batch"},
                                  start=json.dumps({"mode": "rewind_to_batch", "value": str(k)}))
    value = op.execute(context={})  # type: ignore[arg-type]
    assert value["start_plan"]["choice"] == {"mode": "rewind_to_batch", "value": str(k)}
    assert "#### The new version does NOT resume" in value["summary_md"]
    assert f"**Batch {k}'s start is purged after about" in value["summary_md"]
