"""The handover on checkpoints written by real Spark reading a real Kafka broker.

Each test proves exactness the hard way where it can: a second query started on a NEW
checkpoint from the handed-over ``startingOffsets`` must complete the first sink with every
Kafka (topic, partition, offset) exactly once.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint import AmbiguousSource, ExpiredOffsets, KafkaOffsets, reconcile
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.records import produce_records
from tests.integration.streams import batch_ids, drain, kafka_reader, raw_source_line, sink_records

pytestmark = pytest.mark.integration

JOBS = Path(__file__).parent / "jobs"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def expected_records(topic: str, ends: dict[int, int]) -> set[tuple[str, int, int]]:
    return {(topic, p, o) for p, end in ends.items() for o in range(end)}


def test_all_batches_committed_handover_is_exact(kafka, spark, new_topic, tmp_path: Path) -> None:
    topic = new_topic(3)
    produce_records(kafka.bootstrap_servers, topic, 300)
    old_cp, old_sink = tmp_path / "old-cp", tmp_path / "old-sink"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic], max_per_trigger=100), old_cp, old_sink)

    last = batch_ids(old_cp / "commits")[-1]
    handover = CheckpointReader(str(old_cp)).handover()
    assert handover.batch_id == last and handover.in_flight_batch is None
    offsets = handover.kafka_offsets()
    assert offsets == KafkaOffsets.from_json(raw_source_line(old_cp, last))
    assert offsets.total() == 300

    code, out, err = run_cli("offsets", str(old_cp))
    assert (code, err) == (0, "")
    assert KafkaOffsets.from_json(out) == offsets
    code, out, err = run_cli("offsets", str(old_cp), "--bootstrap-servers", kafka.bootstrap_servers)
    assert (code, err) == (0, "")
    assert KafkaOffsets.from_json(out) == offsets

    # more records arrive after the stop; the new query starts exactly at the handover
    produce_records(kafka.bootstrap_servers, topic, 150, start=300)
    result = reconcile(offsets, KafkaBroker(kafka.bootstrap_servers).view([topic]))
    assert result.starting_offsets == offsets and not result.added_partitions
    new_cp, new_sink = tmp_path / "new-cp", tmp_path / "new-sink"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic], result.starting_offsets.to_json()),
          new_cp, new_sink)

    seen = sink_records(spark, old_sink, new_sink)
    ends = {p: KafkaBroker(kafka.bootstrap_servers).view([topic]).partitions(topic)[p][1] for p in range(3)}
    assert sum(ends.values()) == 450
    assert set(seen) == expected_records(topic, ends), "records lost"
    assert max(seen.values()) == 1, "records duplicated"


def test_killed_mid_batch_hands_over_last_committed_batch(kafka, spark, new_topic, tmp_path: Path) -> None:
    topic = new_topic(3)
    produce_records(kafka.bootstrap_servers, topic, 300)
    cp, sink, marker = tmp_path / "cp", tmp_path / "sink", tmp_path / "batch-started"
    proc = subprocess.Popen(
        [sys.executable, str(JOBS / "stuck_batch.py"), kafka.bootstrap_servers, topic, str(cp),
         str(sink), str(marker)],
        start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while not marker.exists():
            assert proc.poll() is None, "the job exited before batch 1 started"
            assert time.monotonic() < deadline, "batch 1 never started"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    assert batch_ids(cp / "commits") == [0]
    assert 1 in batch_ids(cp / "offsets")
    snapshot = CheckpointReader(str(cp)).snapshot()
    assert (snapshot.last_committed_batch, snapshot.last_planned_batch, snapshot.in_flight_batch) == (0, 1, 1)
    handover = CheckpointReader(str(cp)).handover()
    assert handover.batch_id == 0 and handover.in_flight_batch == 1
    offsets = handover.kafka_offsets()
    assert offsets == KafkaOffsets.from_json(raw_source_line(cp, 0))
    assert offsets != KafkaOffsets.from_json(raw_source_line(cp, 1))
    assert 0 < offsets.total() < 300  # about maxOffsetsPerTrigger=100, split over partitions
    written = spark.read.parquet(str(sink)).collect()  # batch 0 only: batch 1 never wrote
    assert {(r.partition, r.offset) for r in written} == {
        (p, o) for (_, p) in offsets.partitions() for o in range(offsets.get(topic, p))
    }

    code, out, _ = run_cli("inspect", str(cp), "--json")
    facts = json.loads(out)
    assert code == 0
    assert (facts["last_committed_batch"], facts["last_planned_batch"], facts["in_flight_batch"]) == (0, 1, 1)


def test_two_kafka_sources(kafka, spark, new_topic, tmp_path: Path) -> None:
    first, second = new_topic(2), new_topic(3)
    produce_records(kafka.bootstrap_servers, first, 40)
    produce_records(kafka.bootstrap_servers, second, 70)
    frame = kafka_reader(spark, kafka.bootstrap_servers, [first]).union(
        kafka_reader(spark, kafka.bootstrap_servers, [second])
    )
    cp = tmp_path / "cp"
    drain(spark, frame, cp, tmp_path / "sink")

    handover = CheckpointReader(str(cp)).handover()
    assert [s.kind.value for s in handover.sources] == ["kafka", "kafka"]
    with pytest.raises(AmbiguousSource):
        handover.kafka_offsets()
    assert handover.kafka_offsets(0).topics == (first,) or list(handover.kafka_offsets(0).topics) == [first]
    assert handover.kafka_offsets(0).total() == 40
    assert handover.kafka_offsets(1).total() == 70

    code, _, err = run_cli("offsets", str(cp))
    assert code == 2 and err.startswith("ckpt: error:") and "Traceback" not in err
    code, out, _ = run_cli("offsets", str(cp), "--source", "1")
    assert code == 0 and KafkaOffsets.from_json(out) == handover.kafka_offsets(1)


def test_partitions_added_after_last_commit_start_at_earliest(kafka, spark, new_topic, tmp_path: Path) -> None:
    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 100)
    old_cp, old_sink = tmp_path / "old-cp", tmp_path / "old-sink"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic]), old_cp, old_sink)
    offsets = CheckpointReader(str(old_cp)).handover().kafka_offsets()
    assert sorted(p for _, p in offsets.partitions()) == [0, 1]

    kafka.add_partitions(topic, 4)
    produce_records(kafka.bootstrap_servers, topic, 200, start=100)  # keyed: lands on all 4
    result = reconcile(offsets, KafkaBroker(kafka.bootstrap_servers).view([topic]))
    assert result.added_partitions == {(topic, 2), (topic, 3)}
    assert result.starting_offsets.get(topic, 2) == -2 and result.starting_offsets.get(topic, 3) == -2
    assert result.starting_offsets.get(topic, 0) == offsets.get(topic, 0)

    new_cp, new_sink = tmp_path / "new-cp", tmp_path / "new-sink"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic], result.starting_offsets.to_json()),
          new_cp, new_sink)
    view = KafkaBroker(kafka.bootstrap_servers).view([topic])
    ends = {p: latest for p, (_, latest) in view.partitions(topic).items()}
    assert ends[2] > 0 and ends[3] > 0, "keyed records should reach the new partitions"
    seen = sink_records(spark, old_sink, new_sink)
    assert set(seen) == expected_records(topic, ends), "records lost"
    assert max(seen.values()) == 1, "records duplicated"


def test_offsets_deleted_by_retention_are_refused(kafka, spark, new_topic, tmp_path: Path) -> None:
    from kafka import TopicPartition

    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 60)
    cp = tmp_path / "cp"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic]), cp, tmp_path / "sink")
    offsets = CheckpointReader(str(cp)).handover().kafka_offsets()
    produce_records(kafka.bootstrap_servers, topic, 60, start=60)

    # retention deletes records the new query has not read yet: partition 0 up to its end
    view = KafkaBroker(kafka.bootstrap_servers).view([topic])
    end0 = view.partitions(topic)[0][1]
    assert end0 > offsets.get(topic, 0)
    admin = kafka.admin()
    try:
        admin.delete_records({TopicPartition(topic, 0): end0})
    finally:
        admin.close()

    view = KafkaBroker(kafka.bootstrap_servers).view([topic])
    assert view.partitions(topic)[0][0] == end0
    with pytest.raises(ExpiredOffsets) as refused:
        reconcile(offsets, view)
    assert f"{topic}-0" in str(refused.value)
    code, out, err = run_cli("offsets", str(cp), "--bootstrap-servers", kafka.bootstrap_servers)
    assert code == 2 and out == "" and f"{topic}-0" in err

    accepted = reconcile(offsets, view, accept_data_loss=True)
    assert accepted.starting_offsets.get(topic, 0) == end0
    assert [(t, p) for t, p, _, _ in accepted.expired] == [(topic, 0)]
    assert accepted.starting_offsets.get(topic, 1) == offsets.get(topic, 1)


def test_console_script_reads_real_checkpoint(kafka, spark, new_topic, tmp_path: Path) -> None:
    topic = new_topic(3)
    produce_records(kafka.bootstrap_servers, topic, 30)
    cp = tmp_path / "cp"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic]), cp, tmp_path / "sink")
    ckpt = Path(sys.executable).with_name("ckpt")
    proc = subprocess.run([str(ckpt), "offsets", str(cp)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert KafkaOffsets.from_json(proc.stdout).total() == 30
    missing = subprocess.run([str(ckpt), "offsets", str(tmp_path / "nope")], capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "Traceback" not in missing.stderr
