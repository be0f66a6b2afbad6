"""Demo streaming job, version 2: the same sink, deduplicated on the Kafka coordinates.

The logic change against version 1 (``stream_v1.py``, whose runner this reuses): deduplication
on (topic, partition, offset) instead of the record key, and a ``value_length`` column.
Changing the deduplication columns is not allowed on the same checkpoint (the state schema
changes), so this version starts on a NEW checkpoint from the handover of version 1.
When the driver does not run from this folder, ship ``stream_v1.py`` with ``--py-files``.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from stream_v1 import columns, run

VERSION = "v2"
DEDUP_KEY = ["topic", "partition", "offset"]


def transform(records: DataFrame) -> DataFrame:
    deduplicated = columns(records).withWatermark("timestamp", "10 minutes").dropDuplicatesWithinWatermark(DEDUP_KEY)
    return deduplicated.withColumn("value_length", F.length("value")).withColumn("version", F.lit(VERSION))


if __name__ == "__main__":
    run(transform, VERSION)
