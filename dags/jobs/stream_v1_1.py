"""Demo streaming job, version 1.1: version 1's query with one more output column.

The change against version 1 (``stream_v1.py``, whose runner this reuses): a ``value_length``
column after the deduplication, which stays on the record key. A projection after the stateful
operator leaves the state's schema as it is, so Spark allows this change on the SAME checkpoint:
the compatibility check says "in place OK", and the reference DAG with ``mode="auto"`` upgrades
by a plain restart on the old checkpoint (the deduplication state goes on in it) instead of a
migration. When the driver does not run from this folder, ship ``stream_v1.py`` with ``--py-files``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from stream_v1 import DEDUP_KEY, columns, run

VERSION = "v1.1"


def transform(records: DataFrame) -> DataFrame:
    deduplicated = columns(records).withWatermark("timestamp", "10 minutes").dropDuplicatesWithinWatermark(DEDUP_KEY)
    return deduplicated.withColumn("value_length", F.length("value")).withColumn("version", F.lit(VERSION))


if __name__ == "__main__":
    run(transform, VERSION)
