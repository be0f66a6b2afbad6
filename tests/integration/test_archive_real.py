"""Archive and restore of real Spark checkpoints WITH STATE (HDFS-backed and RocksDB state stores).

A streaming aggregation (Kafka -> groupBy(partition).count(), complete mode) writes offsets,
commits and state files; the archive must restore byte for byte, and the query must continue from
the restored checkpoint with its state intact (counts continue, nothing recounted).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.manifest import ArchiveManifest
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive
from tests.harness.records import produce_records
from tests.integration.streams import kafka_reader

pytestmark = pytest.mark.integration

PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
STATE_CONF = "spark.sql.streaming.stateStore.providerClass"
MAINTENANCE = "spark.sql.streaming.stateStore.maintenanceInterval"


def tree(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (relative path -> bytes)."""
    return {
        str(Path(d, name).relative_to(root)): Path(d, name).read_bytes()
        for d, _, names in os.walk(root) for name in names
    }


@pytest.fixture
def state_provider(spark, request: pytest.FixtureRequest) -> Iterator[str]:  # noqa: ANN001
    """Set the state store provider for queries started in this test; restore the conf after."""
    provider = PROVIDERS[request.param]
    saved = {key: spark.conf.get(key, None) for key in (STATE_CONF, MAINTENANCE)}
    spark.conf.set(STATE_CONF, provider)
    # no background state maintenance (snapshots, cleanup) writing into a stopped query's checkpoint
    spark.conf.set(MAINTENANCE, "3600s")
    yield provider
    for key, value in saved.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def count_by_partition(spark, bootstrap: str, topic: str, checkpoint: Path, timeout: float = 180) -> dict[int, int]:  # noqa: ANN001
    """Run the stateful aggregation once (availableNow) and return its complete output."""
    name = f"counts_{uuid.uuid4().hex[:8]}"
    query = (
        kafka_reader(spark, bootstrap, [topic], max_per_trigger=60)
        .groupBy("partition").count()
        .writeStream.format("memory").queryName(name).outputMode("complete")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(timeout), f"query did not finish within {timeout} s"
    assert query.exception() is None, query.exception()
    return {row["partition"]: row["count"] for row in spark.table(name).collect()}


@pytest.mark.parametrize("state_provider", ["hdfs", "rocksdb"], indirect=True)
def test_stateful_checkpoint_round_trips_and_restarts(kafka, spark, new_topic, state_provider: str,
                                                      tmp_path: Path) -> None:  # noqa: ANN001
    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 200)
    checkpoint = tmp_path / "cp"
    counts = count_by_partition(spark, kafka.bootstrap_servers, topic, checkpoint)
    assert sum(counts.values()) == 200
    original = tree(checkpoint)
    state_files = [p for p in original if p.startswith("state/")]
    assert len(state_files) >= 4, "the aggregation must have written state"
    if "RocksDB" in state_provider:
        assert any(p.endswith(".zip") or "/SSTs/" in p for p in state_files), state_files

    fs = fsspec.filesystem("file")
    manifest = CheckpointArchive(fs, str(tmp_path / "archive")).archive(
        fs, str(checkpoint), stream_name="counts", upgrade_id="it-1", reason="state store round trip")
    assert {f.path for f in manifest.files} == set(original)
    assert manifest.spark_conf[STATE_CONF] == state_provider
    assert manifest.handover is not None and manifest.handover.kafka_offsets().total() == 200
    assert tree(checkpoint) == original, "archiving must not change the checkpoint"

    archive_path = str(tmp_path / "archive" / "counts" / manifest.name)
    assert verify_archive(fs, archive_path) == manifest
    restored = tmp_path / "restored"
    restore_archive(fs, archive_path, fs, str(restored))
    assert tree(restored) == original, "restore must be byte for byte"

    # the query continues from the restored checkpoint: the state carries the 200 counted records
    produce_records(kafka.bootstrap_servers, topic, 100, start=200)
    counts = count_by_partition(spark, kafka.bootstrap_servers, topic, restored)
    assert sum(counts.values()) == 300, counts


@pytest.mark.parametrize("state_provider", ["hdfs"], indirect=True)
def test_operators_archive_and_restore_in_a_dag_run(airflow_home, kafka, spark, new_topic, state_provider: str,
                                                     tmp_path: Path) -> None:  # noqa: ANN001
    from tests.dags.archive_restore import dag

    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 120)
    checkpoint = tmp_path / "cp"
    count_by_partition(spark, kafka.bootstrap_servers, topic, checkpoint)
    original = tree(checkpoint)

    result_file = tmp_path / "result.json"
    run = dag.test(run_conf={"checkpoint_uri": str(checkpoint), "archive_root": str(tmp_path / "archive"),
                             "stream_name": "counts", "restore_to": str(tmp_path / "restored"),
                             "result_file": str(result_file)})
    assert run.state == "success"
    result = json.loads(result_file.read_text())
    archived = result["archive"]
    assert archived["file_count"] == len(original)
    assert archived["total_bytes"] == sum(map(len, original.values()))
    assert archived["handover"]["batch_id"] is not None
    assert archived["dag_run_id"] == f"ckpt_archive_restore/{run.run_id}"
    assert archived["created_by"] and archived["reason"] == "integration test of the archive operator"
    assert archived["removed_archives"] == []
    location = Path(archived["location"])
    assert location.parent == tmp_path / "archive" / "counts"
    manifest = ArchiveManifest.from_json((location / "manifest.json").read_text())
    assert manifest.upgrade_id in location.name and manifest.upgrade_id.startswith("manual__")
    assert result["restore"]["restored_to"] == str(tmp_path / "restored")
    assert tree(tmp_path / "restored") == original
    assert tree(checkpoint) == original, "remove_source is off: the original stays"
