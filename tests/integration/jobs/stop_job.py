"""A Kafka -> Parquet streaming job for the graceful stop tests.

Usage: stop_job.py BOOTSTRAP TOPIC CHECKPOINT SINK MODE [HEARTBEAT_INTERVAL_S]
MODE ``graceful`` runs a file-sink query on a 3 s processing-time trigger under GracefulStop
(heartbeat every HEARTBEAT_INTERVAL_S, default 0.5 s; stop request; ack) and exits once it
returns: it waits up to 120 s for a batch boundary (the gap between two batches, which a batch
shorter than the trigger interval leaves even on a loaded machine), so its stop is clean; MODE ``ignore`` runs the same query but only calls awaitTermination: it never heartbeats,
never reads the stop request and runs until it is killed. MODE ``busy`` runs on Spark's DEFAULT
trigger (the next batch as soon as one commits; ``maxOffsetsPerTrigger`` below the producer's
rate, so there is always a next batch) with a foreachBatch sink behind ``foreach_batch``, under
GracefulStop: the stop holds the next batch at the sink instead of waiting for a gap. MODE
``busy-file`` is the same busy stream into the built-in file sink (no gate): the stop waits about
two batches for a gap, then stops and may cut one, which the sink's own log decides; MODE
``busy-file-cut`` makes each batch slow (3 ms a record) and stops at once, cutting the batch that
runs (acknowledged ``interrupted``); MODE ``busy-delta-cut`` does the same into Delta Lake's
streaming sink (SINK is the table), whose own log records each batch with the query id.
"""

from __future__ import annotations

import sys
import time

from airflow_ckpt_provider.local.spark import delta_spark_conf, local_spark_session
from airflow_ckpt_provider.spark import GracefulStop, foreach_batch


def main() -> None:
    bootstrap, topic, checkpoint, sink, mode = sys.argv[1:6]
    interval = float(sys.argv[6]) if len(sys.argv) > 6 else 0.5
    delta = mode == "busy-delta-cut"
    spark = local_spark_session(f"stop-job-{mode}", extra=delta_spark_conf() if delta else None)
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    cut = mode in ("busy-file-cut", "busy-delta-cut")
    if mode in ("busy", "busy-file") or cut:
        reader = reader.option("maxOffsetsPerTrigger", 300)
    frame = reader.load().selectExpr("topic", "partition", "offset")
    if cut:  # batches that take a while: a stop request almost always finds one running
        from pyspark.sql import functions as F  # noqa: N812

        @F.udf("long")
        def slowly(offset: int) -> int:
            time.sleep(0.003)
            return offset

        frame = frame.withColumn("offset", slowly("offset"))
    if mode == "busy":

        def append(batch, batch_id: int) -> None:  # noqa: ANN001
            batch.write.mode("append").parquet(sink)

        query = frame.writeStream.foreachBatch(foreach_batch(append, checkpoint)) \
            .option("checkpointLocation", checkpoint).start()
    elif mode in ("busy-file", "busy-file-cut", "busy-delta-cut"):
        query = frame.writeStream.format("delta" if delta else "parquet").option("path", sink) \
            .option("checkpointLocation", checkpoint).start()
    else:
        query = (frame.writeStream.format("parquet").option("path", sink).option("checkpointLocation", checkpoint)
                 .trigger(processingTime="3 seconds").start())
    if mode == "ignore":
        query.awaitTermination()
        return
    # busy-file-cut, busy-delta-cut: stop at once, cutting the batch that runs (a built-in sink has no gate to hold it)
    # graceful: a clean stop at a real boundary, however slow the machine (the built-in wait of about
    # two batches is what busy-file shows)
    boundary_timeout = 0.0 if cut else 120.0 if mode == "graceful" else None
    GracefulStop(spark, query, checkpoint, heartbeat_interval=interval, poll_interval=0.2,
                 boundary_timeout=boundary_timeout).run()
    spark.stop()


if __name__ == "__main__":
    main()
