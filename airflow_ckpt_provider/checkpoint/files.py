"""Whole-file writes for the provider's own small files (journal, lock, control files).

On local disks: a temporary name, fsync, rename and fsync of the directory, with an explicit mode
whatever the process umask. Elsewhere one object write, which object stores make whole.
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


def is_local(fs: AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def write_atomic(fs: AbstractFileSystem, path: str, data: bytes, *, mode: int = FILE_MODE,
                 dir_mode: int = DIR_MODE) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new content, never a mix.
    Local files get ``mode`` (whatever the umask; directories it creates ``dir_mode``) and are
    fsynced with their directory."""
    if not is_local(fs):
        fs.pipe_file(path, data)
        return
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=dir_mode, exist_ok=True)
        os.chmod(folder, dir_mode)
    temp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_exclusive(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists; whether this call created it."""
    if is_local(fs):
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            os.makedirs(folder, mode=DIR_MODE, exist_ok=True)
            os.chmod(folder, DIR_MODE)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            return False
        try:
            os.fchmod(fd, FILE_MODE)
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



__all__ = ["DIR_MODE", "FILE_MODE", "create_exclusive", "is_local", "write_atomic"]
