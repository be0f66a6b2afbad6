"""A "new version" that waits as a standby like any job built on read_kafka, then crashes once
released, before its first batch: the upgrade must roll back after the old version stopped."""

import sys

from pyspark.sql import SparkSession

from airflow_ckpt_provider.spark.kafka import read_kafka

spark = SparkSession.builder.appName("crash-after-release").getOrCreate()
bootstrap = sys.argv[sys.argv.index("--bootstrap-servers") + 1]
topic = sys.argv[sys.argv.index("--topic") + 1]
read_kafka(spark, topics=topic, bootstrap_servers=bootstrap)  # a standby returns from here once released
print("deliberate crash: this version fails right after its release", file=sys.stderr)
sys.exit(3)
