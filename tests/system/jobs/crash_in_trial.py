"""A "new version" that follows the trial contract (its output from sink_location, its query run by
GracefulStop) but crashes before its query starts, in any run: the compatibility check must
refuse it before the old version is asked to stop."""

import sys

from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark import GracefulStop, read_kafka, sink_location

spark = SparkSession.builder.appName("crash-in-trial").getOrCreate()
bootstrap = sys.argv[sys.argv.index("--bootstrap-servers") + 1]
topic = sys.argv[sys.argv.index("--topic") + 1]
sink = sink_location(spark, sys.argv[sys.argv.index("--sink") + 1])
records = read_kafka(spark, topics=topic, bootstrap_servers=bootstrap)
if not spark.conf.get("orders.currency", None):  # the new version needs a setting nobody gave it
    raise SystemExit("deliberate crash on start: orders.currency is not set")
GracefulStop(spark, records.writeStream.format("parquet").option("path", sink).start(), sink).run()
