"""A Kafka -> Parquet streaming job (1 s processing-time trigger) for the graceful stop tests.

Usage: stop_job.py BOOTSTRAP TOPIC CHECKPOINT SINK MODE [HEARTBEAT_INTERVAL_S]
MODE ``graceful`` runs the query under GracefulStop (heartbeat every HEARTBEAT_INTERVAL_S,
default 0.5 s; stop request; ack) and exits once it returns; MODE ``ignore`` only calls
awaitTermination: it never heartbeats, never reads the stop request and runs until it is killed.
"""

from __future__ import annotations

import sys

from airflow_ckpt_provider.local.spark import local_spark_session
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop


def main() -> None:
    bootstrap, topic, checkpoint, sink, mode = sys.argv[1:6]
    interval = float(sys.argv[6]) if len(sys.argv) > 6 else 0.5
    spark = local_spark_session(f"stop-job-{mode}")
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
        .selectExpr("topic", "partition", "offset")
        .writeStream.format("parquet")
        .option("path", sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="1 second")
        .start()
    )
    if mode == "graceful":
        GracefulStop(spark, query, checkpoint, heartbeat_interval=interval, poll_interval=0.2).run()
        spark.stop()
    else:
        query.awaitTermination()


if __name__ == "__main__":
    main()
