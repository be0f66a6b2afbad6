"""A streaming job whose batch 1 never finishes: it touches a marker and waits to be killed.

Usage: stuck_batch.py BOOTSTRAP TOPIC CHECKPOINT SINK MARKER
Batch 0 is written to SINK and committed; batch 1 is planned (offsets/1) and then hangs.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from airflow_ckpt_provider.local.spark import local_spark_session


def main() -> None:
    bootstrap, topic, checkpoint, sink, marker = sys.argv[1:6]
    spark = local_spark_session("stuck-batch")

    def write(frame, batch_id: int) -> None:  # noqa: ANN001
        if batch_id >= 1:
            Path(marker).write_text(str(batch_id))
            time.sleep(3600)
        frame.write.mode("append").parquet(sink)

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 100)
        .load()
        .selectExpr("topic", "partition", "offset")
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main()
