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

Everything goes to a local scratch folder that is deleted afterwards; the session's conf is as
before. A rehearsal never fails the driver: an error is logged and the standby waits as it
would without one (its real query will say what is wrong). ``spark.ckpt.standbyRehearsal=false``
switches it off (:func:`rehearsal_enabled`): the standby then warms up with a batch read only.

Imports pyspark (lazily) and the standard library, plus this package's ``spark`` modules: the
driver has no Airflow.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.batch_names import batch_number
from airflow_ckpt_provider.records.control import CONF_STANDBY_REHEARSAL

log = logging.getLogger(__name__)

__all__ = ["REHEARSAL_QUERY", "rehearsal_enabled", "rehearse_query"]

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


def _rehearse_stream(spark: Any, source: Any, scratch: Path, limit_s: float) -> int | None:  # noqa: ANN401
    """Run the rehearsal query on ``source`` (and a file stream of one Parquet row, as a seeded job
    reads its seed) under ``scratch``; the last committed batch id (None: none)."""
    from pyspark.sql import functions as F

    out, seed = (scratch / "out").as_uri(), (scratch / "seed").as_uri()
    rows = source.select("partition", "offset", "timestamp")
    spark.range(1).select(F.lit(-1).cast("int").alias("partition"), F.lit(-1).cast("long").alias("offset"),
                          F.current_timestamp().alias("timestamp")).write.parquet(seed)
    rows = rows.unionByName(spark.readStream.schema(rows.schema).parquet(seed))
    unique = rows.withWatermark("timestamp", "1 minute").dropDuplicates(["partition", "offset", "timestamp"])
    counted = unique.groupBy("partition").agg(F.count(F.lit(1)).alias("records"), F.max("offset").alias("last"))

    def write(batch: Any, batch_id: int) -> None:  # noqa: ANN401 - a DataFrame
        batch.write.mode("append").parquet(out)

    query = (counted.writeStream.outputMode("update").foreachBatch(write).queryName(REHEARSAL_QUERY)
             .option("checkpointLocation", (scratch / "checkpoint").as_uri()).start())
    try:
        deadline = time.monotonic() + limit_s
        while query.isActive and not _first_batch_done(query) and time.monotonic() < deadline:
            time.sleep(0.1)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    finally:
        query.stop()
    folder = scratch / "checkpoint" / "commits"
    commits = (batch_number(p.name) for p in (folder.iterdir() if folder.is_dir() else ()))
    return max((c for c in commits if c is not None), default=None)


def _rehearse_state_read(spark: Any, scratch: Path, batch: int) -> int:  # noqa: ANN401 - a SparkSession
    """Read the rehearsal query's state after ``batch`` as the state export does; the rows read."""
    from airflow_ckpt_provider.spark.state_export import STATE_PARTITIONS_CONF, export_state
    from airflow_ckpt_provider.spark.state_seed import session_conf

    with session_conf(spark, restore=(STATE_PARTITIONS_CONF,)):
        result = export_state(spark, (scratch / "checkpoint").as_uri(), batch, (scratch / "state").as_uri())
    return sum(int(store.get("rows", 0) or 0) for store in result.stores)


def rehearse_query(spark: Any, source: Callable[[], Any], *,  # noqa: ANN401 - a SparkSession
                   limit_s: float = DEFAULT_REHEARSAL_LIMIT_S) -> None:
    """Rehearse a stateful streaming query on the streaming DataFrame ``source()`` returns (Kafka's
    columns ``partition``, ``offset``, ``timestamp``), then read its state back (see the module
    doc). Logs what ran and how long it took; never raises (a failed rehearsal is logged as a
    warning)."""
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="ckpt-standby-rehearsal-"))
    try:
        batch = _rehearse_stream(spark, source(), scratch, limit_s)
        streamed = time.monotonic()
        if batch is None:
            log.info("standby rehearsal in %s: streaming query ran %.1f s and committed no batch; the state "
                     "reader is not rehearsed", scratch, streamed - started)
            return
        rows = _rehearse_state_read(spark, scratch, batch)
        log.info("standby rehearsal in %s: streaming query ran %.1f s to batch %d, state reader read %d rows in "
                 "%.1f s", scratch, streamed - started, batch, rows, time.monotonic() - streamed)
    except Exception as exc:  # noqa: BLE001 - a rehearsal never fails the driver; its real query will say
        from airflow_ckpt_provider.checkpoint.secrets import redact_text  # the core, only on this path

        log.warning("standby rehearsal in %s failed after %.1f s (the standby waits without it): %s",
                    scratch, time.monotonic() - started, redact_text(str(exc)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
