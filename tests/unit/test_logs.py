"""Single-file parsers, checked against bytes written by a real Spark 4.2 (local mode)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.memory import MemoryFile, MemoryFileSystem

from airflow_ckpt_provider.batch_names import batch_number, zero_padded
from airflow_ckpt_provider.checkpoint.errors import CorruptCheckpointFile, UnsupportedLogVersion
from airflow_ckpt_provider.checkpoint.logs import (
    batch_ids,
    crc_target,
    hadoop_crc,
    parse_batch_name,
    parse_commit_log,
    parse_initial_offsets,
    parse_initial_source,
    parse_metadata,
    parse_offset_log,
    verify_crc,
)
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind
from airflow_ckpt_provider.storage.listing import list_batch_ids
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.unit.conftest import write_checkpoint

# Real files from a Spark 4.2 query (two named sources, offsetLog.formatVersion=2,
# RocksDB checkpoint format 2) and their Hadoop .crc files.
REAL_CONF = (
    '{"spark.sql.streaming.stateStore.providerClass":"org.apache.spark.sql.execution.streaming.state.'
    'RocksDBStateStoreProvider","spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion":"2",'
    '"spark.sql.streaming.stateStore.rocksdb.formatVersion":"5","spark.sql.streaming.queryEvolution.'
    'enableSourceEvolution":"true","spark.sql.streaming.stateStore.encodingFormat":"unsaferow",'
    '"spark.sql.streaming.statefulOperator.useStrictDistribution":"true","spark.sql.streaming.'
    'flatMapGroupsWithState.stateFormatVersion":"2","spark.sql.streaming.multipleWatermarkPolicy":"min",'
    '"spark.sql.streaming.stateStore.rowChecksum.enabled":"false","spark.sql.streaming.aggregation.'
    'stateFormatVersion":"2","spark.sql.function.protobufExtensions.enabled":"false","spark.sql.'
    'streaming.join.stateFormatVersion":"2","spark.sql.streaming.stateStore.compression.codec":"lz4",'
    '"spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan":"false"}'
)
REAL_OFFSETS_V2 = (
    'v2\n{"batchWatermarkMs":1795290456960,"batchTimestampMs":1795290460002,"conf":' + REAL_CONF
    + ',"sourceMetadataInfo":{}}\nsrc_a:7\nsrc_b:{"offset":30,"timestamp":6000}'
).encode()
REAL_OFFSETS_V2_CRC = b"crc\x00\x00\x00\x02\x00/9\x83\xbe\x17\x9f\xe6<\xf8\xcf\x94/"
REAL_COMMIT_V2 = (
    b'v2\n{"nextBatchWatermarkMs":1795290456960,"stateUniqueIds":{"0":[["f1f2f66d-50ae-42e6-8ec5-'
    b'6cc0c6544adf"],["434a80b4-4287-48b2-a2ed-1828e75ec7ad"]]}}'
)
REAL_COMMIT_V2_CRC = b"crc\x00\x00\x00\x02\x00\xdb^Vi"
REAL_METADATA = b'{"id":"9abfa032-811f-4801-b1cb-101f6a0769c2"}'
REAL_METADATA_CRC = b"crc\x00\x00\x00\x02\x00`\x81%L"
REAL_RATE_INITIAL = b"v1\n1795290389976"  # sources/0/0 of the rate source: no 0x00 byte


@pytest.mark.parametrize(
    ("data", "crc"),
    [(REAL_OFFSETS_V2, REAL_OFFSETS_V2_CRC), (REAL_COMMIT_V2, REAL_COMMIT_V2_CRC), (REAL_METADATA, REAL_METADATA_CRC)],
)
def test_crc_matches_real_spark_files(data: bytes, crc: bytes) -> None:
    assert len(REAL_OFFSETS_V2) == 1057  # three 512-byte chunks
    verify_crc(data, crc, "f")
    assert hadoop_crc(data) == crc


@pytest.mark.parametrize("position", [0, 100, 600, 1056])
def test_crc_detects_a_flipped_byte_and_reports_its_line(position: int) -> None:
    data = bytearray(REAL_OFFSETS_V2)
    data[position] ^= 0x01
    with pytest.raises(CorruptCheckpointFile) as info:
        verify_crc(bytes(data), REAL_OFFSETS_V2_CRC, "offsets/5")
    assert info.value.path == "offsets/5"
    assert info.value.line == bytes(data[: position // 512 * 512]).count(b"\n") + 1
    assert "CRC32 mismatch" in str(info.value)


@pytest.mark.parametrize(
    "crc",
    [b"", b"crc", b"CRC\x00\x00\x00\x02\x00`\x81%L", b"crc\x00\x00\x00\x00\x00", REAL_METADATA_CRC + b"\x00"],
)
def test_crc_rejects_malformed_checksum_files(crc: bytes) -> None:
    with pytest.raises(CorruptCheckpointFile):
        verify_crc(REAL_METADATA, crc, "metadata")


def test_crc_of_truncated_data_fails() -> None:
    with pytest.raises(CorruptCheckpointFile):
        verify_crc(REAL_METADATA[:-1], REAL_METADATA_CRC, "metadata")
    verify_crc(b"", hadoop_crc(b""), "empty")


def test_parse_real_offsets_v2_sorts_sources_by_name() -> None:
    entry = parse_offset_log(REAL_OFFSETS_V2, "offsets/5")
    assert entry.version == 2
    assert entry.batch_timestamp_ms == 1795290460002 and entry.batch_watermark_ms == 1795290456960
    assert entry.conf["spark.sql.streaming.stateStore.compression.codec"] == "lz4"
    assert [(s.index, s.name, s.kind, s.raw) for s in entry.sources] == [
        (0, "src_a", SourceKind.RATE, "7"),
        (1, "src_b", SourceKind.RATE_MICRO_BATCH, '{"offset":30,"timestamp":6000}'),
    ]
    reordered = b"\n".join(REAL_OFFSETS_V2.split(b"\n")[:2] + REAL_OFFSETS_V2.split(b"\n")[:1:-1])
    assert parse_offset_log(reordered, "x").sources == entry.sources


@pytest.mark.parametrize("ending", ["", "\n", "\r\n"])
def test_parse_offsets_v1_with_kafka_dash_and_line_endings(ending: str) -> None:
    text = "v1\n\n" + '{"t":{"1":7,"0":23}}\n-\n11'
    entry = parse_offset_log((text.replace("\n", ending or "\n") + ending).encode(), "offsets/3")
    assert entry.version == 1 and entry.conf == {} and entry.batch_timestamp_ms is None
    assert [s.kind for s in entry.sources] == [SourceKind.KAFKA, SourceKind.NONE, SourceKind.RATE]
    assert entry.sources[0].kafka == KafkaOffsets({"t": {0: 23, 1: 7}})
    assert entry.sources[1].raw is None


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 1),
        ("x1\n\n1", 1),
        ("v0\n\n1", 1),
        ("v1", 2),
        ("v1\n{}", 3),
        ("v1\n{bad\n1", 2),
        ("v1\n[]\n1", 2),
        ("v1\n\n{\"t\":{\"0\":1}", 3),
        ("v1\n\n1\n{\"t\":{\"0\":-9}}", 4),
        ("v1\n\n{\"t\":{\"0\":1,\"0\":2}}", 3),
        ("v2\n\nsrc:1", 2),
        ("v2\n{}\nno_colon", 3),
        ("v2\n{}\na:1\na:2", 4),
        ('v1\n{"conf":{"a":1}}\n1', 2),
        ('v1\n{"batchTimestampMs":"x"}\n1', 2),
    ],
)
def test_parse_offsets_rejects_with_line(text: str, line: int) -> None:
    with pytest.raises(CorruptCheckpointFile) as info:
        parse_offset_log(text.encode(), "offsets/9")
    assert not isinstance(info.value, UnsupportedLogVersion)
    assert (info.value.path, info.value.line) == ("offsets/9", line)
    assert "offsets/9" in str(info.value)


@pytest.mark.parametrize("parse", [parse_offset_log, parse_commit_log])
def test_unknown_version_is_unsupported(parse) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnsupportedLogVersion) as info:
        parse(b"v9\n{}\n1", "f")
    assert "v9" in str(info.value)


def test_non_utf8_is_corrupt_with_line() -> None:
    with pytest.raises(CorruptCheckpointFile) as info:
        parse_offset_log(b"v1\n\n\xff", "f")
    assert info.value.line == 3


def test_parse_commits() -> None:
    real = parse_commit_log(REAL_COMMIT_V2, "commits/4")
    assert (real.version, real.next_batch_watermark_ms) == (2, 1795290456960)
    assert list(real.state_unique_ids or {}) == ["0"]
    v1 = parse_commit_log(b'v1\n{"nextBatchWatermarkMs":0}', "c")
    assert (v1.version, v1.next_batch_watermark_ms, v1.state_unique_ids) == (1, 0, None)
    assert parse_commit_log(b"v1\n", "c").version == 1  # Spark reads a missing JSON line as {}
    v3 = parse_commit_log(b'v3\n{"nextBatchWatermarkMs":5,"sinkMetadataMap":{}}\n', "c")
    assert (v3.version, v3.next_batch_watermark_ms) == (3, 5)
    for bad in (b"", b"v1\n[1]", b'v1\n{"nextBatchWatermarkMs":"0"}', b'v2\n{"stateUniqueIds":[]}'):
        with pytest.raises(CorruptCheckpointFile):
            parse_commit_log(bad, "c")


def test_parse_metadata() -> None:
    assert parse_metadata(REAL_METADATA, "metadata") == "9abfa032-811f-4801-b1cb-101f6a0769c2"
    assert parse_metadata(REAL_METADATA + b"\n", "metadata") == "9abfa032-811f-4801-b1cb-101f6a0769c2"
    for bad in (b"", b"{}", b'{"id":"nope"}', b"[]", b'{"id":1}'):
        with pytest.raises(CorruptCheckpointFile):
            parse_metadata(bad, "metadata")


@pytest.mark.parametrize(
    "data",
    # 0x00 + version line (Spark 2.1.1+), a trailing newline, Spark 2.1.0's length byte + JSON
    [b'\x00v1\n{"t":{"0":5}}', b'\x00v1\n{"t":{"0":5}}\n', b'\x0d{"t":{"0":5}}', b'\x00{"t":{"0":5}}'],
)
def test_parse_kafka_initial_offsets_variants(data: bytes) -> None:
    assert parse_initial_offsets(data, "sources/0/0") == '{"t":{"0":5}}'
    source = parse_initial_source(data, "sources/0/0", 0)
    assert source.kafka == KafkaOffsets({"t": {0: 5}})


def test_parse_initial_of_other_sources() -> None:
    rate = parse_initial_source(REAL_RATE_INITIAL, "sources/0/0", 0, "src_a")
    assert (rate.kind, rate.raw, rate.name) == (SourceKind.RATE, "1795290389976", "src_a")
    file_log = (
        b'v1\n{"path":"file:///in/f0.json","timestamp":1,"batchId":0}\n'
        b'{"path":"file:///in/f1.json","timestamp":1,"batchId":0}'
    )
    assert parse_initial_source(file_log, "sources/0/0", 0).kind is SourceKind.UNKNOWN
    with pytest.raises(UnsupportedLogVersion):
        parse_initial_offsets(b'\x00v2\n{"t":{"0":5}}', "s")
    with pytest.raises(CorruptCheckpointFile):
        parse_initial_source(b'\x00v1\n{"t":{"0":', "s", 0)


@pytest.mark.parametrize(
    ("name", "batch"),
    [("0", 0), ("17", 17), ("12345678901", 12345678901), (".3.crc", None), (".3.8f1e.tmp", None),
     ("3.bak", None), ("-1", None), ("+1", None), (" 1", None), ("1_0", None), ("\u0661", None), ("_spark", None)],
)
def test_parse_batch_name(name: str, batch: int | None) -> None:
    assert parse_batch_name(name) == batch


@pytest.mark.parametrize("name", ["00", "007"])
def test_leading_zero_batch_names_are_refused(name: str) -> None:
    with pytest.raises(CorruptCheckpointFile, match="leading zeros"):
        parse_batch_name(name, f"commits/{name}")


@pytest.mark.parametrize(
    ("entry", "batch"),
    [("0", 0), ("17", 17), ("/ck/commits/17", 17), ("bucket/ck/offsets/12345678901", 12345678901),
     (".3.crc", None), ("/ck/commits/.3.crc", None), (".3.8f1e2d.tmp", None), ("/ck/offsets/.3.8f1e2d.tmp", None),
     ("3.bak", None), ("007", None), ("/ck/commits/00", None), ("-1", None), ("+1", None), (" 1", None),
     ("1e3", None), ("\u0661", None), ("", None), ("commits", None),
     ("5/", None), ("/ck/commits/5/", None), ("/ck/commits/", None), ("bucket/ck/offsets/", None)],
)
def test_batch_name_rule(entry: str, batch: int | None) -> None:
    """One rule for the core and the Spark driver: plain decimal names only; no markers, no
    checksums, no temporary files."""
    assert batch_number(entry) == batch
    if not zero_padded(entry):
        assert parse_batch_name(entry) == batch


@pytest.mark.parametrize(("entry", "padded"), [("007", True), ("00", True), ("/ck/commits/0042", True),
                                               ("0", False), ("70", False), ("007/", False), ("a07", False),
                                               (".007.crc", False)])
def test_zero_padded(entry: str, padded: bool) -> None:
    assert zero_padded(entry) is padded


def test_batch_ids_skip_the_folders_own_entry() -> None:
    """Some stores list the folder itself (a directory marker); a folder named like a number
    must not count as a batch."""
    assert batch_ids(["/data/7", "/data/7/", "/data/7/3", "/data/7/1", "/data/7/.1.crc"], "/data/7") == [1, 3]
    assert batch_ids([], "/ck/commits") == []
    with pytest.raises(CorruptCheckpointFile, match="'007' .leading zeros.") as refused:
        batch_ids(["/ck/commits/5", "/ck/commits/007"], "/ck/commits")
    assert refused.value.path == "/ck/commits/007"


def _local(tmp_path: Path) -> tuple[Any, str]:
    return fsspec.filesystem("file"), str(tmp_path / "ck" / "commits")


def _memory(tmp_path: Path) -> tuple[Any, str]:
    return MemoryFileSystem(), f"/t-{uuid.uuid4().hex}/ck/commits"


@pytest.mark.parametrize("make", [_local, _memory], ids=["local", "memory"])
@pytest.mark.parametrize(
    ("names", "ids"),
    [([], []), (["0"], [0]), (["2", "10", "1", "0"], [0, 1, 2, 10]),
     (["0", "1", ".1.crc", ".0.crc", ".2.1b9d6bcd-bbfd-4b2d-9b5d-ab8dfbbd4bed.tmp", "2.bak", "_x"], [0, 1]),
     ([".5.crc"], [])],
)
def test_list_batch_ids(make: Any, names: list[str], ids: list[int], tmp_path: Path) -> None:
    fs, folder = make(tmp_path)
    fs.makedirs(folder, exist_ok=True)
    for name in names:
        fs.pipe_file(f"{folder}/{name}", b"v1\n{}")
    assert list_batch_ids(fs, folder) == ids


@pytest.mark.parametrize("make", [_local, _memory], ids=["local", "memory"])
def test_list_batch_ids_missing_folder_and_zero_padded_names(make: Any, tmp_path: Path) -> None:
    fs, folder = make(tmp_path)
    assert list_batch_ids(fs, folder) == []
    fs.makedirs(folder, exist_ok=True)
    assert list_batch_ids(fs, folder) == []
    fs.pipe_file(f"{folder}/007", b"v1")
    with pytest.raises(CorruptCheckpointFile, match="leading zeros"):
        list_batch_ids(fs, folder)


def test_list_batch_ids_ignores_object_store_directory_markers() -> None:
    """Object stores list 0-byte marker objects: one named like the folder with a trailing '/'."""
    fs, folder = MemoryFileSystem(), f"/t-{uuid.uuid4().hex}/ck/offsets"
    for name in ("0", "1", ".1.crc"):
        fs.pipe_file(f"{folder}/{name}", b"v1")
    fs.store[f"{folder}/"] = MemoryFile(fs, f"{folder}/", b"")  # the folder's own marker
    assert f"{folder}/" in fs.ls(folder, detail=False)
    assert list_batch_ids(fs, folder) == [0, 1]


def test_list_batch_ids_drops_the_listing_cache_first(tmp_path: Path) -> None:
    calls: list[tuple[str, str]] = []
    local = fsspec.filesystem("file")

    class Recording:
        def invalidate_cache(self, path: str) -> None:
            calls.append(("invalidate_cache", path))

        def ls(self, path: str, detail: bool = True) -> list[str]:
            calls.append(("ls", path))
            assert detail is False  # names only: no stat per entry
            return local.ls(path, detail=False)

    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "4").write_bytes(b"v1")
    assert list_batch_ids(Recording(), str(tmp_path / "commits")) == [4]  # type: ignore[arg-type]
    assert calls == [("invalidate_cache", str(tmp_path / "commits")), ("ls", str(tmp_path / "commits"))]


def test_list_batch_ids_agrees_with_the_reader(location: str) -> None:
    built = write_checkpoint(location, batches=range(12), committed=range(11), crc=True, tmp_files=True)
    snapshot = CheckpointReader(built.uri).snapshot()
    assert list_batch_ids(built.fs, f"{built.root}/offsets") == list(range(12))
    assert list_batch_ids(built.fs, f"{built.root}/commits")[-1] == snapshot.last_committed_batch == 10


def test_crc_target() -> None:
    assert crc_target(".12.crc") == "12"
    assert crc_target(".metadata.crc") == "metadata"
    assert crc_target("..3.uuid.tmp.crc") == ".3.uuid.tmp"
    assert crc_target("12") is None and crc_target(".crc") is None
