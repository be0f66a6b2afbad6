"""The safe file layer: no link is followed out of (or inside) a walked tree, only regular files
are opened and never blocking, and overlap checks see through '..' and links. Each case goes
through the entry points (core functions and ``ckpt``) and checks that nothing changed."""

from __future__ import annotations

import hashlib
import io
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveInsideCheckpoint,
    CheckpointError,
    LocationsOverlap,
    UnsafeEntry,
)
from airflow_ckpt_provider.checkpoint.manifest import DATA_DIR
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.files import open_regular, read_file
from airflow_ckpt_provider.storage.listing import find_entries
from airflow_ckpt_provider.storage.locations import overlap
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive
from airflow_ckpt_provider.storage.transfer import scan_tree
from tests.unit.conftest import write_checkpoint

LOCAL = fsspec.filesystem("file")
HANG_GUARD_S = 120  # only a failure detector: a blocking open would never return


def tree_hash(*roots: Path) -> str:
    """Every entry below ``roots``: path, mode, content of files, target of links (never followed)."""
    digest = hashlib.sha256()
    for root in roots:
        digest.update(str(root).encode())
        if not os.path.lexists(root):
            continue
        for folder, dirs, names in os.walk(root):
            for name in sorted(dirs + names):
                path = Path(folder, name)
                info = path.lstat()
                digest.update(f"{path.relative_to(root)}:{info.st_mode:o}:".encode())
                if path.is_symlink():
                    digest.update(os.readlink(path).encode())
                elif path.is_file():
                    digest.update(path.read_bytes())
    return digest.hexdigest()


def returns(call: Callable[[], object]) -> BaseException | object:
    """``call()``'s result or exception; fails if it does not return (a blocked open)."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    assert outcome, "the call blocked"
    return outcome[0]


def ckpt(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    result = returns(lambda: cli.main(list(argv), stdout=out, stderr=err))
    assert isinstance(result, int), result
    return result, out.getvalue(), err.getvalue()


def refused(*argv: str, mentions: tuple[str, ...] = ()) -> str:
    code, out, err = ckpt(*argv)
    assert code == 2 and out == "" and err.startswith("ckpt: error: ") and err.count("\n") == 1, (code, out, err)
    for mention in mentions:
        assert mention in err, (mention, err)
    return err


@pytest.fixture
def ck(tmp_path: Path) -> Path:
    write_checkpoint(str(tmp_path / "ck"), state_operators=(0,))
    (tmp_path / "ck" / "state" / "0" / "0").mkdir(parents=True, exist_ok=True)
    (tmp_path / "ck" / "state" / "0" / "0" / "98.delta").write_bytes(b"state bytes")
    return tmp_path / "ck"


# -- opening: regular files only, never blocking --------------------------------------------------


def test_open_regular_refuses_fifo_socket_device_and_link_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    os.symlink("/etc/passwd", tmp_path / "link")
    (tmp_path / "file").write_bytes(b"ok")
    for name, said in (("fifo", "FIFO"), ("sock", "socket"), ("link", "-> /etc/passwd")):
        error = returns(lambda name=name: read_file(LOCAL, str(tmp_path / name)))
        assert isinstance(error, UnsafeEntry) and said in str(error), error
    assert isinstance(returns(lambda: open_regular("/dev/zero")), UnsafeEntry)
    assert read_file(LOCAL, str(tmp_path / "file")) == b"ok"
    server.close()


@pytest.mark.parametrize("command", ["offsets", "inspect"])
def test_a_fifo_named_like_a_batch_file_is_refused_not_waited_on(ck: Path, command: str) -> None:
    (ck / "offsets" / "2").unlink()
    os.mkfifo(ck / "offsets" / "2")  # the last committed batch's offsets
    before = tree_hash(ck)
    refused(command, str(ck), mentions=("FIFO", f"{ck}/offsets/2"))
    assert tree_hash(ck) == before


def test_a_link_in_the_checkpoint_root_is_refused_by_the_reader(ck: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    os.rename(ck / "commits", tmp_path / "elsewhere" / "commits")
    os.symlink(tmp_path / "elsewhere" / "commits", ck / "commits")
    with pytest.raises(UnsafeEntry, match="outside"):
        CheckpointReader(str(ck)).handover()


# -- walking: links and special files --------------------------------------------------------------


@pytest.mark.parametrize("plant", ["link-out-file", "link-out-dir", "link-in-tree", "fifo-in-state", "socket"])
def test_archive_refuses_links_and_special_files_before_writing(ck: Path, tmp_path: Path, plant: str) -> None:
    target = ck / "state" / "0" / "0" / "99.delta"
    if plant == "link-out-file":
        os.symlink("/etc/passwd", target)
    elif plant == "link-out-dir":
        os.symlink("/etc", target)
    elif plant == "link-in-tree":
        os.symlink(ck / "metadata", target)
    elif plant == "fifo-in-state":
        os.mkfifo(target)
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
    archive = tmp_path / "archive"
    before = tree_hash(ck)
    err = refused("archive", str(ck), "--to", str(archive), "--name", "orders", "--upgrade-id", "u1",
                  mentions=(str(target),))
    assert ("-> " in err) == plant.startswith("link") and ("outside" in err) == plant.startswith("link-out")
    assert tree_hash(ck) == before and not archive.exists()  # nothing written, not even the intent


def test_scan_names_link_and_target(tmp_path: Path) -> None:
    (tmp_path / "t" / "a").mkdir(parents=True)
    os.symlink("../../../etc/passwd", tmp_path / "t" / "a" / "x")
    with pytest.raises(UnsafeEntry) as info:
        scan_tree(LOCAL, str(tmp_path / "t"))
    assert f"{tmp_path}/t/a/x -> ../../../etc/passwd" in str(info.value)


def test_state_walk_refuses_links(tmp_path: Path) -> None:
    (tmp_path / "s" / "0").mkdir(parents=True)
    os.symlink("/etc", tmp_path / "s" / "0" / "etc")
    with pytest.raises(UnsafeEntry, match="/etc"):
        find_entries(LOCAL, str(tmp_path / "s"))


def archived(ck: Path, tmp_path: Path) -> Path:
    manifest = CheckpointArchive(LOCAL, str(tmp_path / "archive")).archive(
        LOCAL, str(ck), stream_name="orders", upgrade_id="u1")
    return Path(manifest.archive_uri)


def test_verify_archive_refuses_a_link_planted_in_the_archive(ck: Path, tmp_path: Path) -> None:
    archive = archived(ck, tmp_path)
    planted = archive / DATA_DIR / "state" / "0" / "0" / "98.delta"
    planted.unlink()
    os.symlink("/etc/passwd", planted)
    before = tree_hash(archive)
    refused("verify-archive", str(archive), mentions=("-> /etc/passwd",))
    target = tmp_path / "restored"
    refused("restore", str(archive), "--to", str(target), mentions=("-> /etc/passwd",))
    assert tree_hash(archive) == before and not target.exists()


def test_resuming_an_archive_whose_data_folder_is_a_link_touches_nothing_it_points_to(ck: Path, tmp_path: Path) -> None:
    archive = CheckpointArchive(LOCAL, str(tmp_path / "archive"))

    def crash(rel: str) -> None:
        raise RuntimeError("crash mid-copy")

    archive.on_file_copied = crash
    with pytest.raises(RuntimeError):
        archive.archive(LOCAL, str(ck), stream_name="orders", upgrade_id="u1", )
    [attempt] = (tmp_path / "archive" / "orders").iterdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_bytes(b"do not delete")
    os.rename(attempt / DATA_DIR, tmp_path / "moved")
    os.symlink(victim, attempt / DATA_DIR)
    before = tree_hash(victim, ck)
    archive.on_file_copied = None
    with pytest.raises(UnsafeEntry, match=f"{DATA_DIR} -> {victim}"):
        archive.archive(LOCAL, str(ck), stream_name="orders", upgrade_id="u1")
    assert tree_hash(victim, ck) == before


# -- overlap through '..' and links ---------------------------------------------------------------


def test_overlap_resolves_dots_and_links(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    os.symlink(tmp_path / "a" / "b", tmp_path / "alias")
    assert overlap((LOCAL, str(tmp_path / "a/b/../b")), (LOCAL, str(tmp_path / "a" / "b"))) == "the same location"
    assert overlap((LOCAL, str(tmp_path / "alias" / "new")), (LOCAL, str(tmp_path / "a"))) == "inside"
    assert overlap((LOCAL, str(tmp_path / "a")), (LOCAL, str(tmp_path / "alias/x/.."))) == "contains"
    assert overlap((LOCAL, str(tmp_path / "a" / "bb")), (LOCAL, str(tmp_path / "a" / "b"))) is None
    memory = fsspec.filesystem("memory")
    assert overlap((memory, "memory://bucket/cp/"), (memory, "/bucket//cp/archive")) == "contains"
    assert overlap((memory, "/bucket/cp"), (LOCAL, "/bucket/cp")) is None


@pytest.mark.parametrize("how", ["dots", "link"])
def test_an_archive_root_inside_the_checkpoint_is_refused_through_dots_and_links(ck: Path, tmp_path: Path,
                                                                                   how: str) -> None:
    if how == "dots":
        root = f"{tmp_path}/other/../ck/state/.."
    else:
        os.symlink(ck, tmp_path / "alias")
        root = str(tmp_path / "alias" / "archives")
    before = tree_hash(ck)
    with pytest.raises(ArchiveInsideCheckpoint):
        CheckpointArchive(LOCAL, root).archive(LOCAL, str(ck), stream_name="orders", upgrade_id="u1")
    refused("archive", str(ck), "--to", root, "--name", "orders", "--upgrade-id", "u1", mentions=("overlap",))
    assert tree_hash(ck) == before


@pytest.mark.parametrize("where", ["itself", "data", "dots", "link", "parent"])
def test_restore_into_the_archive_is_refused(ck: Path, tmp_path: Path, where: str) -> None:
    archive = archived(ck, tmp_path)
    target = {"itself": str(archive), "data": str(archive / DATA_DIR / "new"),
              "dots": f"{archive}/../{archive.name}/x", "parent": str(archive.parent),
              "link": str(tmp_path / "alias" / "restored")}[where]
    if where == "link":
        os.symlink(archive, tmp_path / "alias")
    before = tree_hash(archive)
    with pytest.raises(LocationsOverlap):
        restore_archive(LOCAL, str(archive), LOCAL, target)
    refused("restore", str(archive), "--to", target, mentions=("overlap",))
    assert tree_hash(archive) == before
    verify_archive(LOCAL, str(archive))


def test_every_refusal_here_is_a_checkpoint_error() -> None:
    assert issubclass(UnsafeEntry, CheckpointError) and issubclass(LocationsOverlap, CheckpointError)


@pytest.mark.parametrize("case", ["link-loop", "file-for-folder"])
@pytest.mark.parametrize("command", ["inspect", "offsets", "verify-archive", "archives", "restore"])
def test_os_errors_are_explained_not_bare(tmp_path: Path, case: str, command: str) -> None:
    if case == "link-loop":
        os.symlink("loop", tmp_path / "loop")
        location, said = str(tmp_path / "loop"), "a loop of symbolic links"
    else:
        (tmp_path / "afile").write_bytes(b"x")
        location, said = str(tmp_path / "afile" / "sub"), "a file where a folder is expected"
    argv = [command, location] + (["--to", str(tmp_path / "target")] if command == "restore" else [])
    before = tree_hash(tmp_path)
    err = refused(*argv, mentions=("found ", "expected "))
    code = "ELOOP" if case == "link-loop" else "ENOTDIR"
    assert f"found {said} at {location}" in err and f"({code})" in err and "retry." in err, err
    assert tree_hash(tmp_path) == before
