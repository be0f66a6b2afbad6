"""A stateful Kafka query (running count per Kafka partition) whose checkpoint lives on S3 (``s3a://``), run
with ``availableNow``: it processes what the topic holds, commits and exits.

Usage: s3_stateful.py BOOTSTRAP TOPIC CHECKPOINT SINK SPARK_CONF_JSON [STARTING_OFFSETS_JSON]
Each batch's updated counts go to ``SINK/batch=<id>/`` (local Parquet). SPARK_CONF_JSON holds the
S3A settings and jars (``LocalS3.spark_conf``); STARTING_OFFSETS_JSON is ignored by Spark when
the checkpoint already has offsets (a resume).
"""

from __future__ import annotations

import json
import sys

from airflow_ckpt_provider.local.spark import local_spark_session


def main() -> None:
    bootstrap, topic, checkpoint, sink, conf = sys.argv[1:6]
    starting = sys.argv[6] if len(sys.argv) > 6 else "earliest"
    spark = local_spark_session("s3-stateful", extra=json.loads(conf))

    def write(batch, batch_id: int) -> None:  # noqa: ANN001
        batch.write.mode("overwrite").parquet(f"{sink}/batch={batch_id}")

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("failOnDataLoss", "true")
        .load()
        .groupBy("partition").count()
        .writeStream.outputMode("update")
        .foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
