"""The state export's pure decisions: which versions rebuild, which batch a start needs, the
value objects' JSON, and the export location's refusals (on an in-memory filesystem)."""

from __future__ import annotations

import json

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    SeededStateMismatch,
    StateExportConflict,
    StateExportCorrupt,
    StateStartUnsupported,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceOffsets
from airflow_ckpt_provider.checkpoint.rewind import StartChoice, StartMode, StartPlan
from airflow_ckpt_provider.checkpoint.state import (
    STATE_MANIFEST,
    ExportedFile,
    ExportedStore,
    StateExport,
    StateManifest,
    check_seeded_state,
    export_location,
    state_batch,
    store_versions,
    version_readable,
)
from airflow_ckpt_provider.storage.state import prepare_export_location


@pytest.mark.parametrize(("names", "version", "readable"), [
    (["1.delta", "2.delta", "3.delta"], 3, True),
    (["2.delta", "3.delta"], 3, False),                      # version 1 purged, no snapshot
    (["2.snapshot", "3.delta", "4.delta"], 4, True),         # a snapshot is a whole version
    (["2.snapshot", "4.delta"], 4, False),                   # 3 missing between
    (["5.zip", "6.changelog", "7.changelog"], 7, True),      # RocksDB: zip + changelogs
    (["6.changelog", "7.changelog"], 7, False),
    (["1.changelog"], 2, False),                             # the version itself is missing
    ([], 0, True),                                           # version 0 is the empty state
])
def test_version_readable(names: list[str], version: int, readable: bool) -> None:
    versions, unique = store_versions([*names, ".1.delta.crc", "_metadata", "SSTs"])
    assert not unique
    assert version_readable(versions, version) is readable


def test_unique_ids_mark_checkpoint_format_v2() -> None:
    versions, unique = store_versions(["3_9f1b2c3d-aaaa-bbbb-cccc-0123456789ab.changelog", "3.zip"])
    assert unique and 3 in versions


def _result(choice: StartChoice | None = None, batch: int | None = 7) -> HandoverResult:
    sources = (SourceOffsets.parse(0, '{"t":{"0":5}}'),)
    handover = Handover(query_id="q", checkpoint_uri="/ckpt", batch_id=batch, from_initial=batch is None,
                        sources=sources, in_flight_batch=None, taken_at="2026-01-01T00:00:00+00:00")
    if choice is None:
        return HandoverResult(handover)
    plan = StartPlan(choice=choice, starting_offsets=KafkaOffsets.from_json('{"t":{"0":2}}'), partitions=())
    return HandoverResult(handover, plan.starting_offsets, None, plan)


def test_state_batch_follows_the_start() -> None:
    assert state_batch(_result()) == 7
    assert state_batch(_result(StartChoice(StartMode.REWIND_TO_BATCH, batch=4))) == 3
    assert state_batch(_result(StartChoice(StartMode.REWIND_TO_BATCH, batch=0))) is None
    with pytest.raises(StateStartUnsupported, match="explicit offsets"):
        state_batch(_result(StartChoice(StartMode.OFFSETS, offsets=KafkaOffsets.from_json('{"t":{"0":2}}'))))


def test_state_export_json_round_trip() -> None:
    export = StateExport(location="s3a://b/x", batch_id=3, stores=2, rows=10, size=99, seconds=1.5, operators=(0, 1))
    assert StateExport.from_json(json.dumps(export.to_dict())) == export
    assert StateExport.from_json(export.to_dict()) == export
    assert StateExport.from_json("/plain/location") == StateExport(location="/plain/location")
    assert StateExport.from_json("") is None and StateExport.from_json("None") is None


def _manifest() -> StateManifest:
    store = ExportedStore(operator_id=0, operator_name="stateStoreSave", store_name="default", state_variable=None,
                          path="state/0/default", num_partitions=2, key_schema={"type": "struct", "fields": []},
                          value_schema={"type": "struct", "fields": [{"name": "sum"}, {"name": "sum"}]},
                          void_fields=(), rows=3, files=(ExportedFile("state/0/default/p.parquet", 10, "ab", 3),),
                          renamed_fields={"value.sum_1": "value.sum"})
    return StateManifest(checkpoint_uri="/ckpt", query_id="q", batch_id=7, upgrade_id="u", state_store_provider="p",
                         checkpoint_format_version=1, batch_watermark_ms=5, next_batch_watermark_ms=6,
                         spark_version="4.0.0", created_at="t", stores=(store,), handover=_result().handover.to_dict())


def test_manifest_round_trip_and_refusal() -> None:
    manifest = _manifest()
    assert StateManifest.from_json(manifest.to_json()) == manifest
    assert manifest.store(0, "default") is manifest.stores[0] and manifest.store(1, "default") is None
    assert manifest.rows == 3 and manifest.total_bytes == 10
    with pytest.raises(StateExportCorrupt, match="format 2 .written by a newer release") as newer:
        StateManifest.from_json('{"format": 2}', where="/x/state-manifest.json")
    assert newer.value.path == "/x/state-manifest.json"
    with pytest.raises(StateExportCorrupt, match="without 'checkpoint_uri'"):
        StateManifest.from_json('{"format": 1}')


def test_a_store_checksum_round_trips_and_an_export_without_one_still_reads() -> None:
    manifest = _manifest()
    store = manifest.stores[0]
    with_sum = StateManifest(**{**manifest.__dict__, "stores": (ExportedStore(**{**store.__dict__,
                                                                                  "checksum": "-42"}),)})
    assert StateManifest.from_json(with_sum.to_json()) == with_sum and '"checksum": "-42"' in with_sum.to_json()
    assert '"checksum"' not in manifest.to_json(), "an export made before checksums reads and writes as it was"
    job = {**json.loads(json.dumps(store.to_dict())), "checksum": "7", "min_batch_id": 0, "max_batch_id": 7}
    assert ExportedStore.from_job(job).checksum == "7"


def _seed(rows: int = 3, checksum: str = "99", batch: int = 7, **more: ExportedStore) -> StateManifest:
    manifest = _manifest()
    store = ExportedStore(**{**manifest.stores[0].__dict__, "rows": rows, "checksum": checksum, "files": ()})
    return StateManifest(**{**manifest.__dict__, "batch_id": batch, "stores": (store, *more.values())})


@pytest.mark.parametrize(("seed", "found"), [
    pytest.param(_seed(checksum="98"), "operator 0 store default: 3 rows, checksum 98 in the seed", id="checksum"),
    pytest.param(_seed(rows=2), "operator 0 store default: 2 rows", id="rows"),
    pytest.param(_seed(batch=6), "the seed of batch 6", id="batch"),
    pytest.param(_seed(extra=ExportedStore(**{**_manifest().stores[0].__dict__, "operator_id": 1, "checksum": "1"})),
                 "operator 1 store default only in the seed", id="extra-store"),
    pytest.param(StateManifest(**{**_manifest().__dict__, "stores": ()}), "operator 0 store default missing",
                 id="missing-store"),
    pytest.param(_seed(checksum=""), "without a checksum", id="no-checksum"),
])
def test_a_seed_that_is_not_the_export_is_a_mismatch(seed: StateManifest, found: str) -> None:
    export = _seed()
    check_seeded_state(_seed(), export, uri="/new/_ckpt/seed-state/r")  # the same: no error
    with pytest.raises(SeededStateMismatch) as mismatch:
        check_seeded_state(seed, export, uri="/new/_ckpt/seed-state/r")
    assert found in mismatch.value.found, mismatch.value.found
    assert mismatch.value.path == "/new/_ckpt/seed-state/r" and "rolls back" in str(mismatch.value)


def test_export_location_refusals_and_cleanup() -> None:
    fs = fsspec.filesystem("memory")
    fs.mkdir("/ckpt/state")
    with pytest.raises(StateExportConflict, match="overlaps"):
        prepare_export_location(fs, "/ckpt/export", uri="memory:///ckpt/export", checkpoint_fs=fs,
                                checkpoint_root="/ckpt")
    fs.pipe_file("/exp/a/state/0/default/part-0.parquet", b"half")
    fs.pipe_file("/exp/a/_job/result.json", b"{}")
    assert prepare_export_location(fs, "/exp/a", uri="memory:///exp/a", checkpoint_fs=fs,
                                   checkpoint_root="/ckpt") is None
    assert not fs.exists("/exp/a/state") and not fs.exists("/exp/a/_job"), "the unfinished export is removed"
    fs.pipe_file("/exp/b/mine.txt", b"x")
    with pytest.raises(StateExportConflict, match="mine.txt"):
        prepare_export_location(fs, "/exp/b", uri="memory:///exp/b", checkpoint_fs=fs, checkpoint_root="/ckpt")
    assert fs.cat_file("/exp/b/mine.txt") == b"x"
    fs.pipe_file(f"/exp/c/{STATE_MANIFEST}", _manifest().to_json().encode())
    assert prepare_export_location(fs, "/exp/c", uri="memory:///exp/c", checkpoint_fs=fs,
                                   checkpoint_root="/ckpt") == _manifest()
    assert export_location("s3://b/archives/", "orders", "u-1") == "s3://b/archives/orders/_state/u-1"


def _checkpoint(fs, layout: list[str]) -> str:  # noqa: ANN001
    """A checkpoint's logs (batch 1 committed) and state files on an in-memory filesystem."""
    root = "/cp"
    fs.pipe_file(f"{root}/metadata", b'{"id":"6f1c2d3e-0000-4000-8000-000000000001"}')
    for batch in (0, 1):
        fs.pipe_file(f"{root}/offsets/{batch}", b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":{}}\n'
                     b'{"t":{"0":' + str(batch * 10).encode() + b'}}')
        fs.pipe_file(f"{root}/commits/{batch}", b'v1\n{"nextBatchWatermarkMs":0}')
    for rel in layout:
        fs.pipe_file(f"{root}/state/0/{rel}", b"x")
    return root


@pytest.mark.parametrize(("layout", "inferred"), [
    (["_metadata/metadata", "0/1.delta", "0/2.delta"], []),
    (["0/1.delta", "0/2.delta", "1/1.delta", "1/2.delta"], [(0, "default")]),
    (["0/left-a/1.changelog", "0/left-a/2.changelog", "0/right-b/2.zip"], [(0, "left-a"), (0, "right-b")]),
])
def test_stores_of_operators_without_metadata_come_from_the_layout(layout: list[str], inferred: list) -> None:
    from airflow_ckpt_provider.storage.reader import CheckpointReader
    from airflow_ckpt_provider.storage.state import plan_state_export

    fs = fsspec.filesystem("memory")
    fs.rm("/cp", recursive=True) if fs.exists("/cp") else None
    plan = plan_state_export(CheckpointReader(_checkpoint(fs, layout), fs=fs))
    assert plan.batch_id == 1 and list(plan.inferred_stores) == inferred


def test_transform_with_state_without_metadata_is_refused() -> None:
    from airflow_ckpt_provider.checkpoint.errors import StateMetadataMissing
    from airflow_ckpt_provider.storage.reader import CheckpointReader
    from airflow_ckpt_provider.storage.state import plan_state_export

    fs = fsspec.filesystem("memory")
    fs.rm("/cp", recursive=True) if fs.exists("/cp") else None
    root = _checkpoint(fs, ["0/1.changelog", "0/2.changelog", "_stateSchema/default/0_abc"])
    with pytest.raises(StateMetadataMissing, match="transformWithState"):
        plan_state_export(CheckpointReader(root, fs=fs))


def _v2_checkpoint(fs: fsspec.AbstractFileSystem) -> str:
    """A RocksDB state checkpoint format v2: the commit log names each version's unique ids."""
    root = _checkpoint(fs, ["_metadata/metadata", "0/1_a1b2.zip", "0/2_c3d4.changelog"])
    conf = b'{"spark.sql.streaming.stateStore.checkpointFormatVersion":"2"}'
    fs.pipe_file(f"{root}/offsets/1", b'v1\n{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":' + conf + b'}\n'
                 b'{"t":{"0":10}}')
    fs.pipe_file(f"{root}/commits/1", b'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["c3d4"]]}}')
    return root


@pytest.mark.parametrize(("exporter", "planned"), [
    ("4.0.0", False),   # the state reader of Spark 4.0 cannot read format v2: refused, naming both
    ("3.5.6", False),
    ("4.1.0", True),
    ("4.2.0", True),
    (None, True),       # unknown here: planned, and the export job checks its own Spark first
])
def test_format_v2_is_exported_by_spark_4_1_or_later(exporter: str | None, planned: bool) -> None:
    from airflow_ckpt_provider.checkpoint.errors import StateFormatUnsupported
    from airflow_ckpt_provider.storage.reader import CheckpointReader
    from airflow_ckpt_provider.storage.state import plan_state_export

    fs = fsspec.filesystem("memory")
    fs.rm("/cp", recursive=True) if fs.exists("/cp") else None
    reader = CheckpointReader(_v2_checkpoint(fs), fs=fs)
    if planned:
        plan = plan_state_export(reader, reader_spark=exporter)
        assert plan.checkpoint_format_version == 2 and plan.batch_id == 1
        return
    with pytest.raises(StateFormatUnsupported) as raised:
        plan_state_export(reader, reader_spark=exporter)
    assert f"Spark {exporter}" in raised.value.found and "Spark 4.1.0 or later" in raised.value.expected


def _rocksdb_zip(metadata_line: bytes) -> bytes:
    """A RocksDB snapshot zip as Spark writes it: its ``metadata`` member starts with the version line."""
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("metadata", metadata_line + b'\n{"sstFiles":[],"logFiles":[],"numKeys":3}')
        archive.writestr("CURRENT", b"MANIFEST-000005\n")
    return buffer.getvalue()


@pytest.mark.parametrize(("metadata", "exporter", "planned"), [
    (b"v2", "4.2.0", False),  # Spark 4.0's format v2: Spark 4.2 reads only v1 there (CANNOT_READ_CHECKPOINT)
    (b"v1", "4.2.0", True),   # Spark 4.2's own format v2 snapshots say v1
    (b"v2", "4.1.0", True),   # not checked on 4.1: planned, the export job tells
    (b"v2", None, True),
])
def test_spark40_format_v2_snapshots_are_refused_for_a_spark42_exporter(metadata: bytes, exporter: str | None,
                                                                        planned: bool) -> None:
    from airflow_ckpt_provider.checkpoint.errors import StateFormatUnsupported
    from airflow_ckpt_provider.storage.reader import CheckpointReader
    from airflow_ckpt_provider.storage.state import plan_state_export, rocksdb_snapshot_metadata

    fs = fsspec.filesystem("memory")
    fs.rm("/cp", recursive=True) if fs.exists("/cp") else None
    root = _v2_checkpoint(fs)
    fs.pipe_file(f"{root}/state/0/0/1_a1b2.zip", _rocksdb_zip(b"v1"))  # an older snapshot: not the one read
    fs.pipe_file(f"{root}/state/0/0/2_c3d4.zip", _rocksdb_zip(metadata))
    fs.pipe_file(f"{root}/state/0/0/3_e5f6.zip", _rocksdb_zip(b"v9"))  # after the exported version 2: ignored
    assert rocksdb_snapshot_metadata(fs, f"{root}/state/0/0/2_c3d4.zip") == metadata.decode()
    assert rocksdb_snapshot_metadata(fs, f"{root}/state/0/0/2_c3d4.changelog") is None  # not a zip
    reader = CheckpointReader(root, fs=fs)
    if planned:
        assert plan_state_export(reader, reader_spark=exporter).checkpoint_format_version == 2
        return
    with pytest.raises(StateFormatUnsupported) as raised:
        plan_state_export(reader, reader_spark=exporter)
    assert "state/0/0/2_c3d4.zip with metadata v2" in raised.value.found and "Spark 4.2.0" in raised.value.found
    assert "reads only v1" in raised.value.expected and "carry_state" in raised.value.action


def test_unique_ids_without_a_v2_commit_log_are_refused() -> None:
    from airflow_ckpt_provider.checkpoint.errors import StateFormatUnsupported
    from airflow_ckpt_provider.storage.reader import CheckpointReader
    from airflow_ckpt_provider.storage.state import plan_state_export

    fs = fsspec.filesystem("memory")
    fs.rm("/cp", recursive=True) if fs.exists("/cp") else None
    root = _checkpoint(fs, ["_metadata/metadata", "0/1_a1b2.zip", "0/2_c3d4.changelog"])
    with pytest.raises(StateFormatUnsupported, match="disagree"):
        plan_state_export(CheckpointReader(root, fs=fs), reader_spark="4.2.0")


def test_the_version_of_a_spark_home(tmp_path) -> None:  # noqa: ANN001
    from airflow_ckpt_provider.hooks.launcher import spark_version_at

    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "RELEASE").write_text("Spark 4.2.0 (git revision abc) built for Hadoop 3.4.1\n")
    pip = tmp_path / "site-packages" / "pyspark"
    pip.mkdir(parents=True)
    (pip / "version.py").write_text('#\n__version__: str = "4.1.1"\n')
    assert spark_version_at(str(dist)) == "4.2.0" and spark_version_at(str(pip)) == "4.1.1"
    assert spark_version_at(str(tmp_path)) is None and spark_version_at(None) is None
    import pyspark

    from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
    assert SparkLauncherHook(master="local").spark_version == pyspark.__version__  # this environment's


def test_the_export_step_checks_the_seed_a_switchover_wrote(tmp_path) -> None:  # noqa: ANN001
    from airflow_ckpt_provider.operators.state import StateExportOperator

    seed_dir = tmp_path / "new" / "_ckpt" / "seed-state" / "r1"
    step = StateExportOperator(task_id="export_state", checkpoint_uri="/old", export_uri=str(tmp_path / "export"),
                               handover=_result().to_dict(), seeded_state=str(seed_dir))
    with pytest.raises(SeededStateMismatch, match="no state-manifest.json at the seed's location"):
        step._check_seed(_seed())
    seed_dir.mkdir(parents=True)
    (seed_dir / STATE_MANIFEST).write_text(_seed().to_json())
    step._check_seed(_seed())  # the export is the seed
    with pytest.raises(SeededStateMismatch, match="checksum 98 as exported"):
        step._check_seed(_seed(checksum="98"))
    with pytest.raises(SeededStateMismatch, match="a seed of 3 rows and nothing exported"):
        step._check_seed(None)
    assert "seeded_state" in StateExportOperator.template_fields
    StateExportOperator(task_id="e", checkpoint_uri="/old", export_uri="/e", handover="{}")._check_seed(None)


class ResultLauncher:
    """The state job at the launcher boundary: it "runs" at once and leaves ``result`` (text) as its
    ``_job/result.json`` (none when None)."""

    def __init__(self, result: str | None) -> None:
        self.result = result

    def launch(self, application: str, *, checkpoint_uri: str, **kwargs: object) -> object:
        from pathlib import Path

        from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode

        if self.result is not None:
            path = Path(checkpoint_uri) / "result.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(self.result)
        return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=checkpoint_uri, app_name="ckpt-state-export",
                            started_at="2026-11-26T00:00:00+00:00", pid=4242)

    def driver_state(self, handle: object) -> object:
        from airflow_ckpt_provider.jobs import DriverState

        return DriverState.FINISHED

    def log_tail(self, handle: object, lines: int) -> str:
        return "the job's last words"


#: ``_job/result.json`` as the previous release's job wrote it (no format number)
OLD_JOB_RESULT = (
    '{"batch_id": 7, "checkpoint": "/ck/orders", "listed_only": true, "spark_version": "4.0.1", "stores": '
    '[{"checksum": "12", "key_schema": {"fields": [], "type": "struct"}, "max_batch_id": 7, "min_batch_id": 0, '
    '"num_partitions": 4, "operator_id": 0, "operator_name": "stateStoreSave", "path": "state/0/default", '
    '"renamed_fields": {}, "rows": 3, "state_variable": null, "store_name": "default", '
    '"value_schema": {"fields": [], "type": "struct"}, "void_fields": []}]}'
)


@pytest.mark.parametrize(("result", "found"), [
    (None, "no result at"),
    ("{nope", "state export job result text that is not JSON"),
    (OLD_JOB_RESULT.replace('"rows": 3', '"rows": "3"'), "'rows' of JSON string"),
    ('{"format": 2, "batch_id": 7}', "state export job result format 2 (written by a newer release"),
])
def test_the_state_jobs_result_is_read_through_its_codec(tmp_path: object, result: str | None, found: str) -> None:
    from airflow_ckpt_provider.checkpoint.errors import StateExportFailed
    from airflow_ckpt_provider.hooks.state_export import run_state_job

    common = dict(checkpoint_uri="/ck/orders", batch=7, list_only=True, poll_interval=0.01)
    read = run_state_job(ResultLauncher(OLD_JOB_RESULT), target_uri=f"{tmp_path}/old", **common)  # type: ignore[arg-type]
    assert (read.batch_id, read.spark_version, read.listed_only) == (7, "4.0.1", True)
    assert read.stores == tuple(json.loads(OLD_JOB_RESULT)["stores"]) and read.exported_stores()[0].rows == 3
    with pytest.raises(StateExportFailed) as failed:
        run_state_job(ResultLauncher(result), target_uri=f"{tmp_path}/bad", **common)  # type: ignore[arg-type]
    assert found in failed.value.found and f"{tmp_path}/bad/_job/result.json" in failed.value.found
    assert failed.value.log_tail == "the job's last words" and failed.value.path == "/ck/orders"
