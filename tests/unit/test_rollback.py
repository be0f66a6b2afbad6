"""The rollback's handover: what the old version processes twice, and where a forward rollback starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint import BrokerView, KafkaOffsets
from airflow_ckpt_provider.checkpoint.errors import ForwardRollbackRefused
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.checkpoint.report import UpgradeReport
from airflow_ckpt_provider.checkpoint.rollback import (
    NewVersionProgress,
    RollbackHandover,
    RollbackHandoverUnread,
    forward_offsets,
    rollback_handover,
    rollback_result,
)
from airflow_ckpt_provider.operators.handover import RollbackHandoverOperator
from tests.unit.conftest import write_checkpoint


def k(**partitions: int) -> KafkaOffsets:
    """``k(p0=10, p1=20)``: topic ``t``, partitions 0 and 1."""
    return KafkaOffsets({"t": {int(name[1:]): offset for name, offset in partitions.items()}})


HANDOVER = k(p0=10, p1=20)


@pytest.mark.parametrize(("case", "progress", "restore", "forward", "forward_from"), [
    # (case, new version's progress, restore: {p: (committed again, uncommitted again)}, forward: same, forward start)
    ("started at the handover, committed, one batch planned",
     NewVersionProgress(k(p0=10, p1=20), 4, k(p0=30, p1=25), 5, k(p0=33, p1=25)),
     {0: ((10, 30), (30, 33)), 1: ((20, 25), (0, 0))}, {0: ((0, 0), (30, 33)), 1: ((0, 0), (0, 0))},
     {0: 30, 1: 25}),
    ("ignored the handover: started at latest (a gap of 5 and 2)",
     NewVersionProgress(k(p0=15, p1=22), 1, k(p0=40, p1=30)),
     {0: ((15, 40), (0, 0)), 1: ((22, 30), (0, 0))}, {0: ((15, 40), (0, 0)), 1: ((22, 30), (0, 0))},
     {0: 10, 1: 20}),  # no loss wins: the skipped records are read, then what v2 read after them again
    ("ignored the handover: started at earliest (read again what v1 wrote)",
     NewVersionProgress(k(p0=0, p1=0), 0, k(p0=12, p1=5)),
     {0: ((10, 12), (0, 0)), 1: ((0, 0), (0, 0))}, {0: ((0, 0), (0, 0)), 1: ((0, 0), (0, 0))},
     {0: 12, 1: 20}),
    ("committed nothing, batch 0 planned",
     NewVersionProgress(k(p0=10, p1=20), None, None, 0, k(p0=14, p1=21)),
     {0: ((0, 0), (10, 14)), 1: ((0, 0), (20, 21))}, {0: ((0, 0), (10, 14)), 1: ((0, 0), (20, 21))},
     {0: 10, 1: 20}),  # nothing committed: the original handover
    ("never started its query", NewVersionProgress(),
     {0: ((0, 0), (0, 0)), 1: ((0, 0), (0, 0))}, {0: ((0, 0), (0, 0)), 1: ((0, 0), (0, 0))}, {0: 10, 1: 20}),
    ("a partition the handover did not know: v1 reads it from earliest",
     NewVersionProgress(k(p0=10, p1=20, p2=0), 2, k(p0=11, p1=20, p2=7)),
     {0: ((10, 11), (0, 0)), 1: ((0, 0), (0, 0)), 2: ((0, 7), (0, 0))},
     {0: ((0, 0), (0, 0)), 1: ((0, 0), (0, 0)), 2: ((0, 0), (0, 0))}, {0: 11, 1: 20, 2: 7}),
])
def test_what_the_old_version_processes_twice(case: str, progress: NewVersionProgress, restore: dict[int, Any],
                                              forward: dict[int, Any], forward_from: dict[int, int]) -> None:
    for mode, expected in ((RollbackMode.RESTORE, restore), (RollbackMode.FORWARD, forward)):
        result = rollback_handover(mode, HANDOVER, progress, checkpoint="cp")
        got = {p.partition: (p.again_committed, p.again_planned) for p in result.partitions}
        assert got == expected, (case, mode)
        assert result.again_committed == sum(c[1] - c[0] for c, _ in expected.values())
        assert result.again_planned == sum(u[1] - u[0] for _, u in expected.values())
    assert {p: o for _, p, o in forward_offsets(HANDOVER, progress).items()} == forward_from, case
    result = rollback_handover("forward", HANDOVER, progress, checkpoint="cp")
    assert KafkaOffsets.from_json(result.starting_offsets) == forward_offsets(HANDOVER, progress)
    assert rollback_handover("restore", HANDOVER, progress, checkpoint="cp").starting_offsets == ""


def test_the_summary_says_when_the_new_version_ignored_the_handover() -> None:
    ignored = rollback_handover("restore", HANDOVER, NewVersionProgress(k(p0=15, p1=20), 1, k(p0=40, p1=30)),
                                checkpoint="old-cp")
    text = "\n".join(ignored.describe())
    assert ignored.new_started_at_handover is False
    assert "did not start at the handover" in text and "skipped 5 records" in text
    assert "t-0: again [15, 40) committed (25)" in text and "t-1: again [20, 30) committed (10)" in text
    honoured = rollback_handover("restore", HANDOVER, NewVersionProgress(HANDOVER, 0, k(p0=11, p1=20)),
                                 checkpoint="old-cp")
    assert honoured.new_started_at_handover is True and "did not start" not in "\n".join(honoured.describe())
    assert rollback_handover("restore", HANDOVER, NewVersionProgress(), checkpoint="x").new_started_at_handover is None


def test_round_trip_and_unknown_mode() -> None:
    result = rollback_handover("forward", HANDOVER, NewVersionProgress(k(p0=10, p1=20), 3, k(p0=30, p1=25), 4,
                                                                       k(p0=31, p1=26)), checkpoint="cp.rollback")
    assert RollbackHandover.from_dict(result.to_dict()) == result
    with pytest.raises(ValueError, match="sideways"):
        rollback_handover("sideways", HANDOVER, NewVersionProgress(), checkpoint="cp")


# -- the rollback step, on written checkpoints ----------------------------------------------------------


def step(new: str, old: str, mode: str = "restore", handover: str | None = None) -> RollbackHandoverOperator:
    return RollbackHandoverOperator(task_id="rollback_handover", checkpoint_uri=new, old_checkpoint_uri=old,
                                    handover=handover, rollback_mode=mode, rollback_checkpoint_uri=new + ".rollback")


def test_the_step_reads_the_new_checkpoint_after_the_stop(tmp_path: Path) -> None:
    # v1 never committed: its handover is its initial offsets, 0..3, where v2 started (its sources/0/0)
    old = write_checkpoint(str(tmp_path / "old"), batches=[])
    new = write_checkpoint(str(tmp_path / "new"), batches=range(3), committed=range(2))  # batch 2 planned only

    restore = step(new.uri, old.uri).execute(context={})
    assert restore["new_committed_batch"] == 1 and restore["new_planned_batch"] == 2
    assert restore["new_started_at_handover"] is True
    assert [tuple(p["again_committed"]) for p in restore["partitions"]] == [(p, 200 + p) for p in range(4)]
    assert [tuple(p["again_planned"]) for p in restore["partitions"]] == [(200 + p, 300 + p) for p in range(4)]
    assert (restore["again_committed"], restore["again_planned"]) == (800, 400)
    assert restore["checkpoint"] == old.uri and restore["starting_offsets"] == ""

    forward = step(new.uri, old.uri, "forward").execute(context={})
    assert forward["checkpoint"] == new.uri + ".rollback"
    assert KafkaOffsets.from_json(forward["starting_offsets"]) == new.kafka(1)  # v2's last committed batch
    assert (forward["again_committed"], forward["again_planned"]) == (0, 400)


def test_the_step_prefers_the_handover_step_result_and_copes_with_a_query_that_never_started(tmp_path: Path) -> None:
    from airflow_ckpt_provider.checkpoint.handover import HandoverResult
    from airflow_ckpt_provider.storage import CheckpointReader

    old = write_checkpoint(str(tmp_path / "old"), batches=range(2))
    given = HandoverResult(CheckpointReader(old.uri).handover()).to_json()
    standby_only = tmp_path / "new"
    (standby_only / "_ckpt").mkdir(parents=True)  # a standby that never started its query
    result = step(str(standby_only), str(tmp_path / "gone"), "forward", handover=given).execute(context={})
    assert result["new_started_at_handover"] is None and result["again_committed"] == 0
    assert KafkaOffsets.from_json(result["starting_offsets"]) == old.kafka(1)  # the original handover


def test_a_restore_goes_on_when_the_new_checkpoint_is_unreadable_a_forward_does_not(tmp_path: Path) -> None:
    from airflow_ckpt_provider.checkpoint.errors import CorruptCheckpointFile

    old = write_checkpoint(str(tmp_path / "old"), batches=range(2))
    new = write_checkpoint(str(tmp_path / "new"), batches=range(2))
    new.write("offsets/1", b"v1\n{}\nnot json")
    restore = step(new.uri, old.uri).execute(context={})
    assert restore["mode"] == "restore" and "offsets/1" in restore["error"]
    assert rollback_result(restore) == RollbackHandoverUnread(checkpoint=old.uri, error=restore["error"])
    with pytest.raises(CorruptCheckpointFile):
        step(new.uri, old.uri, "forward").execute(context={})


# -- the preflight refuses a forward rollback it cannot honour --------------------------------------------


class FakeKafkaHook:
    def __init__(self, view: BrokerView) -> None:
        self.view = view

    def broker_view(self, topics: Any) -> BrokerView:  # noqa: ANN401
        return self.view


def preflight(tmp_path: Path, old: str, **kwargs: Any) -> dict[str, Any]:  # noqa: ANN401
    from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator

    op = UpgradePreflightOperator(task_id="preflight", sink={"kind": "foreach_batch"}, stream_name="orders", old_checkpoint_uri=old,
                                  new_checkpoint_uri=str(tmp_path / "new"), archive_root=str(tmp_path / "archive"),
                                  journal=False, **kwargs)
    op.kafka_hook = FakeKafkaHook(BrokerView({"events": {p: (0, 1000) for p in range(4)}}))  # type: ignore[assignment]
    return op.execute(context={})  # type: ignore[arg-type]


def test_preflight_refuses_a_forward_rollback_of_a_stateful_query(tmp_path: Path) -> None:
    old = write_checkpoint(str(tmp_path / "old"), state_operators=[0])
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(ForwardRollbackRefused) as caught:
        preflight(tmp_path, old.uri, rollback_mode="forward", rollback_checkpoint_uri=str(tmp_path / "rb"))
    assert "stateful operator(s) 0" in caught.value.found and "'restore'" in caught.value.action
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before, "nothing changed"
    assert "restarts on its old checkpoint" in preflight(tmp_path, old.uri)["summary_md"]  # restore: fine


@pytest.mark.parametrize("where", ["not empty", "the new checkpoint", "the old checkpoint", "default, not empty"])
def test_preflight_refuses_a_rollback_checkpoint_that_is_not_fresh(tmp_path: Path, where: str) -> None:
    old = write_checkpoint(str(tmp_path / "old"))
    target = {"not empty": str(tmp_path / "rb"), "the new checkpoint": str(tmp_path / "new"),
              "the old checkpoint": old.uri, "default, not empty": ""}[where]
    if where == "not empty":
        (tmp_path / "rb" / "offsets").mkdir(parents=True)
    if where == "default, not empty":  # no location given: <new checkpoint>.rollback, checked the same
        (tmp_path / "new.rollback" / "offsets").mkdir(parents=True)
    with pytest.raises(ForwardRollbackRefused, match="rollback"):
        preflight(tmp_path, old.uri, rollback_mode="forward", rollback_checkpoint_uri=target)


def test_preflight_accepts_a_forward_rollback_of_a_stateless_query(tmp_path: Path) -> None:
    old = write_checkpoint(str(tmp_path / "old"))
    summary = preflight(tmp_path, old.uri, rollback_mode="forward",
                        rollback_checkpoint_uri=str(tmp_path / "rb"))["summary_md"]
    assert "**forward**" in summary and str(tmp_path / "rb") in summary
    found = preflight(tmp_path, old.uri, rollback_mode="forward")  # none given: beside the new checkpoint
    assert f"`{tmp_path / 'new.rollback'}`" in found["summary_md"]
    assert found["rollback_checkpoint"] == str(tmp_path / "new.rollback")


def test_the_report_lists_the_offsets_processed_twice() -> None:
    result = rollback_handover("restore", HANDOVER, NewVersionProgress(k(p0=15, p1=20), 1, k(p0=40, p1=30)),
                               checkpoint="old-cp")
    report = UpgradeReport(stream="orders", outcome="rolled back", rollback=result.to_dict())
    assert UpgradeReport.from_json(report.to_json()) == report
    assert report.to_dict()["rollback"]["again_committed"] == 35
    text = report.to_markdown()
    assert "## Rollback: offsets the old version processes a second time" in text
    assert "| t | 0 | 10 | 10 | 15 | [15, 40): 25 | 0 |" in text
    assert "| processed twice by the old version | 35 committed by the new version, 0 of its uncommitted batch |" \
        in text


def test_reader_reads_the_offsets_of_any_planned_batch(tmp_path: Path) -> None:
    from airflow_ckpt_provider.checkpoint.errors import CheckpointNotFound
    from airflow_ckpt_provider.storage import CheckpointReader

    built = write_checkpoint(str(tmp_path / "ck"), batches=range(3), committed=range(2))
    reader = CheckpointReader(built.uri)
    assert reader.batch_sources(2)[0].kafka == built.kafka(2)  # planned, not committed
    with pytest.raises(CheckpointNotFound, match="offsets/7"):
        reader.batch_sources(7)


def test_a_forward_rollbacks_checkpoint_is_the_given_one_or_beside_the_new_one() -> None:
    from airflow_ckpt_provider.checkpoint.rollback import forward_checkpoint

    assert forward_checkpoint("s3://b/ckpt/orders-v2/") == "s3://b/ckpt/orders-v2.rollback"
    assert forward_checkpoint("s3://b/ckpt/orders-v2", " s3://b/ckpt/rb ") == "s3://b/ckpt/rb"
