"""A checkpoint repartitioned offline by Spark 4.2 itself (SPARK-54345), read, handed over, archived,
verified, restored and resumed by Spark 4.2.

The query is a streaming aggregation from a real Kafka topic on RocksDB state (state checkpoint
format v1) with 4 shuffle partitions: per Kafka partition and ``offset % 7``, the count, sum and sum
of squares of the offsets read (``jobs/spark42_repartition.py``). After the first run Spark's own
``spark._streamingCheckpointManager.repartition(checkpoint, 2)`` adds batch N+1 to the checkpoint.
Spark runs twice for the module (a JVM start costs more than a query on 2 cores): the first run
writes and repartitions the checkpoint; between the runs the provider reads it, takes the handover,
archives, verifies and restores it; the second run resumes the restored checkpoint and starts a NEW
query from the handover. The proof: the handover is the offsets of batch N; the resumed query's
first batch starts exactly there, on 2 shuffle partitions, and its running totals equal a
recomputation over every offset the topic holds (state carried over, 0 lost, 0 read twice); the new
query's totals equal a recomputation over the offsets after the handover.

A second checkpoint, of the same query on the HDFS-backed state store, shows an unfinished
repartition: Spark refuses that store after writing ``offsets/N+1``; the reader names the in-flight
batch, the handover is batch N's, and Spark 4.2 refuses to restart that checkpoint
(``STREAMING_UNFINISHED_REPARTITION_DETECTED``), as the reader's description says.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.manifest import ArchiveManifest
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.repartition import (
    UNFINISHED_REPARTITION_ERROR,
    RepartitionBatch,
    shuffle_partitions,
)
from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot
from airflow_ckpt_provider.checkpoint.verify import verify_start
from airflow_ckpt_provider.hooks.kafka_admin import broker_ranges
from airflow_ckpt_provider.local.spark import SparkInstall
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive
from tests.harness.records import produce_records
from tests.integration.spark42_jobs import run_spark42_job

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "spark42_repartition.py"
FIRST, LATER = 300, 140  # records before the first run, and produced after it (past the handover)
BEFORE, AFTER = 4, 2  # shuffle partitions of the first run, and after Spark's repartition
BUCKETS = 7

Totals = dict[tuple[int, int], tuple[int, int, int]]  # (partition, bucket) -> (count, sum, sum of squares)


def run_spark42(spark42: SparkInstall, work: Path, name: str, queries: list[dict[str, Any]]) -> dict[str, Any]:
    """One driver run of ``jobs/spark42_repartition.py`` on Spark 4.2; its per-query results."""
    return run_spark42_job(JOB, spark42, work, name, queries)


def sink_totals(sink: Path) -> Totals:
    """Each group's running total: its row in the newest batch file that updated it."""
    totals: Totals = {}
    for path in sorted(sink.glob("*.json"), key=lambda p: int(p.stem)):
        for row in json.loads(path.read_text()):
            totals[(row["partition"], row["bucket"])] = (row["n"], row["total"], row["squares"])
    return totals


def expected_totals(ranges: dict[int, tuple[int, int]]) -> Totals:
    """The totals of a query that read every offset in ``ranges`` (partition -> [start, end)) once."""
    totals: dict[tuple[int, int], list[int]] = {}
    for partition, (start, end) in ranges.items():
        for offset in range(start, end):
            group = totals.setdefault((partition, offset % BUCKETS), [0, 0, 0])
            group[0] += 1
            group[1] += offset
            group[2] += offset * offset
    return {key: (n, total, squares) for key, (n, total, squares) in totals.items()}


@dataclass
class Repartitioned:
    """What the first Spark 4.2 run left, and what the provider read and did before the second."""

    work: Path
    bootstrap: str
    topic: str
    first: dict[str, Any]
    unfinished: dict[str, Any]  # the first run's result on the HDFS-backed store
    snapshot: CheckpointSnapshot
    before: KafkaOffsets  # offsets/N, the batch Spark repartitioned
    handover: Handover
    manifest: ArchiveManifest
    restored: CheckpointSnapshot  # the restore, read before Spark resumed it
    ends: dict[int, int]  # partition -> log end after the later records
    resumed: dict[str, Any]

    @property
    def checkpoint(self) -> Path:
        return self.work / "cp"


@pytest.fixture(scope="module")
def repartitioned(kafka, spark42: SparkInstall, tmp_path_factory: pytest.TempPathFactory) -> Repartitioned:  # noqa: ANN001
    work = tmp_path_factory.mktemp("spark42-repartition")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, 2)
    produce_records(kafka.bootstrap_servers, topic, FIRST)
    common = {"bootstrap": kafka.bootstrap_servers, "topic": topic}
    written = run_spark42(spark42, work, "write", [
        {**common, "label": "first", "checkpoint": str(work / "cp"), "sink": str(work / "sink-first"),
         "shuffle_partitions": BEFORE, "repartition": AFTER},
        {**common, "label": "unfinished", "checkpoint": str(work / "cp-hdfs"), "sink": str(work / "sink-hdfs"),
         "shuffle_partitions": BEFORE, "repartition": AFTER, "state_store": "hdfs"}])
    first = written["first"]
    assert first["ok"], first

    reader = CheckpointReader(str(work / "cp"))
    snapshot = reader.snapshot()
    assert snapshot.last_committed_batch is not None
    before = reader.committed_sources(snapshot.last_committed_batch - 1)[0].kafka
    assert before is not None
    handover = reader.handover()
    local = fsspec.filesystem("file")
    manifest = CheckpointArchive(local, str(work / "archive")).archive(
        local, str(work / "cp"), stream_name="repartitioned", upgrade_id="up-1", handover=handover)
    verify_archive(local, manifest.archive_uri)
    restore_archive(local, manifest.archive_uri, local, str(work / "restored"))
    restored = CheckpointReader(str(work / "restored")).snapshot()

    produce_records(kafka.bootstrap_servers, topic, LATER, start=FIRST)
    ends = {p: end for (_, p), (_, end) in broker_ranges(kafka.bootstrap_servers, [topic]).items()}
    resumed = run_spark42(spark42, work, "resume", [
        {**common, "label": "restored", "checkpoint": str(work / "restored"), "sink": str(work / "sink-restored"),
         "shuffle_partitions": AFTER},
        {**common, "label": "new", "checkpoint": str(work / "new-cp"), "sink": str(work / "sink-new"),
         "shuffle_partitions": AFTER, "starting_offsets": handover.kafka_offsets().to_json()},
        {**common, "label": "unfinished", "checkpoint": str(work / "cp-hdfs"), "sink": str(work / "sink-hdfs"),
         "shuffle_partitions": AFTER, "state_store": "hdfs"}])
    return Repartitioned(work, kafka.bootstrap_servers, topic, first, written["unfinished"], snapshot, before, handover, manifest,
                         restored, ends, resumed)


def test_the_reader_names_the_batch_spark_repartitioned(repartitioned: Repartitioned) -> None:
    snap, first = repartitioned.snapshot, repartitioned.first
    n = first["batches"][-1]
    assert first["repartition_s"] is not None  # Spark's call returned: the repartition finished
    assert (snap.last_committed_batch, snap.in_flight_batch) == (n + 1, None)
    assert snap.repartitions == (RepartitionBatch(n + 1, BEFORE, AFTER, committed=True, same_offsets=True),)
    assert shuffle_partitions(snap.conf) == AFTER
    reader = CheckpointReader(str(repartitioned.checkpoint))
    # what Spark wrote: offsets/N+1 = offsets/N but for the shuffle partitions; commits/N+1 = commits/N
    entry, previous = reader.offset_entry(n + 1), reader.offset_entry(n)
    assert (entry.sources, entry.batch_watermark_ms, entry.batch_timestamp_ms) == (
        previous.sources, previous.batch_watermark_ms, previous.batch_timestamp_ms)
    assert {k: v for k, v in entry.conf.items() if k != "spark.sql.shuffle.partitions"} == {
        k: v for k, v in previous.conf.items() if k != "spark.sql.shuffle.partitions"}
    assert reader.commit_entry(n + 1) == reader.commit_entry(n)


def test_the_handover_after_the_repartition_is_the_offsets_of_the_batch_it_repartitioned(
        repartitioned: Repartitioned) -> None:
    handover = repartitioned.handover
    assert handover.batch_id == repartitioned.snapshot.last_committed_batch
    assert handover.kafka_offsets() == repartitioned.before
    # exactly past what the first run read: the first run's totals are those of every offset before it
    ranges = {p: (0, o) for _, p, o in handover.kafka_offsets().items()}
    assert sink_totals(repartitioned.work / "sink-first") == expected_totals(ranges)
    assert sum(end for _, end in ranges.values()) == FIRST


def test_the_archive_keeps_the_repartition_batch(repartitioned: Repartitioned) -> None:
    n1 = repartitioned.snapshot.last_committed_batch
    paths = {f.path for f in repartitioned.manifest.files}
    assert {f"offsets/{n1}", f"commits/{n1}"} <= paths
    assert repartitioned.manifest.handover == repartitioned.handover
    restored = repartitioned.restored
    assert restored.repartitions == repartitioned.snapshot.repartitions
    assert (restored.last_committed_batch, restored.sources) == (n1, repartitioned.snapshot.sources)


def test_spark42_resumes_the_restored_checkpoint_exactly_at_the_handover_with_its_state(
        repartitioned: Repartitioned) -> None:
    resumed = repartitioned.resumed["restored"]
    assert resumed["ok"], resumed
    n1 = repartitioned.snapshot.last_committed_batch
    assert n1 is not None and resumed["batches"][0] == n1 + 1
    assert KafkaOffsets.from_json(resumed["start_offsets"]) == repartitioned.handover.kafka_offsets()
    reader = CheckpointReader(str(repartitioned.work / "restored"))
    assert shuffle_partitions(reader.offset_entry(n1 + 1).conf) == AFTER
    # running totals over everything: the state before the repartition was carried, nothing lost or repeated
    everything = expected_totals({p: (0, end) for p, end in repartitioned.ends.items()})
    assert sum(n for n, _, _ in everything.values()) == FIRST + LATER
    assert sink_totals(repartitioned.work / "sink-restored") == everything


def test_a_new_query_from_the_handover_reads_every_later_record_once(repartitioned: Repartitioned) -> None:
    new = repartitioned.resumed["new"]
    assert new["ok"], new
    handover = repartitioned.handover.kafka_offsets()
    later = expected_totals({p: (handover.get(repartitioned.topic, p) or 0, end)
                             for p, end in repartitioned.ends.items()})
    assert sum(n for n, _, _ in later.values()) == LATER
    assert sink_totals(repartitioned.work / "sink-new") == later
    started = CheckpointReader(str(repartitioned.work / "new-cp")).snapshot(include_initial=True)
    verified = verify_start(started, handover, handover=repartitioned.handover)
    assert all(p.ok for p in verified.partitions)


def test_an_unfinished_repartition_is_named_handed_over_from_before_it_and_refused_by_spark42(
        repartitioned: Repartitioned) -> None:
    unfinished = repartitioned.unfinished
    assert unfinished["ok"] and "UNSUPPORTED_PROVIDER" in (unfinished["repartition_error"] or ""), unfinished
    n = unfinished["batches"][-1]
    refused = repartitioned.resumed["unfinished"]
    assert not refused["ok"] and UNFINISHED_REPARTITION_ERROR in refused["error"], refused
    # Spark's refusal left the checkpoint as the failed repartition did
    reader = CheckpointReader(str(repartitioned.work / "cp-hdfs"))
    snap = reader.snapshot()
    assert (snap.last_committed_batch, snap.in_flight_batch) == (n, n + 1)
    assert snap.unfinished_repartition == RepartitionBatch(n + 1, BEFORE, AFTER, committed=False, same_offsets=True)
    assert UNFINISHED_REPARTITION_ERROR in snap.unfinished_repartition.describe()
    handover = reader.handover()
    assert (handover.batch_id, handover.in_flight_batch) == (n, n + 1)
    assert handover.kafka_offsets() == reader.committed_sources(n)[0].kafka
    ranges = {p: (0, o) for _, p, o in handover.kafka_offsets().items()}
    assert sink_totals(repartitioned.work / "sink-hdfs") == expected_totals(ranges)
