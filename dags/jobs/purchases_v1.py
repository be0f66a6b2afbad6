"""Demo stateful job, version 1: a running total and count of purchases per customer.

Reads JSON purchases ``{"customer": c, "amount": a}`` from Kafka and keeps, per customer, a
streaming aggregation ``sum(amount), count(*)`` (Spark's HDFS-backed state store). Each batch
appends the customers it updated, with their running ``total`` and ``n``, its ``batch_id`` and
the ``version``, to a Parquet folder: a customer's current state is its row of the highest batch.
Version 2 (``purchases_v2.py``) changes the aggregation, which needs a new checkpoint, and starts
from this version's exported state.

    spark-submit purchases_v1.py --bootstrap-servers HOSTS --topic TOPIC --sink PATH \
        --conf spark.ckpt.checkpointLocation=URI [--conf spark.ckpt.startingOffsets=JSON]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from airflow_ckpt_provider.spark.gate import foreach_batch
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop
from airflow_ckpt_provider.spark.kafka import checkpoint_location, read_kafka
from airflow_ckpt_provider.spark.trial import sink_location

VERSION = "v1"
PURCHASE = StructType([StructField("customer", LongType()), StructField("amount", LongType())])


def purchases(records: DataFrame) -> DataFrame:
    """(customer, amount) of each Kafka record."""
    parsed = records.select(F.from_json(F.col("value").cast("string"), PURCHASE).alias("p"))
    return parsed.select("p.customer", "p.amount")


def transform(spark: SparkSession, records: DataFrame) -> DataFrame:
    return purchases(records).groupBy("customer").agg(F.sum("amount").alias("total"), F.count("*").alias("n"))


def run(transform: Callable[[SparkSession, DataFrame], DataFrame], version: str,
        argv: list[str] | None = None) -> None:
    """Parse the job's arguments, start the query (update mode) and run it until a graceful stop."""
    parser = argparse.ArgumentParser(description=f"demo stateful job {version}")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--sink", required=True, help="Parquet folder the batches' updated customers go to")
    parser.add_argument("--trigger", default="1 second", help="processing-time trigger interval")
    parser.add_argument("--checkpoint", help="used when the launcher passes no checkpoint conf")
    args = parser.parse_args(argv)

    spark = SparkSession.builder.appName(f"demo-purchases-{version}").getOrCreate()
    records = read_kafka(spark, topics=args.topic, bootstrap_servers=args.bootstrap_servers)
    checkpoint = checkpoint_location(spark, default=args.checkpoint)
    sink = sink_location(spark, args.sink)  # a trial of the compatibility check writes elsewhere

    def append(batch: DataFrame, batch_id: int) -> None:
        batch.select("customer", "total", "n", F.lit(batch_id).cast("long").alias("batch_id"),
                     F.lit(version).alias("version")).write.mode("append").parquet(sink)

    query = (
        transform(spark, records).writeStream.outputMode("update").foreachBatch(foreach_batch(append, checkpoint))
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=args.trigger)
        .queryName(f"demo_purchases_{version}")
        .start()
    )
    GracefulStop(spark, query, checkpoint).run()
    spark.stop()


if __name__ == "__main__":
    run(transform, VERSION)
