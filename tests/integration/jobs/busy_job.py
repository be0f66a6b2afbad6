"""A busy Kafka -> Parquet job on Spark's DEFAULT trigger, for the stop that needs no gap.

Usage: busy_job.py BOOTSTRAP TOPIC CHECKPOINT SINK [gate|plain]

No ``.trigger(...)``: the next micro-batch starts as soon as the previous one commits, and with
``maxOffsetsPerTrigger`` below the producer's rate there is always a next batch. ``gate`` (the
default) wraps the foreachBatch function with the provider's ``foreach_batch`` (the stop holds
the next batch at the sink); ``plain`` does not (the stop can only wait for a gap).
"""

from __future__ import annotations

import sys

from airflow_ckpt_provider.local.spark import local_spark_session
from airflow_ckpt_provider.spark import GracefulStop, foreach_batch


def main() -> None:
    bootstrap, topic, checkpoint, sink = sys.argv[1:5]
    mode = sys.argv[5] if len(sys.argv) > 5 else "gate"
    spark = local_spark_session("busy-job")

    def append(batch, batch_id: int) -> None:  # noqa: ANN001
        batch.write.mode("append").parquet(sink)

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .option("maxOffsetsPerTrigger", 300)
        .load()
        .selectExpr("topic", "partition", "offset")
        .writeStream.foreachBatch(foreach_batch(append, checkpoint) if mode == "gate" else append)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    GracefulStop(spark, query, checkpoint, poll_interval=0.2).run()
    spark.stop()


if __name__ == "__main__":
    main()
