"""The state export on checkpoints written by real Spark from a real broker.

Round trips: for an aggregation on the HDFS-backed store and on RocksDB with changelog, a
deduplication and a stream-stream join, every exported row equals Spark's own ``statestore``
row of the last committed batch. The spark-submit path (the operator's and ``ckpt
export-state``'s) runs once, is reused when complete and starts over after an unfinished run.
Every refusal changes nothing: neither the checkpoint nor the export location. RocksDB state
checkpoint format v2 written by Spark 4.0 (`make spark40`) is refused for a Spark 4.2 exporter,
which really cannot read it.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.errors import (
    StateBatchNotCommitted,
    StateExportConflict,
    StateExportCorrupt,
    StateFormatUnsupported,
    StateVersionPurged,
)
from airflow_ckpt_provider.checkpoint.state import CONF_CHECKPOINT_FORMAT, STATE_MANIFEST, StateManifest
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.hooks.state_export import export_checkpoint_state
from airflow_ckpt_provider.spark.state_export import export_state
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.state import (
    finish_export,
    plan_state_export,
    prepare_export_location,
    read_manifest,
    verify_state_export,
)
from tests.harness.records import produce_records
from tests.integration.streams import batch_ids, spark_conf

pytestmark = pytest.mark.integration

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
FS = fsspec.filesystem("file")
#: a stateful query whose state Spark purges while it runs (argv[1]: its checkpoint)
PURGING_QUERY = """
import sys, time
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.streaming.minBatchesToRetain", "2")
         .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "2")
         .config("spark.sql.streaming.stateStore.maintenanceInterval", "100ms").getOrCreate())
counts = spark.readStream.format("rate").option("rowsPerSecond", 50).load().groupBy(F.col("value") % 5).count()
query = (counts.writeStream.format("noop").outputMode("update").option("checkpointLocation", sys.argv[1])
         .trigger(processingTime="200 milliseconds").start())
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    time.sleep(1)
    deltas = sorted(int(p.split(".")[0]) for p in __import__("os").listdir(sys.argv[1] + "/state/0/0")
                    if p.endswith(".delta")) if __import__("os").path.isdir(sys.argv[1] + "/state/0/0") else []
    if deltas and deltas[0] > 2 and len((query.lastProgress or {}).get("stateOperators", [])) > 0:
        break
query.stop()
spark.stop()
"""


#: a RocksDB aggregation in state checkpoint format v2, in a Spark of its own (argv[1]: its
#: checkpoint), stopped after its third commit
FORMAT_V2_QUERY = """
import os, sys, time
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.streaming.stateStore.providerClass",
                 "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
         .config("spark.sql.streaming.stateStore.checkpointFormatVersion", "2").getOrCreate())
counts = spark.readStream.format("rate").option("rowsPerSecond", 50).load().groupBy(F.col("value") % 5).count()
query = (counts.writeStream.format("noop").outputMode("update").option("checkpointLocation", sys.argv[1])
         .trigger(processingTime="500 milliseconds").start())
deadline = time.monotonic() + 300
commits = sys.argv[1] + "/commits"
while time.monotonic() < deadline and len([n for n in (os.listdir(commits) if os.path.isdir(commits) else [])
                                           if n.isdigit()]) < 3:
    time.sleep(0.5)
query.stop()
spark.stop()
"""


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` (names and sha256): a checkpoint must not change."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def purchases(spark: Any, bootstrap: str, topic: str, per_batch: int = 150) -> Any:
    """Kafka records as (customer, amount, timestamp): 17 customers, amounts from the offset."""
    from pyspark.sql import functions as F

    frame = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", per_batch).load())
    return frame.select((F.abs(F.hash("key")) % 17).alias("customer"), (F.col("offset") % 100).alias("amount"),
                        "timestamp", "partition", "offset")


def run_until_done(spark: Any, frame: Any, checkpoint: Path, *, mode: str = "update",
                   conf: dict[str, str] | None = None) -> None:
    """Run ``frame`` to a no-op sink until everything in Kafka now is processed."""
    with spark_conf(spark, conf):
        query = (frame.writeStream.format("noop").outputMode(mode).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(300), "query did not finish within 300 s"
        assert query.exception() is None, query.exception()


def aggregation(spark: Any, bootstrap: str, topic: str, per_batch: int = 150) -> Any:
    from pyspark.sql import functions as F

    return purchases(spark, bootstrap, topic, per_batch).groupBy("customer").agg(
        F.sum("amount").alias("total"), F.count("*").alias("n"), F.min("amount"), F.max("amount"), F.avg("amount"))


@pytest.fixture(scope="module")
def topic(kafka) -> str:  # noqa: ANN001
    name = "purchases-state-export"
    kafka.create_topic(name, 3)
    produce_records(kafka.bootstrap_servers, name, 900)
    return name


@pytest.fixture(scope="module")
def checkpoints(spark, kafka, topic, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:  # noqa: ANN001
    """Stateful checkpoints written by Spark from the topic, several batches each."""
    from pyspark.sql import functions as F

    root = tmp_path_factory.mktemp("stateful")
    bootstrap = kafka.bootstrap_servers
    made = {name: root / name for name in ("agg-hdfs", "agg-rocksdb", "dedup", "join")}
    run_until_done(spark, aggregation(spark, bootstrap, topic), made["agg-hdfs"])
    run_until_done(spark, aggregation(spark, bootstrap, topic), made["agg-rocksdb"],
                   conf={PROVIDER: ROCKSDB, CHANGELOG: "true"})
    run_until_done(spark, purchases(spark, bootstrap, topic).dropDuplicates(["customer"]), made["dedup"],
                   mode="append")
    left = purchases(spark, bootstrap, topic).withWatermark("timestamp", "1 hour").select(
        F.col("customer").alias("lc"), F.col("timestamp").alias("lt"), F.col("amount").alias("la"))
    right = purchases(spark, bootstrap, topic).withWatermark("timestamp", "1 hour").select(
        F.col("customer").alias("rc"), F.col("timestamp").alias("rt"), F.col("offset").alias("ro"))
    joined = left.join(right, F.expr("lc = rc AND rt BETWEEN lt - interval 1 second AND lt + interval 1 second"),
                       "leftOuter")
    run_until_done(spark, joined, made["join"], mode="append")
    for path in made.values():
        assert len(batch_ids(path / "commits")) >= 3, f"{path.name}: expected several batches"
    return made


def export_in_process(spark: Any, checkpoint: Path, target: Path, batch: int | None = None) -> StateManifest:
    """The operator's path without spark-submit: plan, the job's function, read-back, manifest."""
    plan = plan_state_export(CheckpointReader(str(checkpoint)), batch)
    assert plan.batch_id is not None
    assert prepare_export_location(FS, str(target), uri=str(target), checkpoint_fs=FS,
                                   checkpoint_root=str(checkpoint)) is None
    result = export_state(spark, str(checkpoint), plan.batch_id, str(target), extra_stores=list(plan.inferred_stores))
    return finish_export(FS, str(target), plan, result, uri=str(target), upgrade_id="test-upgrade")


@pytest.mark.parametrize("name", ["agg-hdfs", "agg-rocksdb", "dedup", "join"])
def test_export_round_trip_equals_the_state_reader(spark, checkpoints, name: str, tmp_path: Path) -> None:  # noqa: ANN001
    from pyspark.sql import functions as F

    checkpoint = checkpoints[name]
    before = tree_digest(checkpoint)
    last = batch_ids(checkpoint / "commits")[-1]
    manifest = export_in_process(spark, checkpoint, tmp_path / "export")

    assert manifest.batch_id == last
    assert manifest.state_store_provider.endswith("RocksDBStateStoreProvider" if name == "agg-rocksdb"
                                                  else "HDFSBackedStateStoreProvider")
    expected_stores = 4 if name == "join" else 1
    assert len(manifest.stores) == expected_stores and manifest.rows > 0
    for store in manifest.stores:
        exported = spark.read.parquet(str(tmp_path / "export" / store.path))
        original = (spark.read.format("statestore").option("batchId", last).option("operatorId", store.operator_id)
                    .option("storeName", store.store_name).load(str(checkpoint)))
        assert original.schema["value"].dataType.jsonValue() == store.value_schema
        # the stored form differs only where Parquet needs it (void fields, repeated names): a positional cast
        original = original.select(F.col("key").cast(exported.schema["key"].dataType).alias("key"),
                                   F.col("value").cast(exported.schema["value"].dataType).alias("value"),
                                   "partition_id")
        assert exported.count() == store.rows == original.count()
        assert exported.exceptAll(original).count() == 0 and original.exceptAll(exported).count() == 0
    if name == "dedup":
        assert manifest.stores[0].void_fields == ("value.__dummy__",)
    if name.startswith("agg"):
        assert manifest.stores[0].renamed_fields == {"value.sum_4": "value.sum", "value.count_5": "value.count"}
    verify_state_export(FS, str(tmp_path / "export"), manifest, uri=str(tmp_path / "export"))
    assert tree_digest(checkpoint) == before, "the export changed the checkpoint"


def test_a_tampered_export_does_not_verify(spark, checkpoints, tmp_path: Path) -> None:  # noqa: ANN001
    target = tmp_path / "export"
    manifest = export_in_process(spark, checkpoints["agg-hdfs"], target)
    victim = target / manifest.stores[0].files[0].path
    victim.write_bytes(victim.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(StateExportCorrupt, match="sha256"):
        verify_state_export(FS, str(target), manifest, uri=str(target))
    victim.unlink()
    with pytest.raises(StateExportCorrupt, match="is missing"):
        verify_state_export(FS, str(target), manifest, uri=str(target))


def test_read_back_refuses_rows_the_job_did_not_read(spark, checkpoints, tmp_path: Path) -> None:  # noqa: ANN001
    checkpoint, target = checkpoints["agg-hdfs"], tmp_path / "export"
    plan = plan_state_export(CheckpointReader(str(checkpoint)))
    assert plan.batch_id is not None
    result = export_state(spark, str(checkpoint), plan.batch_id, str(target))
    first = {**result.stores[0], "rows": result.stores[0]["rows"] + 1}  # what a lost Parquet file looks like
    result = replace(result, stores=(first, *result.stores[1:]))
    with pytest.raises(StateExportCorrupt, match="rows the export job read"):
        finish_export(FS, str(target), plan, result, uri=str(target), upgrade_id="u")
    assert not (target / STATE_MANIFEST).exists(), "no manifest for an export that does not verify"


@pytest.fixture
def copy_of(tmp_path: Path) -> Callable[[Path], Path]:
    made: list[Path] = []

    def copy(checkpoint: Path) -> Path:
        target = tmp_path / f"copy-{len(made)}-{checkpoint.name}"
        made.append(target)
        shutil.copytree(checkpoint, target)
        return target

    return copy


def refused(checkpoint: Path, target: Path, error: type[Exception], batch: int | None = None, *,
            reader_spark: str | None = None) -> str:
    """The refusal's message when ``reader_spark`` (default: this environment's Spark) would
    export; the checkpoint and the export location are unchanged."""
    import pyspark

    before = tree_digest(checkpoint)
    with pytest.raises(error) as caught:
        plan_state_export(CheckpointReader(str(checkpoint)), batch, reader_spark=reader_spark or pyspark.__version__)
    assert tree_digest(checkpoint) == before
    assert not target.exists()
    return str(caught.value)


def test_refusals_change_nothing(spark, spark40, kafka, topic, checkpoints, copy_of,  # noqa: ANN001
                                 tmp_path: Path) -> None:
    target = tmp_path / "export"
    last = batch_ids(checkpoints["agg-hdfs"] / "commits")[-1]
    # a batch that is not committed (planned, or unknown)
    message = refused(checkpoints["agg-hdfs"], target, StateBatchNotCommitted, batch=last + 1)
    assert f"batch {last + 1}" in message and "committed" in message
    planned = copy_of(checkpoints["agg-hdfs"])
    (planned / "commits" / str(last)).unlink()
    (planned / "commits" / f".{last}.crc").unlink(missing_ok=True)
    message = refused(planned, target, StateBatchNotCommitted, batch=last)
    assert "planned in offsets/ but not committed" in message
    # the state version of the batch was purged by Spark's own maintenance: a Spark whose session
    # starts with maintenance every 100 ms, a snapshot every 2 deltas and 2 batches retained (the
    # maintenance interval is fixed when a session first loads a state store, hence its own process)
    purged = tmp_path / "purged"
    subprocess.run([sys.executable, "-c", PURGING_QUERY, str(purged)], check=True, timeout=600,
                   capture_output=True)
    committed = batch_ids(purged / "commits")
    deltas = sorted(int(p.name.split(".")[0]) for p in (purged / "state" / "0" / "0").glob("*.delta"))
    assert deltas and deltas[0] > 2 and committed[0] > 0, f"Spark purged nothing (deltas {deltas}, {committed})"
    # Spark purges the logs and the state alike: a purged batch is no longer a committed one
    message = refused(purged, target, StateBatchNotCommitted, batch=committed[0] - 1)
    assert f"retained: {committed[0]}..{committed[-1]}" in message
    assert plan_state_export(CheckpointReader(str(purged)), committed[0]).batch_id == committed[0]
    # state files missing for a committed batch (a partial copy, a cleanup by hand): the version
    # after it cannot be rebuilt
    lost = copy_of(checkpoints["agg-hdfs"])
    for partition in (lost / "state" / "0").iterdir():
        for version in (1, 2):
            (partition / f"{version}.delta").unlink(missing_ok=True)
            (partition / f".{version}.delta.crc").unlink(missing_ok=True)
    message = refused(lost, target, StateVersionPurged, batch=0)
    assert "version 1 (the state after batch 0)" in message and "retained" in message
    # RocksDB checkpoint format v2 (unique ids) written by this Spark (4.2), which Spark 4.0's
    # reader cannot read (4.2's can: test_spark42_formats.py exports it)
    v2 = tmp_path / "format-v2"
    run_until_done(spark, aggregation(spark, kafka.bootstrap_servers, topic), v2,
                   conf={PROVIDER: ROCKSDB, CONF_CHECKPOINT_FORMAT: "2"})
    message = refused(v2, target, StateFormatUnsupported, reader_spark=spark40.version)
    assert "format v2" in message and "Spark 4.1.0" in message and f"Spark {spark40.version}" in message


def test_spark40_format_v2_state_is_refused_for_spark42_which_cannot_read_it(spark40, spark42,  # noqa: ANN001
                                                                               tmp_path: Path) -> None:
    """Spark 4.0 marks its format-v2 RocksDB snapshots' metadata v2; Spark 4.2 reads only v1 there.
    The plan refuses such state for a Spark 4.2 exporter, before anything is written; the export
    job run past the refusal shows why: Spark 4.2 fails to load the store. The checkpoint comes
    from a Spark 4.0 driver started with format v2 (as a job is launched): Spark 4.0 takes the
    version it writes in that metadata from the conf its JVM had when it first used RocksDB."""
    from airflow_ckpt_provider.checkpoint.errors import StateExportFailed
    from airflow_ckpt_provider.hooks.state_export import run_state_job

    checkpoint, target = tmp_path / "format-v2", tmp_path / "export"
    subprocess.run([str(spark40.python), "-c", FORMAT_V2_QUERY, str(checkpoint)], check=True, timeout=600,
                   capture_output=True)
    before = tree_digest(checkpoint)
    reader = CheckpointReader(str(checkpoint))
    assert reader.snapshot().commit_version == 2
    with pytest.raises(StateFormatUnsupported) as raised:
        plan_state_export(reader, reader_spark=spark42.version)
    assert "with metadata v2" in raised.value.found and f"Spark {spark42.version}" in raised.value.found
    assert tree_digest(checkpoint) == before and not target.exists()

    launched = []
    launcher = SparkLauncherHook(master="local[1]", spark_home=str(spark42.spark_home), log_dir=str(tmp_path / "logs"))
    with pytest.raises(StateExportFailed):
        run_state_job(launcher, checkpoint_uri=str(checkpoint), batch=batch_ids(checkpoint / "commits")[-1],
                      target_uri=str(target), conf={**spark42.job_conf(), "spark.ui.enabled": "false"},
                      checkpoint_format=2, timeout=900, on_launched=launched.append)
    log = Path(launched[0].log_path).read_text(errors="replace")
    assert f"Running Spark version {spark42.version}" in log
    assert "CANNOT_READ_CHECKPOINT" in log and "Expected v1, but found v2" in log
    assert tree_digest(checkpoint) == before


def test_operators_without_metadata_are_read_by_their_layout(spark, checkpoints, copy_of,  # noqa: ANN001
                                                            tmp_path: Path) -> None:
    """Spark 3.5 wrote no operator metadata for some operators; Spark 4.0's reader still reads them."""
    for name, stores in (("agg-hdfs", [(0, "default")]), ("join", [(0, "left-keyToNumValues"),
                         (0, "left-keyWithIndexToValue"), (0, "right-keyToNumValues"),
                         (0, "right-keyWithIndexToValue")])):
        bare = copy_of(checkpoints[name])
        shutil.rmtree(bare / "state" / "0" / "_metadata")
        plan = plan_state_export(CheckpointReader(str(bare)))
        assert list(plan.inferred_stores) == stores
        manifest = export_in_process(spark, bare, tmp_path / f"export-{name}")
        reference = export_in_process(spark, checkpoints[name], tmp_path / f"reference-{name}")
        assert [(s.store_name, s.rows) for s in manifest.stores] == [(s.store_name, s.rows) for s in reference.stores]
        assert manifest.stores[0].operator_name == "(no operator metadata)"


def test_a_location_holding_something_else_is_refused(checkpoints, tmp_path: Path) -> None:  # noqa: ANN001
    target = tmp_path / "export"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(StateExportConflict, match="notes.txt"):
        prepare_export_location(FS, str(target), uri=str(target), checkpoint_fs=FS,
                                checkpoint_root=str(checkpoints["agg-hdfs"]))
    assert (target / "notes.txt").read_text() == "mine"
    inside = checkpoints["agg-hdfs"] / "exported"
    with pytest.raises(StateExportConflict, match="overlaps the checkpoint"):
        prepare_export_location(FS, str(inside), uri=str(inside), checkpoint_fs=FS,
                                checkpoint_root=str(checkpoints["agg-hdfs"]))
    assert not inside.exists()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[SparkLauncherHook]:
    yield SparkLauncherHook(master="local[1]", log_dir=str(tmp_path / "logs"))


def test_submitted_export_is_reused_and_restarts_after_an_unfinished_run(spark, checkpoints, launcher,  # noqa: ANN001
                                                                        tmp_path: Path) -> None:
    checkpoint, target = checkpoints["agg-rocksdb"], tmp_path / "export"
    conf = {"spark.ui.enabled": "false"}
    # an earlier run that died half way: Parquet of a store, no manifest
    (target / "state" / "0" / "default").mkdir(parents=True)
    (target / "state" / "0" / "default" / "part-00000-stale.parquet").write_bytes(b"half a file")
    handover = CheckpointReader(str(checkpoint)).handover().to_dict()  # what the state step passes
    plan, manifest = export_checkpoint_state(checkpoint_uri=str(checkpoint), export_uri=str(target),
                                             launcher=launcher, conf=conf, upgrade_id="u-1",
                                             handover=handover, timeout=900)
    assert manifest is not None and plan.batch_id == manifest.batch_id
    assert manifest.handover is not None and manifest.handover["batch_id"] == plan.batch_id
    assert not (target / "state" / "0" / "default" / "part-00000-stale.parquet").exists()
    assert read_manifest(FS, str(target)) == manifest and manifest.upgrade_id == "u-1"
    reference = export_in_process(spark, checkpoint, tmp_path / "reference")
    assert [(s.path, s.rows) for s in manifest.stores] == [(s.path, s.rows) for s in reference.stores]
    stamp = (target / STATE_MANIFEST).stat().st_mtime_ns
    # a second run finds it complete and verified: no second job, nothing rewritten
    _, again = export_checkpoint_state(checkpoint_uri=str(checkpoint), export_uri=str(target),
                                       launcher=SparkLauncherHook(master="no-such-master"), conf=conf, upgrade_id="u-1")
    assert again == manifest and (target / STATE_MANIFEST).stat().st_mtime_ns == stamp

    # the CLI lists the same stores and rows (ckpt state) from the same job
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["state", str(checkpoint), "--json", "--master", "local[1]"], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    listed = json.loads(out.getvalue())
    assert [(s["path"], s["rows"]) for s in listed["stores"]] == [(s.path, s.rows) for s in manifest.stores]
    assert listed["batch_id"] == manifest.batch_id
