"""The local verified copy under the archive: read-back comparison, stamps, durability, modes."""

from __future__ import annotations

import hashlib
import os
import stat
import time
import uuid
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import ArchiveCorrupt
from airflow_ckpt_provider.checkpoint.manifest import ArchivedFile
from airflow_ckpt_provider.storage import transfer
from airflow_ckpt_provider.storage.transfer import (
    Readahead,
    ReadBackMismatch,
    check_unchanged,
    copy_verified,
    flush_filesystem,
    run_parallel,
    same_verified,
    spread_directories,
)

LOCAL = fsspec.filesystem("file")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 3 * 4096 + 17])
@pytest.mark.parametrize("hint", ["exact", "unknown", "stale"])
def test_copy_verified_copies_hashes_and_stamps(tmp_path: Path, size: int, hint: str) -> None:
    data = os.urandom(size)
    (tmp_path / "src").write_bytes(data)
    size_hint = {"exact": size, "unknown": -1, "stale": max(size - 100, 0)}[hint]
    done = copy_verified(LOCAL, str(tmp_path / "src"), str(tmp_path / "dst"), size_hint=size_hint, chunk=4096)
    assert (done.size, done.sha256) == (size, sha(data))
    assert (tmp_path / "dst").read_bytes() == data
    info = (tmp_path / "dst").stat()
    assert done.stamp == (info.st_mtime_ns, info.st_ctime_ns, info.st_ino)
    assert mode(tmp_path / "dst") == 0o640 & ~_umask()


def test_copy_verified_from_another_filesystem(tmp_path: Path) -> None:
    memory = fsspec.filesystem("memory")
    path = f"/t-{uuid.uuid4().hex}/src"
    data = os.urandom(10_000)
    memory.pipe_file(path, data)
    try:
        done = copy_verified(memory, path, str(tmp_path / "dst"), chunk=4096)
    finally:
        memory.rm(path)
    assert (done.size, done.sha256) == (len(data), sha(data))
    assert (tmp_path / "dst").read_bytes() == data


def test_a_write_that_does_not_read_back_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "src").write_bytes(os.urandom(10_000))
    real = os.pwrite

    def lossy(fd: int, data: bytes, offset: int) -> int:  # acknowledges everything, loses one byte
        written = real(fd, bytes(data)[:-1], offset)
        return written + 1

    monkeypatch.setattr(transfer.os, "pwrite", lossy)
    with pytest.raises(ReadBackMismatch, match="read back differently"):
        copy_verified(LOCAL, str(tmp_path / "src"), str(tmp_path / "dst"), chunk=4096)


def test_a_read_back_that_differs_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "src").write_bytes(b"x" * 5000)
    real = os.pread

    def flipped(fd: int, n: int, offset: int) -> bytes:
        block = bytearray(real(fd, n, offset))
        if offset == 4096:
            block[-1] ^= 1
        return bytes(block)

    monkeypatch.setattr(transfer.os, "pread", flipped)
    with pytest.raises(ReadBackMismatch, match="bytes 4096-5000"):
        copy_verified(LOCAL, str(tmp_path / "src"), str(tmp_path / "dst"), chunk=4096)


def test_same_verified_keeps_only_identical_files_and_narrows_their_mode(tmp_path: Path) -> None:
    data = os.urandom(9000)
    (tmp_path / "src").write_bytes(data)
    dst = tmp_path / "dst"
    dst.write_bytes(data)
    dst.chmod(0o666)
    kept = same_verified(LOCAL, str(tmp_path / "src"), str(dst), chunk=4096)
    assert kept is not None and (kept.size, kept.sha256) == (9000, sha(data))
    assert mode(dst) == 0o640
    assert kept.stamp == (dst.stat().st_mtime_ns, dst.stat().st_ctime_ns, dst.stat().st_ino)

    dst.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert same_verified(LOCAL, str(tmp_path / "src"), str(dst), chunk=4096) is None
    dst.write_bytes(data + b"!")
    assert same_verified(LOCAL, str(tmp_path / "src"), str(dst), chunk=4096) is None
    dst.unlink()
    assert same_verified(LOCAL, str(tmp_path / "src"), str(dst), chunk=4096) is None


def test_check_unchanged_catches_a_rewrite_with_the_same_bytes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "src").write_bytes(b"state")
    done = copy_verified(LOCAL, str(tmp_path / "src"), str(root / "a"))
    files = [ArchivedFile("a", done.size, done.sha256)]
    check_unchanged(LOCAL, str(root), files, {"a": done.stamp}, where="archive")

    time.sleep(0.02)  # past the clock tick of the copy, for kernels with coarse timestamps
    before = (root / "a").stat()
    (root / "a").write_bytes(b"state")  # same size, same bytes ...
    os.utime(root / "a", ns=(before.st_atime_ns, before.st_mtime_ns))  # ... and the old mtime
    with pytest.raises(ArchiveCorrupt, match="changed after it was verified") as changed:
        check_unchanged(LOCAL, str(root), files, {"a": done.stamp}, where="archive")
    assert changed.value.file == "a"

    (root / "b").write_bytes(b"")
    with pytest.raises(ArchiveCorrupt) as extra:
        check_unchanged(LOCAL, str(root), files, {"a": transfer._stamp((root / "a").stat())}, where="archive")
    assert extra.value.file == "b"


def test_flush_filesystem_uses_syncfs_on_linux(tmp_path: Path) -> None:
    expected = "syncfs" if os.uname().sysname == "Linux" else "sync"
    assert flush_filesystem(str(tmp_path)) == expected


def test_spread_directories_deals_one_directory_at_a_time() -> None:
    paths = ["offsets/1", "offsets/0", "state/0/1.delta", "metadata", "offsets/2", "state/0/2.delta"]
    assert spread_directories(paths) == [
        "metadata", "offsets/0", "state/0/1.delta", "offsets/1", "state/0/2.delta", "offsets/2"]
    assert spread_directories([]) == []


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def test_default_workers_one_per_cpu_locally_and_sixteen_for_object_stores(monkeypatch: pytest.MonkeyPatch) -> None:
    local, memory = fsspec.filesystem("file"), fsspec.filesystem("memory")
    for cpus, expected in ((1, 2), (2, 2), (6, 6), (64, 8), (None, 2)):
        monkeypatch.setattr(transfer.os, "cpu_count", lambda cpus=cpus: cpus)
        assert transfer.default_workers(local) == expected
        assert transfer.default_workers(local, local) == expected
    assert transfer.default_workers(local, memory) == 16
    assert transfer.default_workers(memory) == 16


MIB = 1024 * 1024


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    hinted: list[str] = []
    monkeypatch.setattr(Readahead, "_hint", staticmethod(lambda path, length: hinted.append(path)))
    return hinted


def test_readahead_hints_each_file_once_up_to_the_window_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    hinted = _recording(monkeypatch)
    readahead = Readahead([f"f{i}" for i in range(10)], [10 * MIB] * 10, window_bytes=32 * MIB)
    readahead.reach(0)
    assert hinted == ["f0", "f1", "f2", "f3"]  # the files starting within 32 MiB of f0's start
    readahead.reach(1)
    assert hinted[4:] == ["f4"]
    readahead.reach(0)  # a worker that is behind: nothing new
    readahead.reach(1)
    assert len(hinted) == 5
    readahead.reach(9)  # far ahead (a skip): from the file reached, never past the last
    assert hinted[5:] == ["f9"]


def test_readahead_caps_the_number_of_small_files_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    hinted = _recording(monkeypatch)
    readahead = Readahead([f"f{i}" for i in range(1000)], [100] * 1000, window_files=64)
    readahead.reach(0)
    assert hinted == [f"f{i}" for i in range(64)]
    readahead.reach(10)
    assert hinted[64:] == [f"f{i}" for i in range(64, 74)]


def test_run_parallel_hints_before_each_item_and_every_file_once(monkeypatch: pytest.MonkeyPatch) -> None:
    hinted = _recording(monkeypatch)
    events: list[str] = []
    items = [f"f{i}" for i in range(6)]
    readahead = Readahead(items, [MIB] * 6, window_bytes=2 * MIB)
    monkeypatch.setattr(readahead, "reach", lambda index: events.append(f"reach {index}"))
    run_parallel(items, lambda item: events.append(f"work {item}"), 1, readahead=readahead)
    assert events == [e for i in range(6) for e in (f"reach {i}", f"work f{i}")]

    many = [f"g{i}" for i in range(500)]
    assert run_parallel(many, str.upper, 4, readahead=Readahead(many, [MIB] * 500, window_bytes=8 * MIB)) == \
        [m.upper() for m in many]
    assert sorted(hinted) == sorted(many)  # each file hinted exactly once, whatever the thread order


def test_readahead_asks_the_kernel_for_local_files_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Readahead.for_files(fsspec.filesystem("memory"), "/", ["a"], [1]) is None
    (tmp_path / "a").write_bytes(b"x" * 10_000)
    advised: list[tuple[int, int, int]] = []
    real = os.posix_fadvise
    monkeypatch.setattr(transfer.os, "posix_fadvise",
                        lambda fd, offset, length, advice: (advised.append((offset, length, advice)),
                                                            real(fd, offset, length, advice))[1])
    (tmp_path / "big").write_bytes(b"")
    readahead = Readahead.for_files(LOCAL, str(tmp_path), ["missing", "a", "big"], [1, 10_000, 5 * MIB],
                                    window_bytes=4 * MIB)
    assert readahead is not None
    readahead.reach(0)  # a file that is gone is skipped: the copy reports it
    assert advised == [(0, 10_000, os.POSIX_FADV_WILLNEED), (0, 4 * MIB, os.POSIX_FADV_WILLNEED)]  # big: the window


def test_eta_in_the_users_words() -> None:
    from airflow_ckpt_provider.storage.transfer import eta_text

    assert eta_text(0, 100, 5.0) == "time left unknown"
    assert eta_text(25, 100, 5.0) == "about 15 s left"
    assert eta_text(10, 100, 60.0) == "about 9 min left"
    assert eta_text(100, 100, 5.0) == "almost done"


def test_a_file_removed_while_the_tree_is_scanned_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A running query purges its oldest batches while the preflight sizes the checkpoint."""
    import os

    from airflow_ckpt_provider.storage.transfer import list_tree

    (tmp_path / "commits").mkdir()
    for batch in (66, 67, 168):
        (tmp_path / "commits" / str(batch)).write_text("v1\n{}")
    real_scandir = os.scandir

    def purging_scandir(path):  # noqa: ANN001, ANN202
        entries = list(real_scandir(path))
        if str(path).endswith("commits"):
            (tmp_path / "commits" / "67").unlink()  # gone between the listing and its stat
        return _Entries(entries)

    class _Entries(list):  # type: ignore[type-arg]
        def __enter__(self):  # noqa: ANN204
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(os, "scandir", purging_scandir)
    files, _ = list_tree(fsspec.filesystem("file"), str(tmp_path))
    assert sorted(files) == ["commits/168", "commits/66"]
