"""dags/stream_upgrade_example.py stays what other teams copy: short, the operators used alone
(no journal, no branch, no special trigger rule), the handover's typed result passed on as an
XComArg, and params named like the reference DAG's. tests/integration/test_example_dag.py runs it
for real."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

DAGS = Path(__file__).resolve().parents[2] / "dags"
EXAMPLE = DAGS / "stream_upgrade_example.py"
STEPS = ["preflight", "graceful_stop", "extract_handover", "archive", "relaunch", "verify"]


def parsed(path: Path) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(path))
    assert bag.import_errors == {}
    return bag.dags


@pytest.fixture(scope="module")
def example() -> Any:
    return parsed(EXAMPLE)["stream_upgrade_example"]


def test_the_file_is_under_80_lines() -> None:
    assert len(EXAMPLE.read_text(encoding="utf-8").splitlines()) < 80


def test_one_chain_of_the_provider_operators_used_alone(example: Any) -> None:
    from airflow.sdk.definitions.xcom_arg import PlainXComArg

    assert sorted(example.task_ids) == sorted(STEPS)
    for upstream, downstream in zip(STEPS, STEPS[1:], strict=False):
        assert downstream in example.get_task(upstream).downstream_task_ids, (upstream, downstream)
    for task in example.tasks:
        assert task.trigger_rule == "all_success" and not task.journal, task.task_id  # no upgrade journal
        assert task.__module__.startswith("airflow_ckpt_provider.operators."), task.task_id
    for name in ("archive", "relaunch", "verify"):
        given = example.get_task(name).handover
        assert isinstance(given, PlainXComArg) and given.operator.task_id == "extract_handover", name


def test_its_params_are_named_like_the_reference_dags(example: Any) -> None:
    reference = parsed(DAGS / "stream_upgrade.py")["stream_upgrade"]
    assert set(example.params) <= set(reference.params)
