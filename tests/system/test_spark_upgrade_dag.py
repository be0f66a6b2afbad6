"""Spark upgrades through the reference DAG, to Spark 4.2 (the provider's own Spark):
v1 on Spark 4.0 upgraded to v2 on Spark 4.2 that names its Kafka source (Spark's source
evolution, offsets v2: Spark refuses it on v1's checkpoint, so it needs the new one), producer
running; and the rollback of an upgrade from v1 on Spark 3.5 (`make spark35`) that restarts v1 on
Spark 3.5. Both run the cold DAG (``stream_upgrade_cold``: one driver at a time, v2 launched after
the stop and the archive), so these are also its end-to-end tests: its steps in their order, 0
lost, 0 duplicated.

The versions get their Spark from the DAG's ``old_spark`` / ``new_spark`` params
(:meth:`SparkInstall.dag_settings`). The jobs trigger every 5 s: a Spark 3.5 driver on a loaded
2-core machine takes seconds per batch, and a graceful stop needs a moment between two batches.
"""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.manifest import DATA_DIR
from airflow_ckpt_provider.local.errors import LocalStackError
from airflow_ckpt_provider.local.spark import SPARK35, SPARK40, SPARK42, SparkInstall, spark_install
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.stop import ControlFiles
from tests.harness.upgrade_demo import UpgradeDemo, read_dag_report

pytestmark = pytest.mark.system

CRASHING_V2 = Path(__file__).parent / "jobs" / "crash_on_start.py"


SOURCE_NAME = "events"


def on_sparks(demo: UpgradeDemo, old: str, new: str) -> UpgradeDemo:
    """The shared ``demo`` stack with v1 on Spark ``old`` and v2 on Spark ``new``; fails (never
    skips) when `make spark35` / `make spark40` was not run."""
    try:
        demo.old_spark, demo.new_spark = spark_install(old), spark_install(new)
    except LocalStackError as exc:
        pytest.fail(str(exc), pytrace=False)
    demo.trigger = "5 seconds"
    return demo


def states(run) -> dict[str, str]:  # noqa: ANN001
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def driver_log_spark(log_path: str | None) -> str:
    text = Path(log_path or "").read_text(errors="replace")
    assert "Running Spark version " in text, log_path
    return text.split("Running Spark version ", 1)[1].split()[0]


def running_on(checkpoint: Path, spark: SparkInstall) -> None:
    """The driver heartbeating on ``checkpoint`` runs ``spark``'s Python under ``spark``'s JVM."""
    beat = ControlFiles(fsspec.filesystem("file"), str(checkpoint)).heartbeat()
    assert beat is not None and beat.state == "running", beat
    python = Path(f"/proc/{beat.pid}/cmdline").read_bytes().split(b"\0")
    assert python[0].decode() == str(spark.python), python
    parent = Path(f"/proc/{beat.pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    assert str(spark.spark_home).encode() in Path(f"/proc/{parent}/cmdline").read_bytes(), "the JVM of that Spark"


def test_v1_on_spark40_upgrades_to_v2_on_spark42_with_named_sources(airflow_home, demo: UpgradeDemo) -> None:  # noqa: ANN001
    demo = on_sparks(demo, SPARK40, SPARK42)
    demo.new_source_name = SOURCE_NAME
    v1 = demo.start(timeout=600)
    assert driver_log_spark(v1.log_path) == demo.old_spark.version  # type: ignore[union-attr]
    # the export of v1's state runs on the new version's Spark (4.2)
    run = demo.upgrade_with_dag(v1, dag_id="stream_upgrade_cold", carry_state=True)
    assert run.state == "success", states(run)
    running_on(demo.new_cp, demo.new_spark)  # type: ignore[arg-type]
    audit = demo.finish(demo.new_cp)

    assert audit.produced > 500, "the producer must have run through the upgrade"
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
    assert audit.unexpected == 0

    # the checkpoint Spark 4.0 wrote (offsets v1) was read, handed over and archived
    report = read_dag_report(demo.archive_root)
    assert report is not None and report["outcome"] == "upgraded", report
    cold = ["graceful_stop", "extract_handover", "export_state", "archive", "relaunch", "verify"]
    started = {s["name"]: s["started_at"] for s in report["steps"] if s["state"] == "success"}
    assert sorted(cold, key=lambda name: started[name]) == cold, f"the cold steps in their order: {started}"
    assert "start_standby" not in started
    down = report["downtime_by_step"]
    assert abs(sum(down.values()) - report["downtime_s"]) < 0.01 and down.get("graceful_stop", 0) > 0, down
    handover = CheckpointReader(str(demo.old_cp)).handover()
    assert report["handover"]["batch_id"] == handover.batch_id
    archived = Path(report["archive"])
    assert CheckpointReader(str(archived / DATA_DIR)).handover().batch_id == handover.batch_id, archived
    # v2 on Spark 4.2 named its source: its checkpoint's offsets are v2, keyed by the name, and the
    # DAG's verify read its start back from them (sources/<name>/0) and found the handover
    old, new = CheckpointReader(str(demo.old_cp)).snapshot(), CheckpointReader(str(demo.new_cp)).snapshot(
        include_initial=True)
    assert (old.offsets_version, new.offsets_version) == (1, 2)
    assert [s.name for s in new.sources] == [s.name for s in new.initial_sources] == [SOURCE_NAME]
    assert new.conf["spark.sql.streaming.queryEvolution.enableSourceEvolution"] == "true"
    assert states(run)["verify"] == "success"
    # v1's state was exported by the new version's Spark (4.2) at the handover batch
    export = report["state_export"]
    assert export["batch_id"] == handover.batch_id and export["rows"] > 0, export
    manifest = json.loads((Path(export["location"]) / "state-manifest.json").read_text())
    assert manifest["spark_version"] == demo.new_spark.version  # type: ignore[union-attr]
    assert manifest["stores"][0]["store_name"] == "default"


def test_rollback_restarts_v1_on_spark35(airflow_home, demo: UpgradeDemo) -> None:  # noqa: ANN001
    """v1 on Spark 3.5, v2 on Spark 4.2 crashing on start: the rollback restarts v1 on 3.5."""
    demo = on_sparks(demo, SPARK35, SPARK42)
    v1 = demo.start(timeout=600)
    last_before = CheckpointReader(str(demo.old_cp)).snapshot().last_committed_batch
    run = demo.upgrade_with_dag(v1, dag_id="stream_upgrade_cold", new_application=str(CRASHING_V2))

    got = states(run)
    assert run.state == "failed", got
    assert got["graceful_stop"] == got["extract_handover"] == got["archive"] == "success", got
    assert got["relaunch"] == "failed", got
    assert got["rollback_stop_new"] == got["rollback_restore"] == got["rollback_restart_old"] == "success", got
    report = read_dag_report(demo.archive_root)
    assert report is not None and report["outcome"] == "rolled back", report

    # v1 runs again on Spark 3.5 from its own checkpoint, and keeps committing
    demo.wait_for_batch(demo.old_cp, (last_before or 0) + 2, timeout=300)
    running_on(demo.old_cp, demo.old_spark)  # type: ignore[arg-type]
    audit = demo.finish(demo.old_cp)
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
