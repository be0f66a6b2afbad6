"""Version 2 of ``plain_v1_delta.py``, instrumented for the provider: the diff a team makes once.

Against version 1: the reader is :func:`read_kafka` (the handed-over ``startingOffsets``; as a
standby it waits for the release), the checkpoint comes from :func:`checkpoint_location` (the
launcher's conf), and :class:`GracefulStop` runs the query so the next upgrade stops it between
two batches instead of killing it. Same Delta table, same columns, plus the version.
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark.graceful_stop import GracefulStop
from airflow_ckpt_provider.spark.kafka import checkpoint_location, read_kafka


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=2000)
    args = parser.parse_args()

    spark = SparkSession.builder.appName("orders-v2").getOrCreate()
    records = read_kafka(spark, topics=args.topic, bootstrap_servers=args.bootstrap_servers,
                         maxOffsetsPerTrigger=args.max_offsets_per_trigger)
    checkpoint = checkpoint_location(spark)
    rows = records.selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key",
                              "CAST(value AS STRING) AS value").withColumn("version", F.lit("v2"))
    query = (rows.writeStream.format("delta")
             .option("checkpointLocation", checkpoint)
             .option("mergeSchema", "true")
             .outputMode("append")
             .start(args.table))
    GracefulStop(spark, query, checkpoint).run()
    spark.stop()


if __name__ == "__main__":
    main()
