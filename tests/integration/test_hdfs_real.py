"""A stateful checkpoint on a real HDFS (NameNode + DataNode from Maven's Hadoop 3.4.1).

Spark writes ``hdfs://127.0.0.1:<rpc port>/…`` from the real Kafka broker; the provider reads the
same location through WebHDFS (the storage hook maps ``hdfs://`` to fsspec's ``webhdfs``): it
inspects the checkpoint, takes the handover, archives it to the local disk and to HDFS, verifies
both archives, restores to HDFS, and Spark resumes from the restored checkpoint exactly at the
handover. A new version started with the handover as ``startingOffsets`` on a new HDFS checkpoint
records that start in ``sources/0/0``, which the provider reads back over WebHDFS. In the driver,
Hadoop's own ``hdfs://`` client reads the same checkpoint with the provider's reader
(``read_handover``) and takes the same handover.
"""

from __future__ import annotations

import io
import json
import posixpath
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import CheckpointNotFound, NotACheckpoint, UnreadableCheckpoint
from airflow_ckpt_provider.checkpoint.manifest import DATA_DIR
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.verify import recorded_start
from airflow_ckpt_provider.cli import main as cli_main
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive
from tests.harness.records import produce_records
from tests.integration.streams import kafka_reader

pytestmark = [pytest.mark.integration, pytest.mark.hdfs]

STATE_CONF = "spark.sql.streaming.stateStore.providerClass"
HDFS_STORE = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real NameNode and DataNode on 127.0.0.1 (jars: ``jvm fetch hdfs``, a no-op once resolved)."""
    from airflow_ckpt_provider.local import jvm
    from tests.harness.hdfs import LocalHdfs

    jvm.fetch((jvm.HDFS,))
    with LocalHdfs(tmp_path_factory.mktemp("hdfs")) as cluster:
        yield cluster


@pytest.fixture
def hdfs_spark(spark, hdfs) -> Iterator[Any]:  # noqa: ANN001
    """The shared SparkSession writing to this HDFS (one replica) with the HDFS-backed state store."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    hadoop.set("dfs.replication", "1")
    saved = spark.conf.get(STATE_CONF, None)
    spark.conf.set(STATE_CONF, HDFS_STORE)
    yield spark
    if saved is None:
        spark.conf.unset(STATE_CONF)
    else:
        spark.conf.set(STATE_CONF, saved)


def hdfs_tree(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, bytes]:
    """Every file below ``root`` on HDFS (relative path -> bytes)."""
    return {posixpath.relpath(path, root): fs.cat_file(path) for path in fs.find(root)}


def local_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def run_counts(spark: Any, bootstrap: str, topic: str, checkpoint: str, *,
               starting_offsets: str = "earliest", timeout: float = 300) -> tuple[dict[int, int], list[dict[str, Any]]]:
    """Run the stateful count per partition once (availableNow) on ``checkpoint``; return its
    complete output and the query's progress reports."""
    name = f"counts_{uuid.uuid4().hex[:8]}"
    query = (
        kafka_reader(spark, bootstrap, [topic], starting_offsets=starting_offsets, max_per_trigger=60)
        .groupBy("partition").count()
        .writeStream.format("memory").queryName(name).outputMode("complete")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(timeout), f"query did not finish within {timeout} s"
    assert query.exception() is None, query.exception()
    counts = {row["partition"]: row["count"] for row in spark.table(name).collect()}
    return counts, [json.loads(p.json) for p in query.recentProgress]


@dataclass(frozen=True)
class HdfsCheckpoint:
    """A checkpoint the stateful count wrote on HDFS from a new topic, and WebHDFS onto it."""

    topic: str
    uri: str
    storage: CheckpointStorageHook
    fs: fsspec.AbstractFileSystem
    path: str


def counted_on_hdfs(spark: Any, hdfs: Any, kafka: Any, new_topic: Any, *, partitions: int, records: int,
                    name: str) -> HdfsCheckpoint:
    """``records`` records on a new topic of ``partitions`` partitions, counted once (availableNow)
    to a new checkpoint ``/streams/<name>-<random>`` on HDFS, opened through WebHDFS."""
    topic = new_topic(partitions)
    produce_records(kafka.bootstrap_servers, topic, records)
    uri = f"{hdfs.url}/streams/{name}-{uuid.uuid4().hex[:6]}"
    run_counts(spark, kafka.bootstrap_servers, topic, uri)
    storage = CheckpointStorageHook(webhdfs_port=hdfs.http_port, user=hdfs.user)
    fs, path = storage.filesystem(uri)
    return HdfsCheckpoint(topic=topic, uri=uri, storage=storage, fs=fs, path=path)


def offsets_of(progress_offsets: Any) -> KafkaOffsets:
    return KafkaOffsets.from_json(progress_offsets if isinstance(progress_offsets, str)
                                  else json.dumps(progress_offsets))


def test_hdfs_checkpoint_inspect_archive_restore_resume(hdfs, hdfs_spark, kafka, new_topic,
                                                        tmp_path: Path) -> None:  # noqa: ANN001
    spark = hdfs_spark
    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 200)
    checkpoint_uri = f"{hdfs.url}/streams/counts/ck-{uuid.uuid4().hex[:6]}"
    counts, progress = run_counts(spark, kafka.bootstrap_servers, topic, checkpoint_uri)
    assert sum(counts.values()) == 200 and len(progress) >= 4  # 60 records per batch at most
    spark_end = offsets_of(progress[-1]["sources"][0]["endOffset"])

    # one location name for Spark and the provider: hdfs:// opened through WebHDFS
    storage = CheckpointStorageHook(webhdfs_port=hdfs.http_port, user=hdfs.user)
    fs, path = storage.filesystem(checkpoint_uri)
    assert fs.protocol[0] == "webhdfs" and path.startswith("/streams/counts/")
    original = hdfs_tree(fs, path)
    assert any(p.startswith("state/0/") for p in original), sorted(original)

    snapshot = CheckpointReader(checkpoint_uri, fs=fs).snapshot()
    assert snapshot.last_committed_batch == snapshot.last_planned_batch == progress[-1]["batchId"]
    assert snapshot.in_flight_batch is None and snapshot.state_operators == (0,)
    handover = CheckpointReader(checkpoint_uri, fs=fs).handover()
    assert handover.kafka_offsets() == spark_end and spark_end.total() == 200
    assert handover.query_id == progress[-1]["id"]

    # archive to the local disk and to HDFS; both verify; the checkpoint is untouched
    local_fs = fsspec.filesystem("file")
    to_local = CheckpointArchive(local_fs, str(tmp_path / "archive")).archive(
        fs, path, source_uri=checkpoint_uri, stream_name="counts", upgrade_id="hdfs-1", handover=handover)
    to_hdfs = CheckpointArchive(fs, "/archive", archive_uri=f"{hdfs.url}/archive").archive(
        fs, path, source_uri=checkpoint_uri, stream_name="counts", upgrade_id="hdfs-1", handover=handover)
    for manifest in (to_local, to_hdfs):
        assert {f.path for f in manifest.files} == set(original)
        assert manifest.total_bytes == sum(map(len, original.values()))
        assert manifest.handover is not None and manifest.handover.kafka_offsets() == spark_end
    local_archive = tmp_path / "archive" / "counts" / to_local.name
    hdfs_archive = f"/archive/counts/{to_hdfs.name}"
    assert verify_archive(local_fs, str(local_archive)) == to_local
    assert verify_archive(fs, hdfs_archive) == to_hdfs
    assert local_tree(local_archive / DATA_DIR) == original
    assert hdfs_tree(fs, path) == original, "archiving must not change the checkpoint"

    # restore both archives to HDFS, byte for byte
    restored_uri = f"{hdfs.url}/streams/counts/restored-{uuid.uuid4().hex[:6]}"
    restored = storage.filesystem(restored_uri)[1]
    restore_archive(fs, hdfs_archive, fs, restored)
    assert hdfs_tree(fs, restored) == original
    from_local = f"/streams/counts/from-local-{uuid.uuid4().hex[:6]}"
    restore_archive(local_fs, str(local_archive), fs, from_local)
    assert hdfs_tree(fs, from_local) == original

    # Spark resumes from the restored checkpoint: its next batch starts at the handover, the state
    # carries the 200 records counted before
    produce_records(kafka.bootstrap_servers, topic, 100, start=200)
    counts, resumed = run_counts(spark, kafka.bootstrap_servers, topic, restored_uri)
    assert sum(counts.values()) == 300, counts
    assert resumed[0]["batchId"] == handover.batch_id + 1  # type: ignore[operator]
    assert offsets_of(resumed[0]["sources"][0]["startOffset"]) == handover.kafka_offsets()
    after = CheckpointReader(restored_uri, fs=fs)
    assert after.batch_start(handover.batch_id + 1).kafka_offsets() == handover.kafka_offsets()  # type: ignore[operator]
    assert after.handover().kafka_offsets().total() == 300


def test_new_version_on_hdfs_starts_at_the_handover(hdfs, hdfs_spark, kafka, new_topic) -> None:  # noqa: ANN001
    spark = hdfs_spark
    old = counted_on_hdfs(spark, hdfs, kafka, new_topic, partitions=3, records=150, name="v1")
    topic, old_uri, storage, fs = old.topic, old.uri, old.storage, old.fs
    handover = CheckpointReader(old_uri, fs=fs).handover()
    assert handover.kafka_offsets().total() == 150

    # on-call, from a shell: the same hdfs:// name with the HTTP port as a storage option
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["inspect", old_uri, "-o", f"webhdfs_port={hdfs.http_port}", "-o", f"user={hdfs.user}",
                     "--json"], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    inspected = json.loads(out.getvalue())
    assert inspected["last_committed_batch"] == handover.batch_id and inspected["uri"] == old_uri
    assert KafkaOffsets.from_json(json.dumps(inspected["sources"][0]["offsets"])) == handover.kafka_offsets()

    # wrong names get the reader's typed errors, from the real NameNode
    options = {"webhdfs_port": hdfs.http_port, "user": hdfs.user}
    with pytest.raises(CheckpointNotFound):
        CheckpointReader(f"{old_uri}-missing", storage_options=options).snapshot()
    with pytest.raises(NotACheckpoint):
        CheckpointReader(f"{hdfs.url}/streams", storage_options=options).snapshot()
    with pytest.raises(UnreadableCheckpoint) as refused:  # the RPC port where the HTTP port belongs
        CheckpointReader(old_uri, storage_options={"webhdfs_port": hdfs.rpc_port}).snapshot()
    assert old_uri in str(refused.value)

    # the new version on a NEW checkpoint with explicit startingOffsets: it reads only what came after
    produce_records(kafka.bootstrap_servers, topic, 90, start=150)
    new_uri = f"{hdfs.url}/streams/v2-{uuid.uuid4().hex[:6]}"
    counts, progress = run_counts(spark, kafka.bootstrap_servers, topic, new_uri,
                                  starting_offsets=handover.kafka_offsets().to_json())
    assert sum(counts.values()) == 90, counts  # none of the 150 before the handover, all 90 after
    assert progress[0]["batchId"] == 0
    new_fs, _ = storage.filesystem(new_uri)
    index, start = recorded_start(CheckpointReader(new_uri, fs=new_fs).snapshot(include_initial=True))
    assert (index, start) == (0, handover.kafka_offsets())


def test_the_driver_reads_an_hdfs_checkpoint_as_the_provider_reads_it(hdfs, hdfs_spark, kafka,  # noqa: ANN001
                                                                       new_topic) -> None:  # noqa: ANN001
    """Hadoop's own ``hdfs://`` client in the driver (``read_handover``) and the provider's WebHDFS
    reading take the same handover and snapshot, and refuse alike, from one real NameNode."""
    from airflow_ckpt_provider.checkpoint.snapshot_reader import SnapshotReader
    from airflow_ckpt_provider.spark.checkpoint_files import HadoopCheckpointFiles, read_handover

    spark, taken_at = hdfs_spark, "2026-01-01T00:00:00+00:00"
    counted = counted_on_hdfs(spark, hdfs, kafka, new_topic, partitions=2, records=120, name="driver")
    uri, fs, path = counted.uri, counted.fs, counted.path

    provider = CheckpointReader(uri, fs=fs)
    assert read_handover(spark, uri, taken_at=taken_at) == provider.handover(taken_at=taken_at)
    with HadoopCheckpointFiles(spark, uri) as files:
        assert SnapshotReader(files).snapshot(include_initial=True) == provider.snapshot(include_initial=True)

    # the last commit removed: both hand over the batch before it and name it in flight
    last = provider.snapshot().last_committed_batch
    assert last is not None and last > 0
    fs.rm(f"{path}/commits/{last}")
    driver = read_handover(spark, uri, taken_at=taken_at)
    assert driver == CheckpointReader(uri, fs=fs).handover(taken_at=taken_at)
    assert (driver.batch_id, driver.in_flight_batch) == (last - 1, last)

    # a missing checkpoint: the same typed error with the same words
    missing = f"{uri}-missing"
    with pytest.raises(CheckpointNotFound) as in_driver:
        read_handover(spark, missing)
    with pytest.raises(CheckpointNotFound) as in_provider:
        CheckpointReader(missing, fs=fs).handover()
    assert str(in_driver.value) == str(in_provider.value)


def test_a_file_rewritten_over_webhdfs_holds_the_new_bytes_and_nothing_else(hdfs) -> None:  # noqa: ANN001
    """HDFS refuses to rename onto an existing file, and WebHDFS says so only in its answer's
    ``boolean``: a rewrite (a second stop request, a journal record) must still replace the file
    whole, and leave no temporary file."""
    from airflow_ckpt_provider.storage.files import write_atomic

    fs, root = hdfs.filesystem(), f"/rewrite-{uuid.uuid4().hex[:8]}"
    target = f"{root}/_ckpt/stop-request.json"
    for data in (b'{"request": 1}', b'{"request": 22}', b'{"request": 333}'):
        write_atomic(fs, target, data)
        assert fs.cat_file(target) == data
    assert [posixpath.basename(p) for p in fs.find(root)] == ["stop-request.json"]
