"""The driver side of the Spark 4.2 fixture jobs (``spark42_*.py`` here): one Spark session runs
each query of a JSON spec and writes every query's result, or the error Spark gave, to a JSON
file the test reads. Imports nothing but pyspark (so what a job writes or refuses is Spark's own); a job
imports it from its own folder, which Python puts on the path of a script it runs.

Usage of a job: ``python <job>.py <spec.json> <result.json>``; the spec holds ``conf`` (the
session's Spark conf), ``queries`` (each with a ``label``; ``expect_error``: an error is the
point, no traceback printed) and whatever else the job's ``run`` reads from it."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession


def run_spec(app_name: str, run: Callable[[SparkSession, dict, dict], dict[str, Any]]) -> int:
    """Run ``run(spark, query, spec)`` for each query of the spec named on the command line and
    write the results by label (a failed query: ``ok`` false and its error)."""
    spec_path, result_path = sys.argv[1:3]
    with open(spec_path) as handle:
        spec = json.load(handle)
    builder = SparkSession.builder.appName(app_name)
    for key, value in spec["conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    results = {}
    for query in spec["queries"]:
        try:
            results[query["label"]] = run(spark, query, spec)
        except Exception as exc:  # noqa: BLE001 - the test reads which error Spark gave
            results[query["label"]] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "batches": []}
            if not query.get("expect_error"):
                traceback.print_exc()
    with open(result_path, "w") as handle:
        json.dump(results, handle, indent=1)
    spark.stop()
    return 0
