"""Read a Spark Structured Streaming checkpoint through fsspec, touching as few files as possible.
It never writes.

:class:`CheckpointReader` lists the checkpoint root, ``offsets/`` and ``commits/`` once each and
opens only ``metadata``, ``commits/N`` and ``offsets/N`` of the last committed batch N (plus the
``.crc`` files beside them when present). ``sources/<i>/0`` is read only when nothing was
committed or when asked. A stateful checkpoint (one with ``state/``) also has ``offsets/N-1`` and
an in-flight ``offsets/N+1`` read, to recognise Spark 4.2's state repartition batches
(:mod:`~airflow_ckpt_provider.checkpoint.repartition`). The number of files opened therefore does
not depend on how much history the checkpoint retains; :attr:`CheckpointReader.files_opened`
counts them.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    BatchNotRewindable,
    CheckpointNotFound,
    CommitWithoutOffsets,
    CorruptCheckpointFile,
    IncompleteRestore,
    MissingCheckpointMetadata,
    NotACheckpoint,
    UnreadableCheckpoint,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, handover_from_snapshot
from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.checkpoint.logs import (
    CommitLogEntry,
    OffsetLogEntry,
    batch_number,
    crc_target,
    parse_batch_name,
    parse_commit_log,
    parse_committed_offset_log,
    parse_initial_source,
    parse_metadata,
    parse_offset_log,
    verify_crc,
)
from airflow_ckpt_provider.checkpoint.manifest import RESTORE_MARKER
from airflow_ckpt_provider.checkpoint.offsets import SourceOffsets
from airflow_ckpt_provider.checkpoint.repartition import RepartitionBatch, repartition_batch
from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.storage.files import os_error_parts, read_file, unsafe_link
from airflow_ckpt_provider.storage.listing import list_entries, list_names
from airflow_ckpt_provider.storage.locations import open_location

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Dir:
    """One directory listing: batch id -> file name, names of files covered by a .crc, entries."""

    path: str
    batches: Mapping[int, str]
    checksummed: frozenset[str]
    names: Mapping[str, str]  # base name -> entry type ("file" / "directory")


class CheckpointReader:
    """Read-only view of one checkpoint (local path, ``file://``, ``memory://``, ``s3://`` ...).

    Raises :class:`CheckpointNotFound` for a missing location, :class:`NotACheckpoint` when it
    holds none of ``metadata``, ``offsets/`` or ``commits/``, :class:`CommitWithoutOffsets` when
    the last ``commits/N`` has no ``offsets/N``, :class:`CorruptCheckpointFile` when a file read
    fails its ``.crc`` or cannot be parsed, and :class:`UnreadableCheckpoint` on I/O errors.
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
        self.uri = path_or_url
        self.fs: AbstractFileSystem = fs
        self.root: str = root.rstrip("/") or "/"
        self.files_opened = 0
        self.listings = 0

    # -- I/O edges -------------------------------------------------------------------------------

    def _join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    def _list(self, path: str, *, batch_dir: bool = False) -> _Dir:
        """List ``path`` once; CheckpointNotFound if missing. Batch names are parsed in batch dirs."""
        self.listings += 1
        try:
            # batch dirs can hold tens of thousands of names: list without a stat per entry
            entries: list[Any] = list_names(self.fs, path) if batch_dir else list_entries(self.fs, path)
        except FileNotFoundError:
            raise CheckpointNotFound(found="nothing at this location", expected="a directory",
                                     path=self._display(path)) from None
        except OSError as exc:
            found, action = os_error_parts(exc)
            raise UnreadableCheckpoint(found=found, expected="a listable directory", action=action,
                                       path=self._display(path)) from None
        names: dict[str, str] = {}
        own = path.rstrip("/")
        for entry in entries:
            raw = entry if isinstance(entry, str) else entry["name"]
            full = raw.rstrip("/")
            if isinstance(entry, str):  # names only in batch dirs: directory markers are already gone
                kind = "file"
            else:
                kind = entry.get("type", "file")
                if entry.get("islink") and full != own:  # local disk: a link is never followed
                    raise unsafe_link(full, self.root)
            if full == own:
                if kind == "file" and not batch_dir:
                    raise NotACheckpoint(found="a file", expected="a checkpoint directory",
                                         path=self._display(path))
                continue  # some filesystems list the directory itself
            names[full.rsplit("/", 1)[-1]] = kind
        batches: dict[int, str] = {}
        crc_targets: list[str] = []
        for name, kind in names.items():
            if name[:1] == ".":
                target = crc_target(name)
                if target is not None:
                    crc_targets.append(target)
                continue
            batch = (parse_batch_name(name, self._display(posixpath.join(path, name))) if batch_dir
                     else batch_number(name))  # batch dirs: zero-padded names like '007' raise
            if batch is not None and kind == "file":
                batches[batch] = name
        orphans = [t for t in crc_targets if t not in names]
        self._check_orphan_crcs(path, orphans, max(batches, default=-1))
        checksummed = frozenset(t for t in crc_targets if t in names)
        return _Dir(path=path, batches=batches, checksummed=checksummed, names=names)

    def _check_orphan_crcs(self, path: str, orphans: list[str], newest: int) -> None:
        """A ``.N.crc`` newer than every batch file means the newest batch file was deleted."""
        for target in orphans:
            batch = batch_number(target)
            if batch is not None and batch > newest:
                raise CorruptCheckpointFile(
                    path=self._display(posixpath.join(path, f".{target}.crc")),
                    found=f"the checksum of batch file {target} but not the file itself",
                    expected="each .N.crc beside its file N",
                    action="Someone deleted the newest batch file; restore it, or delete the orphan "
                    "checksum if that was intended, and retry.",
                )
            log.debug("ignoring orphan checksum .%s.crc in %s", target, path)

    def _read(self, directory: _Dir, name: str) -> bytes:
        """Read one file (counted) and verify its ``.crc`` when the listing has one."""
        path = posixpath.join(directory.path, name)
        data = self._cat(path)
        if name in directory.checksummed:
            verify_crc(data, self._cat(posixpath.join(directory.path, f".{name}.crc")), self._display(path))
        return data

    def _cat(self, path: str) -> bytes:
        self.files_opened += 1
        try:
            return read_file(self.fs, path)  # local: no link followed, no FIFO named like a batch file waited on
        except FileNotFoundError:
            raise CorruptCheckpointFile(
                path=self._display(path), found="a listed file that vanished before it was read",
                expected="a quiet checkpoint",
                action="Stop the query (or wait for it to stop) and retry.",
            ) from None
        except OSError as exc:
            found, action = os_error_parts(exc)
            raise UnreadableCheckpoint(found=found, expected="a readable file", action=action,
                                       path=self._display(path)) from None

    def _display(self, path: str) -> str:
        rel = posixpath.relpath(path, self.root) if path.startswith(self.root) else path
        return self.uri.rstrip("/") + ("" if rel == "." else "/" + rel)

    # -- public API ------------------------------------------------------------------------------

    def snapshot(self, *, include_initial: bool = False) -> CheckpointSnapshot:
        """Read the checkpoint state; see the class docstring for the errors raised."""
        self.fs.invalidate_cache(self.root)
        root = self._list(self.root)
        kinds = root.names
        if RESTORE_MARKER in kinds:
            raise IncompleteRestore(found=f"{RESTORE_MARKER}: a restore into this location did not finish",
                                    expected="a complete checkpoint", path=self.uri)
        has = {name: kinds.get(name) == "directory" for name in ("offsets", "commits", "sources", "state")}
        has["metadata"] = kinds.get("metadata") == "file"
        if not (has["metadata"] or has["offsets"] or has["commits"]):
            found = "an empty directory" if not kinds else f"only {', '.join(sorted(kinds)[:5])}"
            raise NotACheckpoint(found=found, expected="metadata, offsets/ and commits/",
                                 path=self.uri)
        offsets = self._list(self._join("offsets"), batch_dir=True) if has["offsets"] else None
        commits = self._list(self._join("commits"), batch_dir=True) if has["commits"] else None
        planned = max(offsets.batches, default=None) if offsets else None
        committed = max(commits.batches, default=None) if commits else None
        spark_2_1 = committed is None and offsets is not None and self._spark_2_1_log(offsets)
        if spark_2_1:
            assert planned is not None
            committed = planned - 1
        if spark_2_1 and offsets is not None and committed not in offsets.batches:
            raise CommitWithoutOffsets(
                found=f"a Spark 2.1 checkpoint (no commit log) without offsets/{committed}",
                expected=f"offsets/{committed}: Spark 2.1 counts the batch before the last planned one as committed",
                path=self.uri,
            )
        if committed is not None and (offsets is None or committed not in offsets.batches):
            raise CommitWithoutOffsets(
                found=f"commits/{committed} without offsets/{committed}",
                expected="the offset log entry of every committed batch", path=self.uri,
            )
        query_id = self._query_id(root)
        sources: tuple[SourceOffsets, ...] = ()
        conf: Mapping[str, str] = {}
        entry = commit = None
        if committed is not None and offsets is not None:
            if commits is not None and committed in commits.batches:
                commit = parse_commit_log(self._read(commits, commits.batches[committed]),
                                          self._display(self._join("commits", str(committed))))
            entry = parse_committed_offset_log(self._read(offsets, offsets.batches[committed]),
                                               self._display(self._join("offsets", str(committed))), committed)
            sources, conf = entry.sources, entry.conf
        in_flight = planned if planned is not None and (committed is None or planned > committed) else None
        repartitions: tuple[RepartitionBatch, ...] = ()
        if has["state"] and offsets is not None and not spark_2_1:
            repartitions = self._repartitions(offsets, committed, entry, in_flight)
        initial: tuple[SourceOffsets, ...] = ()
        if has["sources"] and (committed is None or include_initial):
            initial = self._initial_sources()
        return CheckpointSnapshot(
            uri=self.uri,
            query_id=query_id,
            last_committed_batch=committed,
            last_planned_batch=planned,
            in_flight_batch=in_flight,
            sources=sources,
            initial_sources=initial,
            conf=dict(conf),
            state_operators=self._state_operators() if has["state"] else (),
            commit_version=commit.version if commit else None,
            offsets_version=entry.version if entry else None,
            batch_watermark_ms=entry.batch_watermark_ms if entry else None,
            batch_timestamp_ms=entry.batch_timestamp_ms if entry else None,
            spark_2_1=spark_2_1,
            repartitions=repartitions,
        )

    def handover(self, *, taken_at: str | None = None) -> Handover:
        """Handover from the last committed batch (else initial offsets); raises NoOffsets if none,
        and :class:`MissingCheckpointMetadata` for batches without the ``metadata`` file: without
        the query id neither a rollback to this checkpoint (Spark 4.2 refuses to restart it) nor a
        sink that dedupes by query id can be trusted."""
        snapshot = self.snapshot()
        if snapshot.query_id is None and snapshot.last_planned_batch is not None:
            raise MissingCheckpointMetadata(
                found=f"offsets/ up to batch {snapshot.last_planned_batch} but no metadata file",
                expected='the metadata file {"id":"<query id>"} beside offsets/ and commits/',
                path=self._display(self._join("metadata")))
        return handover_from_snapshot(snapshot, taken_at=taken_at)

    def retained_batches(self, root: _Dir | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(planned, committed): the batch ids whose ``offsets/`` and ``commits/`` entries are
        still retained (Spark purges all but the last ``minBatchesToRetain``), ascending."""
        root = root or self._list(self.root)
        listings = {name: self._list(self._join(name), batch_dir=True) if root.names.get(name) == "directory" else None
                    for name in ("offsets", "commits")}
        offsets, commits = listings["offsets"], listings["commits"]
        planned = tuple(sorted(offsets.batches)) if offsets else ()
        committed = tuple(sorted(commits.batches)) if commits else ()
        if not committed and offsets is not None and self._spark_2_1_log(offsets):
            committed = planned[:-1]  # Spark 2.1: all but the last planned batch (see snapshot)
        return planned, committed

    def _spark_2_1_log(self, offsets: _Dir) -> bool:
        """Whether an offset log without any commit is Spark 2.1's (it kept no commit log): its last
        entry has no SQL conf, which Spark records since 2.2. Reads that one file; False when it is
        batch 0 (nothing counts as committed either way)."""
        newest = max(offsets.batches, default=0)
        if newest == 0:
            return False
        entry = parse_offset_log(self._read(offsets, offsets.batches[newest]),
                                 self._display(self._join("offsets", str(newest))))
        if entry.spark_2_1:
            log.info("checkpoint %s was written by Spark 2.1 (no commit log): batch %d counts as committed "
                     "and batch %d as in flight, as Spark's own restart treats them", self.uri, newest - 1, newest)
        return entry.spark_2_1

    def batch_start(self, batch_id: int, *, taken_at: str | None = None) -> Handover:
        """Where committed batch ``batch_id`` started, as a :class:`Handover`: the end offsets of
        batch ``batch_id - 1`` (``offsets/<id-1>``), or for batch 0 the initial offsets in
        ``sources/<i>/0``. Raises :class:`BatchNotRewindable` naming the retained range when the
        batch is not committed, not known or its start is no longer retained."""
        root = self._list(self.root)
        planned, committed = self.retained_batches(root)
        last = committed[-1] if committed else None
        first = 0 if not planned or planned[0] == 0 else planned[0] + 1
        span = ("none: nothing was committed" if last is None else
                f"batches {first}..{last}" + (" and batch 0 (its start is in sources/)" if first > 1 else ""))
        if last is None or batch_id < 0 or batch_id > last:
            what = ("a negative batch id" if batch_id < 0 else
                    f"batch {batch_id}, which is not committed" + (f" (last committed: {last})"
                                                                   if last is not None else ""))
            raise BatchNotRewindable(found=what, expected=f"a committed batch whose start is retained: {span}",
                                     path=self.uri)
        if batch_id == 0:
            initial = self._initial_sources() if root.names.get("sources") == "directory" else ()
            if not initial:
                raise BatchNotRewindable(found="no initial offsets under sources/ for batch 0",
                                         expected=f"a committed batch whose start is retained: {span}",
                                         path=self.uri)
            sources: tuple[SourceOffsets, ...] = initial
        else:
            if batch_id - 1 not in planned:
                raise BatchNotRewindable(
                    found=f"batch {batch_id}, whose start (offsets/{batch_id - 1}) was purged",
                    expected=f"a committed batch whose start is retained: {span}", path=self.uri,
                    action="Choose a batch in the retained range, or a time (at_time) or explicit offsets; "
                           "Spark keeps spark.sql.streaming.minBatchesToRetain batches (100 by default).")
            sources = self.committed_sources(batch_id - 1)
        return Handover(
            query_id=self._query_id(root), checkpoint_uri=self.uri,
            batch_id=None if batch_id == 0 else batch_id - 1, from_initial=batch_id == 0, sources=sources,
            in_flight_batch=None, taken_at=taken_at if taken_at is not None else utc_iso(timespec="microseconds"),
        )

    def batch_sources(self, batch: int) -> tuple[SourceOffsets, ...]:
        """The source offsets of ``offsets/<batch>`` (the exclusive end of that batch, committed or
        not); :class:`CheckpointNotFound` when the batch is not in the offset log."""
        return self.offset_entry(batch).sources

    def committed_sources(self, batch: int) -> tuple[SourceOffsets, ...]:
        """:meth:`batch_sources` of a batch the caller knows is committed: a Kafka sentinel there
        (which Spark never writes for a committed batch) raises :class:`ImpossibleOffsets`."""
        return parse_committed_offset_log(*self._batch_file("offsets", batch, "offset log"), batch).sources

    def offset_entry(self, batch: int) -> OffsetLogEntry:
        """``offsets/<batch>`` parsed (sources, watermark, conf); :class:`CheckpointNotFound` when absent."""
        return parse_offset_log(*self._batch_file("offsets", batch, "offset log"))

    def commit_entry(self, batch: int) -> CommitLogEntry:
        """``commits/<batch>`` parsed; :class:`CheckpointNotFound` when the batch is not committed."""
        return parse_commit_log(*self._batch_file("commits", batch, "commit log"))

    def _batch_file(self, folder: str, batch: int, what: str) -> tuple[bytes, str]:
        listing = self._list(self._join(folder), batch_dir=True)
        if batch not in listing.batches:
            raise CheckpointNotFound(found=f"no {folder}/{batch}", expected=f"batch {batch} in the {what}",
                                     path=self.uri)
        return self._read(listing, listing.batches[batch]), self._display(self._join(folder, str(batch)))

    # -- helpers ---------------------------------------------------------------------------------

    def _offset_entry(self, offsets: _Dir, batch: int) -> OffsetLogEntry:
        return parse_offset_log(self._read(offsets, offsets.batches[batch]),
                                self._display(self._join("offsets", str(batch))))

    def _repartitions(self, offsets: _Dir, committed: int | None, entry: OffsetLogEntry | None,
                      in_flight: int | None) -> tuple[RepartitionBatch, ...]:
        """The last committed batch and the in-flight batch, each when it is a state repartition of
        the batch before it (at most two more offset log entries read). Informative only: an entry
        that cannot be parsed is logged and skipped, the handover does not depend on it."""
        try:
            return self._find_repartitions(offsets, committed, entry, in_flight)
        except CorruptCheckpointFile as exc:
            log.warning("checkpoint %s: could not tell whether a batch is a state repartition: %s", self.uri, exc)
            return ()

    def _find_repartitions(self, offsets: _Dir, committed: int | None, entry: OffsetLogEntry | None,
                           in_flight: int | None) -> tuple[RepartitionBatch, ...]:
        found: list[RepartitionBatch] = []
        if committed is not None and entry is not None and committed - 1 in offsets.batches:
            repartition = repartition_batch(committed, entry, self._offset_entry(offsets, committed - 1),
                                            committed=True)
            if repartition is not None:
                found.append(repartition)
        if in_flight is not None and in_flight - 1 in offsets.batches:
            before = entry if in_flight - 1 == committed and entry is not None else self._offset_entry(
                offsets, in_flight - 1)
            repartition = repartition_batch(in_flight, self._offset_entry(offsets, in_flight), before,
                                            committed=False)
            if repartition is not None:
                found.append(repartition)
        for repartition in found:
            log.info("checkpoint %s: %s", self.uri, repartition.describe())
        return tuple(found)

    def _query_id(self, root: _Dir) -> str | None:
        if "metadata" in root.names:
            return parse_metadata(self._read(root, "metadata"), self._display(self._join("metadata")))
        if ".metadata.crc" in root.names:
            raise CorruptCheckpointFile(
                path=self._display(self._join("metadata")), found="only its checksum .metadata.crc",
                expected="the metadata file beside its checksum",
                action="Restore the metadata file from a backup (it holds the query id).",
            )
        log.warning("checkpoint %s has no metadata file; query id unknown (Spark 4.2 refuses to restart it: "
                    "STREAMING_CHECKPOINT_MISSING_METADATA_FILE; the handover is refused)", self.uri)
        return None

    def _initial_sources(self) -> tuple[SourceOffsets, ...]:
        listing = self._list(self._join("sources"))
        dirs = [n for n, kind in listing.names.items() if kind == "directory"]
        numbered = sorted(b for b in map(batch_number, dirs) if b is not None)
        named = sorted(n for n in dirs if batch_number(n) is None)
        result: list[SourceOffsets] = []
        for index, (dirname, name) in enumerate(
            [(str(i), None) for i in numbered] + [(n, n) for n in named]
        ):
            source_dir = self._list(self._join("sources", dirname))
            if "0" not in source_dir.names:
                continue
            data = self._read(source_dir, "0")
            position = int(dirname) if name is None else index - len(numbered)
            result.append(parse_initial_source(data, self._display(posixpath.join(source_dir.path, "0")),
                                               position, name))
        return tuple(result)

    def _state_operators(self) -> tuple[int, ...]:
        listing = self._list(self._join("state"))
        ids = (batch_number(n) for n, kind in listing.names.items() if kind == "directory")
        return tuple(sorted(i for i in ids if i is not None))
