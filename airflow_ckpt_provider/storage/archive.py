"""Archive a stopped query's checkpoint with a verified manifest; list, prune and restore archives.
Reads and writes through fsspec filesystems (the checkpoint's and the archive's).

Works on any pair of fsspec filesystems (the checkpoint and the archive may live on different
stores): local paths, ``memory://``, ``s3://``, ``gs://``, ``abfs://``, ``hdfs://``.
Layout and manifest: :mod:`airflow_ckpt_provider.checkpoint.manifest`.

A standby rehearsal's scratch left in the checkpoint (``_ckpt/rehearsal/``) is not part of it and
is left out (:func:`checkpoint_tree`).

Safety rules: nothing is copied while the query runs (live heartbeat, or an offsets file newer
than the stop acknowledgement); the manifest is written last, only after every copied byte was
read back from the archive and matched the bytes whose SHA-256 it records (how, cheaply:
:mod:`airflow_ckpt_provider.storage.transfer`) and, on a local disk, after the files were
flushed to it; the original is removed only after that and only when asked; a re-run with the
same upgrade id completes the same archive instead of starting another one.
"""

from __future__ import annotations

import builtins
import getpass
import logging
import posixpath
import socket
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveConflict,
    ArchiveCorrupt,
    ArchiveInsideCheckpoint,
    CheckpointChanged,
    CheckpointError,
    CheckpointNotFound,
    HandoverMismatch,
    NotACheckpoint,
    QueryStillRunning,
    StateChecksumMismatch,
    UnreadableCheckpoint,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, handover_from_snapshot
from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.checkpoint.manifest import (
    DATA_DIR,
    INTENT,
    MANIFEST,
    ArchivedFile,
    ArchiveInfo,
    ArchiveIntent,
    ArchiveManifest,
    RetentionPlan,
    archive_dir_name,
    check_name,
    human_bytes,
    parse_dir_name,
    plan_retention,
)
from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot
from airflow_ckpt_provider.clock import utc_now
from airflow_ckpt_provider.records.control import REHEARSAL_SCRATCH_DIR, parse_time
from airflow_ckpt_provider.storage.checksums import check_state_checksums
from airflow_ckpt_provider.storage.files import (
    check_no_links,
    is_local,
    read_file,
    write_atomic,
    write_private_file,
)
from airflow_ckpt_provider.storage.listing import list_batch_ids, list_entries
from airflow_ckpt_provider.storage.locations import overlap, resolved
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.restore import norm_path as _norm
from airflow_ckpt_provider.storage.restore import read_manifest, restore_archive, verify_archive
from airflow_ckpt_provider.storage.stop import ControlFiles
from airflow_ckpt_provider.storage.transfer import (
    CHUNK,
    Progress,
    Readahead,
    ReadBackMismatch,
    check_unchanged,
    copy_file,
    copy_verified,
    default_workers,
    flush_filesystem,
    hash_file,
    list_tree,
    make_dirs,
    run_parallel,
    same_verified,
    scan_tree,
    spread_directories,
    verify_files,
)

log = logging.getLogger(__name__)
CLOCK_SKEW = timedelta(seconds=2)


def _is_scratch(rel: str) -> bool:
    """Whether ``rel`` (a path in a checkpoint) is in a standby rehearsal's scratch (``_ckpt/rehearsal/``)."""
    return rel == REHEARSAL_SCRATCH_DIR or rel.startswith(REHEARSAL_SCRATCH_DIR + "/")


def checkpoint_tree(fs: AbstractFileSystem, root: str) -> tuple[dict[str, int], dict[str, Any], list[str]]:
    """:func:`~airflow_ckpt_provider.storage.transfer.scan_tree` of a checkpoint, without a standby
    rehearsal's scratch (``_ckpt/rehearsal/``, left by a driver that died while it rehearsed): scratch
    of another query, never part of the checkpoint, so never archived, compared or restored."""
    files, stamps, empty_dirs = scan_tree(fs, root)
    return ({p: size for p, size in files.items() if not _is_scratch(p)},
            {p: stamp for p, stamp in stamps.items() if not _is_scratch(p)},
            [d for d in empty_dirs if not _is_scratch(d)])


def default_actor() -> str:
    """``user@host`` of this process."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _modified(info: Mapping[str, Any]) -> datetime | None:
    """Modification time of an fsspec ``info`` dict (keys differ per filesystem), as UTC."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modificationTime", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        if isinstance(value, (int, float)):
            return datetime.fromtimestamp(value / 1000 if value > 1e11 else value, timezone.utc)
        try:
            stamp = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            continue
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)
    return None


def check_query_stopped(fs: AbstractFileSystem, root: str, *, now: datetime | None = None, uri: str = "") -> None:
    """:class:`QueryStillRunning` if the checkpoint's query looks alive.

    Alive means a live heartbeat (``_ckpt/heartbeat.json``, :meth:`Heartbeat.is_alive`), a live
    supervised driver (``_ckpt/driver.json``, :meth:`DriverRecord.is_alive`), or, when
    a stop acknowledgement exists, an offsets file planned after it (higher batch than it
    recorded, or modified after ``stopped_at``).
    """
    now, where = now or utc_now(), uri or root
    control = ControlFiles(fs, root, uri=where)  # a missing or unreadable record reads as None
    beat = control.heartbeat()
    if beat is not None and beat.is_alive(now):
        raise QueryStillRunning(
            found=f"a live heartbeat of query {beat.query_id} (run {beat.run_id}), updated "
            f"{beat.updated_at}, every {beat.interval_s:g}s", expected="a stopped query", path=where)
    driver = control.driver()
    if driver is not None and driver.is_alive(now):
        raise QueryStillRunning(
            found=f"the driver process of launch {driver.launch_id} (process group {driver.pid} on "
            f"{driver.host or '?'}) still running, record updated {driver.updated_at}",
            expected="a stopped query whose driver exited", path=where)
    ack = control.ack()
    if ack is None:
        return
    planned = list_batch_ids(fs, posixpath.join(root, "offsets"))
    if not planned:
        return
    newest = planned[-1]
    if ack.last_planned_batch is not None and newest > ack.last_planned_batch:
        raise QueryStillRunning(
            found=f"offsets/{newest} planned after the stop acknowledgement (last planned "
            f"{ack.last_planned_batch} at {ack.stopped_at})", expected="no batch after the stop", path=where)
    modified = _modified(fs.info(posixpath.join(root, "offsets", str(newest))))
    if modified is not None and modified > parse_time(ack.stopped_at) + CLOCK_SKEW:
        raise QueryStillRunning(
            found=f"offsets/{newest} modified {modified.isoformat()} after the stop acknowledgement "
            f"({ack.stopped_at})", expected="a checkpoint untouched since the stop", path=where)


def check_archive_location(
    source: tuple[AbstractFileSystem, str],
    archive: tuple[AbstractFileSystem, str],
    stream_name: str,
    *,
    source_uri: str = "",
    archive_uri: str = "",
) -> str:
    """Refuse an unsafe stream name (:class:`UnsafeStreamName`) or an archive location that
    overlaps the checkpoint (:class:`ArchiveInsideCheckpoint`); return the stream name. Reads
    nothing."""
    stream_name = check_name(stream_name)
    (source_fs, source_path), (archive_fs, archive_root) = source, archive
    stream_dir = posixpath.join(_norm(archive_fs, archive_root), stream_name)
    relation = overlap((archive_fs, stream_dir), (source_fs, source_path))  # through '..' and links
    if relation is not None:
        where = source_uri or source_path
        raise ArchiveInsideCheckpoint(
            found=f"archive {(archive_uri or archive_root).rstrip('/')}/{stream_name} and checkpoint {where} overlap "
                  f"({relation}: {resolved(archive_fs, stream_dir)} and {resolved(source_fs, source_path)})",
            expected="separate locations", path=where)
    return stream_name


@dataclass(frozen=True)
class _Plan:
    """The archive directory chosen for this run and whether it resumes an earlier one."""

    name: str
    path: str
    started_at: datetime
    resumed: bool
    complete: bool


class CheckpointArchive:
    """Archives under ``archive_root`` on ``archive_fs``: create, verify, list, prune, restore.

    ``workers`` threads copy and hash (default: :func:`default_workers`); progress is logged
    every ``progress_every_files`` files or ``progress_every_s`` seconds. ``on_file_copied(rel_path)``
    is called after each copied file (a test hook for crashes). ``timings`` holds the seconds the
    last :meth:`archive` spent per phase: ``scan``, ``copy`` (copy, hash and, to a local disk, the
    read-back comparison), ``check`` (source unchanged, archive untouched since verified),
    ``verify`` (second pass; not to a local disk), ``sync`` (flush to disk: the wait left after
    the checks, which run meanwhile), ``manifest``.
    On a local disk, archive files get mode 0o640 and directories 0o750.
    """

    def __init__(
        self,
        archive_fs: AbstractFileSystem,
        archive_root: str,
        *,
        archive_uri: str | None = None,
        workers: int | None = None,
        chunk_size: int = CHUNK,
        progress_every_files: int = 1000,
        progress_every_s: float = 10.0,
        clock: Callable[[], datetime] = utc_now,
        on_file_copied: Callable[[str], None] | None = None,
    ) -> None:
        self.fs = archive_fs
        self.root = _norm(archive_fs, archive_root)
        self.uri = refuse_credentials((archive_uri or archive_root).rstrip("/"), "archive location")
        self.workers = workers
        self.chunk = chunk_size
        self.every_files, self.every_s = progress_every_files, progress_every_s
        self.clock = clock
        self.on_file_copied = on_file_copied
        self.timings: dict[str, float] = {}

    # -- archive ---------------------------------------------------------------------------------

    def archive(
        self,
        source_fs: AbstractFileSystem,
        source_path: str,
        *,
        stream_name: str,
        upgrade_id: str,
        source_uri: str | None = None,
        handover: Handover | None = None,
        created_by: str | None = None,
        reason: str = "",
        dag_run_id: str = "",
        remove_source: bool = False,
    ) -> ArchiveManifest:
        """Copy the checkpoint, verify it, write the manifest; returns it.

        Raises :class:`UnsafeStreamName`, :class:`ArchiveInsideCheckpoint`,
        :class:`QueryStillRunning`, :class:`HandoverMismatch` before anything is written;
        :class:`CheckpointChanged` if the checkpoint changed during the copy;
        :class:`ArchiveCorrupt` if the copy does not verify; :class:`ArchiveConflict` if the
        upgrade id's archive was made from another checkpoint, :class:`InvalidArchiveIntent` if its
        unfinished archive's ``_intent.json`` is not an intent. A complete archive for the same
        upgrade id is verified and returned (no second copy).
        """
        timings = self.timings = {}
        clock = _Stopwatch(timings)
        upgrade_id = check_name(upgrade_id, "upgrade id")
        source = _norm(source_fs, source_path)
        source_uri = refuse_credentials((source_uri or source_path).rstrip("/"), "checkpoint location")
        stream_name = check_archive_location((source_fs, source), (self.fs, self.root), stream_name,
                                             source_uri=source_uri, archive_uri=self.uri)
        check_query_stopped(source_fs, source, now=self.clock(), uri=source_uri)
        snapshot = self._snapshot(source_fs, source, source_uri)
        handover = self._handover(snapshot, handover, source_uri)
        workers = self.workers or default_workers(source_fs, self.fs)

        # links and special files refused before any write
        files, stamps, empty_dirs = checkpoint_tree(source_fs, source)
        clock.lap("scan")
        plan = self._plan(stream_name, upgrade_id)
        if plan.complete:
            return self._reuse(plan, source_fs, source, source_uri, remove_source, workers)
        intent = self._write_intent(plan, ArchiveIntent(
            stream_name=stream_name, upgrade_id=upgrade_id, source_uri=source_uri,
            started_at=plan.started_at.isoformat(), created_by=created_by or default_actor(), reason=reason,
            dag_run_id=dag_run_id))
        data = posixpath.join(plan.path, DATA_DIR)
        archive_uri = f"{self.uri}/{stream_name}/{plan.name}"
        local = is_local(self.fs)
        log.info("archiving %s files (%s) of query %s from %s to %s/%s/%s%s", f"{len(files):,}",
                 human_bytes(sum(files.values())), snapshot.query_id, source_uri, self.uri, stream_name,
                 plan.name, " (resuming)" if plan.resumed else "")
        entries, verified = self._copy_tree(source_fs, source, files, empty_dirs, data, workers, plan.resumed,
                                            archive_uri)
        clock.lap("copy")

        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-flush") as pool:
            if local:  # every byte was read back and compared while copying; the disk flushes while
                # the checks below run (an exception waits for the flush, then propagates)
                log.info("flushing %s to disk before writing the manifest", human_bytes(sum(files.values())))
                flushing = pool.submit(flush_filesystem, data)
            after, after_stamps, _ = checkpoint_tree(source_fs, source)
            if (after, after_stamps) != (files, stamps):
                changed = sorted(set(after) ^ set(files) | {
                    p for p in files if (after.get(p), after_stamps.get(p)) != (files[p], stamps[p])})
                raise CheckpointChanged(found=f"{len(changed)} files added, removed or rewritten during the copy "
                                        f"(first: {changed[0]})", expected="a quiet checkpoint", path=source_uri)
            check_query_stopped(source_fs, source, now=self.clock(), uri=source_uri)
            if local:  # nothing touched the archive since each file was verified
                check_unchanged(self.fs, data, entries, verified, where=archive_uri)
            clock.lap("check")
            if local:
                flushing.result()
                clock.lap("sync")
        if not local:
            verify_files(self.fs, data, entries, where=archive_uri, workers=workers, log=log, verb="verified")
            clock.lap("verify")
        self._check_state_checksums(data, files, archive_uri, source_uri)
        manifest = ArchiveManifest(
            stream_name=stream_name, upgrade_id=upgrade_id, name=plan.name, source_uri=source_uri,
            archive_uri=archive_uri, query_id=snapshot.query_id,
            last_committed_batch=snapshot.last_committed_batch, handover=handover,
            spark_conf=snapshot.conf, files=tuple(entries), empty_dirs=tuple(empty_dirs),
            created_by=intent.created_by, reason=reason, dag_run_id=dag_run_id,
            started_at=plan.started_at.isoformat(), completed_at=self.clock().isoformat(),
            provider_version=_version(),
        )
        self._write_manifest(plan.path, manifest)
        clock.lap("manifest")
        log.info("archive complete and verified: %s (%s files, %s in %.1f s: %s)", manifest.archive_uri,
                 f"{manifest.file_count:,}", human_bytes(manifest.total_bytes), sum(timings.values()),
                 ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in timings.items()))
        if remove_source:
            self._remove_source(source_fs, source, source_uri)
        return manifest

    def _check_state_checksums(self, data: str, files: Mapping[str, int], archive_uri: str, source_uri: str) -> None:
        """Check the archived copy against Spark's own state file checksums (``<file>.crc``, Spark
        4.1+). A mismatch came from the checkpoint itself (every copied byte was verified): it is
        archived as it is, as evidence, with a warning; restoring it is refused later
        (:class:`StateChecksumMismatch`), as Spark would refuse to restart from it."""
        try:
            checked = check_state_checksums(self.fs, data, files, where=archive_uri)
        except StateChecksumMismatch as exc:
            log.warning("the checkpoint %s does not agree with Spark's own state file checksums; it is archived "
                        "as it is, but Spark would not restart from it (nor from a restore of it): %s",
                        source_uri, exc)
            return
        if checked:
            log.info("%d state file checksums (Spark's <file>.crc) agree with their archived files", checked)

    def _snapshot(self, fs: AbstractFileSystem, root: str, uri: str) -> CheckpointSnapshot:
        reader = CheckpointReader(root, fs=fs)
        try:
            return reader.snapshot()
        except (CheckpointNotFound, NotACheckpoint, UnreadableCheckpoint):
            raise
        except CheckpointError as exc:  # archive a damaged checkpoint as it is: it is evidence
            log.warning("archiving %s although it cannot be fully read: %s", uri, exc)
            return CheckpointSnapshot(uri=uri, query_id=None, last_committed_batch=None, last_planned_batch=None,
                                      in_flight_batch=None, sources=(), initial_sources=())

    @staticmethod
    def _handover(snapshot: CheckpointSnapshot, given: Handover | None, uri: str) -> Handover | None:
        if given is None:
            try:
                return handover_from_snapshot(snapshot)
            except CheckpointError:
                return None
        if given.query_id and snapshot.query_id and given.query_id != snapshot.query_id:
            raise HandoverMismatch(found=f"handover of query {given.query_id}",
                                   expected=f"query {snapshot.query_id} of this checkpoint", path=uri)
        if given.batch_id is not None and given.batch_id != snapshot.last_committed_batch:
            raise HandoverMismatch(found=f"handover at batch {given.batch_id}, checkpoint committed up to "
                                   f"{snapshot.last_committed_batch}", expected="the same batch", path=uri)
        return given

    def _plan(self, stream: str, upgrade_id: str) -> _Plan:
        """The directory of this upgrade id if one exists (complete first), else a new one."""
        for info in sorted(self.list(stream), key=lambda a: not a.complete):
            if info.upgrade_id == upgrade_id:
                return _Plan(info.name, info.path, info.started_at, resumed=True, complete=info.complete)
        started = self.clock().replace(microsecond=0)
        name = archive_dir_name(started, upgrade_id)
        return _Plan(name, posixpath.join(self.root, stream, name), started, resumed=False, complete=False)

    def _write_intent(self, plan: _Plan, intent: ArchiveIntent) -> ArchiveIntent:
        """Record what this archive is for before copying; a resumed run must match it. Returns
        the intent in force (a resumed archive keeps its first start). :class:`ArchiveConflict`
        when the unfinished archive is of another checkpoint, :class:`InvalidArchiveIntent` when its
        ``_intent.json`` is not an intent (nothing is copied: what it was for is unknown)."""
        path = posixpath.join(plan.path, INTENT)
        if plan.resumed:
            try:
                data = read_file(self.fs, path)
            except FileNotFoundError:
                data = None
            if data is not None:
                before = ArchiveIntent.from_json(data, path=path)
                if before.source_uri != intent.source_uri:
                    raise ArchiveConflict(found=f"upgrade {intent.upgrade_id} archiving {before.source_uri}",
                                          expected=f"the same checkpoint {intent.source_uri}", path=plan.path)
                return replace(intent, started_at=before.started_at)
        write_atomic(self.fs, path, intent.to_json().encode())  # whole or absent: a resume reads it strictly
        return intent

    def _copy_tree(self, src_fs: AbstractFileSystem, src: str, files: Mapping[str, int], empty_dirs: list[str],
                   dst: str, workers: int, resumed: bool, where: str) -> tuple[list[ArchivedFile], dict[str, Any]]:
        """Copy (or keep, when resuming) every file; returns the entries and, on a local disk, each
        file's stamp when it was verified (:func:`check_unchanged`). :class:`ArchiveCorrupt` if a
        local copy does not read back as written."""
        if resumed and is_local(self.fs):  # never delete or write through a link planted in the archive
            check_no_links(self.root, dst)
        existing = list_tree(self.fs, dst)[0] if resumed and self.fs.exists(dst) else {}
        for extra in sorted(set(existing) - set(files)):
            log.info("removing %s from the earlier attempt: no longer in the checkpoint", extra)
            self.fs.rm_file(posixpath.join(dst, extra))
        local = is_local(self.fs)
        make_dirs(self.fs, dst, files, empty_dirs, private=True)
        progress = Progress(log, "copied", len(files), sum(files.values()),
                            every_files=self.every_files, every_s=self.every_s)
        verified: dict[str, Any] = {}

        def keep_local(rel: str, src_path: str, dst_path: str) -> tuple[int, str] | None:
            kept = same_verified(src_fs, src_path, dst_path, chunk=self.chunk)
            if kept is None:
                return None
            verified[rel] = kept.stamp
            return kept.size, kept.sha256

        def keep_remote(rel: str, src_path: str, dst_path: str) -> tuple[int, str] | None:
            source = hash_file(src_fs, src_path, self.chunk)
            return source if hash_file(self.fs, dst_path, self.chunk) == source else None

        def write_local(rel: str, src_path: str, dst_path: str) -> tuple[int, str]:
            try:
                done = copy_verified(src_fs, src_path, dst_path, size_hint=files[rel], chunk=self.chunk)
            except ReadBackMismatch as exc:
                raise ArchiveCorrupt(file=rel, found=f"a copy that reads back differently ({exc.detail})",
                                     expected="the bytes read from the checkpoint", path=where) from None
            verified[rel] = done.stamp
            return done.size, done.sha256

        def write_remote(rel: str, src_path: str, dst_path: str) -> tuple[int, str]:
            return copy_file(src_fs, src_path, self.fs, dst_path, self.chunk)

        keep, write = (keep_local, write_local) if local else (keep_remote, write_remote)

        def copy(rel: str) -> ArchivedFile:
            src_path, dst_path = posixpath.join(src, rel), posixpath.join(dst, rel)
            if existing.get(rel) == files[rel] and (kept := keep(rel, src_path, dst_path)) is not None:
                progress.add(kept[0], skipped=True)
                return ArchivedFile(rel, *kept)
            size, digest = write(rel, src_path, dst_path)
            progress.add(size)
            if self.on_file_copied is not None:
                self.on_file_copied(rel)
            return ArchivedFile(rel, size, digest)

        order = spread_directories(files)
        readahead = Readahead.for_files(src_fs, src, order, [files[rel] for rel in order])
        entries = run_parallel(order, copy, workers, readahead=readahead)
        progress.finish()
        return entries, verified

    def _write_manifest(self, path: str, manifest: ArchiveManifest) -> None:
        """The manifest appears whole or not at all (and durably, on a local disk): :func:`write_atomic`
        (one object write on an object store, which has no rename)."""
        final = posixpath.join(path, MANIFEST)
        if is_local(self.fs):
            write_private_file(final, manifest.to_json().encode(), atomic=True)
            return
        write_atomic(self.fs, final, manifest.to_json().encode())

    def _reuse(self, plan: _Plan, source_fs: AbstractFileSystem, source: str, source_uri: str,
               remove_source: bool, workers: int) -> ArchiveManifest:
        manifest = verify_archive(self.fs, plan.path, workers=workers)
        if manifest.source_uri != source_uri:
            raise ArchiveConflict(found=f"upgrade {manifest.upgrade_id} archived {manifest.source_uri}",
                                  expected=f"the same checkpoint {source_uri}", path=manifest.archive_uri)
        files, _, _ = checkpoint_tree(source_fs, source)
        if files != {f.path: f.size for f in manifest.files}:
            raise CheckpointChanged(found="a checkpoint that differs from its complete archive",
                                    expected="the files the archive holds", path=source_uri,
                                    action="Archive it under a new upgrade id; nothing was removed.")
        log.info("already archived and verified: %s", manifest.archive_uri)
        if remove_source:
            self._remove_source(source_fs, source, source_uri)
        return manifest

    def _remove_source(self, fs: AbstractFileSystem, source: str, uri: str) -> None:
        check_query_stopped(fs, source, now=self.clock(), uri=uri)
        fs.rm(source, recursive=True)
        log.info("removed the original checkpoint %s after its archive was verified", uri)

    # -- listing and retention -------------------------------------------------------------------

    def list(self, stream_name: str | None = None) -> list[ArchiveInfo]:
        """Archives of one stream (or all streams), oldest first; incomplete ones included."""
        streams = [check_name(stream_name)] if stream_name else self._dirs(self.root)
        result: builtins.list[ArchiveInfo] = []
        for stream in streams:
            for name in self._dirs(posixpath.join(self.root, stream)):
                parsed = parse_dir_name(name)
                if parsed is None:
                    continue
                path = posixpath.join(self.root, stream, name)
                count = total = None
                complete = self.fs.exists(posixpath.join(path, MANIFEST))
                if complete:
                    try:
                        manifest = read_manifest(self.fs, path)
                        count, total = manifest.file_count, manifest.total_bytes
                    except ArchiveCorrupt:
                        complete = False
                result.append(ArchiveInfo(stream, name, path, parsed[0], parsed[1], complete, count, total,
                                          uri=f"{self.uri}/{stream}/{name}"))
        return sorted(result, key=lambda a: (a.stream_name, a.started_at, a.name))

    def _dirs(self, path: str) -> builtins.list[str]:
        try:
            entries = list_entries(self.fs, path)
        except FileNotFoundError:
            return []
        return sorted(e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "directory")

    def prune(
        self,
        stream_name: str,
        *,
        keep_last: int | None = None,
        keep_newer_than: timedelta | None = None,
        incomplete_older_than: timedelta | None = None,
        remove_incomplete: bool = False,
        dry_run: bool = False,
    ) -> RetentionPlan:
        """Apply :func:`plan_retention` to one stream; returns the plan (what was removed).

        The manifest of a removed archive goes first, so an interrupted removal leaves an
        incomplete archive, never a complete-looking broken one.
        """
        plan = plan_retention(self.list(stream_name), keep_last=keep_last, keep_newer_than=keep_newer_than,
                              incomplete_older_than=incomplete_older_than, now=self.clock())
        for info in plan.stale_incomplete:
            log.warning("incomplete archive %s started %s (never finished)%s", info.uri,
                        info.started_at.isoformat(), "" if remove_incomplete and not dry_run else "; kept")
        doomed = list(plan.remove) + (list(plan.stale_incomplete) if remove_incomplete else [])
        for info in doomed:
            if dry_run:
                log.info("would remove archive %s", info.uri)
                continue
            if info.complete:
                self.fs.rm_file(posixpath.join(info.path, MANIFEST))
            self.fs.rm(info.path, recursive=True)
            log.info("removed archive %s (retention)", info.uri)
        return plan


class _Stopwatch:
    """Adds the seconds since the previous lap to ``timings[phase]``."""

    def __init__(self, timings: dict[str, float]) -> None:
        self.timings, self.last = timings, time.perf_counter()

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.timings[phase] = self.timings.get(phase, 0.0) + now - self.last
        self.last = now


def _version() -> str:
    from airflow_ckpt_provider import __version__

    return __version__


__all__ = ["CheckpointArchive", "check_query_stopped", "default_actor", "read_manifest",
           "restore_archive", "verify_archive"]
