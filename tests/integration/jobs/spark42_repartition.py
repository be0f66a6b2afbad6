"""Spark 4.2 runs a stateful query, repartitions its state offline, and resumes it: one driver run.

Usage: spark42_repartition.py SPEC.json RESULT.json

Runs on the provider's own pyspark 4.2 and imports nothing but pyspark: it imports no
provider code, so what it writes is Spark's own. SPEC is ``{"conf": {...}, "queries": [...]}``;
each query runs to its end with ``trigger(availableNow=True)``, one after the other in ONE session:
``{"label", "bootstrap", "topic", "checkpoint", "sink", "shuffle_partitions", "starting_offsets"
(optional), "repartition" (optional: after the query, Spark's offline state repartition of its
checkpoint to this many partitions), "state_store" (``rocksdb``, the default, or ``hdfs``, which
Spark's repartition refuses after writing its batch)}``.

The query is a streaming aggregation on RocksDB state (state checkpoint format v1): per Kafka
partition and ``offset % 7``, the count, sum and sum of squares of the offsets read, in update mode.
foreachBatch writes each batch's updated rows to ``<sink>/<batch id>.json``; a group's newest row is
its running total, so the totals prove both exactness (every offset once) and that the state was
carried over. RESULT gets, per label, ``{"ok", "error", "batches", "start_offsets" (of the first
batch run, as Spark reports it), "repartition_s", "repartition_error"}``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from pyspark.sql import DataFrame, SparkSession, functions
from spec_runner import run_spec

PROVIDERS = {"rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
             "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"}
STATE = {
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "1",
    "spark.sql.streaming.checkpoint.fileChecksum.enabled": "true",
}


def run(spark: SparkSession, query: dict) -> dict:
    for key, value in STATE.items():
        spark.conf.set(key, value)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", PROVIDERS[query.get("state_store", "rocksdb")])
    spark.conf.set("spark.sql.shuffle.partitions", str(query["shuffle_partitions"]))
    sink = query["sink"]
    os.makedirs(sink, exist_ok=True)

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = [row.asDict() for row in batch.collect()]
        with open(os.path.join(sink, f"{batch_id}.json"), "w") as handle:
            json.dump(rows, handle)

    totals = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", query["bootstrap"])
              .option("subscribe", query["topic"])
              .option("startingOffsets", query.get("starting_offsets") or "earliest")
              .option("maxOffsetsPerTrigger", "120")
              .option("failOnDataLoss", "true")
              .load()
              .selectExpr("partition", "offset % 7 AS bucket", "offset")
              .groupBy("partition", "bucket")
              .agg(functions.count("offset").alias("n"), functions.sum("offset").alias("total"),
                   functions.sum(functions.col("offset") * functions.col("offset")).alias("squares")))
    handle = (totals.writeStream.outputMode("update").foreachBatch(write)
              .option("checkpointLocation", query["checkpoint"])
              .queryName(query["label"]).trigger(availableNow=True).start())
    handle.awaitTermination()
    progress = handle.recentProgress
    result = {"ok": True, "error": None, "batches": [p["batchId"] for p in progress],
              "start_offsets": progress[0]["sources"][0]["startOffset"] if progress else None,
              "repartition_s": None, "repartition_error": None}
    if query.get("repartition"):
        began = time.monotonic()
        try:
            spark._streamingCheckpointManager.repartition(query["checkpoint"], int(query["repartition"]))
            result["repartition_s"] = round(time.monotonic() - began, 1)
        except Exception as exc:  # noqa: BLE001 - the test reads which error Spark gave
            result["repartition_error"] = f"{type(exc).__name__}: {exc}"
    return result


def main() -> int:
    return run_spec("spark42-repartition", lambda spark, query, _spec: run(spark, query))


if __name__ == "__main__":
    sys.exit(main())
