"""Checkpoints written by real Spark 4.2 in its newer formats, read, handed over, archived, restored
and resumed by Spark 4.2 (the provider's own pyspark 4.2).

Two checkpoints, one per format, both of a stateful query (``dropDuplicates``) from a real Kafka
topic with Spark's state file checksums on:

* ``named``: offsets v2 through source evolution (the source named ``events``), RocksDB state with
  state checkpoint format v2 (``commits/N`` v2 with ``stateUniqueIds``, ``<version>_<uuid>.zip``
  state files each with Spark's ``.zip.crc`` sidecar);
* ``unnamed``: offsets v2 by ``offsetLog.formatVersion=2`` (the source keyed by its id ``0``), the
  HDFS-backed state store, commits v1.

Spark runs twice for the whole module (a JVM start costs more than a query on 2 cores), each run
a driver of ``jobs/spark42_formats.py`` with queries one after the other: the first writes both
checkpoints; between the runs the provider reads them, takes the handover, archives and restores
them; the second run starts a NEW query from each handover, restarts each restored checkpoint, and
tries a copy without its ``metadata`` file. The proof: the new query reads exactly the records from
the handover on (0 lost, 0 duplicated by (partition, offset), together with what the first run
wrote), the restored checkpoint resumes exactly there too, and a dropped or changed state checksum
is caught by the archive's verification.
"""

from __future__ import annotations

import shutil
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.checksums import SparkChecksum, is_sidecar
from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveCorrupt,
    MissingCheckpointMetadata,
    StateChecksumMismatch,
)
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.manifest import DATA_DIR, ArchiveManifest
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind
from airflow_ckpt_provider.checkpoint.verify import verify_start
from airflow_ckpt_provider.hooks.kafka_admin import broker_ranges
from airflow_ckpt_provider.local.audit import audit, read_sink_records
from airflow_ckpt_provider.local.spark import SparkInstall
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive
from tests.harness.records import produce_records
from tests.integration.spark42_jobs import run_spark42_job

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "spark42_formats.py"
VARIANTS = ("named", "unnamed")
FIRST, LATER = 300, 140  # records before the first run, and produced after it (past the handover)



def run_spark42(spark42: SparkInstall, work: Path, name: str, queries: list[dict[str, Any]]) -> dict[str, Any]:
    """One driver run of ``jobs/spark42_formats.py`` on Spark 4.2; its per-query results."""
    return run_spark42_job(JOB, spark42, work, name, queries)


@dataclass
class Written:
    """What the first Spark 4.2 run left: a topic, one checkpoint and sink per format, what each
    sink held then, and the broker's log ends after the later records."""

    work: Path
    bootstrap: str
    topic: str
    first_sink: dict[str, Counter[tuple[str, int, int]]]
    ends: dict[tuple[str, int], tuple[int, int]]

    def checkpoint(self, variant: str) -> Path:
        return self.work / f"cp-{variant}"

    def sink(self, variant: str) -> Path:
        return self.work / f"sink-{variant}"


@pytest.fixture(scope="module")
def written(kafka, spark42: SparkInstall, tmp_path_factory: pytest.TempPathFactory) -> Written:  # noqa: ANN001
    work = tmp_path_factory.mktemp("spark42")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, 2)
    produce_records(kafka.bootstrap_servers, topic, FIRST)
    queries = [{"label": v, "variant": v, "bootstrap": kafka.bootstrap_servers, "topic": topic,
                "checkpoint": str(work / f"cp-{v}"), "sink": str(work / f"sink-{v}")} for v in VARIANTS]
    results = run_spark42(spark42, work, "write", queries)
    assert all(results[v]["ok"] for v in VARIANTS), results
    first_sink = {v: read_sink_records(work / f"sink-{v}") for v in VARIANTS}
    produce_records(kafka.bootstrap_servers, topic, LATER, start=FIRST)
    return Written(work, kafka.bootstrap_servers, topic, first_sink, broker_ranges(kafka.bootstrap_servers, [topic]))


@dataclass
class Moved:
    """The provider's part between the runs, and what the second run did."""

    handovers: dict[str, Handover]
    manifests: dict[str, ArchiveManifest]
    archives: dict[str, Path]
    results: dict[str, Any]


@pytest.fixture(scope="module")
def moved(written: Written, spark42: SparkInstall) -> Moved:
    work, local = written.work, fsspec.filesystem("file")
    handovers = {v: CheckpointReader(str(written.checkpoint(v))).handover() for v in VARIANTS}
    archive = CheckpointArchive(local, str(work / "archive"))
    manifests = {v: archive.archive(local, str(written.checkpoint(v)), stream_name=f"fmt-{v}", upgrade_id="up-1",
                                    handover=handovers[v]) for v in VARIANTS}
    archives = {v: Path(manifests[v].archive_uri) for v in VARIANTS}
    for v in VARIANTS:
        restore_archive(local, str(archives[v]), local, str(work / f"restored-{v}"))
    no_metadata = work / "no-metadata"
    shutil.copytree(written.checkpoint("named"), no_metadata)
    (no_metadata / "metadata").unlink()
    (no_metadata / ".metadata.crc").unlink()

    common = {"bootstrap": written.bootstrap, "topic": written.topic}
    queries = [{**common, "label": f"new-{v}", "variant": v, "checkpoint": str(work / f"new-cp-{v}"),
                "sink": str(work / f"new-sink-{v}"), "starting_offsets": handovers[v].kafka_offsets().to_json()}
               for v in VARIANTS]
    queries += [{**common, "label": f"restored-{v}", "variant": v, "checkpoint": str(work / f"restored-{v}"),
                 "sink": str(written.sink(v))} for v in VARIANTS]
    queries.append({**common, "label": "no-metadata", "variant": "named", "checkpoint": str(no_metadata),
                    "sink": str(work / "sink-no-metadata"), "expect_error": True})
    results = run_spark42(spark42, work, "resume", queries)
    return Moved(handovers, manifests, archives, results)


def test_the_reader_reads_offsets_v2_named_and_unnamed_and_commits_v2(written: Written) -> None:
    named = CheckpointReader(str(written.checkpoint("named"))).snapshot(include_initial=True)
    unnamed = CheckpointReader(str(written.checkpoint("unnamed"))).snapshot(include_initial=True)
    assert (named.offsets_version, unnamed.offsets_version) == (2, 2)
    assert (named.commit_version, unnamed.commit_version) == (2, 1)  # state checkpoint format v2 / v1
    assert [(s.index, s.name, s.kind) for s in named.sources] == [(0, "events", SourceKind.KAFKA)]
    assert [(s.index, s.name, s.kind) for s in unnamed.sources] == [(0, None, SourceKind.KAFKA)]
    assert [(s.name, s.kind) for s in named.initial_sources] == [("events", SourceKind.KAFKA)]  # sources/events/0
    assert named.conf["spark.sql.streaming.queryEvolution.enableSourceEvolution"] == "true"
    commit = CheckpointReader(str(written.checkpoint("named"))).commit_entry(named.last_committed_batch or 0)
    assert commit.state_unique_ids and set(commit.state_unique_ids) == {"0"}
    for variant, snap in (("named", named), ("unnamed", unnamed)):
        # the last committed batch's end offsets are exactly past what the first run wrote
        kafka = snap.sources[0].kafka
        assert kafka is not None
        seen = written.first_sink[variant]
        assert len(seen) == FIRST and set(seen.values()) == {1}
        ends = {(t, p): o for t, p, o in kafka.items()}
        assert ends == {(t, p): max(o for tt, pp, o in seen if (tt, pp) == (t, p)) + 1 for t, p in ends}


def test_a_new_spark42_query_from_the_handover_reads_every_later_record_once(written: Written, moved: Moved) -> None:
    for variant in VARIANTS:
        assert moved.results[f"new-{variant}"]["ok"], moved.results[f"new-{variant}"]
        handover = moved.handovers[variant].kafka_offsets()
        after = {key: (handover.get(*key) or 0, end) for key, (_, end) in written.ends.items()}
        new = read_sink_records(written.work / f"new-sink-{variant}")
        checked = audit(new, after)
        assert checked.produced == LATER and checked.ok, (variant, checked)
        together = audit(written.first_sink[variant] + new, written.ends)
        assert together.produced == FIRST + LATER and together.ok, (variant, together)
        started = CheckpointReader(str(written.work / f"new-cp-{variant}")).snapshot(include_initial=True)
        verified = verify_start(started, handover, handover=moved.handovers[variant])
        assert all(p.ok for p in verified.partitions)


def test_archive_and_restore_keep_spark_checksums_and_spark42_resumes_the_restore(written: Written,
                                                                               moved: Moved) -> None:
    sidecars = [f.path for f in moved.manifests["named"].files if is_sidecar(f.path)]
    assert sidecars and all(p.startswith("state/0/") and p.endswith(".zip.crc") for p in sidecars)
    restored = written.work / "restored-named"
    for path in sidecars:
        data = (restored / path[: -len(".crc")]).read_bytes()
        assert SparkChecksum.parse((restored / path).read_bytes(), path) == SparkChecksum.of(data)
    for variant in VARIANTS:
        assert moved.results[f"restored-{variant}"]["ok"], moved.results[f"restored-{variant}"]
        # the restored checkpoint went on exactly from the handover: the sink holds everything once
        checked = audit(read_sink_records(written.sink(variant)), written.ends)
        assert checked.produced == FIRST + LATER and checked.ok, (variant, checked)
        resumed = CheckpointReader(str(written.work / f"restored-{variant}")).snapshot()
        handover = moved.handovers[variant]
        assert handover.batch_id is not None and resumed.last_committed_batch is not None
        assert resumed.last_committed_batch > handover.batch_id


@pytest.mark.parametrize("damage", ["dropped", "changed"])
def test_verify_catches_a_dropped_or_changed_state_checksum(written: Written, moved: Moved, tmp_path: Path,
                                                            damage: str) -> None:
    copy = tmp_path / "archive"
    shutil.copytree(moved.archives["named"], copy)
    sidecar = next(f.path for f in moved.manifests["named"].files if is_sidecar(f.path))
    target = copy / DATA_DIR / sidecar
    if damage == "dropped":
        target.unlink()
    else:
        recorded = SparkChecksum.parse(target.read_bytes(), sidecar)
        target.write_bytes(SparkChecksum(value=recorded.value ^ 1, main_file_size=recorded.main_file_size).to_json())
    local = fsspec.filesystem("file")
    with pytest.raises(StateChecksumMismatch) as caught:
        verify_archive(local, str(copy))
    assert caught.value.file == (sidecar if damage == "dropped" else sidecar[: -len(".crc")])
    with pytest.raises(ArchiveCorrupt):  # by name when dropped; a changed one differs from the manifest
        restore_archive(local, str(copy), local, str(tmp_path / "restored"))
    assert not (tmp_path / "restored").exists()


def test_a_checkpoint_without_metadata_is_refused_like_spark42_refuses_it(written: Written, moved: Moved) -> None:
    refused = moved.results["no-metadata"]
    assert not refused["ok"] and "STREAMING_CHECKPOINT_MISSING_METADATA_FILE" in refused["error"], refused
    with pytest.raises(MissingCheckpointMetadata, match="no metadata file"):
        CheckpointReader(str(written.work / "no-metadata")).handover()
    assert isinstance(moved.handovers["named"].kafka_offsets(), KafkaOffsets)


def test_state_format_v2_is_exported_on_spark42_and_refused_on_spark40(written: Written, spark42: SparkInstall,
                                                                       spark40: SparkInstall, tmp_path: Path) -> None:
    """The RocksDB state of checkpoint format v2 (the ``named`` checkpoint: ``dropDuplicates`` by
    partition and offset) is exported by Spark 4.2's state reader, and holds exactly one key per
    record the first run read; on Spark 4.0 the same export is refused before anything is written."""
    import pyarrow.dataset as pds

    from airflow_ckpt_provider.checkpoint.errors import StateFormatUnsupported
    from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
    from airflow_ckpt_provider.hooks.state_export import export_checkpoint_state

    checkpoint = str(written.checkpoint("named"))
    refused_at = tmp_path / "export-on-4.0"
    with pytest.raises(StateFormatUnsupported) as raised:
        export_checkpoint_state(checkpoint_uri=checkpoint, export_uri=str(refused_at),
                                launcher=SparkLauncherHook(master="local[1]", spark_home=str(spark40.spark_home),
                                                           log_dir=str(tmp_path / "logs")))
    assert "Spark 4.0" in raised.value.found and not refused_at.exists()

    launcher = SparkLauncherHook(master="local[1]", spark_home=str(spark42.spark_home),
                                 log_dir=str(tmp_path / "logs"))
    assert launcher.spark_version is not None and launcher.spark_version.startswith("4.2")
    target = tmp_path / "export-on-4.2"
    plan, manifest = export_checkpoint_state(checkpoint_uri=checkpoint, export_uri=str(target), launcher=launcher,
                                             conf={**spark42.job_conf(), "spark.ui.enabled": "false"}, timeout=900)
    assert plan.checkpoint_format_version == 2 and manifest is not None
    assert manifest.spark_version.startswith("4.2") and manifest.checkpoint_format_version == 2
    (store,) = manifest.stores
    keys = pds.dataset(str(target / store.path), format="parquet").to_table(columns=["key"]).column("key").to_pylist()
    seen = {(row["partition"], row["offset"]) for row in keys}
    first = {(p, o) for _, p, o in written.first_sink["named"]}
    assert store.rows == len(keys) == len(seen) == FIRST and seen == first
