"""Whole-file writes for the provider's own small files (journal, lock, control files).

On local disks: a temporary name, fsync, rename and fsync of the directory, with private modes
(a stricter umask narrows them further). Elsewhere one object write, which object stores make
whole.
"""

from __future__ import annotations

import logging
import os
import posixpath

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

log = logging.getLogger(__name__)

#: Private by default: readable by the group (operators), by nobody else.
FILE_MODE, DIR_MODE = 0o640, 0o750
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def is_local(fs: AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def make_private_dirs(path: str, mode: int = DIR_MODE) -> None:
    """``os.makedirs(path, exist_ok=True)`` giving every directory it creates ``mode`` (less with a
    stricter umask); ``os.makedirs`` applies the mode to the last one only. Existing directories
    are left as they are."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent and parent != path:
        make_private_dirs(parent, mode)
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        if not os.path.isdir(path):
            raise


def replace_file(path: str, data: bytes, mode: int = FILE_MODE) -> None:
    """Write the LOCAL file ``path`` under a temporary name in its directory, fsync it, rename it
    over ``path`` and fsync the directory: ``path`` appears whole and durable or not at all.
    Created with ``mode`` (less with a stricter umask). ``OSError`` on failure."""
    folder = os.path.dirname(path) or "."
    temp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    dir_fd = os.open(folder, os.O_RDONLY | O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_atomic(fs: AbstractFileSystem, path: str, data: bytes, *, mode: int = FILE_MODE,
                 dir_mode: int = DIR_MODE) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new content, never a mix:
    :func:`replace_file` on a local disk (missing directories get ``dir_mode``), one object write
    elsewhere."""
    if not is_local(fs):
        fs.pipe_file(path, data)
        return
    make_private_dirs(os.path.dirname(path), dir_mode)
    replace_file(path, data, mode)


def create_exclusive(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists; whether this call created it."""
    if is_local(fs):
        make_private_dirs(os.path.dirname(path))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, FILE_MODE)
        except FileExistsError:
            return False
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return True
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    try:
        with fs.open(path, "xb") as handle:
            handle.write(data)
        return True
    except FileExistsError:
        return False
    except (ValueError, NotImplementedError, TypeError):
        log.warning("%s cannot create a file only if absent: the lock is checked, then written",
                    type(fs).__name__)
        if fs.exists(path):
            return False
        fs.pipe_file(path, data)
        return True



__all__ = ["DIR_MODE", "FILE_MODE", "O_CLOEXEC", "create_exclusive", "is_local", "make_private_dirs",
           "replace_file", "write_atomic"]
