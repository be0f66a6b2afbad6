"""Version 2 of ``plain_v1_delta.py``, instrumented for the provider: the diff a team makes once.

Against version 1: the reader is :func:`read_kafka` (the handed-over ``startingOffsets``; as a
standby it waits for the release), the checkpoint comes from :func:`checkpoint_location` (the
launcher's conf), and :class:`GracefulStop` runs the query so the next upgrade stops it between
two batches instead of killing it. Same Delta table, same columns, plus the version. With
``--parquet-output`` it is version 2 of ``plain_v1_foreach.py`` instead: the same rows appended
to that Parquet folder by foreachBatch, through :func:`foreach_batch` (the gate that holds a batch
before it writes once a stop is asked).
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark.gate import foreach_batch
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop
from airflow_ckpt_provider.spark.kafka import checkpoint_location, read_kafka


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", help="the Delta table (version 2 of plain_v1_delta.py)")
    parser.add_argument("--parquet-output", help="the Parquet folder (version 2 of plain_v1_foreach.py)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=2000)
    args = parser.parse_args()

    spark = SparkSession.builder.appName("orders-v2").getOrCreate()
    records = read_kafka(spark, topics=args.topic, bootstrap_servers=args.bootstrap_servers,
                         maxOffsetsPerTrigger=args.max_offsets_per_trigger)
    checkpoint = checkpoint_location(spark)
    rows = records.selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key",
                              "CAST(value AS STRING) AS value").withColumn("version", F.lit("v2"))
    if args.parquet_output:
        output = args.parquet_output

        def append(batch: DataFrame, batch_id: int) -> None:
            batch.write.mode("append").parquet(output)

        query = rows.writeStream.foreachBatch(foreach_batch(append, checkpoint)) \
            .option("checkpointLocation", checkpoint).start()
    else:
        query = (rows.writeStream.format("delta")
                 .option("checkpointLocation", checkpoint)
                 .option("mergeSchema", "true")
                 .outputMode("append")
                 .start(args.table))
    GracefulStop(spark, query, checkpoint).run()
    spark.stop()


if __name__ == "__main__":
    main()
