"""Read, verify and restore checkpoint archives made by :class:`CheckpointArchive`.
Reads and writes through fsspec filesystems.

Restore is what a rollback uses: it copies an archive's checkpoint back to an empty location and
proves, file by file, that the bytes there are the archived ones.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import posixpath
import socket
import uuid
from dataclasses import asdict, dataclass

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.checksums import is_sidecar
from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveCorrupt,
    ArchiveIncomplete,
    ArchiveNotFound,
    CheckpointError,
    InvalidLockFile,
    LocationsOverlap,
    RestoreInProgress,
    StorageError,
    TargetNotEmpty,
    os_error_parts,
)
from airflow_ckpt_provider.checkpoint.manifest import (
    DATA_DIR,
    MANIFEST,
    RESTORE_MARKER,
    ArchivedFile,
    ArchiveManifest,
    human_bytes,
)
from airflow_ckpt_provider.clock import utc_now
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field
from airflow_ckpt_provider.storage.checksums import check_state_checksums
from airflow_ckpt_provider.storage.files import (
    O_CLOEXEC,
    create_exclusive,
    is_local,
    make_private_dirs,
    read_file,
)
from airflow_ckpt_provider.storage.listing import holds_anything
from airflow_ckpt_provider.storage.locations import overlap, resolved
from airflow_ckpt_provider.storage.transfer import (
    CHUNK,
    Progress,
    Readahead,
    check_listing,
    copy_file,
    default_workers,
    list_tree,
    make_dirs,
    run_parallel,
    verify_files,
)

log = logging.getLogger(__name__)


def norm_path(fs: AbstractFileSystem, path: str) -> str:
    """``path`` without protocol and trailing slash, as ``fs`` names it."""
    return fs._strip_protocol(path).rstrip("/") or "/"


def read_manifest(fs: AbstractFileSystem, archive_path: str) -> ArchiveManifest:
    """The manifest of an archive; :class:`ArchiveNotFound`, :class:`ArchiveIncomplete` or
    :class:`ArchiveCorrupt` (``manifest.json``)."""
    path = norm_path(fs, archive_path)
    try:
        raw = read_file(fs, posixpath.join(path, MANIFEST))
    except FileNotFoundError:
        if not fs.exists(path):
            raise ArchiveNotFound(found="nothing at this location", expected="an archive directory",
                                  path=archive_path) from None
        raise ArchiveIncomplete(found="no manifest.json", expected="a manifest written after verification",
                                path=archive_path) from None
    return ArchiveManifest.from_json(raw)


def verify_archive(fs: AbstractFileSystem, archive_path: str, *, workers: int | None = None) -> ArchiveManifest:
    """Re-read every archived file against the manifest; returns it, or raises
    :class:`ArchiveCorrupt` naming the first bad file (also ArchiveIncomplete / ArchiveNotFound).
    First, Spark's own state file checksums (Spark 4.1+ ``<file>.crc``) are checked against their
    files: :class:`StateChecksumMismatch` (an ArchiveCorrupt) names a file whose checksum is gone
    or disagrees with it, which Spark would refuse on restart."""
    manifest = read_manifest(fs, archive_path)
    data = posixpath.join(norm_path(fs, archive_path), DATA_DIR)
    check_sidecars(fs, data, manifest, where=archive_path)
    verify_files(fs, data, manifest.files, where=archive_path, workers=workers or default_workers(fs), log=log)
    log.info("archive %s verified: %s files, %s", archive_path, f"{manifest.file_count:,}",
             human_bytes(manifest.total_bytes))
    return manifest


def check_sidecars(fs: AbstractFileSystem, root: str, manifest: ArchiveManifest, *, where: str,
                   content: bool = True) -> int:
    """:func:`check_state_checksums` of the copy of ``manifest``'s checkpoint under ``root``: the
    sidecars the manifest lists must be there and (``content``) agree with their files."""
    files, _ = list_tree(fs, root) if fs.exists(root) else ({}, [])
    expected = [f.path for f in manifest.files if is_sidecar(f.path)]
    return check_state_checksums(fs, root, files, where=where, expected=expected, content=content)


def _lock_path(fs: AbstractFileSystem, target: str) -> str:
    parent, name = posixpath.split(target.rstrip("/"))
    return posixpath.join(parent, f".{name}.restore-lock")


#: the format of a restore target's lock (:class:`RestoreLock`); the previous release wrote it without one (format 0)
RESTORE_LOCK_FORMAT = 1


@dataclass(frozen=True)
class RestoreLock:
    """A restore target's lock (``.<target name>.restore-lock`` beside it): the process that holds
    it (``pid`` on ``host``), since when, the archive it restores and the temporary folder it copies
    into (format :data:`RESTORE_LOCK_FORMAT`; a lock without a format number is the previous
    release's, read as format 0)."""

    pid: int
    host: str
    started_at: str = ""
    archive: str = ""
    temp: str = ""

    def to_json(self) -> str:
        return json.dumps(_RESTORE_LOCK.encode(asdict(self)))

    @classmethod
    def from_json(cls, data: str | bytes) -> RestoreLock:
        """Decode a lock through its codec; :class:`InvalidLockFile` when it is not one."""
        return cls(**_RESTORE_LOCK.present(data))


_RESTORE_LOCK = Codec("restore lock", InvalidLockFile, {
    "pid": Field((int,)), "host": Field((str,)),
    **{name: Field((str,), required=False) for name in ("started_at", "archive", "temp")},
}, version=RESTORE_LOCK_FORMAT, versions=(UNVERSIONED,))


def _acquire(fs: AbstractFileSystem, lock: str, holder: RestoreLock, target_path: str) -> None:
    """Take the target's lock (the journal's conditional create); a lock left by a dead process on
    this host is taken over (its temporary folder removed), any other is :class:`RestoreInProgress`
    (one that is not a :class:`RestoreLock` too: being written, or damaged)."""
    for _ in range(3):
        if create_exclusive(fs, lock, holder.to_json().encode()):
            return
        held: RestoreLock | None
        try:
            held = RestoreLock.from_json(read_file(fs, lock))
        except FileNotFoundError:
            continue  # released meanwhile
        except CheckpointError as exc:  # InvalidLockFile; JsonTooLarge from the read
            held, described = None, f"an unreadable lock (found {exc.found}; expected {exc.expected})"
        else:
            described = (f"process {held.pid} on {held.host} since {held.started_at or '?'}, "
                         f"copying into {held.temp or '?'}")
        if held is not None and held.host == holder.host and not _alive(held.pid):
            log.warning("restore lock %s left by process %s, which is gone: taking it over", lock, held.pid)
            if _own_temp(held.temp, lock) and fs.exists(held.temp):
                fs.rm(held.temp, recursive=True)
            fs.rm_file(lock)
            continue
        raise RestoreInProgress(found=f"{lock} held by {described}", expected="no other restore into this target",
                                path=target_path)
    raise RestoreInProgress(found=f"a lock at {lock} that keeps changing", expected="one restore at a time",
                            path=target_path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def _temp_prefix(lock: str) -> str:
    return lock[: -len(".restore-lock")] + ".restoring-"


def _own_temp(temp: str, lock: str) -> bool:
    """Whether ``temp`` (what a lock file names) is one of this target's temporary folders: a
    single name beside the lock starting with its prefix, nothing that climbs out (``..``) or
    nests; a crafted lock file never makes a takeover delete anything else."""
    prefix = _temp_prefix(lock)
    rest = temp[len(prefix):] if temp.startswith(prefix) else ""
    return bool(rest) and "/" not in rest and posixpath.normpath(temp) == temp


def restore_archive(
    archive_fs: AbstractFileSystem,
    archive_path: str,
    target_fs: AbstractFileSystem,
    target_path: str,
    *,
    workers: int | None = None,
    chunk_size: int = CHUNK,
) -> ArchiveManifest:
    """Copy an archive's checkpoint to an empty or missing ``target_path`` and verify it there,
    never half-visible: on a local disk into a temporary sibling folder that is renamed into place
    once every file verified; on other filesystems (no rename) directly into the target, which
    holds :data:`RESTORE_MARKER` from before its first file until after its verification (the
    reader refuses a location holding it). A lock beside the target (created only if absent, like
    the journal's) keeps two restores apart. A restore that fails removes what it wrote.

    Raises :class:`LocationsOverlap` for a target in (or holding) the archive,
    :class:`RestoreInProgress` while another restore holds the target, :class:`TargetNotEmpty`
    if the target holds anything; :class:`ArchiveIncomplete` for an archive without manifest;
    :class:`ArchiveCorrupt` naming the file when an archived file or its restored copy does not
    match the manifest, :class:`UnsafeEntry` for a link or special file in the archive and
    :class:`StorageError` when the target's storage fails (disk full, permission denied): nothing
    is left at the target then.
    """
    relation = overlap((target_fs, target_path), (archive_fs, archive_path))  # through '..' and links
    if relation is not None:
        raise LocationsOverlap(
            found=f"restore target {target_path} and archive {archive_path}: {relation} "
                  f"({resolved(target_fs, target_path)} and {resolved(archive_fs, archive_path)})",
            expected="a restore target outside the archive", path=target_path)
    manifest = read_manifest(archive_fs, archive_path)
    target = norm_path(target_fs, target_path)
    data = posixpath.join(norm_path(archive_fs, archive_path), DATA_DIR)
    check_sidecars(archive_fs, data, manifest, where=archive_path, content=False)  # a dropped checksum, by name
    check_listing(archive_fs, data, manifest.files, where=archive_path)  # links, special files: refused before writing
    local = is_local(target_fs)
    lock = _lock_path(target_fs, target)
    temp = f"{_temp_prefix(lock)}{uuid.uuid4().hex[:12]}" if local else target
    holder = RestoreLock(pid=os.getpid(), host=socket.gethostname(), started_at=utc_now().isoformat(),
                         archive=manifest.archive_uri, temp=temp)
    if holds_anything(target_fs, target):  # before the lock: a refused restore writes nothing at all
        raise TargetNotEmpty(found="existing content", expected="an empty or missing directory", path=target_path)
    try:
        if local:
            make_private_dirs(posixpath.dirname(target))
        _acquire(target_fs, lock, holder, target_path)
    except OSError as exc:  # permission denied, read-only or full filesystem: nothing was written
        raise _storage_error(exc, manifest, target_path, "Nothing was written.") from None
    try:
        if holds_anything(target_fs, target):  # filled while we waited for the lock
            raise TargetNotEmpty(found="existing content", expected="an empty or missing directory",
                                 path=target_path)
        try:
            _copy_verified(archive_fs, archive_path, data, target_fs, temp, manifest, workers, chunk_size,
                           marker=not local, where=target_path)
            if local:
                _rename_into_place(target_fs, temp, target)
            else:
                target_fs.rm_file(posixpath.join(target, RESTORE_MARKER))  # the last write: now complete
        except BaseException as exc:
            _remove(target_fs, temp)
            if isinstance(exc, OSError):
                raise _storage_error(exc, manifest, target_path, "Nothing was left at the target.") from None
            raise
    finally:
        _release(target_fs, lock)
    log.info("restored %s (%s files, %s) to %s and verified it", manifest.archive_uri,
             f"{manifest.file_count:,}", human_bytes(manifest.total_bytes), target_path)
    return manifest


def _storage_error(exc: OSError, manifest: ArchiveManifest, target_path: str, done: str) -> StorageError:
    found, action = os_error_parts(exc)
    return StorageError(found=found, expected=f"a writable target with room for {human_bytes(manifest.total_bytes)}",
                        path=target_path, action=f"{done} {action}")


def _copy_verified(archive_fs: AbstractFileSystem, archive_path: str, data: str, fs: AbstractFileSystem, into: str,
                   manifest: ArchiveManifest, workers: int | None, chunk_size: int, *, marker: bool,
                   where: str) -> None:
    """Copy the archive's files into ``into`` (the marker first when asked), then verify them there."""
    workers = workers or default_workers(archive_fs, fs)
    if marker:
        fs.makedirs(into, exist_ok=True)
        fs.pipe_file(posixpath.join(into, RESTORE_MARKER), json.dumps({"archive": manifest.archive_uri}).encode())
    make_dirs(fs, into, [f.path for f in manifest.files], manifest.empty_dirs)
    progress = Progress(log, "restored", manifest.file_count, manifest.total_bytes)

    def copy(entry: ArchivedFile) -> None:
        size, digest = copy_file(archive_fs, posixpath.join(data, entry.path), fs, posixpath.join(into, entry.path),
                                 chunk_size)
        progress.add(size)
        if (size, digest) != (entry.size, entry.sha256):
            raise ArchiveCorrupt(file=entry.path, found=f"sha256 {digest[:16]}… ({size} bytes) in the archive",
                                 expected=f"sha256 {entry.sha256[:16]}… ({entry.size} bytes)", path=archive_path)

    readahead = Readahead.for_files(archive_fs, data, [f.path for f in manifest.files],
                                    [f.size for f in manifest.files])
    run_parallel(list(manifest.files), copy, workers, readahead=readahead)
    progress.finish()
    verify_files(fs, into, manifest.files, where=where, workers=workers, log=log, verb="verified restored",
                 ignore=frozenset({RESTORE_MARKER}) if marker else frozenset())
    checked = check_sidecars(fs, into, manifest, where=where)  # what Spark verifies when it reads the state
    if checked:
        log.info("%d state file checksums (Spark's <file>.crc) agree with their restored files", checked)


def _rename_into_place(fs: AbstractFileSystem, temp: str, target: str) -> None:
    """Rename the verified LOCAL ``temp`` to ``target`` (an empty folder there is replaced) and make
    the rename durable (fsync of the parent folder)."""
    try:
        os.rename(temp, target)
    except OSError as exc:
        if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
        raise TargetNotEmpty(found="content written to the target while the restore ran",
                             expected="an empty or missing directory", path=target) from None
    fd = os.open(os.path.dirname(target) or "/", os.O_RDONLY | O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(fs: AbstractFileSystem, path: str) -> None:
    """Remove what a failed restore wrote (never raising over the original error)."""
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except Exception:  # noqa: BLE001 - the restore's own error is the one to report
        log.exception("could not remove the partial restore at %s: delete it by hand", path)


def _release(fs: AbstractFileSystem, lock: str) -> None:
    try:
        fs.rm_file(lock)
    except FileNotFoundError:
        pass
    except Exception:  # noqa: BLE001 - never hide the restore's outcome
        log.exception("could not remove the restore lock %s: delete it by hand", lock)
