"""The example DAG (``dags/stream_upgrade_example.py``: the operators used alone, with explicit
typed arguments) run for real: a real Kafka broker, the demo job v1 running in Spark local mode
under a producer that keeps writing through the upgrade, the DAG run by ``dag.test()`` on the
SQLite Airflow home. Then every Kafka (partition, offset) is looked up in the sink v1 and v2
appended to: none lost, none twice. The harness is the system tests' (:class:`UpgradeDemo`, the
sink audit); the example's params are named like the reference DAG's, so its conf is the same.
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pyarrow.dataset as ds
import pytest

from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.upgrade_demo import DAGS, UpgradeDemo

pytestmark = pytest.mark.integration

EXAMPLE = DAGS / "stream_upgrade_example.py"
STEPS = ["preflight", "graceful_stop", "extract_handover", "archive", "relaunch", "verify"]


def test_the_example_dag_moves_a_live_stream_with_nothing_lost_or_duplicated(airflow_home,  # noqa: ANN001
                                                                              demo: UpgradeDemo) -> None:
    v1 = demo.start()
    began = time.monotonic()
    run = demo.upgrade_with_dag(v1, dag_id="stream_upgrade_example", dag_file=EXAMPLE)
    took = time.monotonic() - began
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    assert states == dict.fromkeys(STEPS, "success"), states
    audit = demo.finish(demo.new_cp)
    print(f"example DAG run: {took:.0f} s; audit: {audit.produced} records in Kafka, {audit.in_sink} in the sink, "
          f"{audit.lost} lost, {audit.duplicated} duplicated, {audit.unexpected} unexpected")

    assert audit.produced > 1000, "the producer must have run through the upgrade"
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
    assert audit.unexpected == 0
    versions = Counter(ds.dataset(str(demo.sink), format="parquet").to_table(columns=["version"])
                       .column("version").to_pylist())
    assert versions["v1"] > 0 and versions["v2"] > 0, versions  # both versions wrote, v2 after the handover

    # the old checkpoint stays where it was, and its verified archive holds the handover v2 started from
    handover = CheckpointReader(str(demo.old_cp)).handover()
    (manifest,) = (demo.archive_root / demo.stream).glob("*/manifest.json")
    assert json.loads(manifest.read_text())["handover"]["batch_id"] == handover.batch_id
    (started,) = CheckpointReader(str(demo.new_cp)).snapshot(include_initial=True).initial_sources
    assert started.kafka is not None and started.kafka.to_dict() == handover.kafka_offsets().to_dict(), \
        "v2's recorded start is the handover"

