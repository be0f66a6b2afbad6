"""Checkpoint archive and restore on synthetic checkpoints, on local disk, memory:// and mixed."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import fsspec
import pytest
from fsspec import AbstractFileSystem

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveConflict,
    ArchiveCorrupt,
    ArchiveIncomplete,
    ArchiveInsideCheckpoint,
    CheckpointChanged,
    CheckpointError,
    HandoverMismatch,
    InvalidArchiveIntent,
    QueryStillRunning,
    TargetNotEmpty,
    UnsafeStreamName,
)
from airflow_ckpt_provider.checkpoint.manifest import (
    INTENT,
    MANIFEST,
    ArchiveInfo,
    ArchiveIntent,
    ArchiveManifest,
    plan_retention,
    sanitize_upgrade_id,
)
from airflow_ckpt_provider.records.control import HEARTBEAT, STOP_ACK, Heartbeat, StopAck
from airflow_ckpt_provider.storage import archive as archive_module
from airflow_ckpt_provider.storage import files, transfer
from airflow_ckpt_provider.storage.archive import CheckpointArchive, check_query_stopped
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.restore import read_manifest, restore_archive, verify_archive
from tests.unit.conftest import QUERY_ID, Built, write_checkpoint

T0 = datetime(2026, 11, 21, 20, 0, 0, tzinfo=timezone.utc)


@dataclass
class Store:
    """A place on one filesystem: its URL, fs and path."""

    url: str
    fs: AbstractFileSystem
    path: str

    def child(self, name: str) -> Store:
        fs, path = fsspec.core.url_to_fs(self.url.rstrip("/") + "/" + name)
        return Store(self.url.rstrip("/") + "/" + name, fs, path)

    def files(self) -> dict[str, bytes]:
        if not self.fs.exists(self.path):
            return {}
        prefix = self.path.rstrip("/") + "/"
        return {p[len(prefix):]: self.fs.cat_file(p) for p in self.fs.find(self.path)}


def _store(kind: str, tmp_path: Path, name: str) -> Store:
    url = str(tmp_path / name) if kind == "local" else f"memory://t-{uuid.uuid4().hex}/{name}"
    fs, path = fsspec.core.url_to_fs(url)
    return Store(url, fs, path)


@pytest.fixture(params=[("local", "local"), ("memory", "memory"), ("local", "memory")],
                ids=["local", "memory", "local-to-memory"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """(checkpoint parent, archive root) on the parametrized filesystems."""
    src_kind, dst_kind = request.param
    made = (_store(src_kind, tmp_path, "src"), _store(dst_kind, tmp_path, "archive"))
    yield made
    for store in made:
        if store.url.startswith("memory://"):
            bucket = store.path.rsplit("/", 1)[0]
            if store.fs.exists(bucket):
                store.fs.rm(bucket, recursive=True)


def build(src: Store, **kwargs) -> Built:  # noqa: ANN003
    options = {"batches": range(5), "committed": range(4), "crc": True, "tmp_files": True,
               "state_operators": (0, 1)} | kwargs
    return write_checkpoint(src.child("ck").url, **options)


def archiver(root: Store, **kwargs) -> CheckpointArchive:  # noqa: ANN003
    return CheckpointArchive(root.fs, root.path, archive_uri=root.url, workers=kwargs.pop("workers", 2),
                             clock=kwargs.pop("clock", lambda: T0), **kwargs)


def run(archive: CheckpointArchive, built: Built, upgrade_id: str = "up-1", **kwargs) -> ArchiveManifest:  # noqa: ANN003
    return archive.archive(built.fs, built.root, stream_name="orders", upgrade_id=upgrade_id,
                           source_uri=built.uri, **kwargs)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def archive_dir(root: Store, manifest: ArchiveManifest) -> Store:
    return root.child(f"orders/{manifest.name}")


# -- round trip --------------------------------------------------------------------------------


def test_archive_then_restore_round_trips_byte_for_byte(stores: tuple[Store, Store], tmp_path: Path) -> None:
    src, root = stores
    built = build(src)
    before = Store(built.uri, built.fs, built.root).files()
    manifest = run(archiver(root), built, reason="schema change", dag_run_id="dag/run-1", created_by="alice")

    assert {f.path: (f.size, f.sha256) for f in manifest.files} == {
        p: (len(b), sha(b)) for p, b in before.items()}
    assert manifest.file_count == len(before) and manifest.total_bytes == sum(map(len, before.values()))
    assert manifest.query_id == QUERY_ID and manifest.last_committed_batch == 3
    assert manifest.handover is not None and manifest.handover.batch_id == 3
    assert manifest.spark_conf["spark.sql.shuffle.partitions"] == "2"
    assert (manifest.created_by, manifest.reason, manifest.dag_run_id) == ("alice", "schema change", "dag/run-1")
    assert manifest.name == "20261121T200000Z-up-1"
    assert manifest.archive_uri == f"{root.url}/orders/20261121T200000Z-up-1"
    assert ArchiveManifest.from_json(manifest.to_json()) == manifest
    assert read_manifest(root.fs, archive_dir(root, manifest).path) == manifest
    assert Store(built.uri, built.fs, built.root).files() == before, "archiving must not touch the source"

    target = _store("memory" if root.url.startswith("memory") else "local", tmp_path, "restored")
    assert restore_archive(root.fs, archive_dir(root, manifest).path, target.fs, target.path) == manifest
    assert target.files() == before
    assert CheckpointReader(target.url).snapshot() == replace(CheckpointReader(built.uri).snapshot(), uri=target.url)


def test_empty_directories_are_restored(tmp_path: Path) -> None:
    src, root = _store("local", tmp_path, "src"), _store("local", tmp_path, "archive")
    built = build(src, batches=range(2), committed=range(2))
    (Path(built.root) / "state" / "0" / "empty").mkdir(parents=True)
    manifest = run(archiver(root), built)
    assert manifest.empty_dirs == ("state/0/empty",)
    restore_archive(root.fs, archive_dir(root, manifest).path, root.fs, str(tmp_path / "back"))
    assert (tmp_path / "back" / "state" / "0" / "empty").is_dir()


# -- verification ------------------------------------------------------------------------------


def test_one_corrupt_byte_fails_verification_naming_the_file(stores: tuple[Store, Store], tmp_path: Path) -> None:
    src, root = stores
    manifest = run(archiver(root), build(src))
    archived = archive_dir(root, manifest).child("checkpoint/offsets/2")
    data = bytearray(archived.fs.cat_file(archived.path))
    data[len(data) // 2] ^= 0x01
    archived.fs.pipe_file(archived.path, bytes(data))

    with pytest.raises(ArchiveCorrupt) as failed:
        verify_archive(root.fs, archive_dir(root, manifest).path)
    assert failed.value.file == "offsets/2" and "offsets/2" in str(failed.value)
    target = _store("local", tmp_path, "restored")
    with pytest.raises(ArchiveCorrupt) as refused:
        restore_archive(root.fs, archive_dir(root, manifest).path, target.fs, target.path)
    assert refused.value.file == "offsets/2"


def test_missing_and_extra_files_fail_verification(tmp_path: Path) -> None:
    src, root = _store("local", tmp_path, "src"), _store("local", tmp_path, "archive")
    manifest = run(archiver(root), build(src))
    data = Path(archive_dir(root, manifest).path) / "checkpoint"
    (data / "commits" / "1").unlink()
    with pytest.raises(ArchiveCorrupt, match="commits/1") as missing:
        verify_archive(root.fs, archive_dir(root, manifest).path)
    assert missing.value.file == "commits/1"
    (data / "commits" / "1").write_bytes(build(_store("local", tmp_path, "again")).read("commits/1"))
    verify_archive(root.fs, archive_dir(root, manifest).path)
    (data / "stray").write_bytes(b"x")
    with pytest.raises(ArchiveCorrupt) as extra:
        verify_archive(root.fs, archive_dir(root, manifest).path)
    assert extra.value.file == "stray"


def test_copy_corrupted_in_flight_is_never_marked_complete_and_source_kept(stores: tuple[Store, Store]) -> None:
    src, root = stores
    built = build(src)

    def corrupt(rel: str) -> None:
        if rel == "metadata":
            path = f"{root.path}/orders/20261121T200000Z-up-1/checkpoint/metadata"
            root.fs.pipe_file(path, b'{"id":"someone-else"}')

    with pytest.raises(ArchiveCorrupt) as failed:
        run(archiver(root, on_file_copied=corrupt), built, remove_source=True)
    assert failed.value.file == "metadata"
    assert built.fs.exists(built.path("metadata")), "the source must survive a failed verification"
    assert not root.fs.exists(f"{root.path}/orders/20261121T200000Z-up-1/{MANIFEST}")
    assert [a.complete for a in archiver(root).list("orders")] == [False]


# -- crash and resume --------------------------------------------------------------------------


class Crash(RuntimeError):
    pass


def test_crash_mid_copy_then_rerun_completes_the_same_archive(stores: tuple[Store, Store]) -> None:
    src, root = stores
    built = build(src)
    total = len(built.files())
    copied: list[str] = []

    def crash_after_three(rel: str) -> None:
        copied.append(rel)
        if len(copied) == 3:
            raise Crash("power cut")

    with pytest.raises(Crash):
        run(archiver(root, workers=1, on_file_copied=crash_after_three), built)
    [partial] = archiver(root).list("orders")
    assert not partial.complete
    with pytest.raises(ArchiveIncomplete):
        verify_archive(root.fs, partial.path)
    # the file being written when the power went is half there
    first = f"{partial.path}/checkpoint/{copied[0]}"
    root.fs.pipe_file(first, root.fs.cat_file(first)[:-1])

    resumed: list[str] = []

    def watch(rel: str) -> None:
        assert not root.fs.exists(f"{partial.path}/{MANIFEST}"), "manifest before the copy finished"
        resumed.append(rel)

    later = archiver(root, workers=1, on_file_copied=watch, clock=lambda: T0 + timedelta(hours=1))
    manifest = run(later, built)
    assert manifest.name == partial.name, "the re-run must complete the same archive"
    assert sorted(resumed) == sorted(set(built.files()) - set(copied[1:3])), "only missing/partial files copied"
    assert len(resumed) == total - 2
    assert [(a.name, a.complete) for a in archiver(root).list("orders")] == [(partial.name, True)]
    verify_archive(root.fs, partial.path)


def _crashed_archive(src: Store, root: Store) -> tuple[Built, str]:
    """An archive of a new checkpoint cut short after its first file: (the checkpoint, the archive's path)."""
    built = build(src)

    def crash(rel: str) -> None:
        raise Crash("power cut")

    with pytest.raises(Crash):
        run(archiver(root, workers=1, on_file_copied=crash), built)
    [partial] = archiver(root).list("orders")
    return built, partial.path


def test_an_unfinished_archive_of_the_previous_release_is_resumed(stores: tuple[Store, Store]) -> None:
    """Its ``_intent.json`` has no format number; it reads, and stands."""
    src, root = stores
    built, path = _crashed_archive(src, root)
    assert json.loads(root.fs.cat_file(f"{path}/{INTENT}"))["format"] == 1
    old = ('{"created_by": "airflow", "dag_run_id": "manual__1", "reason": "upgrade", "source_uri": "SOURCE", '
           '"started_at": "2026-11-21T19:00:00+00:00", "stream_name": "orders", "upgrade_id": "up-1"}'
           ).replace("SOURCE", built.uri)
    root.fs.pipe_file(f"{path}/{INTENT}", old.encode())
    later = archiver(root, workers=1, clock=lambda: T0 + timedelta(hours=1))
    manifest = run(later, built)
    assert manifest.archive_uri.endswith(path.rsplit("/", 1)[-1]), "the same archive, completed"
    verify_archive(root.fs, path)
    assert root.fs.cat_file(f"{path}/{INTENT}") == old.encode(), "the first run's intent stands"
    assert ArchiveIntent.from_json(old).started_at == "2026-11-21T19:00:00+00:00"


@pytest.mark.parametrize(("content", "found"), [
    (b"{half", "archive intent text that is not JSON"),
    (b'{"format": 1, "stream_name": "orders"}', "archive intent without 'upgrade_id'"),
    (b'{"format": 2}', "archive intent format 2 (written by a newer release"),
])
def test_an_unfinished_archive_whose_intent_is_damaged_is_not_resumed(stores: tuple[Store, Store], content: bytes,
                                                                      found: str) -> None:
    src, root = stores
    built, path = _crashed_archive(src, root)
    root.fs.pipe_file(f"{path}/{INTENT}", content)
    copied: list[str] = []
    with pytest.raises(InvalidArchiveIntent) as refused:
        run(archiver(root, on_file_copied=copied.append), built)
    assert found in refused.value.found and refused.value.path == f"{path}/{INTENT}" and copied == []
    assert root.fs.cat_file(f"{path}/{INTENT}") == content, "left for a person to look at"


def test_rerun_of_a_complete_archive_copies_nothing(stores: tuple[Store, Store]) -> None:
    src, root = stores
    built = build(src)
    first = run(archiver(root), built)
    copied: list[str] = []
    second = run(archiver(root, on_file_copied=copied.append, clock=lambda: T0 + timedelta(days=1)), built)
    assert second == first and copied == []
    assert len(archiver(root).list()) == 1


def test_same_upgrade_id_for_another_checkpoint_conflicts(stores: tuple[Store, Store]) -> None:
    src, root = stores
    run(archiver(root), build(src))
    other = write_checkpoint(src.child("other").url)
    with pytest.raises(ArchiveConflict):
        run(archiver(root), other)


def test_checkpoint_changing_during_copy_is_refused(stores: tuple[Store, Store]) -> None:
    src, root = stores
    built = build(src)

    def query_writes(rel: str) -> None:
        if rel == "metadata":
            built.write("offsets/9", b"v1\n{}\n{}")

    with pytest.raises(CheckpointChanged):
        run(archiver(root, on_file_copied=query_writes), built, remove_source=True)
    assert built.fs.exists(built.path("metadata"))
    assert not any(a.complete for a in archiver(root).list())


# -- refusals ----------------------------------------------------------------------------------


def heartbeat(updated_at: datetime, state: str = "running") -> bytes:
    return Heartbeat(query_id=QUERY_ID, run_id="r1", state=state, started_at=T0.isoformat(),
                     updated_at=updated_at.isoformat(), interval_s=5.0).to_json().encode()


def test_running_query_is_refused_and_nothing_changes(stores: tuple[Store, Store]) -> None:
    src, root = stores
    built = build(src)
    built.write(HEARTBEAT, heartbeat(T0 - timedelta(seconds=4)))
    before = Store(built.uri, built.fs, built.root).files()
    with pytest.raises(QueryStillRunning, match="live heartbeat"):
        run(archiver(root), built, remove_source=True)
    assert Store(built.uri, built.fs, built.root).files() == before
    assert root.files() == {} and archiver(root).list() == []
    # a heartbeat older than three intervals means the driver is gone
    built.write(HEARTBEAT, heartbeat(T0 - timedelta(seconds=16)))
    assert run(archiver(root), built).file_count == len(before)


def test_offsets_planned_after_the_stop_ack_are_refused(tmp_path: Path) -> None:
    src = _store("local", tmp_path, "src")
    built = build(src)  # offsets 0..4
    ack = StopAck(request_id="s1", query_id=QUERY_ID, run_id="r1", outcome="clean", last_committed_batch=3,
                  last_planned_batch=3, stopped_at=datetime.now(timezone.utc).isoformat())
    built.write(STOP_ACK, ack.to_json().encode())
    with pytest.raises(QueryStillRunning, match="offsets/4"):
        check_query_stopped(built.fs, built.root)
    built.write(STOP_ACK, replace(ack, last_planned_batch=4,
                                  stopped_at=(datetime.now(timezone.utc) - timedelta(hours=1)).isoformat())
                .to_json().encode())
    with pytest.raises(QueryStillRunning, match="modified"):
        check_query_stopped(built.fs, built.root)
    built.write(STOP_ACK, replace(ack, last_planned_batch=4).to_json().encode())
    check_query_stopped(built.fs, built.root)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../x", "/abs", "a/../b", "x..y", "a\\b", "s3:x", " "])
def test_unsafe_stream_names_are_refused(stores: tuple[Store, Store], name: str) -> None:
    src, root = stores
    built = build(src)
    with pytest.raises(UnsafeStreamName):
        archiver(root).archive(built.fs, built.root, stream_name=name, upgrade_id="u1")
    with pytest.raises(UnsafeStreamName):
        run(archiver(root), built, upgrade_id=name)
    assert root.files() == {}


def test_archive_root_inside_the_checkpoint_is_refused(tmp_path: Path) -> None:
    src = _store("local", tmp_path, "src")
    built = build(src)
    for root in (built.root + "/_archive", built.root, str(Path(built.root).parent)):
        with pytest.raises(ArchiveInsideCheckpoint):
            CheckpointArchive(built.fs, root).archive(built.fs, built.root, stream_name="ck", upgrade_id="u")
    assert sorted(built.files()) == sorted(Store(built.uri, built.fs, built.root).files())


def test_handover_of_another_batch_or_query_is_refused(stores: tuple[Store, Store]) -> None:
    src, root = stores
    built = build(src)
    current = CheckpointReader(built.uri).handover()
    old = write_checkpoint(src.child("older").url, batches=range(3), committed=range(2))
    with pytest.raises(HandoverMismatch, match="batch 1"):
        run(archiver(root), built, handover=CheckpointReader(old.uri).handover())
    with pytest.raises(HandoverMismatch, match="query"):
        run(archiver(root), built, handover=replace(current, query_id="0000"))
    assert run(archiver(root), built, handover=current).handover == current


def test_restore_refuses_a_non_empty_target(stores: tuple[Store, Store]) -> None:
    src, root = stores
    manifest = run(archiver(root), build(src))
    target = src.child("live")
    target.fs.makedirs(target.path, exist_ok=True)
    target.fs.pipe_file(target.path + "/metadata", b"keep me")
    with pytest.raises(TargetNotEmpty):
        restore_archive(root.fs, archive_dir(root, manifest).path, target.fs, target.path)
    assert target.files() == {"metadata": b"keep me"}


def test_restore_refuses_an_incomplete_archive(stores: tuple[Store, Store]) -> None:
    src, root = stores

    def crash(rel: str) -> None:
        raise Crash(rel)

    with pytest.raises(Crash):
        run(archiver(root, workers=1, on_file_copied=crash), build(src))
    [partial] = archiver(root).list()
    target = src.child("target")
    with pytest.raises(ArchiveIncomplete):
        restore_archive(root.fs, partial.path, target.fs, target.path)
    assert not target.fs.exists(target.path)


def test_remove_source_only_after_verification(stores: tuple[Store, Store]) -> None:
    src, root = stores
    built = build(src)
    before = Store(built.uri, built.fs, built.root).files()
    manifest = run(archiver(root), built, remove_source=True)
    assert not built.fs.exists(built.root)
    target = src.child("ck")  # roll back into the original location
    restore_archive(root.fs, archive_dir(root, manifest).path, target.fs, target.path)
    assert target.files() == before


def test_non_checkpoint_is_refused(stores: tuple[Store, Store]) -> None:
    src, root = stores
    src.fs.makedirs(src.path, exist_ok=True)
    src.fs.pipe_file(src.path + "/notes.txt", b"hello")
    with pytest.raises(CheckpointError):
        archiver(root).archive(src.fs, src.path, stream_name="s", upgrade_id="u")
    assert root.files() == {}


# -- retention ---------------------------------------------------------------------------------


def info(hours_ago: float, complete: bool = True, name: str | None = None) -> ArchiveInfo:
    started = T0 - timedelta(hours=hours_ago)
    return ArchiveInfo("orders", name or f"{started:%Y%m%dT%H%M%SZ}-u{hours_ago:g}", "/x", started,
                       f"u{hours_ago:g}", complete)


def test_plan_retention_keeps_the_newest_verified_archive() -> None:
    archives = [info(1, complete=False), info(2), info(30), info(50), info(100, complete=False)]
    plan = plan_retention(archives, keep_last=0, now=T0)
    assert [a.upgrade_id for a in plan.keep] == ["u2"]
    assert [a.upgrade_id for a in plan.remove] == ["u30", "u50"]
    assert [a.upgrade_id for a in plan.stale_incomplete] == ["u100"]
    assert [a.upgrade_id for a in plan.recent_incomplete] == ["u1"]

    plan = plan_retention(archives, keep_last=2, keep_newer_than=timedelta(hours=60), now=T0)
    assert [a.upgrade_id for a in plan.keep] == ["u2", "u30", "u50"] and plan.remove == ()
    plan = plan_retention(archives, keep_newer_than=timedelta(minutes=1), now=T0)
    assert [a.upgrade_id for a in plan.keep] == ["u2"]
    assert [a.upgrade_id for a in plan.stale_incomplete] == ["u1", "u100"]
    assert plan_retention(archives, now=T0).remove == ()
    with pytest.raises(ValueError):
        plan_retention(archives, keep_last=-1, now=T0)


def test_prune_removes_old_archives_and_reports_stale_incomplete(stores: tuple[Store, Store]) -> None:
    src, root = stores
    built = build(src)
    for hours, upgrade in ((72, "a"), (48, "b"), (24, "c")):
        run(archiver(root, clock=lambda h=hours: T0 - timedelta(hours=h)), built, upgrade_id=upgrade)

    def crash(rel: str) -> None:
        raise Crash(rel)

    with pytest.raises(Crash):  # the newest one never finished
        run(archiver(root, workers=1, on_file_copied=crash, clock=lambda: T0 - timedelta(hours=2)), built,
            upgrade_id="d")
    plan = archiver(root).prune("orders", keep_last=1, incomplete_older_than=timedelta(hours=1))
    assert [a.upgrade_id for a in plan.keep] == ["c"]
    assert [a.upgrade_id for a in plan.remove] == ["b", "a"]
    assert [a.upgrade_id for a in plan.stale_incomplete] == ["d"]
    assert [(a.upgrade_id, a.complete) for a in archiver(root).list("orders")] == [("c", True), ("d", False)]
    archiver(root).prune("orders", keep_last=0, incomplete_older_than=timedelta(hours=1), remove_incomplete=True)
    assert [(a.upgrade_id, a.complete) for a in archiver(root).list("orders")] == [("c", True)]


# -- names and manifest ------------------------------------------------------------------------


def test_sanitize_upgrade_id_from_airflow_run_ids() -> None:
    assert sanitize_upgrade_id("manual__2026-11-21T20:05:12.123+00:00") == "manual__2026-11-21T20-05-12.123-00-00"
    assert sanitize_upgrade_id("../../etc") == "etc"
    assert sanitize_upgrade_id("///") == "run"


def test_manifest_rejects_tampering(tmp_path: Path) -> None:
    src, root = _store("local", tmp_path, "src"), _store("local", tmp_path, "archive")
    manifest = run(archiver(root), build(src))
    raw = json.loads(manifest.to_json())
    raw["files"][0]["path"] = "../../outside"
    with pytest.raises(ArchiveCorrupt, match="manifest.json"):
        ArchiveManifest.from_json(json.dumps(raw))
    raw = json.loads(manifest.to_json())
    raw["total_bytes"] += 1
    with pytest.raises(ArchiveCorrupt):
        ArchiveManifest.from_json(json.dumps(raw))
    with pytest.raises(ArchiveCorrupt):
        ArchiveManifest.from_json("{not json")


def test_progress_is_logged_in_files_and_bytes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src, root = _store("local", tmp_path, "src"), _store("local", tmp_path, "archive")
    built = build(src)
    with caplog.at_level(logging.INFO, logger="airflow_ckpt_provider.storage.archive"):
        run(archiver(root, progress_every_files=5), built)
    lines = [r.getMessage() for r in caplog.records]
    total = len(built.files())
    assert any(line.startswith(f"copied 5 of {total} files") and "/s, about" in line and " left)" in line
               for line in lines), lines
    assert any(line.startswith("archive complete and verified") for line in lines)


# -- command line ------------------------------------------------------------------------------


def ckpt(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), stdout=out, stderr=err), out.getvalue(), err.getvalue()


def test_cli_archive_list_verify_restore(tmp_path: Path) -> None:
    src = _store("local", tmp_path, "src")
    built = build(src)
    root = f"memory://cli-{uuid.uuid4().hex}/archive"
    code, out, err = ckpt("archive", built.uri, "--to", root, "--upgrade-id", "u7", "--reason", "test")
    assert code == 0, err
    location = out.strip()
    assert location.startswith(f"{root}/ck/") and location.endswith("-u7")
    code, out, _ = ckpt("archives", root)
    assert code == 0 and "ck/" in out and "complete" in out and "INCOMPLETE" not in out
    code, out, _ = ckpt("verify-archive", location, "--json")
    assert code == 0 and json.loads(out)["reason"] == "test"
    code, out, err = ckpt("restore", location, "--to", str(tmp_path / "back"))
    assert code == 0, err
    assert Store("", built.fs, str(tmp_path / "back")).files() == Store("", built.fs, built.root).files()
    code, out, err = ckpt("restore", location, "--to", str(tmp_path / "back"))
    assert code == 2 and out == "" and err.startswith("ckpt: error: target not empty")
    code, _, err = ckpt("archive", built.uri, "--to", root, "--name", "../x")
    assert code == 2 and "unsafe name" in err and "Traceback" not in err


def test_file_rewritten_with_the_same_size_during_copy_is_refused(tmp_path: Path) -> None:
    src, root = _store("local", tmp_path, "src"), _store("local", tmp_path, "archive")
    built = build(src)

    def rewrite(rel: str) -> None:
        if rel == "metadata":
            path = Path(built.path("commits/3"))
            data = path.read_bytes()
            path.write_bytes(data)  # same bytes, new modification time
            stat = path.stat()
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))

    with pytest.raises(CheckpointChanged, match="commits/3"):
        run(archiver(root, workers=1, on_file_copied=rewrite), built)


# -- local archive files: modes, read-back, durability -----------------------------------------


def test_local_archive_is_private_to_owner_and_group(tmp_path: Path) -> None:
    src, root = _store("local", tmp_path, "src"), _store("local", tmp_path, "archive")
    built = build(src)

    def crash(rel: str) -> None:
        raise Crash(rel)

    previous = os.umask(0o002)  # a permissive umask must not widen the archive's modes
    try:
        with pytest.raises(Crash):
            run(archiver(root, workers=1, on_file_copied=crash), built)
        [partial] = archiver(root).list("orders")
        first = next(p for p in Path(partial.path, "checkpoint").rglob("*") if p.is_file())
        first.chmod(0o666)  # left world-writable by someone between the attempts
        manifest = run(archiver(root), built)
    finally:
        os.umask(previous)
    top = Path(root.path)
    paths = [top, *top.rglob("*")]
    assert len([p for p in paths if p.is_file()]) == manifest.file_count + 2  # + _intent.json, manifest.json
    modes = {str(p.relative_to(top)): stat.S_IMODE(p.stat().st_mode) for p in paths}
    assert {m for p, m in modes.items() if (top / p).is_dir()} == {0o750}, modes
    assert {m for p, m in modes.items() if (top / p).is_file()} == {0o640}, modes
    assert not list(Path(archive_dir(root, manifest).path).glob(".*")), "no temporary manifest left behind"


def test_local_copy_that_reads_back_differently_is_never_marked_complete(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, root = _store("local", tmp_path, "src"), _store("local", tmp_path, "archive")
    built = build(src)
    real = os.pread

    def flipped(fd: int, n: int, offset: int) -> bytes:  # the disk returns other bytes than written
        block = bytearray(real(fd, n, offset))
        if block:
            block[0] ^= 1
        return bytes(block)

    monkeypatch.setattr(transfer.os, "pread", flipped)
    with pytest.raises(ArchiveCorrupt, match="reads back differently"):
        run(archiver(root), built, remove_source=True)
    monkeypatch.undo()
    assert built.fs.exists(built.path("metadata")), "the source must survive a failed verification"
    assert [a.complete for a in archiver(root).list("orders")] == [False]
    manifest = run(archiver(root), built)  # a re-run (healthy disk) completes the same archive
    verify_archive(root.fs, archive_dir(root, manifest).path)


def test_local_archive_is_flushed_before_the_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, root = _store("local", tmp_path, "src"), _store("local", tmp_path, "archive")
    built = build(src)
    events: list[str] = []
    real_flush, real_write = transfer.flush_filesystem, files.write_private_file
    monkeypatch.setattr(archive_module, "flush_filesystem", lambda path: events.append("flush") or real_flush(path))

    def write(path: str, data: bytes, *, atomic: bool = False) -> None:
        events.append(f"{Path(path).name} atomic={atomic}")
        real_write(path, data, atomic=atomic)

    monkeypatch.setattr(archive_module, "write_private_file", write)
    run(archiver(root), built)
    # the intent went whole through write_atomic before the copy; the manifest only after the flush
    assert events == ["flush", "manifest.json atomic=True"]
