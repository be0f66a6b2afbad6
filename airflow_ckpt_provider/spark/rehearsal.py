"""A standby's rehearsal: one short streaming query in its own session before it waits.

A standby's downtime is its first batch. In a fresh JVM that batch pays for everything a
streaming query loads the first time: the micro-batch engine, the source's offset reader and
consumers, the state store and its coordinator, the stateful operators' generated code, the
Python ``foreachBatch`` callback, the Parquet writer; and a stateful switchover's seed pays for
Spark's state reader. The rehearsal does all of that once, before the standby heartbeat (so not
in the downtime), on a copy of the job's source:

* ``source``, a streaming DataFrame of recent records (at most a few hundred: the Kafka warm-up
  starts it at a timestamp a little in the past), with a file stream of one Parquet row unioned
  to it (as a seeded job unions its seed), is deduplicated within a watermark and aggregated
  (two stateful operators, the session's state store provider), and written by a
  ``foreachBatch`` as Parquet; the query stops after its first batch (on an idle topic an empty
  one: Spark runs batch 0 of a new query whatever its source has);
* the state after that batch is read back with the state export's own code
  (:func:`~airflow_ckpt_provider.spark.state_export.export_state`), as a seed would.

Everything goes to a scratch folder that is deleted afterwards, whether the rehearsal succeeded
or not (:func:`scratch_location`): on a cluster the executors write its state and output, so it
lives on the new checkpoint's own filesystem, under ``<checkpoint>/_ckpt/rehearsal/<id>/``
(the provider's control folder: the checkpoint reader never looks there and the archive leaves it
out), listed and removed through Hadoop's FileSystem; only a driver whose executors run on its
own host (a ``local`` master) with a checkpoint on the local filesystem uses a temporary folder
of its disk. The session's conf is as before. A rehearsal never fails the driver: an error is
logged and the standby waits as it would without one (its real query will say what is wrong).
``spark.ckpt.standbyRehearsal=false`` switches it off (:func:`rehearsal_enabled`): the standby
then warms up with a batch read only.

Imports pyspark (lazily) and the standard library, plus this package's ``spark`` modules: the
driver has no Airflow.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow_ckpt_provider.batch_names import batch_number
from airflow_ckpt_provider.records.control import (
    CONF_CHECKPOINT_LOCATION,
    CONF_STANDBY_REHEARSAL,
    REHEARSAL_SCRATCH_DIR,
)

log = logging.getLogger(__name__)

__all__ = ["REHEARSAL_QUERY", "rehearsal_enabled", "rehearse_query", "scratch_location"]

#: The rehearsal query's name (in the driver's log and the session's query list while it runs).
REHEARSAL_QUERY = "ckpt_standby_rehearsal"
#: How long the rehearsal waits for its first batch before it stops the query anyway: a bound on
#: a warm-up, not a deadline anything depends on (a slow machine only warms up less).
DEFAULT_REHEARSAL_LIMIT_S = 120.0
#: Spark's status message of a query whose source had nothing new.
_WAITING_FOR_DATA = "Waiting for data to arrive"


def rehearsal_enabled(spark: Any) -> bool:  # noqa: ANN401 - a SparkSession
    """Whether this driver rehearses before it waits as a standby (``spark.ckpt.standbyRehearsal``,
    default true)."""
    return str(spark.conf.get(CONF_STANDBY_REHEARSAL, "true")).strip().lower() != "false"


def _first_batch_done(query: Any) -> bool:  # noqa: ANN401 - a StreamingQuery
    """Whether ``query`` has run a batch with data, or found its source with none."""
    if any(int(p.get("numInputRows", 0) or 0) > 0 for p in query.recentProgress):
        return True
    status = query.status
    return bool(status.get("message") == _WAITING_FOR_DATA and not status.get("isTriggerActive"))


def scratch_location(checkpoint: str | None, unique: str, *, master: str) -> str | None:
    """Where a rehearsal writes, given the new checkpoint (its URI, qualified: a path without a
    scheme counts as the local filesystem, so the driver qualifies one through Hadoop first), a
    folder name of its own and the session's master: ``<checkpoint>/_ckpt/rehearsal/<unique>``, on
    the checkpoint's own filesystem, which the executors reach as the job's query will; None, a
    temporary folder of the driver's disk, only when both the checkpoint is on the local filesystem
    (``file:``) and the executors run on the driver's host (a ``local`` master). On a cluster, a
    ``file:`` checkpoint is a shared mount (else the job's own query could not use it), so it is
    used too.

    ``ValueError`` when ``unique`` is not one folder name, or when a cluster master has no
    checkpoint to write under (a standby launch always sets ``spark.ckpt.checkpointLocation``)."""
    if not unique or "/" in unique or unique in (".", ".."):
        raise ValueError(f"rehearsal scratch name {unique!r}: expected one folder name (no '/', not '.' or '..')")
    local_master = master.strip().lower().startswith("local")
    if not checkpoint or not checkpoint.strip():
        if local_master:
            return None
        raise ValueError(f"no checkpoint location to rehearse under on master {master or '(unknown)'}: expected "
                         f"--conf {CONF_CHECKPOINT_LOCATION}=<new checkpoint> (a standby launch sets it); the "
                         "rehearsal's executors cannot write to the driver's local disk")
    scheme = urlsplit(checkpoint.strip()).scheme.lower()
    if local_master and scheme in ("", "file"):
        return None
    return f"{checkpoint.strip().rstrip('/')}/{REHEARSAL_SCRATCH_DIR}/{unique}"


def _qualified(spark: Any, checkpoint: str) -> str:  # noqa: ANN401 - a SparkSession
    """``checkpoint`` with its filesystem's scheme: a path without one is resolved as Spark resolves
    a checkpoint location (Hadoop's default filesystem, HDFS on most clusters)."""
    if urlsplit(checkpoint).scheme:
        return checkpoint
    path = spark._jvm.org.apache.hadoop.fs.Path(checkpoint)
    return str(path.getFileSystem(spark._jsc.hadoopConfiguration()).makeQualified(path).toString())


class _Scratch:
    """One rehearsal's scratch folder (see :func:`scratch_location`): its URIs, its last committed
    batch, its removal."""

    def __init__(self, spark: Any) -> None:  # noqa: ANN401 - a SparkSession
        # the conf key, not kafka.checkpoint_location(): that one waits for the release this warm-up precedes
        checkpoint = str(spark.conf.get(CONF_CHECKPOINT_LOCATION, "") or "").strip()
        master = str(spark.conf.get("spark.master", "") or "")
        location = scratch_location(_qualified(spark, checkpoint) if checkpoint else None, uuid.uuid4().hex,
                                    master=master)
        self.local: Path | None = None
        self._files: Any = None
        if location is None:
            self.local = Path(tempfile.mkdtemp(prefix="ckpt-standby-rehearsal-"))
            self.uri, self.shown = self.local.as_uri(), str(self.local)
        else:
            from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles  # imports this package's driver side

            self.uri = self.shown = location
            self._files = HadoopFiles(spark, location)

    def child(self, name: str) -> str:
        """The URI of ``name`` in the scratch folder."""
        return f"{self.uri}/{name}"

    def last_batch(self, folder: str) -> int | None:
        """Highest batch id named in ``folder`` (a path under the scratch folder), None when none."""
        if self._files is not None:
            return self._files.last_batch(folder)
        assert self.local is not None
        path = self.local / folder
        names = (batch_number(p.name) for p in (path.iterdir() if path.is_dir() else ()))
        return max((n for n in names if n is not None), default=None)

    def remove(self) -> None:
        """Delete the scratch folder (recursively), then ``_ckpt/rehearsal/`` when nothing else is in
        it. Never raises: a folder that could not be removed is named in a warning."""
        if self.local is not None:
            shutil.rmtree(self.local, ignore_errors=True)
            if self.local.exists():
                log.warning("could not remove the standby rehearsal's scratch folder %s: remove it by hand", self.shown)
            return
        files = self._files
        try:
            files.fs.delete(files.root_path, True)
            parent = files.root_path.getParent()
            if files.fs.exists(parent) and len(files.fs.listStatus(parent)) == 0:
                files.fs.delete(parent, False)
        except Exception as exc:  # noqa: BLE001 - py4j wraps the store's IOException; the standby goes on
            log.warning("could not remove the standby rehearsal's scratch folder %s (%s): remove it by hand; the "
                        "checkpoint reader and the archive ignore it", self.shown, exc)


def _rehearse_stream(spark: Any, source: Any, scratch: _Scratch, limit_s: float) -> int | None:  # noqa: ANN401
    """Run the rehearsal query on ``source`` (and a file stream of one Parquet row, as a seeded job
    reads its seed) under ``scratch``; the last committed batch id (None: none)."""
    from pyspark.sql import functions as F

    out, seed = scratch.child("out"), scratch.child("seed")
    rows = source.select("partition", "offset", "timestamp")
    spark.range(1).select(F.lit(-1).cast("int").alias("partition"), F.lit(-1).cast("long").alias("offset"),
                          F.current_timestamp().alias("timestamp")).write.parquet(seed)
    rows = rows.unionByName(spark.readStream.schema(rows.schema).parquet(seed))
    unique = rows.withWatermark("timestamp", "1 minute").dropDuplicates(["partition", "offset", "timestamp"])
    counted = unique.groupBy("partition").agg(F.count(F.lit(1)).alias("records"), F.max("offset").alias("last"))

    def write(batch: Any, batch_id: int) -> None:  # noqa: ANN401 - a DataFrame
        batch.write.mode("append").parquet(out)

    query = (counted.writeStream.outputMode("update").foreachBatch(write).queryName(REHEARSAL_QUERY)
             .option("checkpointLocation", scratch.child("checkpoint")).start())
    try:
        deadline = time.monotonic() + limit_s
        while query.isActive and not _first_batch_done(query) and time.monotonic() < deadline:
            time.sleep(0.1)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    finally:
        query.stop()
    return scratch.last_batch("checkpoint/commits")


def _rehearse_state_read(spark: Any, scratch: _Scratch, batch: int) -> int:  # noqa: ANN401 - a SparkSession
    """Read the rehearsal query's state after ``batch`` as the state export does; the rows read."""
    from airflow_ckpt_provider.spark.state_export import STATE_PARTITIONS_CONF, export_state
    from airflow_ckpt_provider.spark.state_seed import session_conf

    with session_conf(spark, restore=(STATE_PARTITIONS_CONF,)):
        result = export_state(spark, scratch.child("checkpoint"), batch, scratch.child("state"))
    return sum(int(store.get("rows", 0) or 0) for store in result.stores)


def rehearse_query(spark: Any, source: Callable[[], Any], *,  # noqa: ANN401 - a SparkSession
                   limit_s: float = DEFAULT_REHEARSAL_LIMIT_S) -> None:
    """Rehearse a stateful streaming query on the streaming DataFrame ``source()`` returns (Kafka's
    columns ``partition``, ``offset``, ``timestamp``), then read its state back (see the module
    doc), in a scratch folder (:func:`scratch_location`) removed afterwards, also after a failure.
    Logs what ran and how long it took; never raises (a failed rehearsal, or one without a scratch
    folder, is logged as a warning)."""
    started = time.monotonic()
    scratch: _Scratch | None = None
    try:
        scratch = _Scratch(spark)
        batch = _rehearse_stream(spark, source(), scratch, limit_s)
        streamed = time.monotonic()
        if batch is None:
            log.info("standby rehearsal in %s: streaming query ran %.1f s and committed no batch; the state "
                     "reader is not rehearsed", scratch.shown, streamed - started)
            return
        rows = _rehearse_state_read(spark, scratch, batch)
        log.info("standby rehearsal in %s: streaming query ran %.1f s to batch %d, state reader read %d rows in "
                 "%.1f s", scratch.shown, streamed - started, batch, rows, time.monotonic() - streamed)
    except Exception as exc:  # noqa: BLE001 - a rehearsal never fails the driver; its real query will say
        from airflow_ckpt_provider.checkpoint.secrets import redact_text  # the core, only on this path

        log.warning("standby rehearsal in %s failed after %.1f s (the standby waits without it): %s",
                    scratch.shown if scratch is not None else "no scratch folder", time.monotonic() - started,
                    redact_text(str(exc)))
    finally:
        if scratch is not None:
            scratch.remove()
