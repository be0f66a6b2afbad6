"""Read a Spark Structured Streaming checkpoint through fsspec (and the local disk, where links and
FIFOs are told apart): the fsspec adapter of the core's one checkpoint reader. It never writes.

:class:`CheckpointReader` is the core's
:class:`~airflow_ckpt_provider.checkpoint.snapshot_reader.SnapshotReader` reading through
:class:`FsspecCheckpointFiles`: which files it opens, which batch is committed, the Spark 2.1 logs,
the repartition batches, the ``.crc`` checks and every refusal are the core's, the same rules the
Spark driver applies through Hadoop's FileSystem
(:mod:`airflow_ckpt_provider.spark.checkpoint_files`). This module only lists and reads: directory
markers of object stores dropped (:mod:`~airflow_ckpt_provider.storage.listing`), batch logs listed
by name only (no request per entry), and on a local disk links reported as links and files read
without following one (:func:`~airflow_ckpt_provider.storage.files.read_file`).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Mapping
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.checkpoint.snapshot_reader import (
    EntryKind,
    FileEntry,
    Link,
    NotAFolder,
    SnapshotReader,
    display_path,
)
from airflow_ckpt_provider.storage.files import is_local, local_link, read_file
from airflow_ckpt_provider.storage.listing import list_entries, list_names
from airflow_ckpt_provider.storage.locations import open_location

#: fsspec entry types -> the core's kinds (anything else is a special file)
_KINDS = {"file": EntryKind.FILE, "directory": EntryKind.DIRECTORY}


class FsspecCheckpointFiles:
    """A checkpoint's files under ``root`` of the fsspec filesystem ``fs``, shown under ``uri``
    (:class:`~airflow_ckpt_provider.checkpoint.snapshot_reader.CheckpointFiles`).

    Names-only listings (the batch logs) are ``UNKNOWN`` entries on a local disk, where the core
    looks at a file (:meth:`stat`) before reading it, and files elsewhere (object stores have no
    links nor special files). Errors are fsspec's ``OSError``\\ s, and on a local disk the
    :class:`~airflow_ckpt_provider.checkpoint.errors.UnsafeEntry` of a link or FIFO met at open time.
    """

    def __init__(self, fs: AbstractFileSystem, root: str, uri: str) -> None:
        self.fs = fs
        self.root = root
        self._uri = uri
        self._local = is_local(fs)

    @property
    def uri(self) -> str:
        return self._uri

    def _full(self, path: str) -> str:
        return posixpath.join(self.root, path) if path else self.root

    def listdir(self, path: str, *, names_only: bool = False) -> list[FileEntry]:
        full = self._full(path)
        own = full.rstrip("/")
        if names_only:  # batch dirs can hold tens of thousands of names: no stat per entry
            kind = EntryKind.UNKNOWN if self._local else EntryKind.FILE
            return [FileEntry(name=name.rsplit("/", 1)[-1], kind=kind)
                    for name in (n.rstrip("/") for n in list_names(self.fs, full)) if name != own]
        entries: list[FileEntry] = []
        for info in list_entries(self.fs, full):
            name = str(info["name"]).rstrip("/")
            if name == own:  # some filesystems list the folder itself; ls of a file lists the file
                if info.get("type", "file") == "file" and not info.get("islink"):
                    raise NotAFolder(full)
                continue
            entries.append(self._entry(name, info))
        return entries

    def stat(self, path: str) -> FileEntry:
        full = self._full(path)
        if not self._local:
            return self._entry(full, self.fs.info(full))
        found = os.lstat(full)  # a link is looked at, not followed
        name = posixpath.basename(full)
        if stat.S_ISLNK(found.st_mode):
            return FileEntry(name=name, kind=EntryKind.LINK, link=self._link(full))
        kind = (EntryKind.FILE if stat.S_ISREG(found.st_mode) else
                EntryKind.DIRECTORY if stat.S_ISDIR(found.st_mode) else EntryKind.OTHER)
        return FileEntry(name=name, kind=kind, size=found.st_size)

    def read_bytes(self, path: str) -> bytes:
        return read_file(self.fs, self._full(path))  # local: no link followed, no FIFO waited on

    def display(self, path: str) -> str:
        return display_path(self._uri, path)

    def _entry(self, full: str, info: Mapping[str, Any]) -> FileEntry:
        name = full.rsplit("/", 1)[-1]
        if info.get("islink"):  # local disk: a link is never followed
            return FileEntry(name=name, kind=EntryKind.LINK,
                             link=self._link(full) if self._local else Link(str(info.get("destination", "?"))))
        size = info.get("size")
        return FileEntry(name=name, kind=_KINDS.get(str(info.get("type", "file")), EntryKind.OTHER),
                         size=size if isinstance(size, int) else None)

    def _link(self, full: str) -> Link:
        target, resolved, leaves = local_link(full, self.root)
        return Link(target=target, resolved=resolved, outside=leaves)


class CheckpointReader(SnapshotReader):
    """Read-only view of one checkpoint (local path, ``file://``, ``memory://``, ``s3://`` ...)
    through fsspec: the core's :class:`SnapshotReader` over :class:`FsspecCheckpointFiles`.

    ``fs`` is the filesystem to read through (else the location's, from ``storage_options``).
    Raises :class:`~airflow_ckpt_provider.checkpoint.errors.CredentialsInLocation` for a location
    with credentials in it, before anything is read; then the errors of :class:`SnapshotReader`
    (:class:`CheckpointNotFound`, :class:`NotACheckpoint`, :class:`CommitWithoutOffsets`,
    :class:`CorruptCheckpointFile`, :class:`UnsafeEntry`, :class:`UnreadableCheckpoint`, ...).
    """

    def __init__(
        self,
        path_or_url: str,
        fs: AbstractFileSystem | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None:
        refuse_credentials(path_or_url, "checkpoint location")  # it is shown and handed over
        if fs is None:
            fs, root = open_location(path_or_url, **dict(storage_options or {}))
        else:
            root = fs._strip_protocol(path_or_url)
        self.fs: AbstractFileSystem = fs
        self.root: str = root.rstrip("/") or "/"
        super().__init__(FsspecCheckpointFiles(fs, self.root, path_or_url))
