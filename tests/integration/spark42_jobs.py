"""The test side of the Spark 4.2 fixture jobs (``jobs/spark42_*.py``, run by
``jobs/spec_runner.py``): one driver run of a job on the provider's own Spark 4.2, with this
environment's Maven-resolved Kafka connector, and the per-query results it wrote."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.local.spark import SPARK42, SparkInstall, local_spark_conf

#: a guard against a hung JVM on a busy 2-core machine, not a duration expected
RUN_TIMEOUT_S = 1200


def run_spark42_job(job: Path, spark42: SparkInstall, work: Path, name: str, queries: list[dict[str, Any]], *,
                    conf: Mapping[str, str] | None = None, spec: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One driver run of ``job`` on Spark 4.2 over ``queries`` (extra session ``conf``, extra keys
    of the ``spec`` the job reads); its results by query label. The driver's output is kept in
    ``<work>/<name>.log``; a driver that fails fails the test with its error's tail."""
    session = {**local_spark_conf(f"spark42-{name}", version=SPARK42), "spark.pyspark.python": str(spark42.python),
               **(conf or {})}
    spec_file, result = work / f"{name}-spec.json", work / f"{name}-result.json"
    spec_file.write_text(json.dumps({**(spec or {}), "conf": session, "queries": queries}))
    proc = subprocess.run([str(spark42.python), str(job), str(spec_file), str(result)], capture_output=True,
                          text=True, timeout=RUN_TIMEOUT_S, check=False)
    (work / f"{name}.log").write_text(proc.stdout + proc.stderr)
    assert proc.returncode == 0 and result.exists(), f"Spark 4.2 run {name} of {job.name} failed:\n{proc.stderr[-3000:]}"
    results: dict[str, Any] = json.loads(result.read_text())
    return results
