"""Delta idempotent writes that survive a new checkpoint, inside the user's Spark driver.

Delta skips a write whose ``txnVersion`` is not above the version it recorded for the same
``txnAppId``. A job that writes with ``txnVersion=batch_id`` and a CONSTANT ``txnAppId`` loses
its batches after a move to a new checkpoint (batch ids restart at 0; delta-io/delta#1141).
:func:`delta_txn_options` takes the txnAppId from the checkpoint instead — its query id, new
with every checkpoint, the appId the Delta streaming sink itself records — so the table's log
keeps an exact record of each query's batches, which the provider reads (sinks ``delta_foreach_batch``)::

    def write(batch, batch_id):
        (batch.write.format("delta").options(**delta_txn_options(spark, checkpoint, batch_id))
         .mode("append").save(table))

A ``MERGE`` (``DeltaTable.merge`` or SQL ``MERGE INTO``) takes no writer options: Delta reads the
same pair from the session conf (``spark.databricks.delta.write.txnAppId``/``txnVersion``, Delta
2.0+; delta-io/delta#1555). :func:`delta_txn_conf` sets them on the batch's session for the
statements in its block and removes them after — left set, they would make every later write on
that session "already done" and skipped::

    def upsert(batch, batch_id):
        batch.createOrReplaceTempView("updates")
        with delta_txn_conf(batch.sparkSession, checkpoint, batch_id):
            batch.sparkSession.sql(f"MERGE INTO delta.`{table}` t USING updates s ON t.key = s.key ...")

Imports only pyspark's JVM gateway and this package's standard-library-only modules.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The session conf Delta's DML commands (MERGE, UPDATE, DELETE, INSERT) read the idempotent-write
#: pair from when no writer option gives it.
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"

_query_ids: dict[str, str] = {}
_lock = threading.Lock()


def checkpoint_query_id(spark: Any, checkpoint: str) -> str:
    """The query id in ``<checkpoint>/metadata`` (written when the query starts, before batch 0),
    read once per checkpoint through Hadoop's FileSystem. Raises ``RuntimeError`` if the file is
    missing or has no id (called before the query started, or not a checkpoint)."""
    with _lock:
        known = _query_ids.get(checkpoint)
    if known:
        return known
    from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles

    data = HadoopFiles(spark, checkpoint).read("metadata")
    try:
        query_id = json.loads(data.decode("utf-8"))["id"] if data else ""
    except (ValueError, KeyError, TypeError):
        query_id = ""
    if not isinstance(query_id, str) or not query_id:
        raise RuntimeError(f"no query id in {checkpoint}/metadata: call delta_txn_options from the query's "
                           "foreachBatch function, on the query's own checkpoint")
    with _lock:
        _query_ids[checkpoint] = query_id
    return query_id


def delta_txn_options(spark: Any, checkpoint: str, batch_id: int) -> dict[str, str]:
    """Delta's idempotent-write options for batch ``batch_id`` of the query on ``checkpoint``:
    ``txnAppId`` = the checkpoint's query id, ``txnVersion`` = the batch id."""
    return {"txnAppId": checkpoint_query_id(spark, checkpoint), "txnVersion": str(int(batch_id))}


@contextmanager
def delta_txn_conf(session: Any, checkpoint: str, batch_id: int) -> Iterator[dict[str, str]]:
    """Within the block, Delta DML on ``session`` (the batch's: ``batch.sparkSession``) is an
    idempotent write of batch ``batch_id`` of the query on ``checkpoint`` — the pair of
    :func:`delta_txn_options`, set as Delta's session conf (a MERGE takes no writer options) —
    and the conf is removed afterwards, whatever the block did. Yields the pair."""
    options = delta_txn_options(session, checkpoint, batch_id)
    session.conf.set(TXN_APP_ID_CONF, options["txnAppId"])
    session.conf.set(TXN_VERSION_CONF, options["txnVersion"])
    try:
        yield options
    finally:
        session.conf.unset(TXN_APP_ID_CONF)
        session.conf.unset(TXN_VERSION_CONF)
