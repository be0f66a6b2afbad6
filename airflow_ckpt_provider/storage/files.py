"""The provider's file-writing primitives (private modes, whole writes); writes to the local disk
and through an fsspec filesystem.

Whole-file writes for the provider's own small files (journal, lock, control files, archive
intent and manifest): on local disks a temporary name, fsync, rename and fsync of the directory;
elsewhere one object write, which object stores make whole. Private files and directories for
everything the provider creates locally (archive files, driver logs): created with the given
mode, which a stricter umask narrows further unless said otherwise (:func:`open_private`).
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import stat
from pathlib import Path
from typing import IO, Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from airflow_ckpt_provider.checkpoint.errors import JsonTooLarge, StorageError, UnsafeEntry, link_refused
from airflow_ckpt_provider.json_limits import MAX_JSON_BYTES

log = logging.getLogger(__name__)

#: Private by default: readable by the group (operators), by nobody else.
FILE_MODE, DIR_MODE = 0o640, 0o750
#: Owner only: driver logs and spark-submit output can hold what a job prints about its configuration.
OWNER_FILE_MODE, OWNER_DIR_MODE = 0o600, 0o700
O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
#: what a regular file may be; anything else in a walked tree is refused (:func:`entry_kind`)
_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"))


def is_local(fs: AbstractFileSystem) -> bool:
    return isinstance(fs, LocalFileSystem)


def entry_kind(mode: int) -> str:
    """What a file mode names, for messages: "a FIFO (named pipe)", "a socket", ... "a regular file"."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file" if stat.S_ISREG(mode) else
                f"a file of type {stat.S_IFMT(mode):o}")


def local_link(path: str, root: str | None = None) -> tuple[str, str, bool]:
    """The LOCAL symbolic link ``path``: (its target as written, ``"?"`` when unreadable; where it
    resolves; whether that lies outside ``root``, compared by resolved paths, False without ``root``)."""
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    resolved = os.path.realpath(path)
    if root is None:
        return target, resolved, False
    real_root = os.path.realpath(root)
    return target, resolved, not (resolved == real_root or resolved.startswith(real_root.rstrip("/") + "/"))


def unsafe_link(path: str, root: str | None = None) -> UnsafeEntry:
    """The refusal of the LOCAL link ``path`` (naming its target, and whether it leaves ``root``),
    in the core's wording (:func:`airflow_ckpt_provider.checkpoint.errors.link_refused`)."""
    target, resolved, leaves = local_link(path, root)
    return link_refused(path, target, resolved, root if leaves else None)


def open_regular(path: str, flags: int = os.O_RDONLY, mode: int = FILE_MODE) -> int:
    """Open the LOCAL file ``path`` (a descriptor, blocking mode restored), never through a link
    (``O_NOFOLLOW``), never waiting on a FIFO or device (``O_NONBLOCK``), and only when ``fstat``
    says it is a regular file; :class:`UnsafeEntry` naming the link and its target or the kind of
    file otherwise. ``flags`` may add ``O_CREAT``/``O_TRUNC``/``O_RDWR`` for the files the provider
    writes. Other failures raise ``OSError``."""
    try:
        fd = os.open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK, errno.ENXIO) and os.path.islink(path):
            raise unsafe_link(path) from None  # (ELOOP through a loop of links above it stays an OSError)
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO without a writer opened for writing
            raise UnsafeEntry(found=f"{entry_kind(os.lstat(path).st_mode)} at {path}",
                              expected="a regular file", path=path) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeEntry(found=f"{entry_kind(info.st_mode)} at {path}", expected="a regular file", path=path)
        if O_NONBLOCK:
            import fcntl

            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str, limit: int | None = None) -> bytes:
    """The whole LOCAL regular file ``path`` read through :func:`open_regular`;
    :class:`~airflow_ckpt_provider.checkpoint.errors.JsonTooLarge` before reading when it is larger
    than ``limit`` bytes."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if limit is not None and size > limit:
            raise JsonTooLarge(found=f"a file of {size:,} bytes", expected=f"at most {limit:,} bytes (nothing the "
                               "provider reads whole is larger)", path=path)
        chunks = []
        while block := os.read(fd, 1024 * 1024):
            chunks.append(block)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_file(fs: AbstractFileSystem, path: str) -> bytes:
    """The whole file ``path`` of ``fs``: on a local disk by :func:`read_regular` (no link
    followed, no FIFO waited on, nothing larger than the JSON input limit read into memory),
    elsewhere ``fs.cat_file``. The one way the core reads a file whole."""
    return read_regular(path, MAX_JSON_BYTES) if is_local(fs) else fs.cat_file(path)


def check_no_links(root: str, path: str) -> None:
    """:class:`UnsafeEntry` if ``path`` or a folder between ``root`` and it is a symbolic link (LOCAL
    disk): for folders the provider writes into or deletes from (an archive being resumed)."""
    root, path = os.path.normpath(root), os.path.normpath(path)
    rel = os.path.relpath(path, root)
    current = root
    for part in [] if rel == "." else rel.split(os.sep):
        current = os.path.join(current, part)
        if os.path.islink(current):
            raise unsafe_link(current, os.path.realpath(root))


def pwrite_all(fd: int, data: bytes, offset: int = 0) -> None:
    """Write all of ``data`` at ``offset`` of the open file ``fd``, resuming partial writes
    (legal after signals or on a nearly full disk). ``OSError`` on failure or no progress."""
    written = os.pwrite(fd, data, offset)
    if written < len(data):
        view = memoryview(data)
        while written < len(data):
            more = os.pwrite(fd, view[written:], offset + written)
            if more <= 0:
                raise OSError(errno.EIO, "write made no progress", str(fd))
            written += more


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


def private_dir(folder: str | os.PathLike[str], mode: int = OWNER_DIR_MODE) -> Path:
    """Create the local ``folder`` (and parents) as needed with at most ``mode`` (default owner
    only), through :func:`make_private_dirs`; an existing folder is left as it is. Returns it as
    a :class:`~pathlib.Path`; ``OSError`` if it cannot be created."""
    make_private_dirs(os.fspath(folder), mode)
    return Path(folder)


def open_private(path: str | os.PathLike[str], mode: str = "ab", perms: int = OWNER_FILE_MODE) -> IO[Any]:
    """Open the local file ``path`` for writing (``mode``: ``"a"``/``"ab"`` append, ``"w"``/``"wb"``
    truncate; created if missing) and give it exactly ``perms`` whatever the umask or the mode
    of an existing file (where this process may chmod it). Returns the file object of
    :func:`os.fdopen`; ``OSError`` if it cannot be opened."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags | O_CLOEXEC, perms)
    try:
        try:
            os.fchmod(fd, perms)  # os.open's mode is narrowed by the umask and ignored for an existing file
        except OSError:
            pass  # not the owner: the file stays as its owner made it
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def write_private_file(path: str, data: bytes, *, atomic: bool = False) -> None:
    """Write ``data`` to the LOCAL file ``path``, created with mode 0o640 (less with a stricter
    umask); an existing file is truncated in place and keeps its mode. ``atomic``: through
    :func:`replace_file` instead (whole and durable or not at all). ``OSError`` on failure."""
    if atomic:
        replace_file(path, data, FILE_MODE)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | O_CLOEXEC, FILE_MODE)
    try:
        pwrite_all(fd, data)
    finally:
        os.close(fd)


def replace_file(path: str, data: bytes, mode: int = FILE_MODE) -> None:
    """Write the LOCAL file ``path`` under a temporary name in its directory, fsync it, rename it
    over ``path`` and fsync the directory: ``path`` appears whole and durable or not at all.
    Created with ``mode`` (less with a stricter umask). ``OSError`` on failure (the temporary file
    is removed again)."""
    folder = os.path.dirname(path) or "."
    temp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, mode)
    try:
        try:
            pwrite_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise
    dir_fd = os.open(folder, os.O_RDONLY | O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


#: fsspec protocols of object stores: a single PUT replaces an object whole; there is no rename
#: (a "move" is a copy then a delete, which a reader can see half done).
OBJECT_STORE_PROTOCOLS = frozenset({"s3", "s3a", "gs", "gcs", "abfs", "abfss", "az", "adl", "oss", "r2"})


def is_object_store(fs: AbstractFileSystem) -> bool:
    return any(p in OBJECT_STORE_PROTOCOLS for p in _protocols(fs))


def _protocols(fs: AbstractFileSystem) -> tuple[str, ...]:
    return tuple(fs.protocol) if isinstance(fs.protocol, (tuple, list)) else (str(fs.protocol),)


def _move_over(fs: AbstractFileSystem, temp: str, path: str) -> bool:
    """Move ``temp`` onto ``path``, replacing it; whether it moved. WebHDFS: a RENAME with
    ``renameoptions=OVERWRITE`` (the NameNode's atomic rename2), because HDFS's plain rename refuses
    an existing target and WebHDFS answers that with ``{"boolean": false}``, not an error (fsspec's
    ``mv`` does not look). Elsewhere ``fs.mv``. Either way the temporary name must be gone after."""
    if any(p in ("webhdfs", "swebhdfs") for p in _protocols(fs)):
        fs._call("RENAME", method="put", path=temp, destination=path, renameoptions="OVERWRITE")
    else:
        fs.mv(temp, path)
    return not fs.exists(temp)


def write_atomic(fs: AbstractFileSystem, path: str, data: bytes, *, mode: int = FILE_MODE,
                 dir_mode: int = DIR_MODE) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new content, never a mix:
    :func:`replace_file` on a local disk (missing directories get ``dir_mode``), one object write
    on an object store (no rename there), a temporary name then a move over the target on other
    filesystems (:func:`_move_over`: HDFS renames atomically); a store that cannot move (the move
    raises, or leaves the temporary file) gets a direct write."""
    if is_local(fs):
        make_private_dirs(os.path.dirname(path), dir_mode)
        replace_file(path, data, mode)
        return
    if is_object_store(fs):
        fs.pipe_file(path, data)
        return
    fs.makedirs(posixpath.dirname(path), exist_ok=True)
    temp = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.{os.urandom(6).hex()}.tmp")
    fs.pipe_file(temp, data)
    try:
        moved = _move_over(fs, temp, path)
    except Exception:  # noqa: BLE001 - this store cannot move over a file; one write is whole there
        moved = False
    if not moved:
        fs.pipe_file(path, data)
        if fs.exists(temp):
            fs.rm_file(temp)


#: S3 error codes of a conditional create (``If-None-Match: *``) that lost to another writer:
#: the object exists (412), or a concurrent conditional write to the same key is in flight (409).
LOST_RACE_CODES = frozenset({"PreconditionFailed", "ConditionalRequestConflict", "412", "409"})


def _error_code(exc: BaseException) -> tuple[str, int | None]:
    """(error code, HTTP status) of the botocore ``ClientError`` in ``exc``'s cause chain, else ("", None)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            error = response.get("Error") or {}
            status = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            return str(error.get("Code") or ""), status if isinstance(status, int) else None
        current = current.__cause__ or current.__context__
    return "", None


def lost_create_race(exc: BaseException) -> bool:
    """Whether an error of a conditional create means another writer got there first: a
    ``FileExistsError`` (s3fs's translation of a 412 with its ``Condition``), or any error whose
    ``ClientError`` carries 412 / ``PreconditionFailed`` or 409 ``ConditionalRequestConflict``
    (servers whose 412 lacks ``Condition`` make s3fs raise a plain ``OSError``)."""
    if isinstance(exc, FileExistsError):
        return True
    code, status = _error_code(exc)
    return code in LOST_RACE_CODES or status == 412 or (status == 409 and "Conditional" in code)


def create_exclusive(fs: AbstractFileSystem, path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists; whether this call created it.

    Local disk: ``O_EXCL``. Elsewhere ``open(path, "xb")``, which s3fs sends as a conditional
    PUT (``If-None-Match: *``): a lost race in any of its error shapes (:func:`lost_create_race`)
    is ``False``. Any other failure is a :class:`StorageError` (nothing written); an object store
    whose client cannot create conditionally too (no check-then-write there: two writers could
    both win). Other filesystems without an exclusive create are checked, then written."""
    if is_local(fs):
        make_private_dirs(os.path.dirname(path))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_CLOEXEC, FILE_MODE)
        except FileExistsError:
            return False
        try:
            pwrite_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return True
    object_store = is_object_store(fs)
    if not object_store:
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
    try:
        with fs.open(path, "xb") as handle:
            handle.write(data)
        return True
    except (ValueError, NotImplementedError, TypeError) as exc:
        if object_store:
            raise StorageError(
                found=f"{type(fs).__name__} cannot create {path} only if absent ({type(exc).__name__}: {exc})",
                expected="a client that sends conditional writes (If-None-Match), such as s3fs 2024.10 or newer",
                action="Nothing was written. Upgrade the storage client (`pip install -c .ci/constraints.txt "
                "'airflow-ckpt-provider[s3]'`); a check-then-write lock is not safe on an object store.",
                path=path) from None
        log.warning("%s cannot create a file only if absent: the lock is checked, then written",
                    type(fs).__name__)
        if fs.exists(path):
            return False
        fs.pipe_file(path, data)
        return True
    except Exception as exc:  # noqa: BLE001 - every error shape of a conditional create is sorted here
        if lost_create_race(exc):
            return False
        code, status = _error_code(exc)
        shown = f"{code or type(exc).__name__}" + (f" (HTTP {status})" if status else "")
        raise StorageError(found=f"{shown} creating {path}: {exc}",
                           expected="the file created, or refused because it already exists",
                           path=path) from exc


__all__ = ["DIR_MODE", "FILE_MODE", "LOST_RACE_CODES", "OBJECT_STORE_PROTOCOLS", "is_object_store",
           "lost_create_race", "OWNER_DIR_MODE", "OWNER_FILE_MODE", "O_CLOEXEC", "create_exclusive", "is_local",
           "make_private_dirs", "open_private", "private_dir", "pwrite_all", "replace_file", "write_atomic",
           "write_private_file"]
