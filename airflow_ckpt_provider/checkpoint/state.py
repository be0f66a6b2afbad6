"""The old query's state, carried to the new checkpoint: what may be exported, and the export's
manifest and rules. Pure: no I/O (the checks that read the checkpoint and the export's files
through fsspec are :mod:`airflow_ckpt_provider.storage.state`).

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
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import (
    InvalidStateExport,
    SeededStateMismatch,
    StateExportConflict,
    StateExportCorrupt,
    StateStartUnsupported,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.rewind import StartMode
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, array_of, object_of

log = logging.getLogger(__name__)

STATE_MANIFEST = "state-manifest.json"
STATE_DIR = "state"
JOB_DIR = "_job"
JOB_RESULT = f"{JOB_DIR}/result.json"
#: where the reference DAG exports a stream's state: <archive root>/<stream>/_state/<upgrade id>
EXPORTS_DIR = "_state"
MANIFEST_FORMAT = 1
#: the format of the export job's ``_job/result.json`` (:class:`StateJobResult`); the previous
#: release's job wrote it without one (format 0)
JOB_RESULT_FORMAT = 1
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


def spark_major_minor(spark_version: str | None) -> tuple[int, int] | None:
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
    version = spark_major_minor(spark_version)
    return None if version is None else version >= FORMAT_V2_READER_VERSION


#: a state store version file: <version>[_<unique id>].<kind>
VERSION_FILE = re.compile(r"^(\d+)(?:_([0-9A-Za-z-]+))?\.(delta|snapshot|zip|changelog)$")
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
        match = VERSION_FILE.match(name)
        if match:
            found.setdefault(int(match.group(1)), set()).add(match.group(3))
            unique_ids = unique_ids or match.group(2) is not None
    return {v: frozenset(k) for v, k in found.items()}, unique_ids


def state_layout(offset_conf: Mapping[str, str], state_unique_ids: bool) -> tuple[str, int]:
    """The state store provider and state checkpoint format version a batch was written with: from
    its offset log entry's conf and whether its commit holds ``stateUniqueIds`` (format v2 even where
    the conf does not say so)."""
    provider = offset_conf.get(CONF_PROVIDER, HDFS_PROVIDER)
    version = int(offset_conf.get(CONF_CHECKPOINT_FORMAT, "1") or 1)
    return provider, max(version, 2) if state_unique_ids or version >= 2 else version


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
        return _STATE_EXPORT.encode({"location": self.location, "batch_id": self.batch_id, "stores": self.stores,
                                     "rows": self.rows,
                "bytes": self.size, "seconds": self.seconds, "skipped": self.skipped,
                "operators": list(self.operators)})

    @classmethod
    def from_json(cls, data: StateExport | str | bytes | Mapping[str, Any] | None) -> StateExport | None:
        """This object, its dict or JSON (the state export step's XCom) through its strict codec;
        a bare location text (not starting with ``{``); None for None, empty, ``None`` or ``null``
        (no export). :class:`InvalidStateExport` for anything else."""
        if data is None or isinstance(data, StateExport):
            return data
        if isinstance(data, (str, bytes)):
            text = (data.decode() if isinstance(data, bytes) else data).strip()
            if text in ("", "None", "null"):
                return None
            if not text.startswith("{"):
                return cls(location=text)
        values = _STATE_EXPORT.decode(data)
        return cls(**{"size" if name == "bytes" else name: value for name, value in values.items()})


#: :class:`StateExport`'s codec (no format number, as today's release writes it); ``bytes`` is
#: :attr:`StateExport.size`.
_STATE_EXPORT = Codec("StateExport", InvalidStateExport, {
    "location": Field((str,)),
    "batch_id": Field((int,), required=False, nullable=True),
    **{name: Field((int,), required=False, default=0) for name in ("stores", "rows", "bytes")},
    "seconds": Field((float,), required=False, default=0.0),
    "skipped": Field((str,), required=False, default=""),
    "operators": Field((list,), required=False, default=(), decode=array_of(int)),
}, versions=(UNVERSIONED,))


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

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any]) -> ExportedFile:
        """From :meth:`to_dict` (a manifest's entry); :class:`StateExportCorrupt` on anything else."""
        return cls(**_FILE.decode(data))


@dataclass(frozen=True)
class ExportedStore:
    """One state store (or transformWithState variable) of one operator, as exported.

    ``key_schema``/``value_schema`` are the ``statestore`` reader's ``key``/``value`` struct types
    (Spark's JSON form); ``void_fields`` name the NullType fields Parquet cannot hold, stored as
    boolean nulls (``value.__dummy__`` of a deduplication); ``renamed_fields`` maps a stored field
    path to the reader's where a struct repeats a name (``value.sum_4`` -> ``value.sum``: the
    buffers of ``sum()`` and ``avg()``). ``checksum``: the sum of every row's ``xxhash64(key, value)``
    as the export job computed it (a decimal string; "" in an export made before it was recorded):
    two exports of the same state agree on it however their files are split."""

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
    checksum: str = ""

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
                **({"checksum": self.checksum} if self.checksum else {}), "files": [f.to_dict() for f in self.files]}

    @classmethod
    def from_dict(cls, data: str | bytes | Mapping[str, Any]) -> ExportedStore:
        """From :meth:`to_dict` (a manifest's entry, with its files) through its strict codec;
        :class:`StateExportCorrupt` on anything else."""
        return cls(**_STORE.decode(data))

    @classmethod
    def from_job(cls, data: Mapping[str, Any]) -> ExportedStore:
        """A store as the export job's ``_job/result.json`` lists it: :meth:`from_dict` without
        the files (not read back yet) and the job's own keys (``min_batch_id``, ``max_batch_id``)."""
        return cls.from_dict({k: v for k, v in _STORE.parse(data).items() if k not in _JOB_ONLY})


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
        """From :meth:`to_json` (``state-manifest.json``, format 1) through its strict codec;
        :class:`StateExportCorrupt` (naming ``where``) on anything else."""
        try:
            return cls(**_MANIFEST.decode(data))
        except StateExportCorrupt as exc:
            if not where or exc.path:
                raise
            raise StateExportCorrupt(found=exc.found, expected=exc.expected, path=where) from None


@dataclass(frozen=True)
class StateJobResult:
    """``_job/result.json``: what the export job (:mod:`airflow_ckpt_provider.spark.state_export`)
    read, written by it when it ends (format 1; the previous release's job wrote the same keys
    without a format number): the ``batch_id`` and ``checkpoint`` it read, its ``spark_version``,
    whether it only counted (``listed_only``), and each store as the job lists it
    (:meth:`ExportedStore.from_job` 's input, with the job's own keys: kept as written, for
    listings). ``from_json`` raises :class:`StateExportCorrupt` for anything else."""

    batch_id: int
    checkpoint: str
    spark_version: str
    stores: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)
    listed_only: bool = False

    def exported_stores(self) -> tuple[ExportedStore, ...]:
        """The stores, without their files (not read back yet)."""
        return tuple(ExportedStore.from_job(s) for s in self.stores)

    def to_json(self) -> str:
        return json.dumps(_JOB_RESULT.encode({
            "batch_id": self.batch_id, "checkpoint": self.checkpoint, "spark_version": self.spark_version,
            "stores": [dict(s) for s in self.stores], "listed_only": self.listed_only}), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any], *, where: str = "") -> StateJobResult:
        """From :meth:`to_json` through its codec (every store checked by :class:`ExportedStore`'s);
        :class:`StateExportCorrupt` (naming ``where``) on anything else."""
        try:
            return cls(**_JOB_RESULT.present(data))
        except StateExportCorrupt as exc:
            if not where or exc.path:
                raise
            raise StateExportCorrupt(found=exc.found, expected=exc.expected, path=where) from None


# -- the codecs of the manifest and its entries (airflow_ckpt_provider.records.codec) -----------------
# state-manifest.json is format 1 (every key written since the first export); its stores and files
# carry no format number of their own.

_COUNT = Field((int,))
_FILE = Codec("ExportedFile", StateExportCorrupt, {
    "path": Field((str,)), "bytes": _COUNT, "sha256": Field((str,)), "rows": _COUNT,
}, version=None)
#: keys of a store in the export job's result that the manifest does not keep
_JOB_ONLY = frozenset({"min_batch_id", "max_batch_id"})
_STORE = Codec("ExportedStore", StateExportCorrupt, {
    "operator_id": _COUNT,
    "operator_name": Field((str,)),
    "store_name": Field((str,)),
    "state_variable": Field((str,), nullable=True),
    "path": Field((str,)),
    "num_partitions": _COUNT,
    "key_schema": Field((dict,)),
    "value_schema": Field((dict,)),
    "void_fields": Field((list,), decode=array_of(str)),
    "renamed_fields": Field((dict,), decode=object_of(str)),
    "rows": _COUNT,
    "checksum": Field((str,), required=False, default=""),
    "files": Field((list,), required=False, default=(), decode=array_of(dict, decode=ExportedFile.from_json)),
}, version=None)


def _handover_dict(value: Mapping[str, Any]) -> dict[str, Any]:
    """The handover the export was made for, checked by :class:`Handover`'s own codec, kept as its dict."""
    Handover.from_json(value)
    return dict(value)


_MANIFEST = Codec("StateManifest", StateExportCorrupt, {
    "checkpoint_uri": Field((str,)),
    "query_id": Field((str,), nullable=True),
    "batch_id": _COUNT,
    "upgrade_id": Field((str,)),
    "handover": Field((dict,), nullable=True, decode=_handover_dict),
    "state_store_provider": Field((str,)),
    "checkpoint_format_version": _COUNT,
    "batch_watermark_ms": _COUNT,
    "next_batch_watermark_ms": _COUNT,
    "spark_version": Field((str,)),
    "created_at": Field((str,)),
    "stores": Field((list,), decode=array_of(dict, decode=ExportedStore.from_dict)),
}, version=MANIFEST_FORMAT)




def _job_store(value: Mapping[str, Any]) -> dict[str, Any]:
    """A store of the job's result, checked by :class:`ExportedStore`'s codec, kept as it is."""
    ExportedStore.from_job(value)
    return dict(value)


_JOB_RESULT = Codec("state export job result", StateExportCorrupt, {
    "batch_id": _COUNT,
    "checkpoint": Field((str,)),
    "spark_version": Field((str,)),
    "stores": Field((list,), required=False, decode=array_of(dict, decode=_job_store)),
    "listed_only": Field((bool,), required=False),
}, version=JOB_RESULT_FORMAT, versions=(UNVERSIONED,))


# -- an export found at the location ------------------------------------------------------------


def check_reusable(manifest: StateManifest, plan: StateExportPlan, *, uri: str) -> None:
    """An export already at the location must be of the same checkpoint query and batch;
    :class:`StateExportConflict` otherwise (nothing is replaced)."""
    if (manifest.query_id, manifest.batch_id) != (plan.query_id, plan.batch_id) or (
            manifest.checkpoint_uri.rstrip("/") != plan.checkpoint_uri.rstrip("/")):
        raise StateExportConflict(
            found=f"an export of {manifest.checkpoint_uri} (query {manifest.query_id}) at batch {manifest.batch_id}",
            expected=f"none, or the export of {plan.checkpoint_uri} (query {plan.query_id}) at batch {plan.batch_id}",
            path=uri)


# -- a seed against the export -------------------------------------------------------------------


def check_seeded_state(seed: StateManifest, export: StateManifest, *, uri: str) -> None:
    """The state a standby seeded (``seed``: its manifest, written in its own session) is the export's:
    the same batch and, per store, the same rows and checksum; :class:`SeededStateMismatch` naming
    every difference. An export without checksums (made before they were recorded) is refused too:
    the check cannot be made."""
    differences: list[tuple[str, str]] = []
    if seed.batch_id != export.batch_id:
        differences.append((f"the seed of batch {seed.batch_id}", f"batch {export.batch_id}"))
    names = {(s.operator_id, s.state_variable or s.store_name) for s in (*seed.stores, *export.stores)}
    for operator, name in sorted(names):
        ours, theirs = export.store(operator, name), seed.store(operator, name)
        where = f"operator {operator} store {name}"
        if ours is None or theirs is None:
            differences.append((f"{where} {'only in the seed' if ours is None else 'missing from the seed'}",
                                f"{where} in both"))
        elif not ours.checksum or not theirs.checksum:
            differences.append((f"{where} without a checksum", f"{where} with its checksum in both"))
        elif (theirs.rows, theirs.checksum) != (ours.rows, ours.checksum):
            differences.append((f"{where}: {theirs.rows:,} rows, checksum {theirs.checksum} in the seed",
                                f"{ours.rows:,} rows, checksum {ours.checksum} as exported"))
    if differences:
        raise SeededStateMismatch(found="; ".join(f for f, _ in differences),
                                  expected="the export: " + "; ".join(e for _, e in differences), path=uri)


__all__ = ["HDFS_PROVIDER", "JOB_RESULT", "JOB_RESULT_FORMAT", "STATE_MANIFEST", "ExportedFile", "ExportedStore",
           "StateExport", "StateExportPlan", "StateJobResult", "export_location", "state_layout", "state_batch",
           "StateManifest", "check_reusable", "check_seeded_state", "store_versions", "version_readable"]
