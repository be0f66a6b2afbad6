"""Spark 4.2 writes (and resumes) checkpoints in its newer formats: one driver run, several queries.

Usage: spark42_formats.py SPEC.json RESULT.json

Runs on the provider's own pyspark 4.2 and imports nothing but pyspark: it imports no
provider code, so what it writes is Spark's own. SPEC is ``{"conf": {...}, "queries": [...]}``;
each query runs to its end with ``trigger(availableNow=True)`` one after the other in ONE
session (a JVM start costs more than a query on 2 cores):
``{"label", "variant", "bootstrap", "topic", "checkpoint", "sink", "starting_offsets" (optional),
"expect_error" (optional: the query must fail)}``. A variant fixes the checkpoint's formats:

* ``named``: offset log v2 through source evolution (the source named ``events``), RocksDB state
  with state checkpoint format v2 (``commits/N`` v2 with ``stateUniqueIds``), state file checksums.
* ``unnamed``: offset log v2 by ``spark.sql.streaming.offsetLog.formatVersion=2`` (the source
  keyed by its id), the HDFS-backed state store, state file checksums.

The query is stateful (``dropDuplicates`` by partition and offset) and writes ``topic``,
``partition``, ``offset`` to Parquet, so the sink can be audited record by record. RESULT gets,
per label, ``{"ok", "error", "batches"}``.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from spec_runner import run_spec

VARIANTS = {
    "named": {
        "spark.sql.streaming.offsetLog.formatVersion": "2",
        "spark.sql.streaming.queryEvolution.enableSourceEvolution": "true",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
        "spark.sql.streaming.checkpoint.fileChecksum.enabled": "true",
    },
    "unnamed": {
        "spark.sql.streaming.offsetLog.formatVersion": "2",
        "spark.sql.streaming.queryEvolution.enableSourceEvolution": "false",
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
        "spark.sql.streaming.stateStore.checkpointFormatVersion": "1",
        "spark.sql.streaming.checkpoint.fileChecksum.enabled": "true",
    },
}


def run(spark: SparkSession, query: dict) -> dict:
    for key, value in VARIANTS[query["variant"]].items():
        spark.conf.set(key, value)
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", query["bootstrap"])
              .option("subscribe", query["topic"])
              .option("startingOffsets", query.get("starting_offsets") or "earliest")
              .option("maxOffsetsPerTrigger", "120")
              .option("failOnDataLoss", "true"))
    if query["variant"] == "named":
        reader = reader.name("events")
    stream = (reader.load().selectExpr("topic", "partition", "offset")
              .dropDuplicates(["partition", "offset"]))
    handle = (stream.writeStream.format("parquet").option("path", query["sink"])
              .option("checkpointLocation", query["checkpoint"])
              .queryName(query["label"]).trigger(availableNow=True).start())
    handle.awaitTermination()
    return {"ok": True, "error": None, "batches": [p["batchId"] for p in handle.recentProgress]}


def main() -> int:
    return run_spec("spark42-formats", lambda spark, query, _spec: run(spark, query))


if __name__ == "__main__":
    sys.exit(main())
