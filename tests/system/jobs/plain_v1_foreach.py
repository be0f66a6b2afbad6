"""A streaming job as a team runs it before it meets the provider: Kafka to Parquet by foreachBatch.

No import of the provider, no GracefulStop: submitted with a plain ``spark-submit`` (on YARN in
cluster mode in tests/system/test_adopt_yarn.py), stopped only by its cluster manager. Each batch
appends its rows (with their Kafka topic, partition and offset) to a Parquet folder, then does
``--seconds-after-write`` of further work (a notification, a metrics push) before Spark commits
the batch: a kill in that time leaves a batch written and not committed, which any restart
processes again. At-least-once, as every plain foreachBatch sink is.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from pyspark.sql import SparkSession


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=400)
    parser.add_argument("--seconds-after-write", type=float, default=0.0)
    args = parser.parse_args()

    spark = SparkSession.builder.appName("orders-v1").getOrCreate()
    rows = (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
            .load()
            .selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"))

    def write(batch: Any, batch_id: int) -> None:  # noqa: ANN401 - a DataFrame
        batch.write.mode("append").parquet(args.output)
        time.sleep(args.seconds_after_write)

    query = rows.writeStream.foreachBatch(write).option("checkpointLocation", args.checkpoint).start()
    query.awaitTermination()


if __name__ == "__main__":
    main()
