"""Demo stateful job, version 2: the running total and count carried over, plus the largest
purchase since the upgrade.

The aggregation changes (a third aggregate: a new state schema) and a source is added (the
exported state, read as a stream): both need a new checkpoint. Version 1's state after the
handover batch comes with the upgrade (``spark.ckpt.initialStatePath``) and is unioned, as a
stream, with the new purchases shaped the same way (``total`` = amount, ``n`` = 1), so the
built-in aggregation continues every customer's total and count exactly where version 1 left
them. Without an export (``carry_state`` off) it starts from empty state: every total restarts
at zero, which the demo's negative control shows. When the driver does not run from this
folder, ship ``purchases_v1.py`` with ``--py-files``.
"""

from __future__ import annotations

from purchases_v1 import purchases, run
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark.state import aggregate_seed_stream

VERSION = "v2"
#: version 1's aggregations, in the order of its agg(...): sum(amount) AS total, count(*) AS n
V1_AGGREGATES = [("total", "sum"), ("n", "count")]


def transform(spark: SparkSession, records: DataFrame) -> DataFrame:
    rows = purchases(records).select("customer", F.col("amount").alias("total"), F.lit(1).cast("long").alias("n"),
                                     F.col("amount").alias("largest"))
    seed = aggregate_seed_stream(spark, V1_AGGREGATES, key=["customer"])
    if seed is not None:  # carried customers: their totals so far, no purchase since the upgrade yet
        rows = rows.unionByName(seed.withColumn("largest", F.lit(None).cast("long")))
    return rows.groupBy("customer").agg(F.sum("total").alias("total"), F.sum("n").alias("n"),
                                        F.max("largest").alias("largest_since_upgrade"))


if __name__ == "__main__":
    run(transform, VERSION)
