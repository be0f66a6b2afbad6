"""Benchmark: the state export against a plain read of the same state, in the same run.

Spark writes a stateful checkpoint (a streaming count per key, HDFS-backed store) whose state
holds ``--keys`` keys (default 1,000,000) over ``--partitions`` shuffle partitions (default
200). Then, alternating, ``--rounds`` times each on one local SparkSession:

* baseline: ``spark.read.format("statestore").load(checkpoint).count()``;
* export: what ``StateExportOperator`` does after its checks: the export job's function
  (statestore -> Parquet with an observed row count) and the read-back (sha256 and footer rows
  of every file, then the manifest).

Prints the medians and the ratio export/baseline (target: at most 1.5); exits 1 above it.

    python bench/state_export.py [--keys 1000000] [--partitions 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import fsspec

from airflow_ckpt_provider.spark.state_export import export_state
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.state import finish_export, plan_state_export

TARGET = 1.5


def build(spark: object, checkpoint: Path, keys: int) -> None:
    """One micro-batch of ``keys`` distinct keys into a streaming count: ``keys`` rows of state."""
    frame = (spark.readStream.format("rate-micro-batch")  # type: ignore[attr-defined]
             .option("rowsPerBatch", keys).option("numPartitions", 8).load())
    query = (frame.groupBy("value").count().writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench-state-export")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.shuffle.partitions", str(args.partitions)).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    fs = fsspec.filesystem("file")
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-state-") as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        started = time.perf_counter()
        build(spark, checkpoint, args.keys)
        plan = plan_state_export(CheckpointReader(str(checkpoint)))
        assert plan.batch_id is not None
        print(f"state of {args.keys:,} keys over {args.partitions} partitions written by Spark in "
              f"{time.perf_counter() - started:.1f} s (batch {plan.batch_id})")

        def baseline() -> int:
            return int(spark.read.format("statestore").load(str(checkpoint)).count())

        def export(round_no: int) -> int:
            target = Path(tmp) / f"export-{round_no}"
            result = export_state(spark, str(checkpoint), plan.batch_id, str(target))  # type: ignore[arg-type]
            manifest = finish_export(fs, str(target), plan, result, uri=str(target), upgrade_id="bench")
            shutil.rmtree(target)
            return manifest.rows

        baseline()  # warm the session (class loading, the first state store load) for both
        plain, exported = [], []
        for round_no in range(args.rounds):
            order = [("baseline", baseline), ("export", lambda n=round_no: export(n))]
            for name, action in order if round_no % 2 == 0 else order[::-1]:  # alternate: no order bias
                began = time.perf_counter()
                rows = action()
                (plain if name == "baseline" else exported).append(time.perf_counter() - began)
                if rows != args.keys:
                    print(f"FAIL: {name} saw {rows:,} rows, expected {args.keys:,}", file=sys.stderr)
                    return 1
    spark.stop()
    base, ours = statistics.median(plain), statistics.median(exported)
    print(f"{'':>10} {'median s':>9}  runs")
    print(f"{'baseline':>10} {base:>9.2f}  " + ", ".join(f"{s:.2f}" for s in plain))
    print(f"{'export':>10} {ours:>9.2f}  " + ", ".join(f"{s:.2f}" for s in exported))
    ratio = ours / base
    print(f"export/baseline ratio: {ratio:.2f} (target at most {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
