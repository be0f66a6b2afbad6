"""Hostile and broken inputs, each built from a REAL checkpoint written by Spark reading a real
Kafka broker: refused with a typed error, and nothing else happens.

The rule every case checks (:func:`refused`):

* the ``ckpt`` command exits 2 with one ``ckpt: error:`` line (found / expected / what to do), no
  traceback, nothing on stdout; the core call raises the exact typed error;
* the inputs are byte-identical afterwards: :func:`tree_hash` covers every entry's kind, mode,
  content and link target;
* nothing is written outside the target, and no partial target is left;
* no secret appears in any output or in any file written.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveInsideCheckpoint,
    CheckpointError,
    CorruptCheckpointFile,
    ImpossibleOffsets,
    LocationsOverlap,
    UnsafeEntry,
)
from airflow_ckpt_provider.checkpoint.logs import hadoop_crc
from airflow_ckpt_provider.checkpoint.manifest import DATA_DIR
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive
from tests.integration.test_bad_inputs import Stream, make_stream

pytestmark = pytest.mark.integration


# -- the rule -------------------------------------------------------------------------------------


def tree_hash(*roots: Path) -> str:
    """One digest of every entry below ``roots`` (and the roots): relative path, kind, mode, the
    content of regular files and the target of links. Links are never followed."""
    digest = hashlib.sha256()
    for root in roots:
        digest.update(f"\0root {root}".encode())
        if not os.path.lexists(root):
            digest.update(b"absent")
            continue
        entries = [root]
        for folder, dirs, names in os.walk(root):  # os.walk does not descend into linked folders
            entries += [Path(folder, name) for name in sorted(dirs + names)]
        for path in entries:
            info = path.lstat()
            digest.update(f"\0{path.relative_to(root)}\0{info.st_mode:o}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def cli_refused(argv: list[str], *mentions: str, secrets: tuple[str, ...] = ()) -> str:
    """``ckpt argv`` exits 2 with one explained error line and nothing on stdout."""
    code, out, err = run_cli(argv)
    assert code == 2, (code, out, err)
    assert out == "" and "Traceback" not in err, (out, err)
    assert err.startswith("ckpt: error: ") and err.count("\n") == 1, err
    assert "found " in err and "expected " in err, err
    for mention in mentions:
        assert mention in err, f"{mention!r} not in {err!r}"
    for secret in secrets:
        assert secret not in err
    return err


def core_refused(kind: type[CheckpointError], call: Callable[[], object], *mentions: str) -> CheckpointError:
    with pytest.raises(CheckpointError) as info:
        call()
    error = info.value
    assert type(error) is kind, f"{type(error).__name__}: {error}"
    assert error.found and error.expected and error.action, str(error)
    for mention in mentions:
        assert mention in str(error), f"{mention!r} not in {error}"
    return error


# -- a real checkpoint, copied per test -----------------------------------------------------------


@pytest.fixture(scope="module")
def real(kafka, spark, tmp_path_factory: pytest.TempPathFactory) -> Stream:  # noqa: ANN001
    """A checkpoint written by Spark (Kafka -> Parquet, several committed batches, .crc files)."""
    return make_stream(kafka, spark, tmp_path_factory.mktemp("hostile"))


@pytest.fixture
def ck(real: Stream, tmp_path: Path) -> Path:
    """A private copy of the real checkpoint (links kept as links)."""
    copy = tmp_path / "ck"
    shutil.copytree(real.checkpoint, copy, symlinks=True)
    return copy


def last_committed(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def rewrite(checkpoint: Path, rel: str, change: Callable[[str], str]) -> None:
    """Change a checkpoint file as an editor would, and write a matching Hadoop .crc beside it (so
    the checksum check does not catch it: the content rule must)."""
    path = checkpoint / rel
    data = change(path.read_text()).encode()
    path.write_bytes(data)
    crc = path.with_name(f".{path.name}.crc")
    if crc.exists():
        crc.write_bytes(hadoop_crc(data))


def kafka_line(change: Callable[[dict[str, Any]], None]) -> Callable[[str], str]:
    """Change the Kafka source line (line 3) of an offsets/N file through its parsed JSON."""
    import json

    def apply(text: str) -> str:
        lines = text.split("\n")
        offsets = json.loads(lines[2])
        change(offsets)
        lines[2] = json.dumps(offsets, separators=(",", ":"))
        return "\n".join(lines)

    return apply


# -- impossible offsets ---------------------------------------------------------------------------


@pytest.mark.parametrize("sentinel", [-1, -2])
def test_a_sentinel_in_the_last_committed_batch_is_never_handed_over(ck: Path, real: Stream, sentinel: int) -> None:
    batch = last_committed(ck)

    def set_sentinel(offsets: dict[str, Any]) -> None:
        offsets[real.topic]["1"] = sentinel

    rewrite(ck, f"offsets/{batch}", kafka_line(set_sentinel))
    before = tree_hash(ck)
    culprit = f"{real.topic}-1={sentinel}"
    error = core_refused(ImpossibleOffsets, CheckpointReader(str(ck)).handover, culprit, f"committed batch {batch}")
    assert error.path == f"{ck}/offsets/{batch}"
    for command in ("offsets", "inspect"):
        cli_refused([command, str(ck)], culprit, f"{ck}/offsets/{batch}", "restore it from a backup")
    assert tree_hash(ck) == before


def test_a_sentinel_in_a_rewind_start_is_refused(ck: Path, real: Stream) -> None:
    batch = last_committed(ck)
    assert batch >= 2

    def set_latest(offsets: dict[str, Any]) -> None:
        offsets[real.topic]["0"] = -1

    rewrite(ck, f"offsets/{batch - 1}", kafka_line(set_latest))
    reader = CheckpointReader(str(ck))
    assert reader.handover().batch_id == batch  # the last committed batch is intact
    core_refused(ImpossibleOffsets, lambda: reader.batch_start(batch), f"{real.topic}-0=-1",
                 f"offsets/{batch - 1}")


@pytest.mark.parametrize("change, culprit", [
    (lambda o, t: o[t].__setitem__("0", 2**64), str(2**64)),
    (lambda o, t: o[t].__setitem__("0", 2**63), str(2**63)),
    (lambda o, t: o[t].__setitem__(str(2**63), 5), str(2**63)),
    (lambda o, t: o[t].__setitem__(str(2**31), 5), str(2**31)),
], ids=["offset-2^64", "offset-2^63", "partition-2^63", "partition-2^31"])
def test_values_kafka_source_offset_cannot_hold_are_refused(ck: Path, real: Stream,
                                                           change: Callable[[dict[str, Any], str], None],
                                                           culprit: str) -> None:
    batch = last_committed(ck)
    rewrite(ck, f"offsets/{batch}", kafka_line(lambda offsets: change(offsets, real.topic)))
    before = tree_hash(ck)
    core_refused(CorruptCheckpointFile, CheckpointReader(str(ck)).handover, culprit, f"offsets/{batch}")
    cli_refused(["offsets", str(ck)], culprit, f"offsets/{batch}")
    assert tree_hash(ck) == before


# -- bounded parsing ------------------------------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("rel, change", [
    ("metadata", lambda text: '{"id":' + DEEP + "}"),
    ("offsets/{last}", lambda text: "\n".join(text.split("\n")[:2] + [DEEP])),
    ("offsets/{last}", lambda text: "\n".join([text.split("\n")[0], DEEP] + text.split("\n")[2:])),
    ("commits/{last}", lambda text: "v1\n" + DEEP),
], ids=["metadata", "offsets-source-line", "offsets-metadata-line", "commits"])
def test_deeply_nested_json_in_a_checkpoint_is_a_typed_error(ck: Path, rel: str, change: Callable[[str], str]) -> None:
    rel = rel.format(last=last_committed(ck))
    rewrite(ck, rel, change)
    before = tree_hash(ck)
    with pytest.raises(CorruptCheckpointFile) as info:
        CheckpointReader(str(ck)).handover()
    assert "nested more than 64 levels" in str(info.value) and info.value.path == f"{ck}/{rel}"
    for command in ("inspect", "offsets"):
        err = cli_refused([command, str(ck)], f"{ck}/{rel}", "nested more than 64 levels")
        assert len(err) < 1500
    assert tree_hash(ck) == before


# -- links, special files, overlaps ---------------------------------------------------------------

LOCAL = fsspec.filesystem("file")


def archive_of(checkpoint: Path, root: Path) -> Path:
    manifest = CheckpointArchive(LOCAL, str(root)).archive(LOCAL, str(checkpoint), stream_name="orders",
                                                           upgrade_id="up-hostile")
    return Path(manifest.archive_uri)


@pytest.mark.parametrize("plant", ["link-to-passwd", "link-to-folder", "fifo-in-state", "fifo-as-batch"])
def test_archive_of_a_real_checkpoint_never_follows_a_link_nor_waits_on_a_fifo(ck: Path, tmp_path: Path,
                                                                              plant: str) -> None:
    if plant == "fifo-as-batch":
        batch = last_committed(ck)
        (ck / "offsets" / str(batch)).unlink()
        os.mkfifo(ck / "offsets" / str(batch))
        culprit = f"{ck}/offsets/{batch}"
    else:
        (ck / "state" / "0" / "0").mkdir(parents=True)
        culprit = f"{ck}/state/0/0/1.delta"
        {"link-to-passwd": lambda: os.symlink("/etc/passwd", culprit),
         "link-to-folder": lambda: os.symlink("/etc", culprit),
         "fifo-in-state": lambda: os.mkfifo(culprit)}[plant]()
    archive = tmp_path / "archive"
    before = tree_hash(ck)
    cli_refused(["archive", str(ck), "--to", str(archive), "--name", "orders", "--upgrade-id", "up-1"], culprit)
    assert tree_hash(ck) == before and not archive.exists()
    core_refused(UnsafeEntry, lambda: CheckpointArchive(LOCAL, str(archive)).archive(
        LOCAL, str(ck), stream_name="orders", upgrade_id="up-1"), culprit)
    assert tree_hash(ck) == before and not archive.exists()


def test_a_link_planted_in_a_real_archive_is_never_verified_ok_nor_restored(ck: Path, tmp_path: Path) -> None:
    archive = archive_of(ck, tmp_path / "archive")
    planted = archive / DATA_DIR / "metadata"
    planted.unlink()
    os.symlink("/etc/passwd", planted)
    before, target = tree_hash(tmp_path), tmp_path / "restored"
    cli_refused(["verify-archive", str(archive)], "-> /etc/passwd")
    cli_refused(["restore", str(archive), "--to", str(target)], "-> /etc/passwd")
    assert tree_hash(tmp_path) == before and not target.exists()


@pytest.mark.parametrize("how", ["dots", "link"])
def test_overlaps_through_dots_and_links_are_refused(ck: Path, tmp_path: Path, how: str) -> None:
    if how == "link":
        os.symlink(ck, tmp_path / "alias")
    inside = f"{tmp_path}/x/../ck/sub" if how == "dots" else str(tmp_path / "alias" / "sub")
    before = tree_hash(tmp_path)
    core_refused(ArchiveInsideCheckpoint, lambda: CheckpointArchive(LOCAL, inside).archive(
        LOCAL, str(ck), stream_name="orders", upgrade_id="up-1"), "overlap")
    assert tree_hash(tmp_path) == before
    archive = archive_of(ck, tmp_path / "archive")
    into = f"{archive}/../{archive.name}/{DATA_DIR}" if how == "dots" else str(tmp_path / "alias2" / "r")
    if how == "link":
        os.symlink(archive, tmp_path / "alias2")
    before = tree_hash(tmp_path)
    core_refused(LocationsOverlap, lambda: restore_archive(LOCAL, str(archive), LOCAL, into), "overlap")
    cli_refused(["restore", str(archive), "--to", into], "overlap")
    assert tree_hash(tmp_path) == before
    verify_archive(LOCAL, str(archive))


# -- restores are never half-visible --------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def ckpt_process(*argv: str, user: int | None = None) -> subprocess.Popen[str]:
    """``ckpt argv`` in a child process (as ``user`` through ``setpriv`` when given)."""
    command = [sys.executable, "-m", "airflow_ckpt_provider.cli", *argv]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *command]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs: room for the archive's manifest check, not for the restored checkpoint."""
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def padded_archive(ck: Path, tmp_path: Path) -> Path:
    """An archive of the real checkpoint plus 2 MiB of state, too big for :func:`tmpfs`."""
    (ck / "state" / "0" / "0").mkdir(parents=True)
    (ck / "state" / "0" / "0" / "1.delta").write_bytes(os.urandom(2 * 1024 * 1024))
    return archive_of(ck, tmp_path / "archive")


def test_a_restore_onto_a_full_disk_leaves_nothing(ck: Path, tmp_path: Path, tmpfs: Path) -> None:
    archive = padded_archive(ck, tmp_path)
    before = tree_hash(archive)
    target = tmpfs / "restored"
    cli_refused(["restore", str(archive), "--to", str(target)], "no space left on the device", "(ENOSPC)",
                "Nothing was left at the target. Free space")
    assert os.listdir(tmpfs) == [] and tree_hash(archive) == before
    verify_archive(LOCAL, str(archive))


def test_a_restore_without_write_permission_is_a_typed_error_as_a_non_root_user(ck: Path, tmp_path: Path) -> None:
    archive = padded_archive(ck, tmp_path)
    nobody = 65534
    shared = Path(tempfile.mkdtemp(prefix="ckpt-hostile-", dir="/tmp"))
    try:
        os.chmod(shared, 0o755)
        readable = shared / "archive"
        shutil.copytree(archive, readable)
        for folder, _, names in os.walk(shared):
            os.chmod(folder, 0o755)
            for name in names:
                os.chmod(Path(folder, name), 0o644)
        parent = shared / "locked"
        parent.mkdir(mode=0o755)  # root's: nobody may not create the target, its temp folder or the lock
        before = tree_hash(shared)
        process = ckpt_process("restore", str(readable), "--to", str(parent / "restored"), user=nobody)
        out, err = process.communicate()
        assert process.returncode == 2, (out, err)
        assert out == "" and "Traceback" not in err and err.startswith("ckpt: error: ") and err.count("\n") == 1, err
        assert "found permission denied at" in err and "(EACCES)" in err and "Nothing was written." in err
        assert tree_hash(shared) == before
    finally:
        shutil.rmtree(shared)


def test_concurrent_restore_processes_never_mix(ck: Path, tmp_path: Path, real: Stream) -> None:
    first = archive_of(ck, tmp_path / "a1")
    (ck / "commits" / str(last_committed(ck))).unlink()  # another checkpoint: one commit fewer
    (ck / "commits" / f".{last_committed(ck) + 1}.crc").unlink(missing_ok=True)
    second = archive_of(ck, tmp_path / "a2")
    contents = {str(a): {f.path for f in verify_archive(LOCAL, str(a)).files} for a in (first, second)}
    assert contents[str(first)] != contents[str(second)]
    for round_ in range(8):
        target = tmp_path / "targets" / f"r{round_}"
        processes = [ckpt_process("restore", str(a), "--to", str(target)) for a in (first, second)]
        results = [(p.wait(), *p.communicate()) for p in processes]
        winners = [str(a) for a, (code, _, _) in zip((first, second), results, strict=True) if code == 0]
        assert len(winners) == 1, results
        loser = next(r for r in results if r[0] != 0)
        assert loser[0] == 2 and ("another restore" in loser[2] or "existing content" in loser[2]), loser
        got = {str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()}
        assert got == contents[winners[0]]
        assert sorted(os.listdir(target.parent)) == sorted(f"r{i}" for i in range(round_ + 1))  # no lock, no temp


# -- secrets ---------------------------------------------------------------------------------------

SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzz"


def test_no_secret_reaches_any_output_or_file(ck: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    location = f"s3a://AKIAIOSFODNN7EXAMPLE:{SECRET}@bucket/archives"
    before = tree_hash(tmp_path)
    for argv in (["archive", str(ck), "--to", location, "--name", "orders", "--upgrade-id", "up-1"],
                 ["inspect", location.replace("archives", "cp")], ["offsets", f"hdfs://etl:{SECRET}@nn:8020/cp"],
                 ["restore", location, "--to", str(tmp_path / "r")]):
        cli_refused(argv, "credentials in a location", "Airflow connection", secrets=(SECRET, "AKIAIOSFODNN7EXAMPLE"))
    assert tree_hash(tmp_path) == before
    assert not any(SECRET in record.getMessage() for record in caplog.records)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
