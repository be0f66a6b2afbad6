"""A standby rehearsal's scratch folder and consumer group, without Spark.

Where the scratch goes (:func:`scratch_location`, pure); that a scratch on the checkpoint's
filesystem is removed through Hadoop's FileSystem (replaced at its boundary) even when the
rehearsal fails; that a scratch left in a checkpoint is no part of it for the reader, the launch
target check and the archive (real files); and the warm-up's Kafka options never carry the job's
``kafka.group.id``. The rehearsal itself runs in tests/integration/test_standby.py.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.records.control import CONF_CHECKPOINT_LOCATION, REHEARSAL_SCRATCH_DIR
from airflow_ckpt_provider.spark import graceful_stop, rehearsal
from airflow_ckpt_provider.spark import kafka as spark_kafka
from airflow_ckpt_provider.spark.kafka import warm_up_options
from airflow_ckpt_provider.spark.rehearsal import scratch_location
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.locations import check_launch_target
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.restore import verify_archive
from tests.unit.conftest import write_checkpoint

# -- where the scratch goes ----------------------------------------------------------------------


@pytest.mark.parametrize(("checkpoint", "master", "expected"), [
    # a cluster: the checkpoint's own filesystem, whatever it is
    ("hdfs://nn:8020/ck/orders-v2", "yarn", "hdfs://nn:8020/ck/orders-v2/_ckpt/rehearsal/r1"),
    ("hdfs://nn:8020/ck/orders-v2/", "yarn", "hdfs://nn:8020/ck/orders-v2/_ckpt/rehearsal/r1"),
    ("s3a://lake/ck/orders-v2", "k8s://https://api:6443", "s3a://lake/ck/orders-v2/_ckpt/rehearsal/r1"),
    ("file:/mnt/shared/ck", "spark://master:7077", "file:/mnt/shared/ck/_ckpt/rehearsal/r1"),
    ("/mnt/shared/ck", "yarn", "/mnt/shared/ck/_ckpt/rehearsal/r1"),
    # executors on the driver's host but a checkpoint elsewhere: still the checkpoint's filesystem
    ("hdfs://nn:8020/ck/orders-v2", "local[2]", "hdfs://nn:8020/ck/orders-v2/_ckpt/rehearsal/r1"),
    # the only case for the driver's own disk: a local master and a local checkpoint (or none)
    ("file:/tmp/ck", "local[2]", None),
    ("FILE:///tmp/ck", "LOCAL[*]", None),
    ("/tmp/ck", "local", None),
    ("/tmp/ck", "local-cluster[2,1,1024]", None),
    (None, "local[2]", None),
])
def test_the_scratch_is_on_the_checkpoints_filesystem_unless_all_is_local(
        checkpoint: str | None, master: str, expected: str | None) -> None:
    assert scratch_location(checkpoint, "r1", master=master) == expected


@pytest.mark.parametrize(("checkpoint", "unique", "master", "message"), [
    (None, "r1", "yarn", "no checkpoint location to rehearse under on master yarn"),
    ("", "r1", "spark://m:7077", CONF_CHECKPOINT_LOCATION),
    ("hdfs://nn/ck", "a/b", "yarn", "expected one folder name"),
    ("hdfs://nn/ck", "..", "yarn", "expected one folder name"),
    ("hdfs://nn/ck", "", "yarn", "expected one folder name"),
])
def test_a_scratch_that_cannot_be_placed_is_refused(checkpoint: str | None, unique: str, master: str,
                                                    message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace(".", r"\.")):
        scratch_location(checkpoint, unique, master=master)


# -- the scratch on the checkpoint's filesystem, removed through Hadoop's FileSystem ---------------


class HadoopPath:
    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")

    def getParent(self) -> HadoopPath:  # noqa: N802 - Hadoop's name
        return HadoopPath(self.uri.rsplit("/", 1)[0])

    def toString(self) -> str:  # noqa: N802 - Hadoop's name
        return self.uri


class Store:
    """Hadoop's FileSystem at its boundary: the files and folders that exist, and every delete."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.folders: set[str] = set()
        self.deletes: list[tuple[str, bool]] = []
        self.fail: Exception | None = None

    def add(self, uri: str) -> None:
        """A file, and its folders up to the store's root."""
        self.files.add(uri)
        parent = uri.rsplit("/", 1)[0]
        while "/" in parent.split("://", 1)[-1]:
            self.folders.add(parent)
            parent = parent.rsplit("/", 1)[0]

    def _under(self, uri: str) -> set[str]:
        return {p for p in self.files | self.folders if p.startswith(uri + "/")}

    def exists(self, path: HadoopPath) -> bool:
        return path.uri in self.files or path.uri in self.folders

    def listStatus(self, path: HadoopPath) -> list[str]:  # noqa: N802 - Hadoop's name
        return sorted({p[len(path.uri) + 1:].split("/")[0] for p in self._under(path.uri)})

    def delete(self, path: HadoopPath, recursive: bool) -> bool:
        if self.fail is not None:
            raise self.fail
        self.deletes.append((path.uri, recursive))
        inside = self._under(path.uri)
        assert recursive or not inside, "Hadoop refuses a non-recursive delete of a non-empty folder"
        found = self.exists(path)
        self.files -= inside | {path.uri}
        self.folders -= inside | {path.uri}
        return found


class ScratchFiles:
    """graceful_stop.HadoopFiles over :class:`Store`; a made scratch holds what a rehearsal writes
    first (its seed row), so its removal has something to remove."""

    store = Store()

    def __init__(self, spark: Any, root: str) -> None:  # noqa: ANN401
        self.root_path = HadoopPath(root)
        self.fs = self.store
        self.store.add(f"{root}/seed/part-00000.parquet")


class Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:  # noqa: ANN401
        return self.values.get(key, default)


class Qualifying:
    """py4j's view of Hadoop's Path, FileSystem and configuration: qualifies a path against ``default_fs``."""

    def __init__(self, default_fs: str) -> None:
        self.default_fs = default_fs
        self.org = self  # spark._jvm.org.apache.hadoop.fs.Path
        self.apache = self.hadoop = self.fs = self

    def Path(self, path: str) -> Any:  # noqa: N802, ANN401 - Hadoop's name
        default_fs = self.default_fs
        qualified = f"{default_fs}{path}"

        class Qualified:
            def getFileSystem(self, conf: object) -> Any:  # noqa: N802, ANN401
                return self

            def makeQualified(self, given: object) -> Any:  # noqa: N802, ANN401
                return self

            def toString(self) -> str:  # noqa: N802
                return qualified

        return Qualified()

    def hadoopConfiguration(self) -> object:  # noqa: N802 - Spark's name
        return object()


class Session:
    def __init__(self, conf: dict[str, str], default_fs: str = "file:") -> None:
        self.conf = Conf(conf)
        self._jvm = self._jsc = Qualifying(default_fs)


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Store:
    """HadoopFiles replaced by :class:`ScratchFiles`; local temporary folders go to ``tmp_path``."""
    monkeypatch.setattr(graceful_stop, "HadoopFiles", ScratchFiles)
    monkeypatch.setattr(rehearsal.tempfile, "tempdir", str(tmp_path))
    ScratchFiles.store = Store()
    return ScratchFiles.store


def no_source() -> Any:  # noqa: ANN401
    raise RuntimeError("Failed to find data source: kafka")


def rehearse(spark: Session, caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    with caplog.at_level(level, logger=rehearsal.__name__):
        rehearsal.rehearse_query(spark, no_source)
    return [r.getMessage() for r in caplog.records if r.name == rehearsal.__name__]


def test_a_failed_rehearsal_on_a_cluster_removes_its_scratch_from_the_checkpoints_filesystem(
        store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store.add("hdfs://nn:8020/ck/v2/_ckpt/heartbeat.json")
    lines = rehearse(Session({CONF_CHECKPOINT_LOCATION: "hdfs://nn:8020/ck/v2", "spark.master": "yarn"}), caplog)

    (line,) = lines
    scratch = line.split("standby rehearsal in ", 1)[1].split(" failed", 1)[0]
    assert scratch.startswith("hdfs://nn:8020/ck/v2/_ckpt/rehearsal/") and "Failed to find data source" in line
    # the scratch folder recursively, then the emptied rehearsal folder; the control files stay
    assert store.deletes == [(scratch, True), ("hdfs://nn:8020/ck/v2/_ckpt/rehearsal", False)]
    assert store.files == {"hdfs://nn:8020/ck/v2/_ckpt/heartbeat.json"}
    assert list(tmp_path.iterdir()) == [], "nothing on the driver's disk"


def test_a_checkpoint_path_without_a_scheme_is_qualified_as_spark_resolves_it(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """On a cluster, ``/ck/v2`` is on Hadoop's default filesystem (HDFS), not the driver's disk."""
    (line,) = rehearse(Session({CONF_CHECKPOINT_LOCATION: "/ck/v2", "spark.master": "yarn"},
                               default_fs="hdfs://nn:8020"), caplog)
    assert "standby rehearsal in hdfs://nn:8020/ck/v2/_ckpt/rehearsal/" in line
    assert store.deletes[0][0].startswith("hdfs://nn:8020/ck/v2/_ckpt/rehearsal/")


def test_another_rehearsals_folder_keeps_the_rehearsal_folder(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    left = "hdfs://nn/ck/v2/_ckpt/rehearsal/from-a-killed-driver/checkpoint/commits/0"
    store.add(left)
    rehearse(Session({CONF_CHECKPOINT_LOCATION: "hdfs://nn/ck/v2", "spark.master": "yarn"}), caplog)
    assert len(store.deletes) == 1 and store.deletes[0][1] is True
    assert store.files == {left}


def test_a_scratch_that_cannot_be_removed_is_named_never_raised(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    store.fail = RuntimeError("org.apache.hadoop.security.AccessControlException: Permission denied")
    lines = rehearse(Session({CONF_CHECKPOINT_LOCATION: "s3a://lake/ck/v2", "spark.master": "yarn"}), caplog)
    assert len(lines) == 2 and "failed after" in lines[0]
    assert lines[1].startswith("could not remove the standby rehearsal's scratch folder s3a://lake/ck/v2/_ckpt/"
                               "rehearsal/") and "Permission denied" in lines[1] and "remove it by hand" in lines[1]


def test_a_cluster_driver_without_a_checkpoint_does_not_rehearse_on_its_disk(
        store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (line,) = rehearse(Session({"spark.master": "spark://m:7077"}), caplog)
    assert "standby rehearsal in no scratch folder failed" in line and CONF_CHECKPOINT_LOCATION in line
    assert store.deletes == [] and list(tmp_path.iterdir()) == []


def test_a_local_driver_with_a_local_checkpoint_uses_a_temporary_folder_and_removes_it(
        store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (line,) = rehearse(Session({CONF_CHECKPOINT_LOCATION: str(tmp_path / "ck"), "spark.master": "local[2]"}), caplog)
    assert f"standby rehearsal in {tmp_path}/ckpt-standby-rehearsal-" in line
    assert store.deletes == [] and list(tmp_path.iterdir()) == []


# -- a scratch left in a checkpoint is no part of it ---------------------------------------------


def _with_scratch(root: Path) -> Any:  # noqa: ANN401
    """A stopped checkpoint (batches 0-3 committed, 4 planned, state) and, under ``_ckpt/rehearsal/``,
    what a driver killed while it rehearsed leaves: a query of its own with more batches, its state
    and output."""
    built = write_checkpoint(str(root), batches=range(5), committed=range(4), crc=True, state_operators=(0,))
    write_checkpoint(str(root / REHEARSAL_SCRATCH_DIR / "r1" / "checkpoint"), batches=range(9), committed=range(9),
                     query_id="11111111-2222-3333-4444-555555555555", state_operators=(0, 1))
    (root / REHEARSAL_SCRATCH_DIR / "r1" / "out").mkdir()
    (root / REHEARSAL_SCRATCH_DIR / "r1" / "out" / "part-0.parquet").write_bytes(b"PAR1")
    (root / REHEARSAL_SCRATCH_DIR / "r2").mkdir()  # an empty one
    return built


def test_the_reader_never_looks_into_a_rehearsal_scratch(tmp_path: Path) -> None:
    plain = write_checkpoint(str(tmp_path / "plain"), batches=range(5), committed=range(4), crc=True,
                             state_operators=(0,))
    _with_scratch(tmp_path / "scratched")
    seen = CheckpointReader(str(tmp_path / "scratched")).snapshot(include_initial=True)
    assert seen == replace(CheckpointReader(plain.uri).snapshot(include_initial=True), uri=str(tmp_path / "scratched"))
    assert seen.last_committed_batch == 3 and seen.state_operators == (0,)


def test_a_location_holding_only_a_rehearsal_scratch_is_an_empty_launch_target(tmp_path: Path) -> None:
    (tmp_path / "v2" / REHEARSAL_SCRATCH_DIR / "r1" / "checkpoint" / "commits").mkdir(parents=True)
    (tmp_path / "v2" / REHEARSAL_SCRATCH_DIR / "r1" / "checkpoint" / "commits" / "0").write_text("v1\n{}")
    fs = fsspec.filesystem("file")
    assert check_launch_target((fs, str(tmp_path / "v2")), str(tmp_path / "v2")) is False


def test_the_archive_leaves_a_rehearsal_scratch_out_and_keeps_the_control_files(tmp_path: Path) -> None:
    built = _with_scratch(tmp_path / "ck")
    (tmp_path / "ck" / "_ckpt" / "delivered.json").write_text("{}")
    fs = fsspec.filesystem("file")
    archive = CheckpointArchive(fs, str(tmp_path / "archive"), archive_uri=str(tmp_path / "archive"), workers=1)

    manifest = archive.archive(built.fs, built.root, stream_name="orders", upgrade_id="up-1", source_uri=built.uri)
    archived = {f.path for f in manifest.files}
    assert not [p for p in archived if p.startswith(REHEARSAL_SCRATCH_DIR)], sorted(archived)
    assert not [d for d in manifest.empty_dirs if d.startswith(REHEARSAL_SCRATCH_DIR)], manifest.empty_dirs
    assert "_ckpt/delivered.json" in archived and "commits/3" in archived and "offsets/4" in archived
    assert manifest.query_id == built.query_id and manifest.last_committed_batch == 3
    assert verify_archive(fs, manifest.archive_uri) == manifest
    # a re-run of the same upgrade finds the checkpoint equal to its archive: the scratch is no difference
    again = archive.archive(built.fs, built.root, stream_name="orders", upgrade_id="up-1", source_uri=built.uri)
    assert again == manifest


# -- the warm-up's consumer group ----------------------------------------------------------------


def test_the_warm_up_never_takes_the_jobs_consumer_group() -> None:
    options = {"kafka.group.id": "orders-app", "kafka.security.protocol": "SSL", "groupIdPrefix": "orders-app",
               "kafka.session.timeout.ms": 30000, "maxOffsetsPerTrigger": 100, "startingOffsets": "earliest"}
    assert warm_up_options(options) == (
        {"kafka.security.protocol": "SSL", "groupIdPrefix": "orders-app", "kafka.session.timeout.ms": "30000"},
        "orders-app")
    assert warm_up_options({"kafka.security.protocol": "SSL"}) == ({"kafka.security.protocol": "SSL"}, None)
    assert options["kafka.group.id"] == "orders-app", "the job's own options are left as they are"


class Reader:
    """A recorder of a streaming reader's options."""

    def __init__(self) -> None:
        self.given: dict[str, str] = {}

    def format(self, name: str) -> Reader:
        return self

    def option(self, key: str, value: str) -> Reader:
        self.given[key] = value
        return self

    def options(self, **values: str) -> Reader:
        self.given.update(values)
        return self

    def load(self) -> dict[str, str]:
        return self.given


def test_the_rehearsal_reads_with_its_own_group_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    read: list[dict[str, str]] = []

    class Warm:
        conf = Conf({})

        @property
        def readStream(self) -> Reader:  # noqa: N802 - pyspark's name
            return Reader()

    monkeypatch.setattr(spark_kafka, "warm_up_session", lambda spark: None)
    monkeypatch.setattr(rehearsal, "rehearse_query", lambda spark, source: read.append(source()))
    with caplog.at_level(logging.INFO, logger=spark_kafka.__name__):
        spark_kafka._warm_up(Warm(), "b:9092", ["orders"], {"kafka.group.id": "orders-app",  # type: ignore[arg-type]
                                                            "kafka.security.protocol": "SSL"})
    (options,) = read
    assert "kafka.group.id" not in options and options["kafka.security.protocol"] == "SSL"
    assert options["subscribe"] == "orders" and options["kafka.bootstrap.servers"] == "b:9092"
    assert any("kafka.group.id orders-app not used" in r.getMessage() for r in caplog.records)
