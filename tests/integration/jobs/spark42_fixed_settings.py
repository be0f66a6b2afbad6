"""Spark 4.2 writes checkpoints, then restarts copies of them with a changed fixed setting: one
driver run, several queries one after the other.

Usage: spark42_fixed_settings.py SPEC.json RESULT.json

Runs on the provider's own pyspark 4.2 and imports nothing but pyspark: it imports no
provider code, so what it writes and what it refuses is Spark's own. SPEC is
``{"conf": {...}, "queries": [...]}``; each query: ``{"label", "bootstrap", "topic", "checkpoint",
"sink", "stateful", "conf" (the query's settings over Spark's defaults), "source_name" (optional:
``DataStreamReader.name``), "trigger" (``available_now``, default, or ``real_time``),
"output_topic" (a Kafka sink instead of Parquet)}``. A stateful query is ``dropDuplicates`` by
partition and offset. A real-time query is given ``realtime_wait_s`` to fail; one still running
then is stopped and counts as started. RESULT gets, per label, ``{"ok", "error"}``.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from spec_runner import run_spec

#: every setting a query may change, at Spark 4.2's default: each query starts from these
DEFAULTS = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "1",
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
    "spark.sql.streaming.stateStore.rowChecksum.enabled": "false",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "false",
    "spark.sql.streaming.offsetLog.formatVersion": "1",
}


def run(spark: SparkSession, query: dict, realtime_wait_s: float) -> dict:
    for key, value in {**DEFAULTS, **query.get("conf", {})}.items():
        spark.conf.set(key, value)
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", query["bootstrap"])
              .option("subscribe", query["topic"])
              .option("startingOffsets", "earliest")
              .option("failOnDataLoss", "true"))
    if query.get("trigger") != "real_time":
        reader = reader.option("maxOffsetsPerTrigger", "40")
    if query.get("source_name"):
        reader = reader.name(query["source_name"])
    stream = reader.load().selectExpr("topic", "partition", "offset")
    if query.get("stateful"):
        stream = stream.dropDuplicates(["partition", "offset"])
    if query.get("output_topic"):
        writer = (stream.selectExpr("CAST(offset AS STRING) AS value").writeStream.format("kafka")
                  .option("kafka.bootstrap.servers", query["bootstrap"]).option("topic", query["output_topic"])
                  .outputMode("update"))
    else:
        writer = stream.writeStream.format("parquet").option("path", query["sink"])
    writer = writer.option("checkpointLocation", query["checkpoint"]).queryName(query["label"])
    if query.get("trigger") == "real_time":
        handle = writer.trigger(realTime="5 seconds").start()
        if not handle.awaitTermination(realtime_wait_s):
            handle.stop()
            return {"ok": True, "error": None}
        return {"ok": True, "error": None}
    handle = writer.trigger(availableNow=True).start()
    handle.awaitTermination()
    return {"ok": True, "error": None}


def main() -> int:
    return run_spec("spark42-fixed-settings",
                    lambda spark, query, spec: run(spark, query, float(spec.get("realtime_wait_s", 60))))


if __name__ == "__main__":
    sys.exit(main())
