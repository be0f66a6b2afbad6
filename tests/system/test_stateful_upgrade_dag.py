"""A stateful upgrade through the reference DAG's switchover, Spark 4.0 to Spark 4.2: every
customer's running total is exact after it.

Version 1 on Spark 4.0 keeps ``sum(amount)`` and ``count`` per customer (streaming aggregation,
HDFS-backed store) while a producer keeps sending purchases. ``stream_upgrade_switchover`` starts
version 2 on Spark 4.2 as a standby — a changed aggregation that seeds itself from the old state —
and switches inside the drivers: when v1 acknowledges its stop, the standby reads the handover and
v1's state at the handover batch with Spark 4.2's state reader in its own session, and starts. The
state export after the switch (spark-submit on Spark 4.2) must equal that seed store by store. The
producer goes on through the upgrade. After it, for EVERY customer, v2's total and count equal the
sums over all purchases in the topic, computed from Kafka itself. The negative control — v2 started
from the same handover without the state — fails the same check.

(The standby path's export before the release is the same export job: its seed is proven by
tests/integration/test_state_seed.py and run at the DAG level by the fault-injection chain.)

(RocksDB state checkpoint format v2 written by Spark 4.0 cannot be carried to Spark 4.2: Spark 4.2
cannot read its snapshots, and the preflight refuses it; tests/integration/test_state_export_real.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_ckpt_provider.local.errors import LocalStackError
from airflow_ckpt_provider.local.spark import SPARK40, SPARK42, spark_install
from airflow_ckpt_provider.records.control import SWITCHOVER_HANDOVER
from airflow_ckpt_provider.spark.switchover import SwitchoverHandover
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.records import CUSTOMERS, purchase
from tests.harness.state_audit import compare_totals, kafka_totals, sink_totals
from tests.harness.upgrade_demo import DAGS, UpgradeDemo, read_dag_report, stop_jobs_under
from tests.system.test_spark_upgrade_dag import running_on

pytestmark = pytest.mark.system

PURCHASES_V1, PURCHASES_V2 = DAGS / "jobs" / "purchases_v1.py", DAGS / "jobs" / "purchases_v2.py"
STREAM = "purchases"


def purchases_demo(kafka, work: Path) -> UpgradeDemo:  # noqa: ANN001
    """v1 on Spark 4.0, v2 on Spark 4.2 (fails, never skips, without `make spark40`)."""
    try:
        old, new = spark_install(SPARK40), spark_install(SPARK42)
    except LocalStackError as exc:
        pytest.fail(str(exc), pytrace=False)
    return UpgradeDemo(work, kafka=kafka, rate=60.0, v1=PURCHASES_V1, v2=PURCHASES_V2, record=purchase,
                       topic="purchases", stream=STREAM, old_spark=old, new_spark=new)


def test_stateful_upgrade_carries_every_customers_total(airflow_home, kafka, tmp_path: Path) -> None:  # noqa: ANN001
    demo = purchases_demo(kafka, tmp_path / "upgrade")
    try:
        v1 = demo.start(min_batches=3, timeout=600)
        run = demo.upgrade_with_dag(v1, carry_state=True, dag_id="stream_upgrade_switchover")
        assert run.state == "success", {ti.task_id: ti.state for ti in run.get_task_instances()}
        running_on(demo.new_cp, demo.new_spark)  # type: ignore[arg-type]
        report = read_dag_report(demo.archive_root, STREAM)
        assert report is not None and report["outcome"] == "upgraded"
        export = report["state_export"]
        handover = CheckpointReader(str(demo.old_cp)).handover()
        assert export["batch_id"] == handover.batch_id and export["rows"] == CUSTOMERS, export
        manifest = json.loads((Path(export["location"]) / "state-manifest.json").read_text())
        assert manifest["spark_version"] == demo.new_spark.version  # type: ignore[union-attr]
        # the standby seeded the same state in its own session, inside the downtime, with no export job
        used = SwitchoverHandover.from_json((demo.new_cp / SWITCHOVER_HANDOVER).read_bytes())
        seed = json.loads((Path(used.state_path) / "state-manifest.json").read_text())
        assert Path(used.state_path).is_relative_to(demo.new_cp / "_ckpt") and used.state_rows == CUSTOMERS
        assert [(s["rows"], s["checksum"]) for s in seed["stores"]] == [
            (s["rows"], s["checksum"]) for s in manifest["stores"]], (seed["stores"], manifest["stores"])
        split = report["switchover"]
        assert split["state_wait_s"] is not None and split["downtime_s"] is not None, split
        print(f"stateful switchover: downtime {split['downtime_s']} s, of which state wait {split['state_wait_s']} s")
        demo.drain(demo.new_cp)
        truth = kafka_totals(kafka.bootstrap_servers, demo.topic)
        result = compare_totals(truth, sink_totals(demo.sink, "v2"))
    finally:
        demo.close()
        stop_jobs_under(demo.work)
    produced = sum(n for _, n in truth.values())
    print(f"stateful upgrade: {produced} purchases, customers {result.customers}, mismatched {result.mismatched}")
    assert produced > 600 and demo.produced_acked == produced, "the producer ran through the upgrade"
    assert result.customers == CUSTOMERS and result.ok, result.examples

    # the negative control: v1 again, then v2 from the same kind of handover WITHOUT the export
    control = purchases_demo(kafka, tmp_path / "control")
    try:
        v1 = control.start(min_batches=3)
        from airflow_ckpt_provider.cli import main as ckpt

        assert ckpt(["stop", str(control.old_cp), "--timeout", "120", "--pid", str(v1.pid)]) == 0
        offsets = CheckpointReader(str(control.old_cp)).handover().kafka_offsets().to_json()
        control.launch(control.v2, control.new_cp, starting_offsets=offsets, spark=control.new_spark)
        control.wait_for_batch(control.new_cp, 1, timeout=300)
        control.drain(control.new_cp)
        truth = kafka_totals(kafka.bootstrap_servers, control.topic)
        naive = compare_totals(truth, sink_totals(control.sink, "v2"))
    finally:
        control.close()
        stop_jobs_under(control.work)
    print(f"control (no export): customers {naive.customers}, mismatched {naive.mismatched}")
    assert naive.mismatched > 0, "the same check must fail when the state is not carried"
