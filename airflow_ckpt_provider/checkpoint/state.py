"""The old query's state, carried to the new checkpoint: what may be exported, and the export's
manifest and checks (reads checkpoints and writes exports through fsspec).

Spark's state data source (``statestore``, Spark 3.5+; ``state-metadata``, 4.0+) reads a stopped
checkpoint's state offline, but it does not consult the commit log: asked for an uncommitted
batch it returns that batch's state. So the batch comes from here, never from Spark:
:func:`plan_state_export` takes the last COMMITTED batch N (or a named committed one) and checks,
before any Spark job runs, that the state after N can be read:

* ``commits/N`` exists (:class:`StateBatchNotCommitted` otherwise);
* every store directory of every stateful operator still holds version N+1 and what it is built
  from (the deltas or changelogs back to a snapshot; :class:`StateVersionPurged`);
* the state is not RocksDB checkpoint format v2 (``stateUniqueIds`` in ``commits/N``, files
  ``<v>_<uuid>.changelog``), which Spark 4.0's reader cannot read (:class:`StateFormatUnsupported`);
  nor format v2 written by Spark 4.0 when the export runs on Spark 4.2 or later: Spark 4.0 marks
  its RocksDB snapshots' ``metadata`` ``v2``, which Spark 4.2 cannot read (``CANNOT_READ_CHECKPOINT``,
  "Expected v1, but found v2"; :class:`StateFormatUnsupported`);
* an operator without ``_metadata/metadata`` (Spark 3.5 wrote none for some operators) is read
  by its layout (``<partition>/`` holds the ``default`` store, ``<partition>/<store>/`` named
  ones), except a transformWithState operator, whose variables only its metadata names
  (:class:`StateMetadataMissing`).

The export itself (a Spark job: :mod:`airflow_ckpt_provider.spark.state_export`) writes, under
an export location E::

    E/state/<operator id>/<store name or state variable>/part-*.parquet   the reader's own columns
    E/_job/result.json                                                    what the job read
    E/state-manifest.json                                                 written last (complete)

:func:`finish_export` then reads every Parquet file back (sha256, and the row count of its
footer), checks the counts against what the job read from the state store, and writes the
:class:`StateManifest`; its presence means a complete, verified export. A re-run after a crash
removes an unfinished export (never anything it did not write) and starts over
(:func:`prepare_export_location`); one with a complete manifest for the same batch is verified
(:func:`verify_state_export`) and reused.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    StateBatchNotCommitted,
    StateExportConflict,
    StateExportCorrupt,
    StateFormatUnsupported,
    StateMetadataMissing,
    StateStartUnsupported,
    StateVersionPurged,
)
from airflow_ckpt_provider.checkpoint.files import is_local, read_file, write_atomic
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.checkpoint.jsonin import load_json
from airflow_ckpt_provider.checkpoint.listing import find_entries, list_names
from airflow_ckpt_provider.checkpoint.reader import CheckpointReader
from airflow_ckpt_provider.checkpoint.rewind import StartMode
from airflow_ckpt_provider.checkpoint.transfer import hash_file, human_bytes
from airflow_ckpt_provider.clock import utc_now

log = logging.getLogger(__name__)

STATE_MANIFEST = "state-manifest.json"
STATE_DIR = "state"
JOB_DIR = "_job"
JOB_RESULT = f"{JOB_DIR}/result.json"
#: where the reference DAG exports a stream's state: <archive root>/<stream>/_state/<upgrade id>
EXPORTS_DIR = "_state"
MANIFEST_FORMAT = 1
CONF_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
CONF_CHECKPOINT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
#: Spark's first release whose state reader reads RocksDB checkpoint format v2 (SPARK-53294).
FORMAT_V2_READER = "Spark 4.1.0"
FORMAT_V2_READER_VERSION = (4, 1)
#: The first Spark known to read only ``v1`` in a RocksDB snapshot's ``metadata`` (checked on 4.2.0:
#: ``RocksDBCheckpointMetadata.VERSION`` is 1). Spark 4.0 writes the state checkpoint format
#: there (``v2`` under format v2), so its format-v2 snapshots do not load on 4.2.
ROCKSDB_METADATA_V1_ONLY = (4, 2)


def _major_minor(spark_version: str | None) -> tuple[int, int] | None:
    if not spark_version:
        return None
    try:
        major, minor = (int(part) for part in spark_version.split(".")[:2])
    except ValueError:
        return None
    return major, minor


def reads_format_v2(spark_version: str | None) -> bool | None:
    """Whether Spark ``spark_version`` ("4.2.0") reads state checkpoint format v2; None when the
    version is not known."""
    version = _major_minor(spark_version)
    return None if version is None else version >= FORMAT_V2_READER_VERSION


#: a state store version file: <version>[_<unique id>].<kind>
_VERSION_FILE = re.compile(r"^(\d+)(?:_([0-9A-Za-z-]+))?\.(delta|snapshot|zip|changelog)$")
_FULL = ("snapshot", "zip")  # a whole version; delta and changelog need the version below


@dataclass(frozen=True)
class StateExportPlan:
    """What an export of ``checkpoint_uri`` reads: the state after ``batch_id`` of ``operators``.

    ``batch_id`` is None when the query is stateless (``operators`` empty) or committed nothing
    yet (its state is empty): then there is nothing to carry. ``batch_watermark_ms`` is the
    watermark batch N ran with (``offsets/N``); ``next_batch_watermark_ms`` the one the old query
    had reached after it (``commits/N``), which a new query cannot be given but can filter by.
    """

    checkpoint_uri: str
    query_id: str | None
    batch_id: int | None
    operators: tuple[int, ...]
    state_store_provider: str = HDFS_PROVIDER
    checkpoint_format_version: int = 1
    batch_watermark_ms: int = 0
    next_batch_watermark_ms: int = 0
    #: (operator, store name) read by the layout on disk, for operators without metadata
    inferred_stores: tuple[tuple[int, str], ...] = ()

    @property
    def stateful(self) -> bool:
        return bool(self.operators)

    @property
    def exportable(self) -> bool:
        """Whether there is state to export (a stateful query that committed a batch)."""
        return self.stateful and self.batch_id is not None

    def to_dict(self) -> dict[str, Any]:
        return {"checkpoint_uri": self.checkpoint_uri, "query_id": self.query_id, "batch_id": self.batch_id,
                "operators": list(self.operators), "state_store_provider": self.state_store_provider,
                "checkpoint_format_version": self.checkpoint_format_version,
                "batch_watermark_ms": self.batch_watermark_ms, "next_batch_watermark_ms": self.next_batch_watermark_ms,
                "inferred_stores": [list(s) for s in self.inferred_stores]}


def version_readable(versions: Mapping[int, frozenset[str]], version: int) -> bool:
    """Whether a store directory holding ``versions`` (version -> file kinds) can rebuild
    ``version``: a snapshot (``snapshot``/``zip``) of it, or a delta/changelog of it on top of a
    readable ``version - 1``; version 0 is the empty state."""
    while version > 0:
        kinds = versions.get(version, frozenset())
        if any(kind in kinds for kind in _FULL):
            return True
        if not kinds:
            return False
        version -= 1
    return True


def store_versions(names: Iterable[str]) -> tuple[dict[int, frozenset[str]], bool]:
    """(version -> kinds, whether any file carries a unique id, i.e. checkpoint format v2) of the
    file names of one store directory; other names (``.crc``, ``_metadata``, ``SSTs``) are ignored."""
    found: dict[int, set[str]] = {}
    unique_ids = False
    for name in names:
        match = _VERSION_FILE.match(name)
        if match:
            found.setdefault(int(match.group(1)), set()).add(match.group(3))
            unique_ids = unique_ids or match.group(2) is not None
    return {v: frozenset(k) for v, k in found.items()}, unique_ids


def plan_state_export(reader: CheckpointReader, batch: int | None = None, *,
                      reader_spark: str | None = None) -> StateExportPlan:
    """Check that the state after ``batch`` (default: the last committed batch) can be exported
    and say what is exported; raises the refusals listed in the module doc. Reads only.

    ``reader_spark`` is the version of the Spark that will run the export ("4.2.0"; None:
    unknown). RocksDB state checkpoint format v2 is read by :data:`FORMAT_V2_READER` or later:
    refused for an older one (:class:`StateFormatUnsupported`, naming both versions); with an
    unknown version it is planned, and the export job checks its own Spark before it reads."""
    snapshot = reader.snapshot()
    uri = reader.uri
    last = snapshot.last_committed_batch
    operators = snapshot.state_operators
    if not operators or (last is None and batch is None):
        return StateExportPlan(uri, snapshot.query_id, None if not operators else last, operators)
    _, committed = reader.retained_batches()
    chosen = last if batch is None else batch
    if chosen is None or chosen not in committed:
        span = f"{committed[0]}..{committed[-1]}" if committed else "none"
        newest = snapshot.last_planned_batch
        planned = chosen is not None and newest is not None and (last if last is not None else -1) < chosen <= newest
        what = (f"batch {chosen}, planned in offsets/ but not committed" if planned
                else f"batch {chosen}, not in commits/")
        raise StateBatchNotCommitted(found=what, expected=f"a committed batch (retained: {span})", path=uri)
    commit = reader.commit_entry(chosen)
    entry = reader.offset_entry(chosen)
    conf = dict(entry.conf)
    provider = conf.get(CONF_PROVIDER, HDFS_PROVIDER)
    format_version = int(conf.get(CONF_CHECKPOINT_FORMAT, "1") or 1)
    v2 = bool(commit.state_unique_ids) or format_version >= 2
    if v2:
        format_version = max(format_version, 2)
        if reads_format_v2(reader_spark) is False:
            raise StateFormatUnsupported(
                found=(f"RocksDB state checkpoint format v{format_version} (commits/{chosen} holds stateUniqueIds), "
                       f"and the export would run on Spark {reader_spark}"),
                expected=f"{FORMAT_V2_READER} or later to read format v2",
                action=f"Run the export on {FORMAT_V2_READER} or later (the DAG's new_spark param: the new version's "
                       "Spark), or upgrade without carrying the state. Nothing was written.", path=uri)
    inferred = tuple((operator, store) for operator in operators
                     for store in _check_operator(reader, operator, chosen, format_v2=v2))
    if v2:
        _check_rocksdb_metadata(reader, operators, chosen, reader_spark)
    return StateExportPlan(
        checkpoint_uri=uri, query_id=snapshot.query_id, batch_id=chosen, operators=operators,
        inferred_stores=inferred,
        state_store_provider=provider, checkpoint_format_version=format_version,
        batch_watermark_ms=entry.batch_watermark_ms or 0, next_batch_watermark_ms=commit.next_batch_watermark_ms,
    )


def _check_operator(reader: CheckpointReader, operator: int, batch: int, *, format_v2: bool = False) -> tuple[str, ...]:
    """Check the state version after ``batch`` in each store directory of ``operator``; returns
    the store names to read when the operator has no metadata (Spark 3.5 wrote none for some
    operators), inferred from the layout, else (). Files with unique ids (format v2) are refused
    unless the commit log says the checkpoint is format v2 (``format_v2``)."""
    fs, root = reader.fs, posixpath.join(reader.root, STATE_DIR, str(operator))
    where = f"{reader.uri.rstrip('/')}/{STATE_DIR}/{operator}"
    files = list(find_entries(fs, root))
    by_dir: dict[str, list[str]] = {}
    for path in files:
        rel = posixpath.relpath(path, root)
        parent, name = posixpath.split(rel)
        by_dir.setdefault(parent, []).append(name)
    needed = batch + 1
    stores: set[str] = set()
    for directory, names in sorted(by_dir.items()):
        if directory.startswith("_metadata") or "/_metadata" in directory or "SSTs" in directory.split("/"):
            continue
        versions, unique_ids = store_versions(names)
        if not versions:
            continue
        parts = directory.split("/")
        stores.add(parts[1] if len(parts) > 1 else "default")  # <partition>[/<store name>]
        if unique_ids and not format_v2:
            raise StateFormatUnsupported(
                found=f"state files with unique ids in {directory} (RocksDB checkpoint format v2)",
                expected="state checkpoint format v1 (the commit log records no stateUniqueIds)",
                action="The checkpoint's state files and its commit log disagree; export it with the Spark that "
                       "wrote it, or upgrade without carrying the state. Nothing was written.", path=where)
        if not version_readable(versions, needed):
            raise StateVersionPurged(
                found=f"store {directory}: versions {min(versions)}..{max(versions)} retained, version {needed} "
                      f"(the state after batch {batch}) cannot be rebuilt from them",
                expected=f"state version {needed} and the files it is built from", path=where)
    if not stores:
        raise StateVersionPurged(found=f"no state files for operator {operator}",
                                 expected=f"state version {needed} (the state after batch {batch})", path=where)
    if "metadata" in by_dir.get("_metadata", []) or any(d.startswith("_metadata/v2") for d in by_dir):
        return ()
    if any(d.startswith("_stateSchema") for d in by_dir):  # transformWithState: its variables are in the metadata
        raise StateMetadataMissing(
            found=f"a transformWithState operator {operator} without _metadata/ (its state variables are unknown)",
            expected="the operator metadata Spark writes for transformWithState", path=where)
    log.info("operator %s has no _metadata/metadata (written by Spark 3.5 or earlier): reading its store(s) %s "
             "as laid out on disk", operator, ", ".join(sorted(stores)))
    return tuple(sorted(stores))


def rocksdb_snapshot_metadata(fs: AbstractFileSystem, path: str) -> str | None:
    """The version line (``v1``, ``v2``) of the ``metadata`` member of the RocksDB snapshot zip at
    ``path``; None when it is not a zip holding one. Reads the zip's directory and that member only."""
    try:
        with fs.open(path, "rb") as handle, zipfile.ZipFile(handle) as archive, archive.open("metadata") as member:
            return member.readline(64).decode("utf-8", "replace").strip() or None
    except (zipfile.BadZipFile, KeyError, OSError, ValueError):
        return None


def _check_rocksdb_metadata(reader: CheckpointReader, operators: Iterable[int], batch: int,
                            reader_spark: str | None) -> None:
    """Refuse format-v2 RocksDB snapshots that Spark 4.0 wrote (``metadata`` ``v2``) when the
    export runs on a Spark that reads only ``v1`` there (:data:`ROCKSDB_METADATA_V1_ONLY`); reads,
    per operator, the newest snapshot among its stores at or below the exported version."""
    version = _major_minor(reader_spark)
    if version is None or version < ROCKSDB_METADATA_V1_ONLY:
        return
    for operator in operators:
        root = posixpath.join(reader.root, STATE_DIR, str(operator))
        zips = []
        for path in find_entries(reader.fs, root):
            match = _VERSION_FILE.match(posixpath.basename(path))
            if match and match.group(3) == "zip" and int(match.group(1)) <= batch + 1 and "/_metadata" not in path:
                zips.append((int(match.group(1)), path))
        if not zips:
            continue
        newest = max(zips)[1]
        found = rocksdb_snapshot_metadata(reader.fs, newest)
        if found is not None and found != "v1":
            rel = posixpath.relpath(newest, reader.root)
            raise StateFormatUnsupported(
                found=(f"RocksDB snapshot {rel} with metadata {found} (what Spark 4.0 writes there under state "
                       f"checkpoint format v2), and the export would run on Spark {reader_spark}"),
                expected=f"metadata v1: Spark {reader_spark} reads only v1 there (CANNOT_READ_CHECKPOINT "
                         "'Expected v1, but found v2')",
                action="Spark 4.0's own state reader does not read format v2 either: upgrade without carrying the "
                       "state (the DAG's carry_state param false: the new version starts with EMPTY state), or let "
                       "the new version rebuild it from Kafka (a start before the handover, docs \"Choosing where "
                       "the new version starts\"). Nothing was written.", path=reader.uri)


def export_location(archive_root: str, stream_name: str, upgrade_id: str) -> str:
    """The export location of one upgrade next to the stream's archives (archive listings skip it)."""
    return posixpath.join(archive_root.rstrip("/"), stream_name, EXPORTS_DIR, upgrade_id)


def state_batch(result: HandoverResult) -> int | None:
    """The batch whose state matches where the new version starts: the handover's batch for a
    resume, K-1 for a rewind to committed batch K (None for K=0: the state before batch 0 is
    empty). A time or explicit offsets fall between batches: :class:`StateStartUnsupported`."""
    plan = result.start_plan
    mode = plan.choice.mode if plan is not None else StartMode.RESUME
    if mode is StartMode.RESUME:
        return result.handover.batch_id
    if mode is StartMode.REWIND_TO_BATCH:
        assert plan is not None and plan.choice.batch is not None
        return plan.choice.batch - 1 if plan.choice.batch > 0 else None
    raise StateStartUnsupported(
        found=f"the new version starts {'at a time' if mode is StartMode.AT_TIME else 'at explicit offsets'} "
              f"({mode.value}), between batches",
        expected="a start at a batch boundary (resume or rewind_to_batch), where the old state is exact",
        path=result.handover.checkpoint_uri)


@dataclass(frozen=True)
class StateExport:
    """The state-export step's result, the contract with the relaunch and the report.

    ``location`` is the export root (the new version gets it as ``spark.ckpt.initialStatePath``),
    empty when nothing was exported; then ``skipped`` says why (a stateless query, state not
    carried, nothing committed, a start before batch 0). As XCom: :meth:`to_dict`."""

    location: str = ""
    batch_id: int | None = None
    stores: int = 0
    rows: int = 0
    size: int = 0
    seconds: float = 0.0
    skipped: str = ""
    operators: tuple[int, ...] = ()

    @classmethod
    def of(cls, manifest: StateManifest, location: str, seconds: float) -> StateExport:
        return cls(location=location, batch_id=manifest.batch_id, stores=len(manifest.stores), rows=manifest.rows,
                   size=manifest.total_bytes, seconds=round(seconds, 3),
                   operators=tuple(sorted({s.operator_id for s in manifest.stores})))

    def to_dict(self) -> dict[str, Any]:
        return {"location": self.location, "batch_id": self.batch_id, "stores": self.stores, "rows": self.rows,
                "bytes": self.size, "seconds": self.seconds, "skipped": self.skipped,
                "operators": list(self.operators)}

    @classmethod
    def from_json(cls, data: StateExport | str | bytes | Mapping[str, Any] | None) -> StateExport | None:
        """This object, its dict or JSON; a bare location string; None/empty for no export."""
        if data is None or isinstance(data, StateExport):
            return data
        raw: dict[str, Any]
        if isinstance(data, (str, bytes)):
            text = (data.decode() if isinstance(data, bytes) else data).strip()
            if text in ("", "None", "null"):
                return None
            if not text.startswith("{"):
                return cls(location=text)
            raw = dict(load_json(text))
        else:
            raw = dict(data)
        batch = raw.get("batch_id")
        return cls(location=str(raw.get("location") or ""), batch_id=int(batch) if batch is not None else None,
                   stores=int(raw.get("stores") or 0), rows=int(raw.get("rows") or 0), size=int(raw.get("bytes") or 0),
                   seconds=float(raw.get("seconds") or 0.0), skipped=str(raw.get("skipped") or ""),
                   operators=tuple(int(o) for o in raw.get("operators") or ()))


# -- the manifest --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportedFile:
    """One Parquet file of an export: path relative to the export root, size, sha256, rows."""

    path: str
    bytes: int
    sha256: str
    rows: int

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "bytes": self.bytes, "sha256": self.sha256, "rows": self.rows}


@dataclass(frozen=True)
class ExportedStore:
    """One state store (or transformWithState variable) of one operator, as exported.

    ``key_schema``/``value_schema`` are the ``statestore`` reader's ``key``/``value`` struct types
    (Spark's JSON form); ``void_fields`` name the NullType fields Parquet cannot hold, stored as
    boolean nulls (``value.__dummy__`` of a deduplication); ``renamed_fields`` maps a stored field
    path to the reader's where a struct repeats a name (``value.sum_4`` -> ``value.sum``: the
    buffers of ``sum()`` and ``avg()``)."""

    operator_id: int
    operator_name: str
    store_name: str
    state_variable: str | None
    path: str
    num_partitions: int
    key_schema: Mapping[str, Any] = field(hash=False)
    value_schema: Mapping[str, Any] = field(hash=False)
    void_fields: tuple[str, ...]
    rows: int
    files: tuple[ExportedFile, ...] = ()
    renamed_fields: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def field_names(self, column: str) -> list[str]:
        """Top-level field names of the ``key`` or ``value`` struct."""
        schema = self.key_schema if column == "key" else self.value_schema
        return [str(f.get("name")) for f in schema.get("fields", [])]

    def to_dict(self) -> dict[str, Any]:
        return {"operator_id": self.operator_id, "operator_name": self.operator_name, "store_name": self.store_name,
                "state_variable": self.state_variable, "path": self.path, "num_partitions": self.num_partitions,
                "key_schema": dict(self.key_schema), "value_schema": dict(self.value_schema),
                "void_fields": list(self.void_fields), "renamed_fields": dict(self.renamed_fields), "rows": self.rows,
                "files": [f.to_dict() for f in self.files]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExportedStore:
        return cls(
            operator_id=int(data["operator_id"]), operator_name=str(data.get("operator_name") or ""),
            store_name=str(data.get("store_name") or "default"),
            state_variable=str(data["state_variable"]) if data.get("state_variable") else None,
            path=str(data["path"]), num_partitions=int(data.get("num_partitions") or 0),
            key_schema=dict(data.get("key_schema") or {}), value_schema=dict(data.get("value_schema") or {}),
            void_fields=tuple(str(v) for v in data.get("void_fields") or ()), rows=int(data["rows"]),
            renamed_fields={str(k): str(v) for k, v in (data.get("renamed_fields") or {}).items()},
            files=tuple(ExportedFile(str(f["path"]), int(f["bytes"]), str(f["sha256"]), int(f["rows"]))
                        for f in data.get("files") or ()),
        )


@dataclass(frozen=True)
class StateManifest:
    """``state-manifest.json``: what was exported, from which checkpoint and batch, for which
    upgrade and handover, and every file's checksum. ``from_json`` raises
    :class:`StateExportCorrupt` for anything that does not parse."""

    checkpoint_uri: str
    query_id: str | None
    batch_id: int
    upgrade_id: str
    state_store_provider: str
    checkpoint_format_version: int
    batch_watermark_ms: int
    next_batch_watermark_ms: int
    spark_version: str
    created_at: str
    stores: tuple[ExportedStore, ...]
    handover: Mapping[str, Any] | None = field(default=None, hash=False)
    format: int = MANIFEST_FORMAT

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.stores)

    @property
    def total_bytes(self) -> int:
        return sum(s.total_bytes for s in self.stores)

    def store(self, operator_id: int, name: str) -> ExportedStore | None:
        """The export of ``operator_id``'s store (or state variable) ``name``."""
        for store in self.stores:
            if store.operator_id == operator_id and name in (store.store_name, store.state_variable):
                return store
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "checkpoint_uri": self.checkpoint_uri, "query_id": self.query_id,
                "batch_id": self.batch_id, "upgrade_id": self.upgrade_id,
                "handover": dict(self.handover) if self.handover is not None else None,
                "state_store_provider": self.state_store_provider,
                "checkpoint_format_version": self.checkpoint_format_version,
                "batch_watermark_ms": self.batch_watermark_ms, "next_batch_watermark_ms": self.next_batch_watermark_ms,
                "spark_version": self.spark_version, "created_at": self.created_at,
                "stores": [s.to_dict() for s in self.stores]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any], *, where: str = "") -> StateManifest:
        try:
            raw = load_json(data) if isinstance(data, (str, bytes)) else dict(data)
            if raw.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format {raw.get('format')!r}")
            return cls(
                checkpoint_uri=str(raw["checkpoint_uri"]), query_id=raw.get("query_id"), batch_id=int(raw["batch_id"]),
                upgrade_id=str(raw.get("upgrade_id") or ""), handover=raw.get("handover"),
                state_store_provider=str(raw.get("state_store_provider") or HDFS_PROVIDER),
                checkpoint_format_version=int(raw.get("checkpoint_format_version") or 1),
                batch_watermark_ms=int(raw.get("batch_watermark_ms") or 0),
                next_batch_watermark_ms=int(raw.get("next_batch_watermark_ms") or 0),
                spark_version=str(raw.get("spark_version") or ""), created_at=str(raw.get("created_at") or ""),
                stores=tuple(ExportedStore.from_dict(s) for s in raw["stores"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StateExportCorrupt(found=f"a state manifest that does not parse ({type(exc).__name__}: {exc})",
                                     expected=f"a {STATE_MANIFEST} of format {MANIFEST_FORMAT}",
                                     path=where or None) from None


# -- the export location -------------------------------------------------------------------------


def _inside(child: str, parent: str) -> bool:
    child, parent = child.rstrip("/"), parent.rstrip("/")
    return child == parent or child.startswith(parent + "/")


def read_manifest(fs: AbstractFileSystem, root: str, *, uri: str = "") -> StateManifest | None:
    """The manifest under ``root``, None when there is none (no export, or an unfinished one)."""
    path = posixpath.join(root, STATE_MANIFEST)
    fs.invalidate_cache(root)
    try:
        data = read_file(fs, path)
    except FileNotFoundError:
        return None
    return StateManifest.from_json(data, where=f"{uri.rstrip('/')}/{STATE_MANIFEST}" if uri else path)


def prepare_export_location(fs: AbstractFileSystem, root: str, *, uri: str, checkpoint_fs: AbstractFileSystem,
                            checkpoint_root: str) -> StateManifest | None:
    """Make ``root`` ready for an export; returns the complete manifest already there, if any.

    Refuses (:class:`StateExportConflict`, nothing changed) a location inside the checkpoint or
    holding it, or one with entries an export does not write. An unfinished export (``state/``
    or ``_job/`` without a manifest: a crashed run) is removed."""
    same_store = type(fs) is type(checkpoint_fs) and (is_local(fs) == is_local(checkpoint_fs))
    if same_store and (_inside(root, checkpoint_root) or _inside(checkpoint_root, root)):
        raise StateExportConflict(found="the export location overlaps the checkpoint",
                                  expected="a location outside the checkpoint (and not holding it)", path=uri)
    manifest = read_manifest(fs, root, uri=uri)
    if manifest is not None:
        return manifest
    if not fs.exists(root):
        return None
    names = {posixpath.basename(p) for p in list_names(fs, root)}
    names.discard(posixpath.basename(root.rstrip("/")))
    unknown = sorted(names - {STATE_DIR, JOB_DIR})
    if unknown:
        raise StateExportConflict(found=f"{', '.join(unknown[:5])} and no {STATE_MANIFEST}",
                                  expected="an empty location, or one holding an export of this provider", path=uri)
    for name in sorted(names):
        log.info("removing the unfinished export's %s/ under %s (no %s: a run that did not finish)",
                 name, uri, STATE_MANIFEST)
        fs.rm(posixpath.join(root, name), recursive=True)
    return None


def _parquet_rows(fs: AbstractFileSystem, path: str, uri: str) -> int:
    """The row count in the footer of a Parquet file; :class:`StateExportCorrupt` when unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with fs.open(path, "rb") as handle:
            return int(pq.ParquetFile(handle).metadata.num_rows)
    except (pa.ArrowException, OSError) as exc:
        raise StateExportCorrupt(found=f"{posixpath.basename(path)} unreadable as Parquet ({exc})",
                                 expected="a complete Parquet file", path=uri) from None


def _parquet_files(fs: AbstractFileSystem, directory: str) -> list[tuple[str, int]]:
    fs.invalidate_cache(directory)
    found = find_entries(fs, directory) if fs.exists(directory) else {}
    return sorted((str(p), int(info.get("size") or 0)) for p, info in found.items()
                  if str(p).endswith(".parquet") and not posixpath.basename(str(p)).startswith((".", "_")))


def _read_store(fs: AbstractFileSystem, root: str, store: ExportedStore, uri: str,
                progress: Callable[[str], None]) -> ExportedStore:
    """The store with every Parquet file read back: sha256 and the row count of its footer;
    :class:`StateExportCorrupt` when the rows differ from what the job read."""
    files: list[ExportedFile] = []
    for path, _size in _parquet_files(fs, posixpath.join(root, store.path)):
        size, digest = hash_file(fs, path)
        files.append(ExportedFile(posixpath.relpath(path, root), size, digest, _parquet_rows(fs, path, uri)))
    rows = sum(f.rows for f in files)
    if rows != store.rows:
        raise StateExportCorrupt(
            found=f"{rows:,} rows in the Parquet files of operator {store.operator_id} store "
                  f"{store.state_variable or store.store_name}",
            expected=f"the {store.rows:,} rows the export job read from the state store", path=f"{uri}/{store.path}")
    progress(f"operator {store.operator_id} store {store.state_variable or store.store_name}: {rows:,} rows in "
             f"{len(files)} files ({human_bytes(sum(f.bytes for f in files))}) read back")
    return ExportedStore(**{**store.__dict__, "files": tuple(files)})


def finish_export(fs: AbstractFileSystem, root: str, plan: StateExportPlan, job_result: Mapping[str, Any], *,
                  uri: str, upgrade_id: str, handover: Mapping[str, Any] | None = None,
                  clock: Callable[[], datetime] = utc_now,
                  progress: Callable[[str], None] = log.info) -> StateManifest:
    """Read the job's Parquet back, check it against the job's row counts and the plan's
    operators, then write and re-read ``state-manifest.json``. Raises :class:`StateExportCorrupt`."""
    assert plan.batch_id is not None
    stores = tuple(_read_store(fs, root, ExportedStore.from_dict(s), uri, progress)
                   for s in job_result.get("stores") or ())
    if int(job_result.get("batch_id", -1)) != plan.batch_id:
        raise StateExportCorrupt(found=f"the job read batch {job_result.get('batch_id')}",
                                 expected=f"batch {plan.batch_id}", path=uri)
    missing = sorted(set(plan.operators) - {s.operator_id for s in stores})
    if missing:
        raise StateExportCorrupt(found=f"no export of operator(s) {', '.join(map(str, missing))}",
                                 expected=f"every stateful operator of the checkpoint ({list(plan.operators)})",
                                 path=uri)
    manifest = StateManifest(
        checkpoint_uri=plan.checkpoint_uri, query_id=plan.query_id, batch_id=plan.batch_id, upgrade_id=upgrade_id,
        handover=handover, state_store_provider=plan.state_store_provider,
        checkpoint_format_version=plan.checkpoint_format_version, batch_watermark_ms=plan.batch_watermark_ms,
        next_batch_watermark_ms=plan.next_batch_watermark_ms, spark_version=str(job_result.get("spark_version") or ""),
        created_at=clock().isoformat(timespec="seconds"), stores=stores,
    )
    write_atomic(fs, posixpath.join(root, STATE_MANIFEST), manifest.to_json().encode())
    again = read_manifest(fs, root, uri=uri)
    if again != manifest:
        raise StateExportCorrupt(found=f"{STATE_MANIFEST} reads back differently", expected="the manifest written",
                                 path=uri)
    return manifest


def verify_state_export(fs: AbstractFileSystem, root: str, manifest: StateManifest, *, uri: str) -> None:
    """Every file of ``manifest`` present with its size, sha256 and rows, and no other Parquet
    file in a store; :class:`StateExportCorrupt` naming the first difference."""
    for store in manifest.stores:
        expected = {f.path: f for f in store.files}
        present = {posixpath.relpath(p, root): size for p, size in _parquet_files(fs, posixpath.join(root, store.path))}
        for rel in sorted(set(expected) | set(present)):
            want = expected.get(rel)
            if want is None:
                raise StateExportCorrupt(found=f"{rel}, not in the manifest", expected="only the exported files",
                                         path=uri)
            if rel not in present:
                raise StateExportCorrupt(found=f"{rel} is missing", expected="every file of the manifest", path=uri)
            size, digest = hash_file(fs, posixpath.join(root, rel))
            if (size, digest) != (want.bytes, want.sha256):
                raise StateExportCorrupt(found=f"{rel}: {size} bytes, sha256 {digest[:12]}…",
                                         expected=f"{want.bytes} bytes, sha256 {want.sha256[:12]}…", path=uri)
            rows = _parquet_rows(fs, posixpath.join(root, rel), uri)
            if rows != want.rows:
                raise StateExportCorrupt(found=f"{rel}: {rows} rows", expected=f"{want.rows} rows", path=uri)


def check_reusable(manifest: StateManifest, plan: StateExportPlan, *, uri: str) -> None:
    """An export already at the location must be of the same checkpoint query and batch;
    :class:`StateExportConflict` otherwise (nothing is replaced)."""
    if (manifest.query_id, manifest.batch_id) != (plan.query_id, plan.batch_id) or (
            manifest.checkpoint_uri.rstrip("/") != plan.checkpoint_uri.rstrip("/")):
        raise StateExportConflict(
            found=f"an export of {manifest.checkpoint_uri} (query {manifest.query_id}) at batch {manifest.batch_id}",
            expected=f"none, or the export of {plan.checkpoint_uri} (query {plan.query_id}) at batch {plan.batch_id}",
            path=uri)


__all__ = ["HDFS_PROVIDER", "JOB_RESULT", "STATE_MANIFEST", "ExportedFile", "ExportedStore", "StateExport",
           "StateExportPlan", "export_location", "state_batch",
           "StateManifest", "check_reusable", "finish_export", "plan_state_export", "prepare_export_location",
           "read_manifest", "store_versions", "verify_state_export", "version_readable"]
