"""Directory listings through fsspec without object-store directory markers; pure (no Airflow).

Object stores have no directories. Hadoop 3.4's S3A keeps a zero-byte object per directory it
creates (``ckpt/``, ``ckpt/commits/``: ``fs.s3a.directory.marker.retention=keep``, the default),
and other tools write zero-byte objects named like a prefix that also holds objects. s3fs lists
such a marker as a FILE: ``ls("b/ckpt")`` returns ``b/ckpt/`` beside the real entries, and
``find`` returns every ``<dir>/``. Every listing of the provider goes through this module, which
drops a marker of the listed folder itself and turns any other marker into the directory it
stands for, so the reader, the archive, restore, the journal and the state export see the same
tree on S3 as on a local disk. Every listing here is fresh: fsspec's cached listing of the
folder (s3fs keeps one per folder it listed) is dropped first, so a poll sees new batches and an
``open`` after a scan does not trust a listing older than the scan. fsspec already pages through
object listings (ListObjectsV2 continuation tokens), so a listing here is complete however many
objects the folder holds.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.logs import batch_ids


def is_marker(name: str, info: dict[str, Any] | None = None) -> bool:
    """Whether a listing entry is a directory marker: a name ending in ``/`` that is not listed
    as a directory (with ``info``: a file of zero bytes)."""
    if not name.endswith("/"):
        return False
    if info is None:
        return True
    return info.get("type") != "directory" and not int(info.get("size") or 0)


def _directory(name: str) -> dict[str, Any]:
    return {"name": name, "type": "directory", "size": 0}


def list_names(fs: AbstractFileSystem, path: str) -> list[str]:
    """Full paths of the entries of the folder ``path`` (names only, no request per entry), without
    its own marker; a marker of a sub-folder names that sub-folder (no trailing ``/``). Raises
    what ``fs.ls`` raises (``FileNotFoundError`` when nothing is there)."""
    own = path.rstrip("/")
    fs.invalidate_cache(own)
    names: dict[str, None] = {}
    for entry in fs.ls(path, detail=False):
        raw = str(entry)
        name = raw.rstrip("/") or raw
        if raw.endswith("/") and name == own:
            continue
        names.setdefault(name, None)
    return list(names)


def list_entries(fs: AbstractFileSystem, path: str) -> list[dict[str, Any]]:
    """The detailed entries of the folder ``path`` (fsspec info dicts), without its own marker; a
    marker of a sub-folder becomes that directory's entry, once. Raises what ``fs.ls`` raises."""
    own = path.rstrip("/")
    fs.invalidate_cache(own)
    entries: dict[str, dict[str, Any]] = {}
    for info in fs.ls(path, detail=True):
        raw = str(info["name"])
        if is_marker(raw, info):
            name = raw.rstrip("/")
            if name != own and name:
                entries.setdefault(name, _directory(name))
            continue
        name = raw.rstrip("/") or raw
        if info.get("type") == "directory" or name not in entries:
            entries[name] = {**info, "name": name}
    return list(entries.values())


def forget_listings(fs: AbstractFileSystem, root: str) -> None:
    """Drop fsspec's cached listings of ``root``, its parents and everything below it.

    s3fs answers ``info`` (which every ``open`` calls) from a cached listing of the parent when
    it has one, so a file written after that listing reads as missing (``FileNotFoundError``);
    ``invalidate_cache(path)`` drops only the path and its parents, not the folders below."""
    fs.invalidate_cache(root)
    cache = getattr(fs, "dircache", None)
    if cache:
        own = root.rstrip("/")
        for key in [k for k in list(cache) if str(k) == own or str(k).startswith(own + "/")]:
            cache.pop(key, None)


def holds_anything(fs: AbstractFileSystem, path: str) -> bool:
    """Whether ``path`` is a file or a folder holding anything but directory markers (an empty
    folder, a folder only a marker keeps, or nothing at all: False). Raises what ``fs.ls``
    raises except ``FileNotFoundError``."""
    fs.invalidate_cache(path.rstrip("/"))
    try:
        entries = fs.ls(path, detail=True)
    except FileNotFoundError:
        return False
    return any(not is_marker(str(info["name"]), info) for info in entries)


def _refuse_entry(path: str, root: str) -> None:
    """:class:`UnsafeEntry` for a link or special file met while walking ``root`` (local disk)."""
    from airflow_ckpt_provider.checkpoint.errors import UnsafeEntry
    from airflow_ckpt_provider.storage.files import entry_kind, unsafe_link

    if os.path.islink(path):
        raise unsafe_link(path, os.path.realpath(root))
    raise UnsafeEntry(found=f"{entry_kind(os.lstat(path).st_mode)} at {path}",
                      expected="regular files and folders only", path=path)


def find_entries(fs: AbstractFileSystem, root: str, *, withdirs: bool = False) -> dict[str, dict[str, Any]]:
    """``{path: info}`` of everything below ``root`` (fsspec's ``find``, detailed), without
    directory markers: with ``withdirs`` a marker becomes its directory's entry (so an empty
    directory that only a marker holds is still listed), else it is dropped; a zero-byte
    object named like a prefix that holds other objects counts as that directory. ``root``
    itself is never listed. ``{}`` when nothing is there. A link, FIFO, socket or device (local
    disk) is :class:`~airflow_ckpt_provider.checkpoint.errors.UnsafeEntry`: never followed or read."""
    own = root.rstrip("/")
    forget_listings(fs, own)
    found: dict[str, Any] = fs.find(root, withdirs=withdirs, detail=True)
    forget_listings(fs, own)
    files: dict[str, dict[str, Any]] = {}
    dirs: dict[str, dict[str, Any]] = {}
    for raw, info in found.items():
        raw = str(raw)
        name = raw.rstrip("/") or raw
        if name == own:
            continue
        if info.get("islink") or info.get("type") == "other":  # local disk: links, FIFOs, sockets, devices
            _refuse_entry(name, own)
        if is_marker(raw, info) or info.get("type") == "directory":
            dirs.setdefault(name, _directory(name) if is_marker(raw, info) else {**info, "name": name})
        else:
            files[name] = {**info, "name": name}
    # parents of files are directories; a zero-byte "file" that is such a parent is a marker
    parents: set[str] = set()
    for name in [*files, *dirs]:
        parent = posixpath.dirname(name)
        while parent.startswith(own + "/") and parent not in parents:
            parents.add(parent)
            parent = posixpath.dirname(parent)
    for name in [n for n, info in files.items() if n in parents and not int(info.get("size") or 0)]:
        del files[name]
        dirs.setdefault(name, _directory(name))
    result = dict(files)
    if withdirs:
        result.update((name, info) for name, info in dirs.items() if name not in files)
    return result


__all__ = ["find_entries", "forget_listings", "holds_anything", "is_marker", "list_entries", "list_names"]


def list_batch_ids(fs: AbstractFileSystem, folder: str) -> list[int]:
    """Sorted batch ids in the batch log ``folder`` (``<root>/offsets`` or ``<root>/commits``,
    a path of ``fs``); ``[]`` when the folder does not exist.

    Drops fsspec's listing cache of ``folder`` first, so a poll sees new batches, and lists names
    only (no metadata request per entry). :class:`CorruptCheckpointFile` for a zero-padded name;
    other I/O errors (``OSError``) propagate.
    """
    try:
        entries = list_names(fs, folder)
    except FileNotFoundError:
        return []
    return batch_ids((str(entry) for entry in entries), folder)
