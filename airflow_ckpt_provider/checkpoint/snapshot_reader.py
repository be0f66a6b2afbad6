"""The one reader of a Spark Structured Streaming checkpoint: which files to read, what they say and
what to refuse, over any storage. Pure: it does no I/O of its own; it reads through a
:class:`CheckpointFiles` it is handed (list a folder, look at one entry, read a whole file, show a
path) and never writes.

Two adapters implement :class:`CheckpointFiles`: the storage layer's, through an fsspec filesystem
(:class:`airflow_ckpt_provider.storage.reader.CheckpointReader`, in Airflow and the ``ckpt``
command line), and the driver side's, through Hadoop's FileSystem in the user's Spark driver
(:class:`airflow_ckpt_provider.spark.checkpoint_files.HadoopCheckpointFiles`). Both hand the same
checkpoint to :class:`SnapshotReader`, so both take the same handover and refuse the same damage
with the same typed error: there is no second implementation of any rule.

:class:`SnapshotReader` lists the checkpoint root, ``offsets/`` and ``commits/`` once each and
opens only ``metadata``, ``commits/N`` and ``offsets/N`` of the last committed batch N (plus the
Hadoop ``.crc`` files beside them when present). ``sources/<i>/0`` is read only when nothing was
committed or when asked. A stateful checkpoint (one with ``state/``) also has ``offsets/N-1`` and
an in-flight ``offsets/N+1`` read, to recognise Spark 4.2's state repartition batches
(:mod:`~airflow_ckpt_provider.checkpoint.repartition`). The number of files opened therefore does
not depend on how much history the checkpoint retains; :attr:`SnapshotReader.files_opened`
counts them, :attr:`SnapshotReader.listings` the folders listed.

Rules it applies (each once, here): a batch file's name is a plain decimal (``007`` refused); the
last committed batch is the highest in ``commits/`` and its ``offsets/N`` must exist; an offset log
without any commit whose last entry has no SQL conf is Spark 2.1's (the batch before the last
planned one counts as committed); a Hadoop ``.N.crc`` beside a file read is verified, and one newer
than every batch file means the newest batch file was deleted; a symbolic link anywhere it lists,
or met when it opens a file, is refused, never followed, and so is a FIFO, socket, device or
folder where a file is read; nothing larger than the JSON input limit is read whole; a
``metadata`` checksum without its file, and a handover of batches without ``metadata``, are
refused.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from airflow_ckpt_provider.batch_names import batch_number
from airflow_ckpt_provider.checkpoint.errors import (
    BatchNotRewindable,
    CheckpointNotFound,
    CommitWithoutOffsets,
    CorruptCheckpointFile,
    IncompleteRestore,
    JsonTooLarge,
    MissingCheckpointMetadata,
    NotACheckpoint,
    UnreadableCheckpoint,
    UnsafeEntry,
    link_refused,
    os_error_parts,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, handover_from_snapshot
from airflow_ckpt_provider.checkpoint.logs import (
    CommitLogEntry,
    OffsetLogEntry,
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
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.json_limits import MAX_JSON_BYTES

log = logging.getLogger(__name__)
_T = TypeVar("_T")

__all__ = ["CheckpointFiles", "EntryKind", "FileEntry", "Link", "LinkAtOpen", "Listing", "NotAFolder",
           "SnapshotReader", "display_path"]


class NotAFolder(Exception):
    """Raised by :meth:`CheckpointFiles.listdir` when the path it was asked to list is a file."""


class EntryKind(StrEnum):
    """What a listed entry is. ``UNKNOWN``: a names-only listing did not look (the reader looks at
    an entry through :meth:`CheckpointFiles.stat` before reading it)."""

    FILE = "file"
    DIRECTORY = "directory"
    LINK = "link"
    OTHER = "other"  # a FIFO, socket or device
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Link:
    """Where a symbolic link points: ``target`` as written in the link; ``resolved``, the location
    it resolves to (None when the storage cannot tell); ``outside``, whether that lies outside the
    checkpoint. Only for the refusal's message: a link is never followed, wherever it points."""

    target: str
    resolved: str | None = None
    outside: bool = False


@dataclass(frozen=True)
class FileEntry:
    """One entry of a folder: its base ``name``, its ``kind``, its ``size`` in bytes (None when the
    listing does not say) and, for a symbolic link, where it points."""

    name: str
    kind: EntryKind
    size: int | None = None
    link: Link | None = None

    @property
    def is_file(self) -> bool:
        return self.kind is EntryKind.FILE

    @property
    def is_dir(self) -> bool:
        return self.kind is EntryKind.DIRECTORY

    @property
    def is_link(self) -> bool:
        return self.kind is EntryKind.LINK


class LinkAtOpen(Exception):
    """Raised by :meth:`CheckpointFiles.read_bytes` when the file it opens turns out to be a
    symbolic link (``link``: where it points), one swapped in after the listing: the open refused
    it, nothing was read through it. The reader refuses it as it refuses a listed link."""

    def __init__(self, link: Link) -> None:
        super().__init__(link.target)
        self.link = link


class CheckpointFiles(Protocol):
    """A checkpoint's files as :class:`SnapshotReader` reads them. Paths are relative to the
    checkpoint root, ``/``-separated (``""`` is the root, ``"offsets/7"`` a batch file).

    * :meth:`listdir`: the folder's entries (never the folder itself, nor a directory marker of an
      object store); ``FileNotFoundError`` when nothing is there, :class:`NotAFolder` when it is a
      file, another ``OSError`` when it cannot be listed (``NotADirectoryError``: a file on the
      way). With ``names_only`` the caller needs names only (a batch log can hold thousands):
      entries may then be ``UNKNOWN``.
    * :meth:`stat`: the one entry at ``path``, a link reported as a link (never followed);
      ``FileNotFoundError`` when it is gone.
    * :meth:`read_bytes`: the whole file; ``FileNotFoundError`` when it vanished, another
      ``OSError`` on I/O errors, :class:`LinkAtOpen` when the open met a link (swapped in after
      the listing) and refused to follow it. An adapter may refuse what else it meets at open time
      with a :class:`~airflow_ckpt_provider.checkpoint.errors.CheckpointError` of its own (a FIFO
      swapped in after the listing).
    * :meth:`display`: the path as errors and logs show it (:func:`display_path`).
    """

    @property
    def uri(self) -> str:
        """The checkpoint's location as the user gave it."""
        ...

    def listdir(self, path: str, *, names_only: bool = False) -> Sequence[FileEntry]: ...

    def stat(self, path: str) -> FileEntry: ...

    def read_bytes(self, path: str) -> bytes: ...

    def display(self, path: str) -> str: ...


def display_path(uri: str, path: str) -> str:
    """``path`` (relative to the checkpoint) shown under the checkpoint's ``uri`` as the user gave
    it: ``/data/ck`` + ``offsets/7`` -> ``/data/ck/offsets/7``; the root is ``uri`` without a
    trailing ``/``."""
    return uri.rstrip("/") + ("/" + path if path else "")


@dataclass(frozen=True)
class Listing:
    """One folder listed: its entries by name, the batch ids named (batch id -> file name), and
    the names of files a Hadoop ``.<name>.crc`` covers."""

    path: str
    entries: Mapping[str, FileEntry]
    batches: Mapping[int, str] = field(default_factory=dict)
    checksummed: frozenset[str] = frozenset()

    def is_dir(self, name: str) -> bool:
        entry = self.entries.get(name)
        return entry is not None and entry.is_dir


#: how a refusal names a FIFO, socket or device (storages tell them apart differently)
_SPECIAL = "a special file (a FIFO, socket or device)"


class SnapshotReader:
    """Read-only view of one checkpoint through ``files``: its snapshot, its handover, the start
    of a retained batch, single log entries.

    Raises :class:`CheckpointNotFound` for a missing location, :class:`NotACheckpoint` for a file
    or a folder holding none of ``metadata``, ``offsets/`` or ``commits/``,
    :class:`IncompleteRestore` while a restore into it is unfinished, :class:`CommitWithoutOffsets`
    when the last ``commits/N`` has no ``offsets/N``, :class:`CorruptCheckpointFile` when a file
    read fails its ``.crc``, cannot be parsed or vanished while read, :class:`UnsafeEntry` for a
    link (or a special file where a file is read), :class:`JsonTooLarge` for a file beyond the JSON
    input limit, and :class:`UnreadableCheckpoint` on other I/O errors.
    """

    def __init__(self, files: CheckpointFiles) -> None:
        self.files = files
        self.files_opened = 0
        self.listings = 0

    @property
    def uri(self) -> str:
        return self.files.uri

    # -- reads through the files -------------------------------------------------------------------

    def _show(self, *parts: str) -> str:
        return self.files.display(posixpath.join(*parts) if parts else "")

    def _list(self, path: str, *, batch_dir: bool = False) -> Listing:
        """List ``path`` once. Batch names are parsed in batch dirs (zero-padded ones refused); a
        link is refused; an orphan ``.N.crc`` newer than every batch file is corruption."""
        self.listings += 1
        try:
            found = self.files.listdir(path, names_only=batch_dir)
        except FileNotFoundError:
            raise CheckpointNotFound(found="nothing at this location", expected="a directory",
                                     path=self.files.display(path)) from None
        except NotAFolder:
            raise NotACheckpoint(found="a file", expected="a checkpoint directory",
                                 path=self.files.display(path)) from None
        except OSError as exc:
            problem, action = os_error_parts(exc)
            raise UnreadableCheckpoint(found=problem, expected="a listable directory", action=action,
                                       path=self.files.display(path)) from None
        entries: dict[str, FileEntry] = {}
        for entry in found:
            if entry.is_link:
                raise self._link_refused(posixpath.join(path, entry.name), entry)
            entries[entry.name] = entry
        batches: dict[int, str] = {}
        crc_targets: list[str] = []
        for name, entry in entries.items():
            if name[:1] == ".":
                target = crc_target(name)
                if target is not None:
                    crc_targets.append(target)
                continue
            batch = (parse_batch_name(name, self._show(path, name)) if batch_dir
                     else batch_number(name))  # batch dirs: zero-padded names like '007' raise
            if batch is not None and not entry.is_dir:
                batches[batch] = name
        orphans = [t for t in crc_targets if t not in entries]
        self._check_orphan_crcs(path, orphans, max(batches, default=-1))
        checksummed = frozenset(t for t in crc_targets if t in entries)
        return Listing(path=path, entries=entries, batches=batches, checksummed=checksummed)

    def _link_refused(self, path: str, entry: FileEntry) -> UnsafeEntry:
        link = entry.link or Link(target="?")
        return link_refused(self.files.display(path), link.target, link.resolved,
                           self.uri.rstrip("/") if link.outside else None)

    def _check_orphan_crcs(self, path: str, orphans: list[str], newest: int) -> None:
        """A ``.N.crc`` newer than every batch file means the newest batch file was deleted."""
        for target in orphans:
            batch = batch_number(target)
            if batch is not None and batch > newest:
                raise CorruptCheckpointFile(
                    path=self._show(path, f".{target}.crc"),
                    found=f"the checksum of batch file {target} but not the file itself",
                    expected="each .N.crc beside its file N",
                    action="Someone deleted the newest batch file; restore it, or delete the orphan "
                    "checksum if that was intended, and retry.",
                )
            log.debug("ignoring orphan checksum .%s.crc in %s", target, self._show(path))

    def _read(self, listing: Listing, name: str) -> bytes:
        """Read one listed file (counted) and verify its ``.crc`` when the listing has one."""
        data = self._cat(listing, name)
        if name in listing.checksummed:
            verify_crc(data, self._cat(listing, f".{name}.crc"), self._show(listing.path, name))
        return data

    def _cat(self, listing: Listing, name: str) -> bytes:
        path = posixpath.join(listing.path, name)
        entry = listing.entries.get(name)
        if entry is None or entry.kind is EntryKind.UNKNOWN:  # a names-only listing: look at it first
            entry = self._stat(path)
        self._check_readable(path, entry)
        self.files_opened += 1
        return self._look(path, self.files.read_bytes)

    def _stat(self, path: str) -> FileEntry:
        return self._look(path, self.files.stat)

    def _look(self, path: str, action: Callable[[str], _T]) -> _T:
        """``action(path)`` (a read or a stat), its OS error turned into the typed error: a file gone
        since it was listed (:class:`CorruptCheckpointFile`) or :class:`UnreadableCheckpoint`; a
        link met at open time is refused as a listed one (:class:`UnsafeEntry`)."""
        try:
            return action(path)
        except LinkAtOpen as exc:
            raise self._link_refused(path, FileEntry(name=posixpath.basename(path), kind=EntryKind.LINK,
                                                     link=exc.link)) from None
        except FileNotFoundError:
            raise self._vanished(path) from None
        except OSError as exc:
            problem, action_text = os_error_parts(exc)
            raise UnreadableCheckpoint(found=problem, expected="a readable file", action=action_text,
                                       path=self.files.display(path)) from None

    def _vanished(self, path: str) -> CorruptCheckpointFile:
        return CorruptCheckpointFile(
            path=self.files.display(path), found="a listed file that vanished before it was read",
            expected="a quiet checkpoint", action="Stop the query (or wait for it to stop) and retry.",
        )

    def _check_readable(self, path: str, entry: FileEntry) -> None:
        """Only a regular file within the JSON input limit is read: a link is never followed, a
        FIFO is never waited on, a folder is not a file."""
        shown = self.files.display(path)
        if entry.is_link:
            raise self._link_refused(path, entry)
        if entry.kind in (EntryKind.OTHER, EntryKind.DIRECTORY):
            what = "a folder" if entry.is_dir else _SPECIAL
            raise UnsafeEntry(found=f"{what} at {shown}", expected="a regular file", path=shown)
        if entry.size is not None and entry.size > MAX_JSON_BYTES:
            raise JsonTooLarge(found=f"a file of {entry.size:,} bytes", expected=f"at most {MAX_JSON_BYTES:,} bytes "
                               "(nothing the provider reads whole is larger)", path=shown)

    # -- public API --------------------------------------------------------------------------------

    def snapshot(self, *, include_initial: bool = False) -> CheckpointSnapshot:
        """Read the checkpoint state; see the class docstring for the errors raised."""
        root = self._list("")
        if RESTORE_MARKER in root.entries:
            raise IncompleteRestore(found=f"{RESTORE_MARKER}: a restore into this location did not finish",
                                    expected="a complete checkpoint", path=self.uri)
        has = {name: root.is_dir(name) for name in ("offsets", "commits", "sources", "state")}
        has["metadata"] = "metadata" in root.entries and root.entries["metadata"].is_file
        if not (has["metadata"] or has["offsets"] or has["commits"]):
            names = sorted(root.entries)
            found = "an empty directory" if not names else f"only {', '.join(names[:5])}"
            raise NotACheckpoint(found=found, expected="metadata, offsets/ and commits/", path=self.uri)
        offsets = self._list("offsets", batch_dir=True) if has["offsets"] else None
        commits = self._list("commits", batch_dir=True) if has["commits"] else None
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
                                          self._show("commits", str(committed)))
            entry = parse_committed_offset_log(self._read(offsets, offsets.batches[committed]),
                                               self._show("offsets", str(committed)), committed)
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
        return self.handover_of(self.snapshot(), taken_at=taken_at)

    def handover_of(self, snapshot: CheckpointSnapshot, *, taken_at: str | None = None) -> Handover:
        """:meth:`handover` from a ``snapshot`` this reader took (the same rules and errors)."""
        if snapshot.query_id is None and snapshot.last_planned_batch is not None:
            raise MissingCheckpointMetadata(
                found=f"offsets/ up to batch {snapshot.last_planned_batch} but no metadata file",
                expected='the metadata file {"id":"<query id>"} beside offsets/ and commits/',
                path=self._show("metadata"))
        return handover_from_snapshot(snapshot, taken_at=taken_at)

    def retained_batches(self, root: Listing | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(planned, committed): the batch ids whose ``offsets/`` and ``commits/`` entries are
        still retained (Spark purges all but the last ``minBatchesToRetain``), ascending."""
        root = root or self._list("")
        listings = {name: self._list(name, batch_dir=True) if root.is_dir(name) else None
                    for name in ("offsets", "commits")}
        offsets, commits = listings["offsets"], listings["commits"]
        planned = tuple(sorted(offsets.batches)) if offsets else ()
        committed = tuple(sorted(commits.batches)) if commits else ()
        if not committed and offsets is not None and self._spark_2_1_log(offsets):
            committed = planned[:-1]  # Spark 2.1: all but the last planned batch (see snapshot)
        return planned, committed

    def _spark_2_1_log(self, offsets: Listing) -> bool:
        """Whether an offset log without any commit is Spark 2.1's (it kept no commit log): its last
        entry has no SQL conf, which Spark records since 2.2. Reads that one file; False when it is
        batch 0 (nothing counts as committed either way)."""
        newest = max(offsets.batches, default=0)
        if newest == 0:
            return False
        entry = parse_offset_log(self._read(offsets, offsets.batches[newest]), self._show("offsets", str(newest)))
        if entry.spark_2_1:
            log.info("checkpoint %s was written by Spark 2.1 (no commit log): batch %d counts as committed "
                     "and batch %d as in flight, as Spark's own restart treats them", self.uri, newest - 1, newest)
        return entry.spark_2_1

    def batch_start(self, batch_id: int, *, taken_at: str | None = None) -> Handover:
        """Where committed batch ``batch_id`` started, as a :class:`Handover`: the end offsets of
        batch ``batch_id - 1`` (``offsets/<id-1>``), or for batch 0 the initial offsets in
        ``sources/<i>/0``. Raises :class:`BatchNotRewindable` naming the retained range when the
        batch is not committed, not known or its start is no longer retained."""
        root = self._list("")
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
            initial = self._initial_sources() if root.is_dir("sources") else ()
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
        listing = self._list(folder, batch_dir=True)
        if batch not in listing.batches:
            raise CheckpointNotFound(found=f"no {folder}/{batch}", expected=f"batch {batch} in the {what}",
                                     path=self.uri)
        return self._read(listing, listing.batches[batch]), self._show(folder, str(batch))

    # -- helpers -----------------------------------------------------------------------------------

    def _offset_entry(self, offsets: Listing, batch: int) -> OffsetLogEntry:
        return parse_offset_log(self._read(offsets, offsets.batches[batch]), self._show("offsets", str(batch)))

    def _repartitions(self, offsets: Listing, committed: int | None, entry: OffsetLogEntry | None,
                      in_flight: int | None) -> tuple[RepartitionBatch, ...]:
        """The last committed batch and the in-flight batch, each when it is a state repartition of
        the batch before it (at most two more offset log entries read). Informative only: an entry
        that cannot be parsed is logged and skipped, the handover does not depend on it."""
        try:
            return self._find_repartitions(offsets, committed, entry, in_flight)
        except CorruptCheckpointFile as exc:
            log.warning("checkpoint %s: could not tell whether a batch is a state repartition: %s", self.uri, exc)
            return ()

    def _find_repartitions(self, offsets: Listing, committed: int | None, entry: OffsetLogEntry | None,
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

    def _query_id(self, root: Listing) -> str | None:
        if "metadata" in root.entries:
            return parse_metadata(self._read(root, "metadata"), self._show("metadata"))
        if ".metadata.crc" in root.entries:
            raise CorruptCheckpointFile(
                path=self._show("metadata"), found="only its checksum .metadata.crc",
                expected="the metadata file beside its checksum",
                action="Restore the metadata file from a backup (it holds the query id).",
            )
        log.warning("checkpoint %s has no metadata file; query id unknown (Spark 4.2 refuses to restart it: "
                    "STREAMING_CHECKPOINT_MISSING_METADATA_FILE; the handover is refused)", self.uri)
        return None

    def _initial_sources(self) -> tuple[SourceOffsets, ...]:
        listing = self._list("sources")
        dirs = [name for name, entry in listing.entries.items() if entry.is_dir]
        numbered = sorted(b for b in map(batch_number, dirs) if b is not None)
        named = sorted(n for n in dirs if batch_number(n) is None)
        result: list[SourceOffsets] = []
        for index, (dirname, name) in enumerate(
            [(str(i), None) for i in numbered] + [(n, n) for n in named]
        ):
            source_dir = self._list(posixpath.join("sources", dirname))
            if "0" not in source_dir.entries:
                continue
            data = self._read(source_dir, "0")
            position = int(dirname) if name is None else index - len(numbered)
            result.append(parse_initial_source(data, self._show(source_dir.path, "0"), position, name))
        return tuple(result)

    def _state_operators(self) -> tuple[int, ...]:
        listing = self._list("state")
        ids = (batch_number(name) for name, entry in listing.entries.items() if entry.is_dir)
        return tuple(sorted(i for i in ids if i is not None))
