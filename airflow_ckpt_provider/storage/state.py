"""The state export's I/O: whether the old checkpoint's state after the chosen batch can be read
(:func:`plan_state_export`, through the reader), and the export location read and written through
fsspec (:func:`prepare_export_location`, :func:`finish_export`, :func:`verify_state_export`).

What an export is and the rules it follows (:class:`StateExportPlan`, :class:`StateManifest`,
:func:`export_location`, :func:`check_reusable`, ...) are the pure core's,
:mod:`airflow_ckpt_provider.checkpoint.state`, whose docstring describes the export as a whole.
"""

from __future__ import annotations

import logging
import posixpath
import zipfile
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    StateBatchNotCommitted,
    StateExportConflict,
    StateExportCorrupt,
    StateFormatUnsupported,
    StateMetadataMissing,
    StateVersionPurged,
)
from airflow_ckpt_provider.checkpoint.state import (
    FORMAT_V2_READER,
    JOB_DIR,
    ROCKSDB_METADATA_V1_ONLY,
    STATE_DIR,
    STATE_MANIFEST,
    VERSION_FILE,
    ExportedFile,
    ExportedStore,
    StateExportPlan,
    StateJobResult,
    StateManifest,
    reads_format_v2,
    spark_major_minor,
    state_layout,
    store_versions,
    version_readable,
)
from airflow_ckpt_provider.clock import utc_now
from airflow_ckpt_provider.storage.files import is_local, read_file, write_atomic
from airflow_ckpt_provider.storage.listing import find_entries, list_names
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.transfer import hash_file, human_bytes

log = logging.getLogger(__name__)


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
    provider, format_version = state_layout(dict(entry.conf), bool(commit.state_unique_ids))
    v2 = format_version >= 2
    if v2:
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
    version = spark_major_minor(reader_spark)
    if version is None or version < ROCKSDB_METADATA_V1_ONLY:
        return
    for operator in operators:
        root = posixpath.join(reader.root, STATE_DIR, str(operator))
        zips = []
        for path in find_entries(reader.fs, root):
            match = VERSION_FILE.match(posixpath.basename(path))
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


def finish_export(fs: AbstractFileSystem, root: str, plan: StateExportPlan, job_result: StateJobResult, *,
                  uri: str, upgrade_id: str, handover: Mapping[str, Any] | None = None,
                  clock: Callable[[], datetime] = utc_now,
                  progress: Callable[[str], None] = log.info) -> StateManifest:
    """Read the job's Parquet back, check it against the job's row counts and the plan's
    operators, then write and re-read ``state-manifest.json``. Raises :class:`StateExportCorrupt`."""
    assert plan.batch_id is not None
    stores = tuple(_read_store(fs, root, store, uri, progress) for store in job_result.exported_stores())
    if job_result.batch_id != plan.batch_id:
        raise StateExportCorrupt(found=f"the job read batch {job_result.batch_id}",
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
        next_batch_watermark_ms=plan.next_batch_watermark_ms, spark_version=job_result.spark_version,
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
