"""The demo job's version 1 without its deduplication: a stateless query (no ``state/`` in its
checkpoint), the kind a forward rollback (``rollback_mode="forward"``) can restart on a fresh
checkpoint. Same arguments, sink and GracefulStop as ``dags/jobs/stream_v1.py``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "dags" / "jobs"))

from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from stream_v1 import columns, run  # noqa: E402

VERSION = "v1-stateless"


def transform(records: DataFrame) -> DataFrame:
    return columns(records).withColumn("version", F.lit(VERSION))


if __name__ == "__main__":
    run(transform, VERSION)
