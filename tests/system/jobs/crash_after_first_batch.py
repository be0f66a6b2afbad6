"""A "new version" that starts exactly at the handover (read_kafka), commits its first batch to the
same sink as version 1, then crashes in its second batch before writing it (offsets/1 planned,
commits/1 missing): the upgrade is rolled back after the new version committed a batch."""

import sys

from pyspark.sql import DataFrame, SparkSession

from airflow_ckpt_provider.spark.graceful_stop import GracefulStop
from airflow_ckpt_provider.spark.kafka import checkpoint_location, read_kafka

args = dict(zip(sys.argv[1::2], sys.argv[2::2], strict=False))
spark = SparkSession.builder.appName("crash-after-first-batch").getOrCreate()
records = read_kafka(spark, topics=args["--topic"], bootstrap_servers=args["--bootstrap-servers"])
checkpoint = checkpoint_location(spark)


def append(batch: DataFrame, batch_id: int) -> None:
    if batch_id >= 1:
        raise RuntimeError(f"deliberate crash in batch {batch_id}, before writing it")
    batch.selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value",
                     "timestamp", "'v2-crashing' AS version").write.mode("append").parquet(args["--sink"])


query = (records.writeStream.foreachBatch(append).option("checkpointLocation", checkpoint)
         .trigger(processingTime=args.get("--trigger", "1 second")).start())
GracefulStop(spark, query, checkpoint).run()
