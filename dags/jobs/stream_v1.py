"""Demo streaming job, version 1: Kafka -> Parquet, deduplicated on the record key.

One output row per Kafka record (topic, partition, offset, key, value, version), appended by
``foreachBatch`` to a Parquet folder: a sink that does NOT deduplicate by itself, so a record
read twice is written twice and a record skipped is missing — which is what the upgrade's
audit counts. Version 2 (``stream_v2.py``) changes the deduplication key, a change Spark's
guide lists as not allowed on the same checkpoint: it must move to a new one.

Run by the launcher (the reference DAG, the demo) with::

    spark-submit stream_v1.py --bootstrap-servers HOSTS --topic TOPIC --sink PATH [--source-name NAME] \
        --conf spark.ckpt.checkpointLocation=URI [--conf spark.ckpt.startingOffsets=JSON]

``--source-name`` (Spark 4.2+) switches on Spark's source evolution and names the Kafka source,
with the offset log in format v2: the checkpoint then keys the source by that name
(``sources/<name>/``, ``<name>:<offsets>`` lines). Spark refuses source evolution on an existing
offset log v1, so a version that adds it moves to a new checkpoint. (Spark 4.2.0 keeps writing
offset log v1 under source evolution unless the format is asked for.)
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark.gate import foreach_batch
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop
from airflow_ckpt_provider.spark.kafka import checkpoint_location, read_kafka
from airflow_ckpt_provider.spark.trial import sink_location

VERSION = "v1"
DEDUP_KEY = ["key"]
#: ``--trigger default``: Spark's default trigger, the next micro-batch as soon as one commits
DEFAULT_TRIGGER = "default"
#: Spark 4.2's named sources (source evolution) and the offset log format that keys offsets by
#: name; both fixed for a checkpoint's life
NAMED_SOURCES_CONF = {"spark.sql.streaming.queryEvolution.enableSourceEvolution": "true",
                      "spark.sql.streaming.offsetLog.formatVersion": "2"}


def columns(records: DataFrame) -> DataFrame:
    """Kafka coordinates, key and value as strings, and the event time for the watermark."""
    return records.selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key",
                              "CAST(value AS STRING) AS value", "timestamp")


def transform(records: DataFrame) -> DataFrame:
    deduplicated = columns(records).withWatermark("timestamp", "10 minutes").dropDuplicatesWithinWatermark(DEDUP_KEY)
    return deduplicated.withColumn("version", F.lit(VERSION))


def run(transform: Callable[[DataFrame], DataFrame], version: str, argv: list[str] | None = None) -> None:
    """Parse the job's arguments, start the query and run it until a graceful stop."""
    parser = argparse.ArgumentParser(description=f"demo streaming job {version}")
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--sink", required=True, help="Parquet folder the batches are appended to")
    parser.add_argument("--trigger", default="1 second",
                        help=f"processing-time trigger interval, or {DEFAULT_TRIGGER!r}: Spark's default trigger "
                             "(no .trigger(): the next batch starts as soon as one commits)")
    parser.add_argument("--checkpoint", help="used when the launcher passes no checkpoint conf")
    parser.add_argument("--source-name", help="name the Kafka source, with source evolution on (Spark 4.2+)")
    args = parser.parse_args(argv)

    spark = SparkSession.builder.appName(f"demo-stream-{version}").getOrCreate()
    for key, value in (NAMED_SOURCES_CONF if args.source_name else {}).items():
        spark.conf.set(key, value)  # before the query is defined
    # launched as a standby, read_kafka warms the session up and waits here for the handover
    records = read_kafka(spark, topics=args.topic, bootstrap_servers=args.bootstrap_servers,
                         source_name=args.source_name)
    checkpoint = checkpoint_location(spark, default=args.checkpoint)
    sink = sink_location(spark, args.sink)  # a trial of the compatibility check writes elsewhere

    def append(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("append").parquet(sink)

    writer = (
        transform(records).writeStream.foreachBatch(foreach_batch(append, checkpoint))
        .option("checkpointLocation", checkpoint)
        .queryName(f"demo_stream_{version}")
    )
    if args.trigger != DEFAULT_TRIGGER:
        writer = writer.trigger(processingTime=args.trigger)
    query = writer.start()
    GracefulStop(spark, query, checkpoint).run()
    spark.stop()


if __name__ == "__main__":
    run(transform, VERSION)
