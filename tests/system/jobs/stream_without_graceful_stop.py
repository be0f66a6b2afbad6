"""The demo job's version 1 without GracefulStop: it runs and commits, but never heartbeats and
cannot acknowledge a stop request (``query.awaitTermination()`` like most jobs written before
the provider). The graceful stop of such a job cannot complete without a launch handle."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "dags" / "jobs"))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from stream_v1 import VERSION, transform  # noqa: E402

from airflow_ckpt_provider.spark.kafka import checkpoint_location, read_kafka  # noqa: E402


def main(argv: list[str]) -> None:
    args = dict(zip(argv[::2], argv[1::2], strict=False))
    spark = SparkSession.builder.appName("demo-stream-v1-no-graceful-stop").getOrCreate()
    records = read_kafka(spark, topics=args["--topic"], bootstrap_servers=args["--bootstrap-servers"])
    sink = args["--sink"]

    def append(batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("append").parquet(sink)

    query = (transform(records).writeStream.foreachBatch(append)
             .option("checkpointLocation", checkpoint_location(spark))
             .trigger(processingTime=args.get("--trigger", "1 second")).queryName(f"demo_stream_{VERSION}").start())
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
