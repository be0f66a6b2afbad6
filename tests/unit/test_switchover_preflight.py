"""The preflight of the switchover path refuses, before anything changes, what the standby cannot
honour: it takes its start from the old checkpoint's files alone and carries no state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint import BrokerView
from airflow_ckpt_provider.checkpoint.errors import SwitchoverUnsupported
from tests.unit.conftest import write_checkpoint
from tests.unit.test_rollback import FakeKafkaHook


def preflight(tmp_path: Path, old: str, partitions: int = 4, **kwargs: Any) -> dict[str, Any]:  # noqa: ANN401
    from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator

    op = UpgradePreflightOperator(task_id="preflight", sink={"kind": "foreach_batch"}, stream_name="orders", old_checkpoint_uri=old,
                                  new_checkpoint_uri=str(tmp_path / "new"), archive_root=str(tmp_path / "archive"),
                                  journal=False, relaunch_mode="switchover", **kwargs)
    op.kafka_hook = FakeKafkaHook(  # type: ignore[assignment]
        BrokerView({"events": {p: (0, 1000) for p in range(partitions)}}))
    return op.execute(context={})  # type: ignore[arg-type]


def tree(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*"))


def test_a_stateless_query_may_switch_and_the_approver_reads_how(tmp_path: Path) -> None:
    old = write_checkpoint(str(tmp_path / "old"))
    summary = preflight(tmp_path, old.uri)["summary_md"]
    assert "inside the drivers" in summary and "no Airflow task in between" in summary


@pytest.mark.parametrize(("case", "found"), [
    ("at_time", "start at_time"),
    ("added partition", "partition(s) events-4 added"),
])
def test_what_a_switchover_cannot_honour_is_refused_and_changes_nothing(tmp_path: Path, case: str,
                                                                        found: str) -> None:
    old = write_checkpoint(str(tmp_path / "old"))
    kwargs: dict[str, Any] = {}
    if case == "at_time":
        kwargs = {"start": '{"mode": "at_time", "value": "2026-01-01T00:00:00+00:00"}',
                  "accept_reprocessing": True}
    before = tree(tmp_path)
    with pytest.raises(SwitchoverUnsupported) as refused:
        preflight(tmp_path, old.uri, partitions=5 if case == "added partition" else 4, **kwargs)
    assert found in refused.value.found
    assert "relaunch_mode='standby'" in str(refused.value), "what to do instead"
    assert tree(tmp_path) == before, "nothing changed"


def test_a_stateful_query_switches_with_its_state_seeded_by_the_standby(tmp_path: Path) -> None:
    old = write_checkpoint(str(tmp_path / "old"), state_operators=[0])
    summary = preflight(tmp_path, old.uri)["summary_md"]
    assert "seeded by the standby in its own session" in summary and "compared with the seed" in summary


def test_a_stateful_query_switches_when_its_state_is_not_carried(tmp_path: Path) -> None:
    old = write_checkpoint(str(tmp_path / "old"), state_operators=[0])
    assert "EMPTY state" in preflight(tmp_path, old.uri, carry_state="False")["summary_md"]
