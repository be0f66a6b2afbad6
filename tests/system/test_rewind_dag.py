"""Reprocessing from a chosen point with the reference DAG, producers running.

A rewind to batch K (three batches back when the run is triggered) hands v2 the start of batch
K: the sink audit must show exactly the records of batches K..N (N: v1's last batch) twice — the
ranges the report predicted, per partition — and nothing lost. A start at a time differs only in
how the start offsets are found, which tests/integration/test_rewind_real.py checks against a
real broker (each partition's first record at or after the time); the launch and the
verification from them are the steps this test runs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from airflow_ckpt_provider.local.audit import read_sink_records
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.upgrade_demo import UpgradeDemo, read_dag_report

pytestmark = pytest.mark.system


def states(run) -> dict[str, str]:  # noqa: ANN001
    return {ti.task_id: ti.state for ti in run.get_task_instances()}


def records_twice(sink: Path) -> set[tuple[str, int, int]]:
    seen = read_sink_records(sink)
    assert max(seen.values()) <= 2, "a record more than twice"
    return {record for record, count in seen.items() if count == 2}


def check_reprocessed_exactly(demo: UpgradeDemo, report: dict) -> Counter[int]:
    """The audit after v2 caught up: nothing lost, and the records seen twice are exactly the
    report's ranges [start_at, resume_at) per partition. Returns the counts per partition."""
    audit = demo.finish(demo.new_cp)
    assert audit.produced > 500 and audit.lost == 0, audit.lost_examples
    plan = report["start_plan"]
    predicted = {(demo.topic, p["partition"], o) for p in plan["partitions"]
                 for o in range(p["start_at"], p["resume_at"])}
    twice = records_twice(demo.sink)
    extra = twice - predicted
    if extra:  # only a batch v1 was stopped in may be twice as well: its offsets are never handed over
        assert extra <= interrupted_batch_records(demo), sorted(extra)[:5]
    assert predicted <= twice, sorted(predicted - twice)[:5]
    assert audit.duplicated == len(twice) and plan["reprocessed"] == len(predicted) > 0
    return Counter(p for _, p, _ in twice & predicted)


def interrupted_batch_records(demo: UpgradeDemo) -> set[tuple[str, int, int]]:
    """The records of the batch v1's graceful stop cut (planned, never committed), from the
    journal's stop result: an append sink may hold them from v1 as well (none when the stop was
    clean). Under heavy load a trigger can start between the boundary check and query.stop()."""
    import fsspec

    from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
    from airflow_ckpt_provider.storage.journal import list_journals
    from tests.integration.streams import raw_source_line

    journals = list_journals(fsspec.filesystem("file"), str(demo.archive_root), "demo-events")
    stop = journals[-1].steps["graceful_stop"].result
    cut = stop.get("interrupted_batch")
    if cut is None:
        return set()
    begin = KafkaOffsets.from_json(raw_source_line(demo.old_cp, stop["last_committed_batch"]))
    end = KafkaOffsets.from_json(raw_source_line(demo.old_cp, cut))
    return {(t, p, o) for t, p, e in end.items() for o in range(begin.get(t, p) or 0, e)}


def test_rewind_to_batch_reprocesses_batches_k_to_n_exactly(airflow_home, demo: UpgradeDemo) -> None:  # noqa: ANN001
    # batches shorter than the trigger interval: the graceful stop finds a boundary between two
    # batches at once, and batch K stays within Spark's retained 100 batches until the handover
    # (back-to-back 1 s batches on a loaded machine left no boundary for 117 s, and K was purged)
    demo.trigger = "2 seconds"
    v1 = demo.start(min_batches=4)
    # three batches back from now (the refusals without consent are tests/integration/test_bad_inputs.py's)
    k = CheckpointReader(str(demo.old_cp)).snapshot().last_committed_batch - 2  # type: ignore[operator]
    run = demo.upgrade_with_dag(v1, handover_mode="rewind_to_batch", handover_value=str(k),
                                accept_reprocessing=True, carry_state=True)
    assert run.state == "success", states(run)
    report = read_dag_report(demo.archive_root)
    assert report is not None and report["outcome"] == "upgraded"
    n = report["handover"]["batch_id"]
    assert n >= k + 2
    old = Path(demo.old_cp)
    start_of_k = CheckpointReader(str(old)).batch_start(k).kafka_offsets()
    assert {p["partition"]: p["start_at"] for p in report["start_plan"]["partitions"]} == \
        {p: start_of_k.get(demo.topic, p) for p in range(demo.partitions)}
    counts = check_reprocessed_exactly(demo, report)
    assert dict(counts) == {p["partition"]: p["reprocessed"] for p in report["start_plan"]["partitions"]}
    # the state carried is the one before batch K, where v2 starts (not the handover's batch N)
    assert report["state_export"]["batch_id"] == k - 1, report["state_export"]
