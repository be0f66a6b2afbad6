"""The "new version" of a streaming job, launched by spark-submit: Kafka -> Parquet.

Usage: kafka_to_parquet.py BOOTSTRAP TOPIC SINK [--crash-on-start | --hold-first-batch | --delta]
The checkpoint location and the startingOffsets come from the launcher's Spark conf
(spark.ckpt.checkpointLocation, spark.ckpt.startingOffsets) through read_kafka and
checkpoint_location. ``--crash-on-start`` raises before the query starts (launch failure test).
``--hold-first-batch`` writes through foreachBatch and never lets batch 0 end: it writes
``SINK.holding`` and waits before writing anything, so ``offsets/0`` is planned and ``commits/0``
never comes (a test kills the driver there); later batches append Parquet to SINK.
``--delta`` writes Delta Lake's streaming sink (SINK is the table) on Spark's default trigger, up
to 5,000 records a batch.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from airflow_ckpt_provider.spark.kafka import checkpoint_location, read_kafka


def main() -> None:
    bootstrap, topic, sink = sys.argv[1:4]
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    if "--crash-on-start" in sys.argv[4:]:
        raise RuntimeError("deliberate crash on start: the new version cannot read its configuration")
    delta = "--delta" in sys.argv[4:]
    # Delta batches cost a table commit each: larger ones, so the new version catches up with the producer
    frame = read_kafka(spark, topics=topic, bootstrap_servers=bootstrap, maxOffsetsPerTrigger=5000 if delta else 200)
    writer = frame.selectExpr("topic", "partition", "offset").writeStream
    if "--hold-first-batch" in sys.argv[4:]:

        def held(batch: DataFrame, batch_id: int) -> None:
            if batch_id == 0:  # planned, nothing written, never committed
                Path(f"{sink}.holding").write_text("0")
                while True:
                    time.sleep(1)
            batch.write.mode("append").parquet(sink)

        writer = writer.foreachBatch(held)
    else:
        writer = writer.format("delta" if delta else "parquet").option("path", sink)
    writer = writer.option("checkpointLocation", checkpoint_location(spark))
    query = (writer if delta else writer.trigger(processingTime="1 second")).start()
    query.awaitTermination()


if __name__ == "__main__":
    main()
