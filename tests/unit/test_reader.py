"""CheckpointReader over a local directory and memory://, on synthetic Spark checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointNotFound,
    CommitWithoutOffsets,
    CorruptCheckpointFile,
    NoOffsets,
    NotACheckpoint,
    UnsupportedLogVersion,
)
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.unit.conftest import QUERY_ID, kafka_and_rate, write_checkpoint

VARIANTS = {
    "v1": {},
    "v1-crc": {"crc": True},
    "v1-tmp-files": {"tmp_files": True, "crc": True},
    "v1-trailing-newline": {"trailing_newline": True},
    "v1-empty-metadata-line": {"empty_meta_line": True},
    "v2-offsets": {"offsets_version": 2, "crc": True},
    "v2-commits-state": {"commit_version": 2, "state_operators": (0, 3)},
    "two-sources": {"sources": kafka_and_rate},
}


@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
def test_snapshot_and_handover_of_last_committed_batch(location: str, variant: str) -> None:
    built = write_checkpoint(location, batches=range(5), committed=range(4), **VARIANTS[variant])  # type: ignore[arg-type]
    reader = CheckpointReader(location)
    snap = reader.snapshot()
    assert (snap.query_id, snap.last_committed_batch, snap.last_planned_batch, snap.in_flight_batch) == (
        QUERY_ID, 3, 4, 4,
    )
    assert snap.sources[0].kind is SourceKind.KAFKA
    assert snap.sources[0].kafka == built.kafka(3) == KafkaOffsets({"events": {0: 400, 1: 401, 2: 402, 3: 403}})
    assert snap.initial_sources == ()  # not read when something is committed
    assert snap.offsets_version == VARIANTS[variant].get("offsets_version", 1)
    assert snap.commit_version == VARIANTS[variant].get("commit_version", 1)
    assert snap.state_operators == tuple(VARIANTS[variant].get("state_operators", ()))
    if not VARIANTS[variant].get("empty_meta_line"):
        assert snap.conf["spark.sql.shuffle.partitions"] == "2"
        assert snap.batch_timestamp_ms == 1795290403000
    handover = reader.handover()
    assert (handover.batch_id, handover.from_initial, handover.in_flight_batch) == (3, False, 4)
    assert handover.kafka_offsets() == built.kafka(3)
    assert [s.raw for s in handover.sources] == built.lines[3]


def test_files_opened_does_not_grow_with_history(location: str) -> None:
    counts = []
    for n in (2, 300):
        url = f"{location}-{n}"
        write_checkpoint(url, batches=range(n), crc=True, tmp_files=True)
        reader = CheckpointReader(url)
        assert reader.handover().batch_id == n - 1
        counts.append((reader.files_opened, reader.listings))
    assert counts[0] == counts[1] == (6, 3)  # metadata, commits/N, offsets/N + their .crc; 3 listings


def test_files_opened_without_crc(location: str) -> None:
    write_checkpoint(location, batches=range(10))
    reader = CheckpointReader(location)
    reader.snapshot()
    assert reader.files_opened == 3


@pytest.mark.parametrize(
    ("batches", "committed", "last", "planned", "in_flight"),
    [
        (range(100, 105), range(100, 105), 104, 104, None),  # purged history: no offsets/0
        ([0, 1, 2, 5, 6], [0, 1, 5], 5, 6, 6),  # gaps (async progress tracking)
        ([7], [], None, 7, 7),
    ],
)
def test_purged_history_and_gaps(  # type: ignore[no-untyped-def]
    location: str, batches, committed, last, planned, in_flight
) -> None:
    built = write_checkpoint(location, batches=batches, committed=committed)
    snap = CheckpointReader(location).snapshot()
    assert (snap.last_committed_batch, snap.last_planned_batch, snap.in_flight_batch) == (last, planned, in_flight)
    if last is not None:
        assert snap.sources[0].kafka == built.kafka(last)


def test_in_flight_offsets_are_never_handed_over(location: str) -> None:
    built = write_checkpoint(location, batches=range(3), committed=range(2))
    handover = CheckpointReader(location).handover()
    assert handover.kafka_offsets() == built.kafka(1) != built.kafka(2)
    assert handover.in_flight_batch == 2


def test_nothing_committed_uses_initial_offsets(location: str) -> None:
    built = write_checkpoint(location, batches=[0], committed=[], sources=kafka_and_rate)
    reader = CheckpointReader(location)
    handover = reader.handover()
    assert (handover.batch_id, handover.from_initial, handover.in_flight_batch) == (None, True, 0)
    assert handover.kafka_offsets() == KafkaOffsets({"events": {0: 0, 1: 1, 2: 2, 3: 3}})
    assert [s.kind for s in handover.sources] == [SourceKind.KAFKA, SourceKind.RATE]
    assert built.initial[1] == "0"


def test_named_initial_sources_v2(location: str) -> None:
    write_checkpoint(location, batches=[], committed=[], offsets_version=2, sources=kafka_and_rate, crc=True)
    snap = CheckpointReader(location).snapshot()
    assert [(s.index, s.name, s.kind) for s in snap.initial_sources] == [
        (0, "src_a", SourceKind.KAFKA), (1, "src_b", SourceKind.RATE),
    ]


def test_include_initial_on_request(location: str) -> None:
    write_checkpoint(location, batches=range(3))
    reader = CheckpointReader(location)
    snap = reader.snapshot(include_initial=True)
    assert snap.initial_sources[0].kafka == KafkaOffsets({"events": {0: 0, 1: 1, 2: 2, 3: 3}})
    assert reader.files_opened == 4


def test_no_offsets_at_all(location: str) -> None:
    write_checkpoint(location, batches=[], committed=[], initial=False)
    snap = CheckpointReader(location).snapshot()
    assert (snap.last_committed_batch, snap.last_planned_batch, snap.sources) == (None, None, ())
    with pytest.raises(NoOffsets, match="no committed batch"):
        CheckpointReader(location).handover()


def test_commit_without_offsets(location: str) -> None:
    built = write_checkpoint(location, batches=range(3))
    built.fs.rm(built.path("offsets", "2"))
    with pytest.raises(CommitWithoutOffsets, match="commits/2 without offsets/2"):
        CheckpointReader(location).snapshot()


def test_missing_metadata_gives_no_query_id(location: str) -> None:
    write_checkpoint(location, metadata=False)
    assert CheckpointReader(location).snapshot().query_id is None


def test_orphan_metadata_checksum_is_corruption(location: str) -> None:
    built = write_checkpoint(location, crc=True)
    built.fs.rm(built.path("metadata"))
    with pytest.raises(CorruptCheckpointFile, match="metadata"):
        CheckpointReader(location).snapshot()


def test_orphan_checksum_of_newest_commit_is_corruption(location: str) -> None:
    built = write_checkpoint(location, batches=range(4), crc=True)
    built.fs.rm(built.path("commits", "3"))
    with pytest.raises(CorruptCheckpointFile, match=r"\.3\.crc"):
        CheckpointReader(location).snapshot()


def test_orphan_checksum_of_old_batch_is_ignored(location: str) -> None:
    built = write_checkpoint(location, batches=range(4), crc=True)
    built.fs.rm(built.path("commits", "0"))
    assert CheckpointReader(location).snapshot().last_committed_batch == 3


def test_checksum_mismatch_names_the_file(location: str) -> None:
    built = write_checkpoint(location, batches=range(3), crc=True)
    data = bytearray(built.read("offsets/2"))
    data[-3] = ord("9") if data[-3] != ord("9") else ord("8")
    built.write("offsets/2", bytes(data))
    with pytest.raises(CorruptCheckpointFile) as info:
        CheckpointReader(location).handover()
    assert info.value.path == f"{location}/offsets/2"
    assert info.value.line == 1  # first line of the failing 512-byte chunk


def test_leading_zero_duplicate_is_refused(location: str) -> None:
    built = write_checkpoint(location, batches=range(3))
    built.write("commits/02", built.read("commits/2"))
    with pytest.raises(CorruptCheckpointFile, match="leading zeros"):
        CheckpointReader(location).snapshot()


def test_unsupported_version_of_committed_offsets(location: str) -> None:
    built = write_checkpoint(location, batches=range(2))
    built.write("offsets/1", built.read("offsets/1").replace(b"v1", b"v9", 1))
    with pytest.raises(UnsupportedLogVersion):
        CheckpointReader(location).snapshot()


def test_not_found_and_not_a_checkpoint(location: str) -> None:
    with pytest.raises(CheckpointNotFound):
        CheckpointReader(location + "-missing").snapshot()
    fs, root = fsspec.core.url_to_fs(location)
    fs.makedirs(f"{root}/somewhere", exist_ok=True)
    fs.pipe_file(f"{root}/somewhere/readme.txt", b"hello")
    with pytest.raises(NotACheckpoint, match="readme.txt"):
        CheckpointReader(f"{location}/somewhere").snapshot()
    with pytest.raises(NotACheckpoint, match="a file"):
        CheckpointReader(f"{location}/somewhere/readme.txt").snapshot()


def test_empty_directory_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotACheckpoint, match="empty directory"):
        CheckpointReader(str(tmp_path / "empty")).snapshot()


def test_file_url_and_explicit_filesystem(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(2))
    assert CheckpointReader(f"file://{tmp_path}/ck").handover().kafka_offsets() == built.kafka(1)
    fs = fsspec.filesystem("file")
    assert CheckpointReader(str(tmp_path / "ck"), fs=fs).snapshot().last_committed_batch == 1


def test_reader_never_writes(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "ck"), batches=range(3), crc=True)
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    CheckpointReader(str(tmp_path / "ck")).snapshot(include_initial=True)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_snapshot_is_json_friendly(location: str) -> None:
    write_checkpoint(location, batches=range(2))
    snap = CheckpointReader(location).snapshot()
    assert json.loads(json.dumps(dict(snap.conf))) == dict(snap.conf)
