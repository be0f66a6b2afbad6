"""Restores are never half-visible: a local restore is copied into a temporary sibling, verified
and renamed into place; on an object store the target holds a marker the reader refuses until
the restore verified; a lock keeps two restores apart; a failed restore removes what it wrote."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import fsspec
import pytest
from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveCorrupt,
    IncompleteRestore,
    RestoreInProgress,
    StorageError,
    TargetNotEmpty,
)
from airflow_ckpt_provider.checkpoint.manifest import DATA_DIR, RESTORE_MARKER
from airflow_ckpt_provider.storage import restore as restore_module
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive
from tests.unit.conftest import write_checkpoint

LOCAL = fsspec.filesystem("file")


def place(kind: str, tmp_path: Path, name: str) -> tuple[AbstractFileSystem, str]:
    if kind == "local":
        return LOCAL, str(tmp_path / name)
    return fsspec.filesystem("memory"), f"/r-{uuid.uuid4().hex}/{name}"


def everything(fs: AbstractFileSystem, path: str) -> dict[str, bytes]:
    """Every file below the PARENT of ``path`` (so temporary siblings and locks show up too)."""
    parent = path.rsplit("/", 1)[0]
    return {p: fs.cat_file(p) for p in fs.find(parent)} if fs.exists(parent) else {}


@pytest.fixture
def archive(tmp_path: Path) -> str:
    write_checkpoint(str(tmp_path / "ck"), batches=range(6), state_operators=(0,))
    manifest = CheckpointArchive(LOCAL, str(tmp_path / "archive")).archive(
        LOCAL, str(tmp_path / "ck"), stream_name="orders", upgrade_id="u1")
    return manifest.archive_uri


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_a_restore_is_invisible_until_verified_then_complete(archive: str, tmp_path: Path, kind: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fs, target = place(kind, tmp_path, "restored")
    seen: list[str] = []
    copy = restore_module.copy_file

    def watching(*args: object) -> tuple[int, str]:
        result = copy(*args)  # type: ignore[arg-type]
        if not fs.exists(target):
            seen.append("absent")
        else:
            try:
                CheckpointReader(target, fs=fs).snapshot()
                seen.append("readable")
            except IncompleteRestore:
                seen.append("refused")
        return result

    monkeypatch.setattr(restore_module, "copy_file", watching)
    restore_archive(LOCAL, archive, fs, target, workers=1)
    assert set(seen) == {"absent" if kind == "local" else "refused"} and len(seen) > 5
    assert CheckpointReader(target, fs=fs).snapshot().last_committed_batch == 5
    assert not fs.exists(f"{target}/{RESTORE_MARKER}")
    parent = target.rsplit("/", 1)[0]
    assert [p for p in fs.ls(parent, detail=False) if "restored" in p] == [target]  # no lock, no temporary folder


def corrupt_one(archive: str) -> None:
    victim = sorted(Path(archive, DATA_DIR, "offsets").iterdir())[-1]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1  # same size, other bytes: only the checksum tells
    victim.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["local", "memory"])
@pytest.mark.parametrize("damage", ["checksum", "truncated", "missing", "write-fails"])
def test_a_failed_restore_leaves_nothing_behind(archive: str, tmp_path: Path, kind: str, damage: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    fs, target = place(kind, tmp_path, "restored")
    expected: type[Exception] = ArchiveCorrupt
    if damage == "checksum":
        corrupt_one(archive)
    elif damage == "truncated":
        victim = Path(archive, DATA_DIR, "metadata")
        victim.write_bytes(victim.read_bytes()[:5])
    elif damage == "missing":
        Path(archive, DATA_DIR, "commits", "3").unlink()
    else:
        copy, calls = restore_module.copy_file, []

        def full_disk(*args: object) -> tuple[int, str]:
            calls.append(1)
            if len(calls) == 7:
                raise OSError(28, "No space left on device")
            return copy(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(restore_module, "copy_file", full_disk)
        expected = StorageError
    fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
    before = everything(fs, target)
    with pytest.raises(expected) as info:
        restore_archive(LOCAL, archive, fs, target, workers=2)
    assert everything(fs, target) == before  # no target, no temporary folder, no lock
    assert not fs.exists(target)
    if damage == "write-fails":
        assert "no space left on the device" in str(info.value) and "(ENOSPC)" in str(info.value)
        assert "Nothing was left at the target. Free space" in str(info.value)


def test_a_failed_restore_into_an_existing_empty_folder_leaves_it_empty(archive: str, tmp_path: Path) -> None:
    target = tmp_path / "restored"
    target.mkdir()
    corrupt_one(archive)
    with pytest.raises(ArchiveCorrupt):
        restore_archive(LOCAL, archive, LOCAL, str(target))
    assert sorted(os.listdir(tmp_path)) == ["archive", "ck", "restored"] and not os.listdir(target)


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_two_restores_into_one_target_never_mix(archive: str, tmp_path: Path, kind: str) -> None:
    write_checkpoint(str(tmp_path / "ck2"), batches=range(9))
    other = CheckpointArchive(LOCAL, str(tmp_path / "archive2")).archive(
        LOCAL, str(tmp_path / "ck2"), stream_name="orders", upgrade_id="u2").archive_uri
    for round_ in range(25):
        fs, target = place(kind, tmp_path, f"restored-{round_}")
        outcomes: list[object] = [None, None]
        barrier = threading.Barrier(2)

        def run(index: int, source: str, target: str = target, fs: AbstractFileSystem = fs,
                outcomes: list[object] = outcomes, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                outcomes[index] = restore_archive(LOCAL, source, fs, target, workers=2).archive_uri
            except (RestoreInProgress, TargetNotEmpty) as exc:
                outcomes[index] = exc

        threads = [threading.Thread(target=run, args=(i, src)) for i, src in enumerate((archive, other))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        winners = [o for o in outcomes if isinstance(o, str)]
        assert len(winners) == 1, outcomes
        manifest = verify_archive(LOCAL, winners[0])
        got = {p[len(target) + 1:]: fs.cat_file(p) for p in fs.find(target)}
        assert got == {f.path: Path(winners[0], DATA_DIR, f.path).read_bytes() for f in manifest.files}
        parent = target.rsplit("/", 1)[0]
        assert [p for p in fs.ls(parent, detail=False) if f"restored-{round_}" in p] == [target]  # no lock or temp


def test_a_lock_left_by_a_dead_process_on_this_host_is_taken_over(archive: str, tmp_path: Path) -> None:
    import json
    import socket

    target = tmp_path / "restored"
    leftover = tmp_path / f".restored.restoring-{uuid.uuid4().hex[:12]}"
    leftover.mkdir()
    (leftover / "half").write_bytes(b"x")
    pid = _a_dead_pid()
    (tmp_path / ".restored.restore-lock").write_text(json.dumps(
        {"pid": pid, "host": socket.gethostname(), "temp": str(leftover)}))
    restore_archive(LOCAL, archive, LOCAL, str(target))
    assert not leftover.exists() and not (tmp_path / ".restored.restore-lock").exists()
    (tmp_path / ".again.restore-lock").write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    with pytest.raises(RestoreInProgress, match=f"process {os.getpid()}"):
        restore_archive(LOCAL, archive, LOCAL, str(tmp_path / "again"))
    assert not (tmp_path / "again").exists()


def test_a_lock_of_the_previous_release_is_read_and_this_release_writes_its_format(archive: str,
                                                                                  tmp_path: Path) -> None:
    import json
    import socket

    from airflow_ckpt_provider.storage.restore import RestoreLock

    lock = tmp_path / ".restored.restore-lock"
    leftover = tmp_path / f".restored.restoring-{uuid.uuid4().hex[:12]}"
    leftover.mkdir()
    old = ('{"archive": "s3a://lake/archive/orders/20261121T194700Z-up-1", "host": "HOST", "pid": PID, '
           '"started_at": "2026-11-21T19:47:00+00:00", "temp": "TEMP"}'
           ).replace("HOST", socket.gethostname()).replace("PID", str(os.getpid())).replace("TEMP", str(leftover))
    lock.write_text(old)
    with pytest.raises(RestoreInProgress) as held:  # this process holds it: alive
        restore_archive(LOCAL, archive, LOCAL, str(tmp_path / "restored"))
    assert f"process {os.getpid()} on {socket.gethostname()} since 2026-11-21T19:47:00+00:00" in held.value.found
    lock.write_text(old.replace(f'"pid": {os.getpid()}', f'"pid": {_a_dead_pid()}'))  # its process gone: taken over
    restore_archive(LOCAL, archive, LOCAL, str(tmp_path / "restored"))
    assert not lock.exists() and not leftover.exists()
    written = RestoreLock(pid=1, host="h", started_at="t", archive="a", temp="x").to_json()
    assert json.loads(written)["format"] == 1 and RestoreLock.from_json(written).temp == "x"


@pytest.mark.parametrize(("content", "found"), [
    ("", "restore lock text that is not JSON"),  # being written
    ('{"pid": "42", "host": "h"}', "restore lock 'pid' of JSON string"),
    ('{"format": 2, "pid": 42, "host": "h"}', "restore lock format 2 (written by a newer release"),
])
def test_a_lock_that_is_not_one_is_held_and_named(archive: str, tmp_path: Path, content: str, found: str) -> None:
    lock = tmp_path / ".again.restore-lock"
    lock.write_text(content)
    with pytest.raises(RestoreInProgress) as held:
        restore_archive(LOCAL, archive, LOCAL, str(tmp_path / "again"))
    assert f"held by an unreadable lock (found {found}" in held.value.found
    assert lock.read_text() == content and not (tmp_path / "again").exists()


def _a_dead_pid() -> int:
    import subprocess

    process = subprocess.Popen(["true"])  # noqa: S607
    process.wait()
    return process.pid


def test_the_reader_refuses_a_target_with_the_marker(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "ck"))
    (tmp_path / "ck" / RESTORE_MARKER).write_text("{}")
    with pytest.raises(IncompleteRestore, match="did not finish"):
        CheckpointReader(str(tmp_path / "ck")).handover()



@pytest.mark.parametrize(("temp", "own"), [
    ("/data/.orders.restoring-1a2b3c", True),
    ("bucket/data/.orders.restoring-1a2b3c", False),  # another tree: not beside this lock
    ("/data/.orders.restoring-1a2b3c/../../etc", False),
    ("/data/.orders.restoring-../../home", False),
    ("/data/.orders.restoring-", False),
    ("/data/.orders.restoring-x/nested", False),
    ("/data/.other.restoring-1a2b3c", False),
])
def test_a_lock_file_names_only_its_own_temporary_folder_for_a_takeover_to_delete(temp: str, own: bool) -> None:
    from airflow_ckpt_provider.storage.restore import _own_temp

    assert _own_temp(temp, "/data/.orders.restore-lock") is own
