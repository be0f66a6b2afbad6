"""The step table as the upgrade's typed schema: every row bound to an operator class that serves its
kind and to a factory, one row per step of each DAG, each step's recorded result decoded through its
row's type (a wrong one refused), and the timeouts the rows give."""

from __future__ import annotations

import importlib
import json
from dataclasses import replace
from pathlib import Path as FsPath
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult, UnknownStepKind
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.upgrade.record import DONE, FAILED, JournalRecord, JournalStep, UpgradeIntent
from airflow_ckpt_provider.upgrade.steps import KINDS, PLANNING, Path, all_steps
from airflow_ckpt_provider.upgrade.table import REPORT, TABLE, StepRow, Timeout, noted, recorded, row_of, rows
from tests.unit.step_results import NOTES, RESULTS, switchover
from tests.unit.test_launch_operators import local_handle


def resolve(dotted: str) -> Any:  # noqa: ANN401 - a class or a function
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("row", TABLE, ids=lambda row: f"{row.kind}-{row.operator.rpartition(':')[2]}")
def test_every_row_names_an_operator_that_serves_its_kind_and_a_factory(row: StepRow) -> None:
    operator = resolve(row.operator)
    assert callable(resolve(row.factory))
    if row.kind not in (*PLANNING, REPORT):
        assert row.kind in operator.STEP_KINDS, f"{operator.__name__} does not serve {row.kind}"
    fields = operator.template_fields
    assert set(row.inputs) <= set(fields), f"{row.kind}: record inputs are template fields only"


@pytest.mark.parametrize("path", [Path.STANDBY, Path.COLD, Path.SWITCHOVER])
def test_each_dag_takes_one_row_per_step_and_the_report(path: Path) -> None:
    chosen = rows(path)
    assert [row.kind for row in chosen] == [*all_steps(path), REPORT]
    relaunch = [row.operator for row in chosen if row.kind == "relaunch"]
    assert relaunch == {Path.STANDBY: ["airflow_ckpt_provider.operators.launch:StandbyReleaseOperator"],
                        Path.COLD: ["airflow_ckpt_provider.operators.launch:StreamLaunchOperator"],
                        Path.SWITCHOVER: []}[path]
    assert {row.kind for row in TABLE} == {*KINDS, REPORT}


def test_the_in_place_path_is_built_by_the_migrations_factories() -> None:
    """No copied operator: each in-place step's row names the factory of its migration twin."""
    for in_place, migration in (("in_place_stop", "graceful_stop"), ("in_place_handover", "extract_handover"),
                                ("in_place_archive", "archive"), ("in_place_verify", "verify"),
                                ("in_place_rollback_stop", "rollback_stop_new"),
                                ("in_place_rollback_restart", "rollback_restart_old")):
        assert row_of(in_place).factory == row_of(migration).factory
        assert row_of(in_place).operator == row_of(migration).operator
        assert row_of(in_place).in_place and not row_of(migration).in_place


@pytest.mark.parametrize("path", [Path.STANDBY, Path.COLD, Path.SWITCHOVER])
def test_every_row_of_every_path_has_a_result_type_and_a_notes_type(path: Path) -> None:
    for row in rows(path):
        assert callable(row.result), f"{row.kind}: no result type"
        assert callable(row.notes), f"{row.kind}: no notes type"
    with pytest.raises(ValueError, match="no result type"):
        StepRow("verify", "m:C", "m:f")


@pytest.mark.parametrize("row", TABLE, ids=lambda row: f"{row.kind}-{row.operator.rpartition(':')[2]}")
def test_each_row_decodes_what_its_operator_records_and_notes(row: StepRow) -> None:
    """Each result its step returns (built by the step's own result type), through the JSON the journal
    keeps, decodes to the same value; each set of notes its operator writes decodes, and writes back as noted."""
    for value in RESULTS[row.kind]:
        kept = json.loads(json.dumps(value.to_dict()))
        assert row.result(kept) == value, row.kind
    for notes in NOTES[row.kind]:
        decoded = row.notes(json.loads(json.dumps(notes)))
        assert decoded.to_dict() == notes, row.kind  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", [k for k in KINDS if NOTES[k] != [{}]])
def test_notes_a_step_does_not_write_are_refused(kind: str) -> None:
    written = {**NOTES[kind][0], "surprise": 1}
    with pytest.raises(InvalidStepResult, match=f"found the notes {kind} recorded"):
        noted(journal_with(kind, None, state=FAILED, notes=written), kind)
    assert noted(journal_with(kind, None, state=FAILED, notes=NOTES[kind][0]), kind) is not None
    assert noted(journal_with("verify", {}, state=FAILED), kind) is None, "no record of the step: no notes"


def test_rows_refuse_what_the_table_cannot_hold() -> None:
    with pytest.raises(ValueError, match="not a kind of the step table"):
        StepRow("launch", "m:C", "m:f")
    with pytest.raises(ValueError, match="is not 'module:name'"):
        StepRow("verify", "m.C", "m:f")
    with pytest.raises(ValueError, match="waits among"):
        Timeout(60.0, ("forever",))
    with pytest.raises(UnknownStepKind):
        row_of("launch")
    assert Timeout(600.0, ("stop_timeout", "progress_window_s")).seconds(
        {"stop_timeout": 300.0, "progress_window_s": 20.0}) == 920.0
    assert row_of("rollback_stop_new").phase == "rollback" and row_of("graceful_stop").phase == "upgrade"


def journal_with(name: str, result: Any, state: str = DONE, kind: str = "",  # noqa: ANN401
                 notes: dict[str, Any] | None = None) -> JournalRecord:
    record = JournalRecord(upgrade_id="u", intent=UpgradeIntent("s", "/c/old", "/c/new"),
                           created_at="2026-01-01T00:00:00+00:00")
    return replace(record, steps={name: JournalStep(name=name, state=state, result=result, kind=kind,
                                                    notes=notes or {})})


def test_a_recorded_result_is_read_as_its_rows_type(tmp_path: FsPath) -> None:
    handle = local_handle(4242, tmp_path / "log", "/c/new")
    typed = recorded(journal_with("relaunch", handle.to_dict()), "relaunch")
    assert isinstance(typed, LaunchHandle) and typed == handle
    # under another task id, by its kind
    assert recorded(journal_with("start_v2", handle.to_dict(), kind="relaunch"), "relaunch") == handle
    assert recorded(journal_with("relaunch", handle.to_dict(), state=FAILED), "relaunch") is None
    assert recorded(None, "relaunch") is None
    assert recorded(journal_with("relaunch", handle.to_dict()), "relaunch", as_type=LaunchHandle) == handle
    with pytest.raises(InvalidStepResult, match="read as LaunchHandle"):
        recorded(journal_with("relaunch", handle.to_dict()), "relaunch", as_type=StopResult)


@pytest.mark.parametrize(("kind", "result"), [("relaunch", {"pid": 1}), ("graceful_stop", {"outcome": 3}),
                                              ("verify", ["not", "an", "object"]),
                                              ("extract_handover", {"handover": {}, "unknown": 1}),
                                              ("archive", {"location": 7}), ("archive", {"path": "/a"}),
                                              ("rollback_restore", {"file_count": 3, "restored_to": "/c"}),
                                              ("export_state", "/lake/state"),
                                              ("switchover", {**switchover().to_dict(), "used": {"state_path": 1}})])
def test_a_recorded_result_that_is_not_its_rows_type_is_refused(kind: str, result: Any) -> None:  # noqa: ANN401
    with pytest.raises(InvalidStepResult, match=f"found the result {kind} recorded"):
        recorded(journal_with(kind, result), kind)
