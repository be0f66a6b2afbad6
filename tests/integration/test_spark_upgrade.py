"""A major Spark upgrade on the real stack: v1 runs on Spark 3.5 (pyspark 3.5 in its own
virtualenv, `make spark35`), v2 on Spark 4.0 (the provider's pyspark), producer running.

The 3.5 driver runs the provider's Spark-side helpers (``read_kafka``, ``checkpoint_location``,
``GracefulStop``) with nothing but pyspark installed; the provider's reader reads the checkpoint
Spark 3.5 wrote; the graceful stop is acknowledged by the 3.5 driver; the handover taken from it
starts v2 on Spark 4.0 on a new checkpoint exactly there, and every Kafka (partition, offset)
is in the sink exactly once.

The jobs trigger every 5 s, not every second like the demo: a Spark 3.5 driver on a loaded
2-core machine takes 2-4 s per batch of this job, and a graceful stop needs a moment between two
batches (with a 1 s trigger the next batch starts as soon as the last one ends: no boundary).
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint import CheckpointReader, reconcile
from airflow_ckpt_provider.checkpoint.errors import LocalStackError
from airflow_ckpt_provider.checkpoint.verify import verify_start
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.local.spark import SPARK35, SparkInstall, spark_install
from airflow_ckpt_provider.local.upgrade_demo import V2, UpgradeDemo

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def spark35() -> SparkInstall:
    """The Spark 3.5 of `make spark35`; fails (never skips) with what to do when it is missing."""
    try:
        return spark_install(SPARK35)
    except LocalStackError as exc:
        pytest.fail(str(exc), pytrace=False)


def spark_version_of(handle_log: str | None) -> str:
    """The Spark version a driver logged ("Running Spark version X")."""
    text = Path(handle_log or "").read_text(errors="replace")
    marker = "Running Spark version "
    assert marker in text, f"no '{marker}' in the driver log {handle_log}"
    return text.split(marker, 1)[1].split()[0]


def test_the_spark35_driver_imports_the_helpers_without_airflow(spark35: SparkInstall) -> None:
    probe = ("import importlib.util, pyspark, airflow_ckpt_provider.spark as helpers; "
             "print(pyspark.__version__, importlib.util.find_spec('airflow') is None, helpers.__file__)")
    proc = subprocess.run([str(spark35.python), "-c", probe], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    version, no_airflow, helpers = proc.stdout.split()
    assert version == spark35.version and version.startswith("3.5.")
    assert no_airflow == "True", "the 3.5 driver's environment must not have Airflow"
    assert Path(helpers).resolve() == (Path(cli.__file__).parents[1] / "spark" / "__init__.py").resolve()


def test_v1_on_spark35_hands_over_to_v2_on_spark40(kafka, tmp_path: Path, spark35: SparkInstall) -> None:  # noqa: ANN001
    demo = UpgradeDemo(tmp_path / "demo", kafka=kafka, rate=80.0, trigger="5 seconds", old_spark=spark35)
    try:
        v1 = demo.start(min_batches=3, timeout=600)
        assert spark_version_of(v1.log_path) == spark35.version

        # the provider reads the checkpoint Spark 3.5 wrote
        before = CheckpointReader(str(demo.old_cp)).snapshot()
        assert before.last_committed_batch is not None and before.last_committed_batch >= 2

        # the 3.5 driver's GracefulStop acknowledges a stop between two batches
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["stop", str(demo.old_cp), "--timeout", "300", "--quiet-period", "3",
                         "--pid", str(v1.pid), "--json"], stdout=out, stderr=err)
        assert code == 0, err.getvalue()
        stopped = json.loads(out.getvalue())
        assert stopped["outcome"] == "graceful", stopped
        assert stopped["ack"]["outcome"] == "clean", stopped

        # the handover: the last committed batch of the 3.5 checkpoint, reconciled with the broker
        handover = CheckpointReader(str(demo.old_cp)).handover()
        assert handover.batch_id == stopped["last_committed_batch"]
        result = reconcile(handover.kafka_offsets(), KafkaBroker(kafka.bootstrap_servers).view([demo.topic]))
        starting = result.starting_offsets

        # v2 on Spark 4.0, on a new checkpoint, from the handover
        v2 = demo.launch(V2, demo.new_cp, starting_offsets=starting.to_json())
        demo.wait_for_batch(demo.new_cp, 0, timeout=600, handle=v2)
        assert spark_version_of(v2.log_path).startswith("4.0.")
        verified = verify_start(CheckpointReader(str(demo.new_cp)).snapshot(include_initial=True), starting,
                                handover=handover)
        assert len(verified.partitions) == demo.partitions and all(p.ok for p in verified.partitions)

        audit = demo.finish(demo.new_cp)
    finally:
        demo.close()
    assert audit.produced > 500, "the producer must have run through the upgrade"
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
    assert audit.unexpected == 0
