"""Read, verify and restore checkpoint archives made by :class:`CheckpointArchive`.
Reads and writes through fsspec filesystems.

Restore is what a rollback uses: it copies an archive's checkpoint back to an empty location and
proves, file by file, that the bytes there are the archived ones.
"""

from __future__ import annotations

import logging
import posixpath

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveCorrupt,
    ArchiveIncomplete,
    ArchiveNotFound,
    LocationsOverlap,
    TargetNotEmpty,
)
from airflow_ckpt_provider.checkpoint.files import read_file
from airflow_ckpt_provider.checkpoint.listing import holds_anything
from airflow_ckpt_provider.checkpoint.locations import overlap, resolved
from airflow_ckpt_provider.checkpoint.manifest import DATA_DIR, MANIFEST, ArchivedFile, ArchiveManifest, human_bytes
from airflow_ckpt_provider.checkpoint.transfer import (
    CHUNK,
    Progress,
    Readahead,
    check_listing,
    copy_file,
    default_workers,
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
    :class:`ArchiveCorrupt` naming the first bad file (also ArchiveIncomplete / ArchiveNotFound)."""
    manifest = read_manifest(fs, archive_path)
    verify_files(fs, posixpath.join(norm_path(fs, archive_path), DATA_DIR), manifest.files,
                 where=archive_path, workers=workers or default_workers(fs), log=log)
    log.info("archive %s verified: %s files, %s", archive_path, f"{manifest.file_count:,}",
             human_bytes(manifest.total_bytes))
    return manifest


def restore_archive(
    archive_fs: AbstractFileSystem,
    archive_path: str,
    target_fs: AbstractFileSystem,
    target_path: str,
    *,
    workers: int | None = None,
    chunk_size: int = CHUNK,
) -> ArchiveManifest:
    """Copy an archive's checkpoint to an empty or missing ``target_path`` and verify it there.

    Raises :class:`TargetNotEmpty` before writing anything if the target holds anything;
    :class:`ArchiveIncomplete` for an archive without manifest; :class:`ArchiveCorrupt` naming
    the file when an archived file or its restored copy does not match the manifest (the
    partial target must then be deleted by hand before a retry).
    """
    relation = overlap((target_fs, target_path), (archive_fs, archive_path))  # through '..' and links
    if relation is not None:
        raise LocationsOverlap(
            found=f"restore target {target_path} and archive {archive_path}: {relation} "
                  f"({resolved(target_fs, target_path)} and {resolved(archive_fs, archive_path)})",
            expected="a restore target outside the archive", path=target_path)
    manifest = read_manifest(archive_fs, archive_path)
    target = norm_path(target_fs, target_path)
    if holds_anything(target_fs, target):
        raise TargetNotEmpty(found="existing content", expected="an empty or missing directory",
                             path=target_path)
    workers = workers or default_workers(archive_fs, target_fs)
    data = posixpath.join(norm_path(archive_fs, archive_path), DATA_DIR)
    check_listing(archive_fs, data, manifest.files, where=archive_path)  # links, special files: refused before writing
    make_dirs(target_fs, target, [f.path for f in manifest.files], manifest.empty_dirs)
    progress = Progress(log, "restored", manifest.file_count, manifest.total_bytes)

    def copy(entry: ArchivedFile) -> None:
        size, digest = copy_file(archive_fs, posixpath.join(data, entry.path), target_fs,
                                 posixpath.join(target, entry.path), chunk_size)
        progress.add(size)
        if (size, digest) != (entry.size, entry.sha256):
            raise ArchiveCorrupt(file=entry.path, found=f"sha256 {digest[:16]}… ({size} bytes) in the archive",
                                 expected=f"sha256 {entry.sha256[:16]}… ({entry.size} bytes)", path=archive_path)

    readahead = Readahead.for_files(archive_fs, data, [f.path for f in manifest.files],
                                    [f.size for f in manifest.files])
    run_parallel(list(manifest.files), copy, workers, readahead=readahead)
    progress.finish()
    verify_files(target_fs, target, manifest.files, where=target_path, workers=workers, log=log,
                 verb="verified restored")
    log.info("restored %s (%s files, %s) to %s and verified it", manifest.archive_uri,
             f"{manifest.file_count:,}", human_bytes(manifest.total_bytes), target_path)
    return manifest
