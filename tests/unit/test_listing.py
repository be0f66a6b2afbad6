"""Directory markers (S3A's zero-byte ``dir/`` objects) are ignored by every listing, and the
conditional create of the lock maps each error shape of s3fs to a lost race or a storage error.

The fakes return what s3fs returned from a real S3 server (moto) for a checkpoint with markers.
"""

from __future__ import annotations

from typing import Any

import pytest
from fsspec.implementations.memory import MemoryFileSystem

from airflow_ckpt_provider.checkpoint.errors import NotACheckpoint, StorageError
from airflow_ckpt_provider.storage.files import create_exclusive, lost_create_race
from airflow_ckpt_provider.storage.listing import find_entries, holds_anything, list_batch_ids, list_entries, list_names
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.transfer import list_tree


def _file(name: str, size: int) -> dict[str, Any]:
    return {"name": name, "type": "file", "size": size}


def _dir(name: str) -> dict[str, Any]:
    return {"name": name, "type": "directory", "size": 0}


class MarkerFS(MemoryFileSystem):
    """A memory filesystem that also lists S3A directory markers the way s3fs does: ``ls`` of a
    folder returns its own marker ``<folder>/`` as a zero-byte file, ``find`` every marker."""

    protocol = ("markerfs",)
    cachable = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401
        super().__init__(*args, **kwargs)
        self.store = {}
        self.pseudo_dirs = [""]
        self.markers: set[str] = set()

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:  # noqa: ANN401
        entries = super().ls(path, detail=True, **kwargs)
        own = self._strip_protocol(path).rstrip("/")
        if own in self.markers:
            entries = [_file(f"{own}/", 0), *entries]
        return entries if detail else [e["name"] for e in entries]

    def find(self, path: str, maxdepth: int | None = None, withdirs: bool = False, detail: bool = False,
             **kwargs: Any) -> Any:  # noqa: ANN401
        found = dict(super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=True, **kwargs))
        root = self._strip_protocol(path).rstrip("/")
        for marker in self.markers:
            if marker == root or marker.startswith(root + "/"):
                found[f"{marker}/"] = _file(f"{marker}/", 0)
        return found if detail else sorted(found)


@pytest.fixture
def fs() -> MarkerFS:
    fs = MarkerFS()
    fs.pipe_file("/cp/metadata", b'{"id":"0a6bb8a2-2f66-4b3e-9f0e-5f6a1c7e9d11"}')
    fs.pipe_file("/cp/offsets/0", b'v1\n{}\n{"t":{"0":5}}')
    fs.pipe_file("/cp/commits/0", b'v1\n{"nextBatchWatermarkMs":0}')
    fs.mkdir("/cp/sources")
    fs.markers |= {"/cp", "/cp/offsets", "/cp/commits", "/cp/sources"}
    return fs


def test_listings_drop_the_folders_own_marker(fs: MarkerFS) -> None:
    assert "/cp/" in fs.ls("/cp", detail=False), "the fake must list the marker as s3fs does"
    assert sorted(list_names(fs, "/cp")) == ["/cp/commits", "/cp/metadata", "/cp/offsets", "/cp/sources"]
    assert sorted(e["name"] for e in list_entries(fs, "/cp/commits")) == ["/cp/commits/0"]
    assert list_batch_ids(fs, "/cp/commits") == [0]
    assert not holds_anything(fs, "/cp/sources") and holds_anything(fs, "/cp/commits")


def test_find_turns_markers_into_directories(fs: MarkerFS) -> None:
    found = find_entries(fs, "/cp", withdirs=True)
    assert {n for n, i in found.items() if i["type"] == "file"} == {"/cp/metadata", "/cp/offsets/0", "/cp/commits/0"}
    assert {"/cp/offsets", "/cp/commits", "/cp/sources"} <= {n for n, i in found.items() if i["type"] == "directory"}
    assert not any(name.endswith("/") for name in found)
    files, empty = list_tree(fs, "/cp")
    assert files == {"metadata": 45, "offsets/0": 19, "commits/0": 29} and "sources" in empty


def test_a_zero_byte_object_named_like_a_prefix_is_a_directory() -> None:
    class PrefixObjects(MemoryFileSystem):
        def find(self, path: str, **kwargs: Any) -> Any:  # noqa: ANN401
            return {"b/cp/state": _file("b/cp/state", 0), "b/cp/state/0/1.delta": _file("b/cp/state/0/1.delta", 7),
                    "b/cp/empty": _file("b/cp/empty", 0)}

    found = find_entries(PrefixObjects(), "b/cp", withdirs=True)
    assert found["b/cp/state"]["type"] == "directory" and found["b/cp/state/0/1.delta"]["size"] == 7
    assert found["b/cp/empty"]["type"] == "file", "a zero-byte object without children is a file"


def test_the_reader_reads_a_checkpoint_with_markers(fs: MarkerFS) -> None:
    snapshot = CheckpointReader("/cp", fs=fs).snapshot()
    assert snapshot.last_committed_batch == 0 and snapshot.query_id == "0a6bb8a2-2f66-4b3e-9f0e-5f6a1c7e9d11"
    fs.pipe_file("/lone", b"x")
    with pytest.raises(NotACheckpoint):
        CheckpointReader("/lone", fs=fs).snapshot()


class ClientError(Exception):
    """botocore's ClientError shape: ``response`` with Error.Code and the HTTP status."""

    def __init__(self, code: str, status: int) -> None:
        super().__init__(f"An error occurred ({code})")
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


def _wrapped(cause: BaseException, outer: type[BaseException] = OSError) -> BaseException:
    try:
        raise outer("s3fs wrapped it") from cause
    except BaseException as exc:  # noqa: BLE001
        return exc


@pytest.mark.parametrize("error", [
    FileExistsError("exists"),
    _wrapped(ClientError("PreconditionFailed", 412)),  # a 412 without Condition: s3fs raises OSError
    _wrapped(ClientError("ConditionalRequestConflict", 409)),
    ClientError("PreconditionFailed", 412),
], ids=["FileExistsError", "OSError-412", "OSError-409", "ClientError-412"])
def test_every_shape_of_a_lost_race_is_a_lost_race(error: BaseException) -> None:
    assert lost_create_race(error)
    assert create_exclusive(_raising(error), "b/_upgrades/LOCK.json", b"{}") is False


@pytest.mark.parametrize("error", [
    _wrapped(ClientError("AccessDenied", 403), PermissionError),
    _wrapped(ClientError("NoSuchBucket", 404), FileNotFoundError),
    _wrapped(ClientError("BucketAlreadyOwnedByYou", 409)),
    OSError("connection reset"),
], ids=["403", "404", "409-other", "OSError"])
def test_any_other_failure_is_a_storage_error(error: BaseException) -> None:
    assert not lost_create_race(error)
    with pytest.raises(StorageError) as raised:
        create_exclusive(_raising(error), "b/_upgrades/LOCK.json", b"{}")
    assert "b/_upgrades/LOCK.json" in str(raised.value) and "expected the file created" in str(raised.value)


def test_an_object_store_without_conditional_create_is_refused_not_checked_then_written() -> None:
    fs = _raising(NotImplementedError("mode x"))
    with pytest.raises(StorageError) as raised:
        create_exclusive(fs, "b/_upgrades/LOCK.json", b"{}")
    assert "check-then-write" in str(raised.value) and fs.written == []


class _Raising(MemoryFileSystem):
    protocol = ("s3", "s3a")
    cachable = False

    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error
        self.written: list[str] = []

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:  # noqa: ANN401
        raise self.error

    def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:  # noqa: ANN401
        self.written.append(path)


def _raising(error: BaseException) -> _Raising:
    return _Raising(error)


def test_cached_listings_below_a_tree_are_forgotten_before_and_after_a_scan() -> None:
    class Cached(MemoryFileSystem):
        cachable = False

        def __init__(self) -> None:
            super().__init__()
            self.store, self.pseudo_dirs = {}, [""]

    fs = Cached()
    fs.pipe_file("/cp/state/0/0/1.delta", b"x")
    fs.dircache = {"/cp": [], "/cp/state/0/0": [], "/cpx": [], "/other": []}  # s3fs keeps listings there
    found = find_entries(fs, "/cp")
    assert list(found) == ["/cp/state/0/0/1.delta"]
    assert sorted(fs.dircache) == ["/cpx", "/other"], "a stale parent listing would hide files written later"
