"""The negative control of the exactly-once proof: the demo's audit fails for a naive relaunch.

The same harness as the reference DAG's system tests (tests/system/test_upgrade_dag.py) — real
Kafka, real Spark, every (partition, offset) the broker holds looked up in the sink — with no
Airflow: v1 is stopped with ``ckpt stop`` and v2 started on a new checkpoint from ``latest``
(Spark's default for a new checkpoint). Records are lost, so the audit that finds none lost in
the upgrades can fail. The audit's duplicate count fails where records are processed twice: the
restore rollback (tests/system/test_upgrade_dag.py) and the rewind
(tests/system/test_rewind_dag.py) expect exactly the duplicates their reports predict.
"""

from __future__ import annotations

import pytest

from tests.harness.upgrade_demo import UpgradeDemo

pytestmark = pytest.mark.integration


def test_naive_relaunch_is_caught(demo: UpgradeDemo) -> None:
    v1 = demo.start()
    demo.naive_upgrade(v1, "latest")
    audit = demo.finish(demo.new_cp)
    assert audit.produced > 500
    assert audit.lost > 0, audit
    assert not audit.ok
