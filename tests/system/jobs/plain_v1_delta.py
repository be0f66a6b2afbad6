"""A streaming job as a team runs it before it meets the provider: Kafka to a Delta table.

No import of the provider, no GracefulStop, no control files: submitted with a plain
``spark-submit`` (on YARN in cluster mode in tests/system/test_adopt_yarn.py), stopped only by its
cluster manager. Each row keeps its Kafka (topic, partition, offset), so an audit finds every
record lost or written twice. Spark's default trigger: a batch starts as soon as the last ends.
``--seconds-per-task`` stands for the work a real job does per partition (an enrichment call):
each task of a batch takes that long, so a kill usually lands inside a batch.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import pandas as pd
from pyspark.sql import SparkSession


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=400)
    parser.add_argument("--seconds-per-task", type=float, default=0.0)
    args = parser.parse_args()

    spark = SparkSession.builder.appName("orders-v1").getOrCreate()
    rows = (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
            .load()
            .selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"))
    if args.seconds_per_task > 0:
        pause = args.seconds_per_task

        def enrich(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
            time.sleep(pause)
            yield from frames

        rows = rows.mapInPandas(enrich, rows.schema)
    query = (rows.writeStream.format("delta")
             .option("checkpointLocation", args.checkpoint)
             .outputMode("append")
             .start(args.table))
    query.awaitTermination()


if __name__ == "__main__":
    main()
