"""The Spark driver reads a checkpoint through Hadoop's FileSystem exactly as the provider reads it
through fsspec: one reader (the core's ``SnapshotReader``), two adapters.

One stateful query (``dropDuplicates`` on RocksDB, Spark's state file checksums on) of the real local Spark
reads a real Kafka topic into Parquet and writes ONE checkpoint for the module. Each test copies it
with ``shutil``, damages the copy the way an operator or a crash would, and reads it twice: in the
driver (``read_handover(spark, uri)``, java.nio through py4j) and in the provider
(``CheckpointReader(uri).handover()``, fsspec). Both must give the SAME handover, or raise the
same typed error with the same message.
"""

from __future__ import annotations

import os
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.checksums import is_sidecar
from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    CheckpointNotFound,
    CommitWithoutOffsets,
    CorruptCheckpointFile,
    MissingCheckpointMetadata,
    NoOffsets,
    UnsafeEntry,
)
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.snapshot_reader import SnapshotReader
from airflow_ckpt_provider.spark.checkpoint_files import HadoopCheckpointFiles, read_handover
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.records import produce_records
from tests.integration.streams import batch_ids, kafka_reader, raw_source_line, spark_conf

pytestmark = pytest.mark.integration

RECORDS = 300
TAKEN_AT = "2026-01-01T00:00:00.000000+00:00"
#: a stateful query on RocksDB with state checkpoint format v2 (commits v2) and Spark 4.1+'s state
#: file checksums (``<version>_<uuid>.zip.crc``), on 2 shuffle partitions (fast on 2 cores)
SETTINGS = {
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    "spark.sql.streaming.checkpoint.fileChecksum.enabled": "true",
}


@dataclass(frozen=True)
class Written:
    """The checkpoint Spark wrote, its last committed batch and where it started."""

    checkpoint: Path
    last: int
    topic: str


@pytest.fixture(scope="module")
def written(kafka, spark, tmp_path_factory: pytest.TempPathFactory) -> Written:  # noqa: ANN001
    work = tmp_path_factory.mktemp("driverread")
    topic = f"t-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, 3)
    produce_records(kafka.bootstrap_servers, topic, RECORDS)
    checkpoint = work / "cp"
    with spark_conf(spark, SETTINGS):
        frame = (kafka_reader(spark, kafka.bootstrap_servers, [topic], max_per_trigger=100)
                 .dropDuplicates(["partition", "offset"]))
        query = (frame.writeStream.format("parquet").option("path", str(work / "sink"))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert query.awaitTermination(300), "the query did not finish within 300 s"
        assert query.exception() is None, query.exception()
    commits = batch_ids(checkpoint / "commits")
    assert len(commits) >= 3 and commits == batch_ids(checkpoint / "offsets"), commits  # 100 records a batch
    return Written(checkpoint=checkpoint, last=commits[-1], topic=topic)


@pytest.fixture
def copy(written: Written, tmp_path: Path) -> Path:
    """A copy of the module's checkpoint to damage (links copied as links)."""
    target = tmp_path / "cp"
    shutil.copytree(written.checkpoint, target, symlinks=True)
    return target


def both(spark: Any, uri: str) -> tuple[Handover | CheckpointError, Handover | CheckpointError]:
    """(driver, provider): the handover each side reads at ``uri``, or the typed error it raised."""
    results: list[Handover | CheckpointError] = []
    for read in (lambda: read_handover(spark, uri, taken_at=TAKEN_AT),
                 lambda: CheckpointReader(uri).handover(taken_at=TAKEN_AT)):
        try:
            results.append(read())
        except CheckpointError as exc:
            results.append(exc)
    return results[0], results[1]


def same_handover(spark: Any, uri: str) -> Handover:
    driver, provider = both(spark, uri)
    assert isinstance(driver, Handover), f"the driver refused: {driver}"
    assert isinstance(provider, Handover), f"the provider refused: {provider}"
    assert driver == provider
    return driver


def same_error(spark: Any, uri: str, kind: type[CheckpointError], *mentions: str) -> CheckpointError:
    driver, provider = both(spark, uri)
    assert type(driver) is kind, f"the driver gave {driver!r}"
    assert type(provider) is kind, f"the provider gave {provider!r}"
    assert str(driver) == str(provider)
    for words in mentions:
        assert words in str(driver), str(driver)
    return driver


def test_the_driver_and_the_provider_hand_over_the_same_offsets(written: Written, spark) -> None:  # noqa: ANN001
    cp = written.checkpoint
    assert any(is_sidecar(str(p.relative_to(cp))) for p in cp.rglob("*.crc")), "no state checksum files written"
    handover = same_handover(spark, str(cp))
    assert (handover.batch_id, handover.in_flight_batch, handover.from_initial) == (written.last, None, False)
    assert handover.kafka_offsets().total() == RECORDS
    assert handover.kafka_offsets() == KafkaOffsets.from_json(raw_source_line(cp, written.last))
    assert same_handover(spark, f"file://{cp}").kafka_offsets() == handover.kafka_offsets()

    # the whole snapshot too, read with the same number of files and listings
    with HadoopCheckpointFiles(spark, str(cp)) as files:
        driver = SnapshotReader(files)
        driver_snapshot = driver.snapshot(include_initial=True)
    provider = CheckpointReader(str(cp))
    assert driver_snapshot == provider.snapshot(include_initial=True)
    assert driver_snapshot.state_operators == (0,) and driver_snapshot.initial_sources
    assert (driver.files_opened, driver.listings) == (provider.files_opened, provider.listings)


def test_hadoop_checksum_files_are_checked_by_the_core(written: Written, spark, copy: Path) -> None:  # noqa: ANN001
    """Spark wrote Hadoop's ``.N.crc`` beside every log file on the local disk; the driver lists
    and reads them as plain files (not through Hadoop's checksummed local filesystem), so the core
    checks them and refuses in its own words."""
    batch = copy / "offsets" / str(written.last)
    assert (copy / "offsets" / f".{written.last}.crc").is_file()
    data = bytearray(batch.read_bytes())
    where = data.rindex(b":") + 1  # the first digit of the last partition's offset
    data[where] = ord("7") if data[where] != ord("7") else ord("8")
    batch.write_bytes(bytes(data))
    same_error(spark, str(copy), CorruptCheckpointFile, "CRC32 mismatch", f"{copy}/offsets/{written.last}")


def test_a_damaged_checksum_file_is_refused_alike(written: Written, spark, copy: Path) -> None:  # noqa: ANN001
    crc = copy / "commits" / f".{written.last}.crc"
    data = bytearray(crc.read_bytes())
    data[-1] ^= 0xFF
    crc.write_bytes(bytes(data))
    same_error(spark, str(copy), CorruptCheckpointFile, f"{copy}/commits/{written.last}")


def test_a_damaged_state_checksum_is_not_part_of_the_handover(written: Written, spark, copy: Path) -> None:  # noqa: ANN001
    """Spark's own state checksums (``state/.../<file>.crc``) guard the state, which the handover
    does not read (the archive and restore check them): neither side refuses, both agree."""
    sidecar = next(p for p in sorted(copy.rglob("*.crc")) if is_sidecar(str(p.relative_to(copy))))
    sidecar.write_bytes(sidecar.read_bytes().replace(b'"value":', b'"value":1', 1))
    assert same_handover(spark, str(copy)).batch_id == written.last


@pytest.mark.parametrize("checksum", ["deleted too", "left behind"])
def test_a_deleted_metadata_file(written: Written, spark, copy: Path, checksum: str) -> None:  # noqa: ANN001
    (copy / "metadata").unlink()
    if checksum == "deleted too":
        (copy / ".metadata.crc").unlink()
        same_error(spark, str(copy), MissingCheckpointMetadata, "no metadata file")
    else:
        same_error(spark, str(copy), CorruptCheckpointFile, "only its checksum .metadata.crc")


def test_no_commits_hands_over_the_initial_offsets(written: Written, spark, copy: Path) -> None:  # noqa: ANN001
    shutil.rmtree(copy / "commits")
    (copy / "commits").mkdir()
    handover = same_handover(spark, str(copy))
    assert (handover.batch_id, handover.from_initial, handover.in_flight_batch) == (None, True, written.last)
    assert handover.kafka_offsets().total() == 0  # startingOffsets earliest, resolved to 0 in sources/0/0
    shutil.rmtree(copy / "sources")
    same_error(spark, str(copy), NoOffsets)


def test_an_uncommitted_last_batch_is_named_never_handed_over(written: Written, spark, copy: Path) -> None:  # noqa: ANN001
    last = written.last
    (copy / "commits" / str(last)).unlink()
    (copy / "commits" / f".{last}.crc").unlink()
    handover = same_handover(spark, str(copy))
    assert (handover.batch_id, handover.in_flight_batch) == (last - 1, last)
    assert handover.kafka_offsets() == KafkaOffsets.from_json(raw_source_line(copy, last - 1))
    assert handover.kafka_offsets().total() < RECORDS  # batch N's records are read again, not lost


def test_a_commit_without_its_offsets(written: Written, spark, copy: Path) -> None:  # noqa: ANN001
    (copy / "offsets" / str(written.last)).unlink()
    (copy / "offsets" / f".{written.last}.crc").unlink()
    same_error(spark, str(copy), CommitWithoutOffsets, f"commits/{written.last} without offsets/{written.last}")


def _plant_folder_link(copy: Path, last: int, outside: Path) -> str:
    shutil.move(copy / "commits", outside / "commits")
    os.symlink(outside / "commits", copy / "commits")
    return "commits"


def _plant_batch_link(copy: Path, last: int, outside: Path) -> str:
    (outside / "offsets").mkdir()
    shutil.move(copy / "offsets" / str(last), outside / "offsets" / str(last))
    os.symlink(outside / "offsets" / str(last), copy / "offsets" / str(last))
    return f"offsets/{last}"


def _plant_dangling_metadata(copy: Path, last: int, outside: Path) -> str:
    (copy / "metadata").unlink()
    os.symlink(outside / "gone", copy / "metadata")
    return "metadata"


#: a link planted in a copy of the checkpoint (copy, last batch, a folder outside) -> its path in the copy
PLANTS: dict[str, Callable[[Path, int, Path], str]] = {
    "folder out of the tree": _plant_folder_link,
    "batch file out of the tree": _plant_batch_link,
    "dangling metadata": _plant_dangling_metadata,
}


@pytest.mark.parametrize("plant", PLANTS)
def test_a_link_out_of_the_tree_is_refused_never_followed(written: Written, spark, copy: Path,  # noqa: ANN001
                                                         tmp_path: Path, plant: str) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    rel = PLANTS[plant](copy, written.last, outside)
    error = same_error(spark, str(copy), UnsafeEntry, f"a symbolic link {copy}/{rel} -> {outside}", "outside")
    assert error.path == f"{copy}/{rel}"


@pytest.mark.parametrize("swapped", ["metadata", "last offsets"])
def test_a_link_swapped_in_after_the_listing_is_refused_by_the_open(written: Written, spark, copy: Path,  # noqa: ANN001
                                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    swapped: str) -> None:
    """The driver lists a committed file (and looks at it), then opens it: a link swapped in
    between, to the very same bytes outside the tree, is refused by the open itself, never read
    through, with the error of a link found by the listing."""
    rel = "metadata" if swapped == "metadata" else f"offsets/{written.last}"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    moved = outside / Path(rel).name
    read_bytes = HadoopCheckpointFiles.read_bytes

    def swap_then_read(files: HadoopCheckpointFiles, path: str) -> bytes:
        if path == rel and not moved.exists():  # listed and looked at: now swap, then open
            shutil.move(copy / rel, moved)
            os.symlink(moved, copy / rel)
        return read_bytes(files, path)

    monkeypatch.setattr(HadoopCheckpointFiles, "read_bytes", swap_then_read)
    with pytest.raises(UnsafeEntry) as refused:
        read_handover(spark, str(copy), taken_at=TAKEN_AT)
    monkeypatch.undo()
    assert (copy / rel).is_symlink(), "the file was not swapped for a link"
    listed = same_error(spark, str(copy), UnsafeEntry, f"a symbolic link {copy}/{rel} -> {moved}", "outside")
    assert str(refused.value) == str(listed) and refused.value.path == f"{copy}/{rel}"


def test_a_missing_checkpoint(spark, tmp_path: Path) -> None:  # noqa: ANN001
    same_error(spark, str(tmp_path / "nowhere"), CheckpointNotFound, f"{tmp_path}/nowhere")


def test_a_control_file_rewritten_by_the_driver_is_never_missing_for_a_reader(spark, tmp_path: Path) -> None:  # noqa: ANN001
    """Spark's Hive jars make ``file:`` Hive's ProxyLocalFileSystem, whose rename refuses an
    existing file: HadoopFiles writes local control files through the raw local file system, whose
    rename replaces the target atomically. A reader polling while the driver rewrites a heartbeat
    300 times never finds it missing, and only the file is left (no temporary, no stale .crc)."""
    from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles

    files = HadoopFiles(spark, str(tmp_path))
    heartbeat = tmp_path / "_ckpt" / "heartbeat.json"
    files.write("_ckpt/heartbeat.json", b'{"n": 0}')
    (tmp_path / "_ckpt" / ".heartbeat.json.crc").write_bytes(b"a checksum of other bytes")
    writing, missing, polls = True, 0, 0

    def poll() -> None:
        nonlocal missing, polls
        while writing:
            polls += 1
            missing += not heartbeat.exists()

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        for n in range(1, 301):
            files.write("_ckpt/heartbeat.json", b'{"n": %d}' % n)
    finally:
        writing = False
        reader.join()
    assert polls > 300 and missing == 0
    assert files.read("_ckpt/heartbeat.json") == b'{"n": 300}'
    assert sorted(os.listdir(tmp_path / "_ckpt")) == ["heartbeat.json"]
