"""Versions of a Kafka streaming job for the compatibility check's table of changes, launched by
spark-submit: ``compat_job.py VARIANT BOOTSTRAP TOPIC SINK``. It follows the trial contract: its
output location from ``sink_location`` and its query run by ``GracefulStop``.

Variants (old versions): ``stateless``, ``agg``, ``dedup``, ``join``; (new versions)
``filter_projection`` (of stateless: a filter added and the projection changed, same schema),
``agg_key``, ``agg_seeded`` (of agg: a second aggregate, a new state value schema, that continues
the old counts from the exported state given as ``spark.ckpt.initialStatePath``), ``dedup_cols``,
``two_sources`` (a second Kafka source), ``join_left_outer``, ``crash`` (fails before its query
starts). ``dedup`` -> ``dedup_cols`` is not restarted by the integration test: Spark's text of its
restart, which names the same rule as ``agg_key``'s, is in ``tests/unit/test_compat.py``; run it
to capture that text again for another Spark.
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark import GracefulStop, checkpoint_location, read_kafka, sink_location
from airflow_ckpt_provider.spark.state import aggregate_seed_stream


def columns(frame: DataFrame) -> DataFrame:
    return frame.selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key",
                            "CAST(value AS STRING) AS value", "timestamp")


def build(spark: SparkSession, variant: str, bootstrap: str, topic: str) -> tuple[DataFrame, str]:
    """(the query's result, output mode) of ``variant``."""
    if variant == "crash":
        raise RuntimeError("deliberate crash on start: the new version cannot read its configuration")
    records = columns(read_kafka(spark, topics=topic, bootstrap_servers=bootstrap))
    if variant == "stateless":
        return records.select("topic", "partition", "offset", "key", "value"), "append"
    if variant == "filter_projection":  # a filter added, and the same schema from other expressions
        return records.where("offset >= 0").select("topic", "partition", "offset", F.upper("key").alias("key"),
                                                   F.concat(F.lit("v2:"), "value").alias("value")), "append"
    if variant == "agg":
        return records.groupBy("key").agg(F.count("*").alias("n")), "update"
    if variant == "agg_key":
        return records.groupBy("key", "partition").agg(F.count("*").alias("n")), "update"
    if variant == "agg_seeded":  # agg's count per key continued from its state, plus the latest offset
        rows = records.select("key", F.lit(1).cast("long").alias("n"), F.col("offset").alias("latest"))
        seed = aggregate_seed_stream(spark, [("n", "count")], key=["key"])
        if seed is not None:
            rows = rows.unionByName(seed.withColumn("latest", F.lit(None).cast("long")))
        return rows.groupBy("key").agg(F.sum("n").alias("n"), F.max("latest").alias("latest")), "update"
    if variant == "dedup":
        return records.dropDuplicates(["key"]).select("topic", "partition", "offset", "key"), "append"
    if variant == "dedup_cols":
        return records.dropDuplicates(["topic", "partition", "offset"]).select("topic", "partition", "offset",
                                                                               "key"), "append"
    if variant == "two_sources":
        other = columns(read_kafka(spark, topics=topic, bootstrap_servers=bootstrap, starting_offsets="earliest"))
        both = records.select("topic", "partition", "offset", "key", "value").unionByName(
            other.select("topic", "partition", "offset", "key", "value"))
        return both, "append"
    if variant in ("join", "join_left_outer"):
        left = records.withWatermark("timestamp", "1 minute").selectExpr("key AS lkey", "offset AS loffset",
                                                                          "timestamp AS lt")
        right = columns(read_kafka(spark, topics=topic, bootstrap_servers=bootstrap)).withWatermark(
            "timestamp", "1 minute").selectExpr("key AS rkey", "offset AS roffset", "timestamp AS rt")
        condition = F.expr("lkey = rkey AND rt BETWEEN lt - INTERVAL 30 SECONDS AND lt + INTERVAL 30 SECONDS")
        how = "inner" if variant == "join" else "leftOuter"
        return left.join(right, condition, how).select("lkey", "loffset", "roffset"), "append"
    raise SystemExit(f"unknown variant {variant}")


def main() -> None:
    variant, bootstrap, topic, sink = sys.argv[1:5]
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    result, mode = build(spark, variant, bootstrap, topic)
    output = sink_location(spark, sink)

    def append(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("append").parquet(output)

    checkpoint = checkpoint_location(spark)
    query = (result.writeStream.outputMode(mode).foreachBatch(append).option("checkpointLocation", checkpoint)
             .trigger(processingTime="500 milliseconds").start())
    GracefulStop(spark, query, checkpoint).run()
    spark.stop()


if __name__ == "__main__":
    main()
