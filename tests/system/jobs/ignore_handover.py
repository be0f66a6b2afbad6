"""A "new version" that waits as a standby like any job built on read_kafka, then IGNORES the
handed-over offsets and starts at ``latest``: it skips the records produced between the old
version's stop and its own start, commits batches to the same sink as version 1 and is caught by
the verification. Stateless; stops between batches (GracefulStop) when the rollback asks."""

import sys

from pyspark.sql import DataFrame, SparkSession

from airflow_ckpt_provider.spark.graceful_stop import GracefulStop
from airflow_ckpt_provider.spark.kafka import checkpoint_location, read_kafka

args = dict(zip(sys.argv[1::2], sys.argv[2::2], strict=False))
spark = SparkSession.builder.appName("ignore-handover").getOrCreate()
# the bug under test: a standby returns from read_kafka once released, then starts at latest
records = read_kafka(spark, topics=args["--topic"], bootstrap_servers=args["--bootstrap-servers"],
                     starting_offsets="latest")
checkpoint = checkpoint_location(spark)


def append(batch: DataFrame, batch_id: int) -> None:
    batch.selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                     "timestamp", "'v2-ignoring-the-handover' AS version").write.mode("append").parquet(args["--sink"])


query = (records.writeStream.foreachBatch(append).option("checkpointLocation", checkpoint)
         .trigger(processingTime=args.get("--trigger", "1 second")).start())
GracefulStop(spark, query, checkpoint).run()
