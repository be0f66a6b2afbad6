"""What Spark 4.1/4.2 write into a checkpoint, parsed: offsets v2 keyed by source id or name, commits
v2/v3, Spark's own state file checksums (``<file>.crc``), and the refusal of a checkpoint without
its ``metadata`` file. Pure and fast; the files marked "real" were written by pyspark 4.2.0
(``tests/integration/test_spark42_formats.py`` writes them again on every run and checks the same
against Spark itself)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.checksums import SparkChecksum, crc32c, is_sidecar
from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveCorrupt,
    CorruptCheckpointFile,
    MissingCheckpointMetadata,
    StateChecksumMismatch,
)
from airflow_ckpt_provider.checkpoint.logs import parse_commit_log, parse_offset_log
from airflow_ckpt_provider.checkpoint.manifest import DATA_DIR
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.checksums import check_state_checksums
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive
from tests.unit.conftest import write_checkpoint

REAL_META = ('{"batchWatermarkMs":0,"batchTimestampMs":1795763039229,"conf":{"spark.sql.streaming.stateStore.'
             'providerClass":"org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",'
             '"spark.sql.streaming.queryEvolution.enableSourceEvolution":"false","spark.sql.streaming.stateStore.'
             'encodingFormat":"unsaferow","spark.sql.streaming.stateStore.compression.codec":"lz4"},'
             '"sourceMetadataInfo":{}}')
#: real: offsetLog.formatVersion=2, an unnamed Kafka source (keyed by its id)
REAL_OFFSETS_V2_UNNAMED = f'v2\n{REAL_META}\n0:{{"ev":{{"0":153,"1":147}}}}'.encode()
#: real: source evolution on, the Kafka source named ``events``
REAL_OFFSETS_V2_NAMED = f'v2\n{REAL_META}\nevents:{{"ev":{{"0":153,"1":147}}}}'.encode()
#: real: RocksDB state checkpoint format v2
REAL_COMMIT_V2 = (b'v2\n{"nextBatchWatermarkMs":0,"stateUniqueIds":{"0":[["4ac615c6-ad02-49fd-9bfd-ed0c32439e70"],'
                  b'["c507d990-8604-42c3-a25f-73a52cf559ca"]]}}')
#: commits v3 as Spark's CommitLogSuite writes it (sink evolution)
COMMIT_V3 = (b'v3\n{"nextBatchWatermarkMs":42,"sinkMetadataMap":{"sink-0":{"sinkName":"sink-0","commitOffset":"-",'
             b'"providerName":"memory","apiVersion":"v2","isActive":true}}}')
#: real: a sidecar whose CRC32C is above 2**31 (Spark writes it as a negative Java int)
REAL_SIDECAR = (b'{"algorithm":"CRC32C","value":-1722119127,"mainFileSize":3772,"timestampMs":1795763035231,'
                b'"creator":{"executorId":"driver","taskInfo":"Task= 1.0, Stage= 1.0"}}')
KAFKA = KafkaOffsets({"ev": {0: 153, 1: 147}})


def test_offsets_v2_of_an_unnamed_source_read_like_v1() -> None:
    entry = parse_offset_log(REAL_OFFSETS_V2_UNNAMED, "offsets/2")
    assert entry.version == 2 and entry.batch_timestamp_ms == 1795763039229
    assert [(s.index, s.name, s.kind, s.kafka) for s in entry.sources] == [(0, None, SourceKind.KAFKA, KAFKA)]
    v1 = parse_offset_log(b'v1\n' + REAL_META.encode() + b'\n{"ev":{"1":147,"0":153}}', "offsets/2")
    assert [(s.index, s.name, s.kafka) for s in v1.sources] == [(s.index, s.name, s.kafka) for s in entry.sources]


def test_offsets_v2_of_a_named_source() -> None:
    entry = parse_offset_log(REAL_OFFSETS_V2_NAMED, "offsets/2")
    assert [(s.index, s.name, s.label, s.kafka) for s in entry.sources] == [(0, "events", "events", KAFKA)]


def test_offsets_v2_ids_in_numeric_order_then_names_and_dashes() -> None:
    lines = ['10:{"t":{"0":10}}', "2:-", 'b:{"t":{"0":3}}', '0:{"t":{"0":1}}', "a:7", "01:5"]
    entry = parse_offset_log(("v2\n{}\n" + "\n".join(lines)).encode(), "offsets/9")
    assert [(s.index, s.name, s.kind) for s in entry.sources] == [
        (0, None, SourceKind.KAFKA), (2, None, SourceKind.NONE), (10, None, SourceKind.KAFKA),
        (3, "01", SourceKind.RATE), (4, "a", SourceKind.RATE), (5, "b", SourceKind.KAFKA)]


def test_offsets_v2_metadata_with_control_batch_info_and_a_colon_in_the_offset() -> None:
    meta = {"batchWatermarkMs": 5, "batchTimestampMs": 9, "conf": {}, "sourceMetadataInfo": {
        "events": {"sourceId": "events", "providerName": "kafka", "apiVersion": "v2"}},
        "controlBatchInfo": {"operationType": "repartition", "operationInfo": "4"}}
    entry = parse_offset_log(f'v2\n{json.dumps(meta)}\nevents:{{"a:b":{{"0":4}}}}'.encode(), "offsets/3")
    assert entry.batch_watermark_ms == 5 and entry.sources[0].kafka == KafkaOffsets({"a:b": {0: 4}})


@pytest.mark.parametrize("text", ["v2\n\n0:1", "v2\n{}\n:1", "v2\n{}\n0:1\n0:2", "v3\n{}\n0:1"])
def test_offsets_v2_refusals(text: str) -> None:
    with pytest.raises(CorruptCheckpointFile):  # UnsupportedLogVersion is one too
        parse_offset_log(text.encode(), "offsets/1")


def test_commits_v2_and_v3() -> None:
    v2 = parse_commit_log(REAL_COMMIT_V2, "commits/2")
    assert v2.version == 2 and v2.state_unique_ids is not None and list(v2.state_unique_ids) == ["0"]
    v3 = parse_commit_log(COMMIT_V3, "commits/0")
    assert (v3.version, v3.next_batch_watermark_ms) == (3, 42)
    assert v3.sink_metadata is not None and v3.sink_metadata["sink-0"]["isActive"] is True
    with pytest.raises(CorruptCheckpointFile, match="sinkMetadataMap"):
        parse_commit_log(b'v3\n{"nextBatchWatermarkMs":0,"sinkMetadataMap":[]}', "commits/0")


def test_crc32c_and_the_real_sidecar() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(b"56789", crc32c(b"1234")) == 0xE3069283
    parsed = SparkChecksum.parse(REAL_SIDECAR, "state/0/1/3_x.zip.crc")
    assert parsed == SparkChecksum(value=2572848169, main_file_size=3772)
    assert SparkChecksum.parse(parsed.to_json(), "again") == parsed


@pytest.mark.parametrize("body", [b"", b"[]", b"not json", b'{"algorithm":"CRC32","value":1,"mainFileSize":1}',
                                  b'{"algorithm":"CRC32C","value":"1","mainFileSize":1}',
                                  b'{"algorithm":"CRC32C","value":1,"mainFileSize":-1}'])
def test_malformed_sidecars_are_refused(body: bytes) -> None:
    with pytest.raises(CorruptCheckpointFile):
        SparkChecksum.parse(body, "state/0/0/1.zip.crc")


@pytest.mark.parametrize(("path", "sidecar"), [("state/0/0/1_u.zip.crc", True), ("state/0/0/.1_u.zip.crc", False),
                                               ("commits/.3.crc", False), ("state/0/0/.crc", False),
                                               ("state/0/0/1.zip", False), ("sinks/x.crc", False)])
def test_sidecars_are_visible_crc_files(path: str, sidecar: bool) -> None:
    assert is_sidecar(path) is sidecar


def state_tree(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    root = tmp_path / "tree"
    files = {"state/0/0/1_u.zip": b"rocksdb state" * 50, "state/0/1/2_v.zip": b"other" * 7}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        (root / f"{rel}.crc").write_bytes(SparkChecksum.of(data).to_json())
        (root / Path(rel).parent / f".{Path(rel).name}.crc").write_bytes(b"crc\x00hadoop")  # not Spark's
    (root / "state/0/0/9_orphan.zip.crc").write_bytes(b"{}")  # an orphan: Spark leaves it, so do we
    return root, {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_a_tree_whose_sidecars_agree(tmp_path: Path) -> None:
    root, files = state_tree(tmp_path)
    expected = [p for p in files if is_sidecar(p)]
    assert check_state_checksums(fsspec.filesystem("file"), str(root), files, where="t", expected=expected) == 2


@pytest.mark.parametrize("damage", ["changed file", "changed sidecar", "resized file", "dropped sidecar",
                                    "garbled sidecar"])
def test_a_desynchronised_or_dropped_sidecar_names_the_file(tmp_path: Path, damage: str) -> None:
    root, files = state_tree(tmp_path)
    expected = [p for p in files if is_sidecar(p)]
    target = "state/0/0/1_u.zip"
    if damage == "changed file":
        (root / target).write_bytes(b"ROCKSDB STATE" * 50)
    elif damage == "changed sidecar":
        (root / f"{target}.crc").write_bytes(SparkChecksum(value=1, main_file_size=650).to_json())
    elif damage == "resized file":
        (root / target).write_bytes(b"rocksdb")
    elif damage == "garbled sidecar":
        (root / f"{target}.crc").write_bytes(b'{"algorithm":"CRC32C","val')
    else:
        (root / f"{target}.crc").unlink()
    files = {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}
    with pytest.raises(StateChecksumMismatch) as caught:
        check_state_checksums(fsspec.filesystem("file"), str(root), files, where="t", expected=expected)
    assert caught.value.file == (f"{target}.crc" if damage in ("dropped sidecar", "garbled sidecar") else target)
    assert isinstance(caught.value, ArchiveCorrupt)  # every caller of the archive checks catches it


@pytest.fixture
def archived(tmp_path: Path) -> tuple[Path, str]:
    """An archive of a checkpoint with Spark state sidecars; (archive folder, one sidecar path)."""
    built = write_checkpoint(str(tmp_path / "ck"), offsets_version=2, commit_version=2)
    state, _ = state_tree(tmp_path)
    shutil.copytree(state / "state", tmp_path / "ck" / "state")
    local = fsspec.filesystem("file")
    manifest = CheckpointArchive(local, str(tmp_path / "archive")).archive(
        local, built.root, stream_name="ck", upgrade_id="u")
    sidecars = [f.path for f in manifest.files if is_sidecar(f.path)]
    assert "state/0/0/1_u.zip.crc" in sidecars and "state/0/0/9_orphan.zip.crc" in sidecars  # carried as they are
    return Path(manifest.archive_uri), "state/0/0/1_u.zip.crc"


def test_archive_verify_and_restore_check_the_sidecars(archived: tuple[Path, str], tmp_path: Path) -> None:
    archive, sidecar = archived
    local = fsspec.filesystem("file")
    verify_archive(local, str(archive))
    restore_archive(local, str(archive), local, str(tmp_path / "restored"))
    assert (tmp_path / "restored" / sidecar).read_bytes() == (archive / DATA_DIR / sidecar).read_bytes()
    (archive / DATA_DIR / sidecar).unlink()
    for check in (lambda: verify_archive(local, str(archive)),
                  lambda: restore_archive(local, str(archive), local, str(tmp_path / "again"))):
        with pytest.raises(StateChecksumMismatch, match="checksum file") as caught:
            check()
        assert caught.value.file == sidecar
    assert not (tmp_path / "again").exists()


def test_a_checkpoint_without_metadata_is_read_but_not_handed_over(tmp_path: Path) -> None:
    location = str(tmp_path / "ck")
    write_checkpoint(location, metadata=False, offsets_version=2)
    reader = CheckpointReader(location)
    assert reader.snapshot().query_id is None  # looking into it still works
    with pytest.raises(MissingCheckpointMetadata, match="no metadata file") as caught:
        reader.handover()
    assert "Spark 4.2" in str(caught.value) and str(caught.value.path).endswith("/metadata")
