"""A Kafka -> Parquet query run under GracefulStop with a SLOW heartbeat (for "query still running").

Usage: heartbeat_job.py BOOTSTRAP TOPIC CHECKPOINT SINK HEARTBEAT_INTERVAL_S
A heartbeat interval of several seconds keeps the heartbeat alive (3 intervals) while the test
freezes the job with SIGSTOP, so the checkpoint cannot change while the refusal is checked.
"""

from __future__ import annotations

import sys

from airflow_ckpt_provider.local.spark import local_spark_session
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop


def main() -> None:
    bootstrap, topic, checkpoint, sink, interval = sys.argv[1:6]
    spark = local_spark_session("heartbeat-job")
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("topic", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    GracefulStop(spark, query, checkpoint, heartbeat_interval=float(interval), poll_interval=0.5).run()
    spark.stop()


if __name__ == "__main__":
    main()
