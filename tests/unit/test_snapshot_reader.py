"""The core's one checkpoint reader (checkpoint/snapshot_reader.py) over an in-memory
``CheckpointFiles``: it reads what the fsspec adapter reads, and every refusal is its own (links,
special files, oversized files, I/O errors turned into typed errors), whatever storage it is handed."""

from __future__ import annotations

import errno
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    CheckpointNotFound,
    CorruptCheckpointFile,
    JsonTooLarge,
    NotACheckpoint,
    UnreadableCheckpoint,
    UnsafeEntry,
)
from airflow_ckpt_provider.checkpoint.snapshot_reader import (
    CheckpointFiles,
    EntryKind,
    FileEntry,
    Link,
    LinkAtOpen,
    NotAFolder,
    SnapshotReader,
    display_path,
)
from airflow_ckpt_provider.json_limits import MAX_JSON_BYTES
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.unit.conftest import Built, kafka_and_rate, write_checkpoint

TAKEN_AT = "2026-01-01T00:00:00+00:00"


@dataclass
class MemoryFiles:
    """A checkpoint held in memory: files (relative path -> bytes), empty folders, links and special
    files by path, I/O errors to raise by path. Names-only listings are ``UNKNOWN`` entries, as on a local
    disk; every call is recorded."""

    uri: str
    files: dict[str, bytes]
    folders: set[str] = field(default_factory=set)
    links: dict[str, Link] = field(default_factory=dict)
    special: set[str] = field(default_factory=set)
    sizes: dict[str, int] = field(default_factory=dict)
    errors: dict[str, OSError] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)

    @classmethod
    def of(cls, built: Built) -> MemoryFiles:
        prefix = built.root.rstrip("/") + "/"
        folders = {path[len(prefix):] for path, info in built.fs.find(built.root, withdirs=True, detail=True).items()
                   if info["type"] == "directory" and path.startswith(prefix)}
        return cls(uri=built.uri, files={rel: built.read(rel) for rel in built.files()}, folders=folders)

    def _paths(self) -> set[str]:
        return {*self.files, *self.folders, *self.links, *self.special}

    def _kind(self, path: str) -> EntryKind:
        if path in self.links:
            return EntryKind.LINK
        if path in self.special:
            return EntryKind.OTHER
        if path in self.files:
            return EntryKind.FILE
        if path in self.folders or any(p.startswith(path + "/") for p in self._paths()):
            return EntryKind.DIRECTORY
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)

    def _entry(self, path: str) -> FileEntry:
        kind = self._kind(path)
        size = self.sizes.get(path, len(self.files[path])) if kind is EntryKind.FILE else None
        return FileEntry(name=path.rsplit("/", 1)[-1], kind=kind, size=size, link=self.links.get(path))

    def listdir(self, path: str, *, names_only: bool = False) -> Sequence[FileEntry]:
        self.calls.append(("list", path))
        if path in self.errors:
            raise self.errors[path]
        if path and self._kind(path) is not EntryKind.DIRECTORY:
            raise NotAFolder(path)
        prefix = path + "/" if path else ""
        children = sorted({p[len(prefix):].split("/", 1)[0] for p in self._paths() if p.startswith(prefix)})
        if not children and path and path not in self.folders:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if names_only:
            return [FileEntry(name=name, kind=EntryKind.UNKNOWN) for name in children]
        return [self._entry(prefix + name) for name in children]

    def stat(self, path: str) -> FileEntry:
        self.calls.append(("stat", path))
        return self._entry(path)

    def read_bytes(self, path: str) -> bytes:
        self.calls.append(("read", path))
        if path in self.errors:
            raise self.errors[path]
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return self.files[path]

    def display(self, path: str) -> str:
        return display_path(self.uri, path)


def test_the_fake_is_checkpoint_files() -> None:
    files: CheckpointFiles = MemoryFiles(uri="mem://ck", files={})
    assert files.display("") == "mem://ck"


VARIANTS = {
    "v1-crc": {"crc": True},
    "v1-tmp-files": {"tmp_files": True, "crc": True},
    "v2-offsets": {"offsets_version": 2, "crc": True},
    "v2-commits-state": {"commit_version": 2, "state_operators": (0, 3)},
    "in-flight": {"committed": range(4)},
    "nothing-committed": {"batches": [0], "committed": [], "sources": kafka_and_rate},
    "purged-with-gaps": {"batches": [100, 101, 102, 105, 106], "committed": [100, 101, 105]},
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_core_reads_what_the_fsspec_adapter_reads(variant: str) -> None:
    """Over memory and over fsspec the same snapshot, handover and batch starts, with the same
    number of files opened and folders listed: the adapter adds no rule of its own."""
    options = {"batches": range(5), **VARIANTS[variant]}
    built = write_checkpoint(f"memory://snap-{variant}/ck", **options)  # type: ignore[arg-type]
    core, fsspec_side = SnapshotReader(MemoryFiles.of(built)), CheckpointReader(built.uri)
    assert core.snapshot(include_initial=True) == fsspec_side.snapshot(include_initial=True)
    assert core.handover(taken_at=TAKEN_AT) == fsspec_side.handover(taken_at=TAKEN_AT)
    assert core.retained_batches() == fsspec_side.retained_batches()
    assert (core.files_opened, core.listings) == (fsspec_side.files_opened, fsspec_side.listings)
    for batch in built.committed:  # a retained start, or the same refusal
        assert outcome(core, batch) == outcome(fsspec_side, batch)


def outcome(reader: SnapshotReader, batch: int) -> object:
    """Where ``batch`` started by ``reader``, or the type and text of the error it raises."""
    try:
        return reader.batch_start(batch, taken_at=TAKEN_AT)
    except CheckpointError as exc:
        return type(exc), str(exc)


def checkpoint(**options: object) -> MemoryFiles:
    """A checkpoint of batches 0..3, all committed, with Hadoop ``.crc`` files, shown as ``mem://ck``."""
    built = write_checkpoint(f"memory://snap-{uuid.uuid4().hex}/ck", batches=range(4), crc=True,
                             **options)  # type: ignore[arg-type]
    files = MemoryFiles.of(built)
    built.fs.rm(built.root, recursive=True)
    files.uri = "mem://ck"
    return files


def test_only_the_files_of_the_last_committed_batch_are_read_and_each_is_looked_at_first() -> None:
    files = checkpoint()
    SnapshotReader(files).handover()
    reads = [path for call, path in files.calls if call == "read"]
    assert reads == ["metadata", ".metadata.crc", "commits/3", "commits/.3.crc", "offsets/3", "offsets/.3.crc"]
    # the batch logs were listed by name only: the core looked at each file before reading it
    assert [path for call, path in files.calls if call == "stat"] == [p for p in reads if "/" in p]


def test_a_link_anywhere_listed_is_refused_never_read() -> None:
    files = checkpoint(state_operators=(0,))
    files.links["state/1"] = Link(target="/elsewhere/state", resolved="/elsewhere/state", outside=True)
    with pytest.raises(UnsafeEntry) as refused:
        SnapshotReader(files).snapshot()
    assert str(refused.value).startswith(
        "link or special file in the tree (mem://ck/state/1): found a symbolic link mem://ck/state/1 -> "
        "/elsewhere/state (resolves to /elsewhere/state, outside mem://ck)")
    assert refused.value.path == f"{files.uri}/state/1"
    assert not any(path.startswith("state/1") for call, path in files.calls if call == "read")


def test_a_link_inside_the_tree_is_refused_too() -> None:
    files = checkpoint()
    del files.files["metadata"]
    files.links["metadata"] = Link(target="offsets/0", resolved="/ck/offsets/0", outside=False)
    with pytest.raises(UnsafeEntry, match=r"metadata -> offsets/0 \(resolves to /ck/offsets/0\)") as refused:
        SnapshotReader(files).snapshot()
    assert "outside" not in str(refused.value)


@pytest.mark.parametrize("path", ["metadata", "offsets/3"])
def test_a_link_met_at_open_time_is_refused_as_a_listed_link(path: str) -> None:
    """A link swapped in after the listing, which the adapter's open refused to follow (LinkAtOpen),
    gets the same refusal as the same link found by the listing."""
    link = Link(target="/elsewhere/x", resolved="/elsewhere/x", outside=True)
    at_open = checkpoint()
    at_open.errors[path] = LinkAtOpen(link)  # type: ignore[assignment]
    with pytest.raises(UnsafeEntry) as refused_at_open:
        SnapshotReader(at_open).handover()
    listed = checkpoint()
    del listed.files[path]
    listed.links[path] = link
    with pytest.raises(UnsafeEntry) as refused_listed:
        SnapshotReader(listed).handover()
    assert str(refused_at_open.value) == str(refused_listed.value)
    assert refused_at_open.value.path == f"{at_open.uri}/{path}"
    assert "outside mem://ck" in str(refused_at_open.value)


def test_a_link_in_a_batch_log_is_seen_when_the_file_is_looked_at() -> None:
    files = checkpoint()
    del files.files["offsets/3"]
    files.links["offsets/3"] = Link(target="/etc/passwd", resolved="/etc/passwd", outside=True)
    with pytest.raises(UnsafeEntry, match="offsets/3 -> /etc/passwd"):
        SnapshotReader(files).handover()
    assert ("read", "offsets/3") not in files.calls


@pytest.mark.parametrize(("kind", "said"), [("special", "FIFO"), ("folder", "a folder at")])
def test_a_special_file_or_folder_where_a_file_is_read(kind: str, said: str) -> None:
    files = checkpoint()
    del files.files["offsets/3"]
    if kind == "special":
        files.special.add("offsets/3")
    else:
        files.files["offsets/3/x"] = b""
    with pytest.raises(UnsafeEntry, match=said) as refused:
        SnapshotReader(files).handover()
    assert refused.value.path == f"{files.uri}/offsets/3"
    assert ("read", "offsets/3") not in files.calls


def test_a_file_beyond_the_json_limit_is_not_read() -> None:
    files = checkpoint()
    files.sizes["metadata"] = MAX_JSON_BYTES + 1
    with pytest.raises(JsonTooLarge, match="bytes"):
        SnapshotReader(files).snapshot()
    assert ("read", "metadata") not in files.calls


def test_a_hadoop_checksum_mismatch_names_the_file() -> None:
    files = checkpoint()
    files.files["commits/3"] = files.files["commits/3"].replace(b"0", b"1")
    with pytest.raises(CorruptCheckpointFile, match="CRC32 mismatch") as refused:
        SnapshotReader(files).handover()
    assert refused.value.path == f"{files.uri}/commits/3"


@pytest.mark.parametrize(("where", "error", "expected", "said"), [
    ("", FileNotFoundError(errno.ENOENT, "gone", "ck"), CheckpointNotFound, "nothing at this location"),
    ("", NotAFolder("ck"), NotACheckpoint, "found a file"),
    ("", PermissionError(errno.EACCES, "Permission denied", "mem://ck"), UnreadableCheckpoint,
     "permission denied at mem://ck (EACCES)"),
    ("offsets", OSError("java.io.IOException: the namenode is in safe mode"), UnreadableCheckpoint,
     "the namenode is in safe mode"),
    ("offsets/3", FileNotFoundError(errno.ENOENT, "gone", "offsets/3"), CorruptCheckpointFile,
     "vanished before it was read"),
    ("offsets/3", OSError(errno.EIO, "Input/output error", "mem://ck/offsets/3"), UnreadableCheckpoint,
     "input/output error"),
])
def test_storage_errors_become_the_core_typed_errors(where: str, error: Exception, expected: type[Exception],
                                                     said: str) -> None:
    files = checkpoint()
    files.errors[where] = error  # type: ignore[assignment]
    with pytest.raises(expected, match=said.replace("(", r"\(").replace(")", r"\)")) as refused:
        SnapshotReader(files).handover()
    shown = display_path(files.uri, where)
    assert refused.value.path == shown  # type: ignore[attr-defined]


def test_display_path() -> None:
    assert display_path("s3a://b/ck/", "") == "s3a://b/ck"
    assert display_path("/data/ck", "offsets/7") == "/data/ck/offsets/7"
