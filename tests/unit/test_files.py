"""The file-writing primitives of checkpoint/files.py: private modes, whole writes."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from airflow_ckpt_provider.storage import files
from airflow_ckpt_provider.storage.files import (
    make_private_dirs,
    open_private,
    private_dir,
    pwrite_all,
    replace_file,
    write_atomic,
    write_private_file,
)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


@pytest.fixture(params=[0o000, 0o022, 0o077], ids=["umask0", "umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_write_private_file_atomic_leaves_one_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "manifest.json"
    target.write_bytes(b"old")
    write_private_file(str(target), b'{"new": true}', atomic=True)
    assert target.read_bytes() == b'{"new": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]
    assert mode(target) == 0o640 & ~_umask()


def test_write_private_file_truncates_in_place(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "_intent.json"
    write_private_file(str(target), b"a much longer first version")
    assert target.read_bytes() == b"a much longer first version" and mode(target) == 0o640 & ~umask
    inode = target.stat().st_ino
    write_private_file(str(target), b"short")
    assert target.read_bytes() == b"short" and target.stat().st_ino == inode


def test_make_private_dirs_gives_every_new_level_0o750(tmp_path: Path) -> None:
    make_private_dirs(str(tmp_path / "a" / "b" / "c"))
    for path in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert mode(path) == 0o750 & ~_umask()
    make_private_dirs(str(tmp_path / "a" / "b" / "c"))  # exists: fine


def test_private_dir_is_owner_only_at_every_new_level_and_leaves_existing_ones(tmp_path: Path, umask: int) -> None:
    made = private_dir(tmp_path / "logs" / "driver")
    assert made == tmp_path / "logs" / "driver" and made.is_dir()
    assert mode(tmp_path / "logs") == mode(made) == 0o700 & ~umask
    os.chmod(made, 0o755)
    assert private_dir(str(made), 0o700) == made and mode(made) == 0o755  # existing: left as it is
    assert mode(private_dir(tmp_path / "jar", 0o755)) == 0o755 & ~umask
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(OSError):
        private_dir(tmp_path / "file")


def test_open_private_appends_with_exact_perms_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    log = tmp_path / "driver.log"
    with open_private(log) as out:
        out.write(b"one\n")
    assert mode(log) == 0o600
    with open_private(log, "ab") as out:
        out.write(b"two\n")
    assert log.read_bytes() == b"one\ntwo\n"
    os.chmod(log, 0o666)  # an existing file is narrowed back
    with open_private(log, "w") as text:
        text.write("fresh\n")
    assert log.read_text() == "fresh\n" and mode(log) == 0o600
    jar = tmp_path / "launcher.jar"
    with open_private(jar, "wb", 0o644) as out:
        out.write(b"PK")
    assert mode(jar) == 0o644  # wider than the umask allows: set explicitly


def test_open_private_closes_its_descriptor_when_the_mode_is_bad(tmp_path: Path) -> None:
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    with pytest.raises(ValueError):
        open_private(tmp_path / "x.log", "az")
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before


def test_pwrite_all_resumes_partial_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwrite
    monkeypatch.setattr(files.os, "pwrite", lambda fd, data, offset: real(fd, bytes(data)[:3], offset))
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        pwrite_all(fd, b"0123456789", 2)
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"\0\0" + b"0123456789"
    monkeypatch.setattr(files.os, "pwrite", lambda fd, data, offset: 0)
    with pytest.raises(OSError, match="no progress"):
        replace_file(str(tmp_path / "g"), b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # no temporary file left behind


class RefusingRenames(MemoryFileSystem):
    """A store whose rename onto an existing file does nothing and says nothing (WebHDFS's plain
    RENAME answers ``{"boolean": false}``, which fsspec's ``mv`` does not read)."""

    protocol = ("refusing",)

    def mv(self, path1: str, path2: str, **kwargs: object) -> None:
        if not self.exists(path2):
            super().mv(path1, path2, **kwargs)


class WebHdfsLike(MemoryFileSystem):
    """A WebHDFS client's RENAME: without ``renameoptions=OVERWRITE`` it refuses an existing target."""

    protocol = ("webhdfs",)

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, object]] = []

    def _call(self, op: str, method: str = "get", path: str = "", **params: object) -> None:
        self.calls.append({"op": op, "path": path, **params})
        assert op == "RENAME" and method == "put"
        destination = str(params["destination"])
        if self.exists(destination) and params.get("renameoptions") != "OVERWRITE":
            return
        self.pipe_file(destination, self.cat_file(path))
        self.rm_file(path)


@pytest.mark.parametrize("store", [RefusingRenames, WebHdfsLike])
def test_write_atomic_replaces_a_file_on_a_store_whose_rename_refuses_an_existing_target(store: type) -> None:
    fs = store()
    root = f"/rewrite-{store.__name__}"
    for data in (b"first", b"second", b"third"):
        write_atomic(fs, f"{root}/_ckpt/stop-request.json", data)
        assert fs.cat_file(f"{root}/_ckpt/stop-request.json") == data
    assert [p.rsplit("/", 1)[1] for p in fs.find(root)] == ["stop-request.json"]
    if isinstance(fs, WebHdfsLike):  # one atomic rename2 per write, no direct write
        assert [c["renameoptions"] for c in fs.calls] == ["OVERWRITE"] * 3
