"""Seed a standby from the old query's state, read in its own warm session during a switchover.

A stateful switchover cannot wait for a spark-submit of the state export inside its downtime. The
standby (:mod:`airflow_ckpt_provider.spark.switchover`), once the old query stopped clean at batch
N, reads the old checkpoint's state after N with Spark's ``statestore`` reader in the session it
already runs, with the export job's own code (:func:`~airflow_ckpt_provider.spark.state_export.export_state`),
and writes it as an export (Parquet per store and ``state-manifest.json`` with rows and checksum per
store, no file list) under the NEW checkpoint's ``_ckpt/seed-state/<release id>/``. It gives that
location to the job as ``spark.ckpt.initialStatePath``: the job's state functions
(:mod:`airflow_ckpt_provider.spark.state`) read it as they read an export. The provider's verified
export of the same batch runs after the switch, for the archive, and must agree with the seed
(:func:`~airflow_ckpt_provider.checkpoint.state.check_seeded_state`).

Imports pyspark (through the modules it calls), the standard library, the pure core and this
package's ``spark`` modules: never Airflow or fsspec.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.snapshot_reader import SnapshotReader
from airflow_ckpt_provider.checkpoint.state import (
    CONF_CHECKPOINT_FORMAT,
    STATE_MANIFEST,
    StateManifest,
    state_layout,
)
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.spark.checkpoint_files import HadoopCheckpointFiles
from airflow_ckpt_provider.spark.state_export import STATE_PARTITIONS_CONF, export_state, use_checkpoint_format

log = logging.getLogger(__name__)

__all__ = ["SEED_STATE_DIR", "seed_location", "seed_state", "session_conf"]

#: Where a standby writes the state it seeds, under the new checkpoint: one folder per release.
SEED_STATE_DIR = "_ckpt/seed-state"


def seed_location(new_checkpoint: str, release_id: str) -> str:
    """The seed folder of ``release_id`` under the new checkpoint."""
    return f"{new_checkpoint.rstrip('/')}/{SEED_STATE_DIR}/{release_id}"


@contextmanager
def session_conf(spark: Any, settings: Mapping[str, str] | None = None, *,
                 restore: Iterable[str] = ()) -> Iterator[None]:
    """Set ``settings`` on the session for the block, then put back what was there (unset what was
    not set), for those keys and the ``restore`` keys the block may set itself: here, the state
    reader's settings never reach the new query this session starts next (its own state format,
    its partitions)."""
    saved = {key: spark.conf.get(key, None) for key in (*(settings or {}), *restore)}
    for key, value in (settings or {}).items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def seed_state(spark: Any, handover: Handover, batch: int | None, target: str, *,
               upgrade_id: str, operators: Sequence[int] | None = None) -> StateManifest | None:
    """Read the state of the old checkpoint (``handover.checkpoint_uri``) after committed batch
    ``batch`` (where the new version starts: :func:`~airflow_ckpt_provider.checkpoint.state.state_batch`)
    and write it under ``target`` as an export; returns its manifest, None when there is no state to
    carry (a stateless query; ``batch`` None: the state before batch 0 is empty). The checkpoint is
    read with the provider's reader first (the batch is committed, the state's format). Spark's and
    the reader's errors propagate (``CheckpointError``, ``OSError``, Spark's own). ``operators``:
    the stateful operators the handover's reading listed (None: list them here)."""
    checkpoint = handover.checkpoint_uri
    with HadoopCheckpointFiles(spark, checkpoint) as files:
        reader = SnapshotReader(files)
        if operators is None:
            operators = reader.snapshot().state_operators
        if not operators or batch is None:
            return None
        commit, offsets = reader.commit_entry(batch), reader.offset_entry(batch)  # committed, or CheckpointNotFound
    provider, format_version = state_layout(dict(offsets.conf), bool(commit.state_unique_ids))
    started = time.monotonic()
    log.info("seeding the old query's state: reading operators %s of %s after batch %d (format v%d) in this "
             "session", ", ".join(map(str, operators)), checkpoint, batch, format_version)
    with session_conf(spark, restore=(CONF_CHECKPOINT_FORMAT, STATE_PARTITIONS_CONF)):
        if format_version >= 2:
            use_checkpoint_format(spark, format_version)
        result = export_state(spark, checkpoint, batch, target)
    manifest = StateManifest(
        checkpoint_uri=checkpoint, query_id=handover.query_id, batch_id=batch, upgrade_id=upgrade_id,
        handover=handover.to_dict(), state_store_provider=provider,
        checkpoint_format_version=format_version, batch_watermark_ms=offsets.batch_watermark_ms or 0,
        next_batch_watermark_ms=commit.next_batch_watermark_ms, spark_version=str(spark.version),
        created_at=utc_iso(timespec="seconds"), stores=result.exported_stores())
    from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles

    HadoopFiles(spark, target).write(STATE_MANIFEST, manifest.to_json().encode())
    log.info("seeded %s rows of %d stores (batch %d) at %s in %.1f s", f"{manifest.rows:,}", len(manifest.stores),
             batch, target, time.monotonic() - started)
    return manifest
