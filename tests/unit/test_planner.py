"""The planner as decision tables over the journal's record: every step of every path in every
recorded state (not run, started, done, failed), the rollback it calls for in each mode, the
outcome, the approval, and the three wiring faults of the reference DAG's branch-and-state days
as cases. These replace the edge-by-edge reading of Airflow's task states."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import PathNotRecorded, UnknownStepKind
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode, RollbackPlan
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade import planner
from airflow_ckpt_provider.upgrade.planner import StepStatus
from airflow_ckpt_provider.upgrade.record import (
    DONE,
    FAILED,
    FINAL_OUTCOMES,
    STARTED,
    JournalRecord,
    JournalStep,
    UpgradeIntent,
)
from airflow_ckpt_provider.upgrade.steps import (
    IN_PLACE_ROLLBACK,
    KINDS,
    PATHS,
    PLANNING,
    ROLLBACK,
    Path,
    PathSteps,
    all_steps,
)
from airflow_ckpt_provider.upgrade.table import handle_of, handover_of, recorded, stop_of
from tests.unit.step_results import handle, handover, path_choice, stop, switchover

INTENT = UpgradeIntent(stream_name="s", old_checkpoint="/c/old", new_checkpoint="/c/new")


def record(steps: Mapping[str, str] | None = None, planning: Mapping[str, Any] | None = None) -> JournalRecord:
    """A journal record with ``steps`` (name -> journal state) and ``planning`` (name -> result)."""
    return JournalRecord(
        upgrade_id="u", intent=INTENT, created_at="2026-01-01T00:00:00+00:00",
        steps={n: JournalStep(name=n, state=s, started_at="2026-01-01T00:00:01+00:00",
                              finished_at="" if s == STARTED else "2026-01-01T00:00:03.5+00:00",
                              error="boom" if s == FAILED else "") for n, s in (steps or {}).items()},
        planning={n: JournalStep(name=n, state=DONE, result=r, started_at="2026-01-01T00:00:00+00:00",
                                 finished_at="2026-01-01T00:00:00.5+00:00") for n, r in (planning or {}).items()})


def run_up_to(path: PathSteps, step: str, state: str | None) -> JournalRecord:
    """The record of a run that did every step before ``step``, then left ``step`` in ``state``
    (None: it never began) and ran nothing after it."""
    before = path.steps[:path.steps.index(step)]
    steps = {s: DONE for s in before}
    if state is not None:
        steps[step] = state
    return record(steps)


#: path -> step -> (stop the new version, restart the old one) when the run ends AT that step
#: (the step failed, was interrupted, or never began after every earlier step was done).
EXPECTED: dict[Path, dict[str, tuple[bool, bool]]] = {
    Path.STANDBY: {"start_standby": (False, False), "graceful_stop": (True, False),
                   "extract_handover": (True, True), "export_state": (True, True), "relaunch": (True, True),
                   "verify": (True, True), "archive": (False, False)},
    Path.COLD: {"graceful_stop": (False, False), "extract_handover": (True, True), "export_state": (True, True),
                "archive": (True, True), "relaunch": (True, True), "verify": (True, True)},
    # the switchover is the stop: a failed one restarts the old version only when it noted that the old
    # query acknowledged its stop request (see test_a_failed_switchover_restarts_the_old_version_only_if_it_stopped)
    Path.SWITCHOVER: {"start_standby": (False, False), "switchover": (True, False), "verify": (True, True),
                      "archive": (False, False)},
    Path.IN_PLACE: {"in_place_stop": (False, False), "in_place_handover": (True, True),
                    "in_place_archive": (True, True), "in_place_restart": (True, True),
                    "in_place_verify": (True, True)},
}
#: A standby that began its start and then failed is stopped all the same (it may be up).
STARTED_ITSELF = {(Path.STANDBY, "start_standby"): (True, False), (Path.SWITCHOVER, "start_standby"): (True, False)}
CASES = [(path, step, state) for path, table in EXPECTED.items() for step in table for state in (None, STARTED, FAILED)]


@pytest.mark.parametrize(("path", "step", "state"), CASES, ids=lambda v: str(v) if v is not None else "not-run")
@pytest.mark.parametrize("mode", list(RollbackMode))
def test_rollback_for_every_step_in_every_unfinished_state(path: Path, step: str, state: str | None,
                                                           mode: RollbackMode) -> None:
    steps = PATHS[path]
    stop_new, restart_old = EXPECTED[path][step]
    if state is not None:
        stop_new, restart_old = STARTED_ITSELF.get((path, step), (stop_new, restart_old))
    plan = planner.rollback_plan(run_up_to(steps, step, state), steps, mode)
    assert plan == RollbackPlan(stop_new=stop_new, restart_old=restart_old, mode=mode)
    assert plan.restore is (restart_old and mode is RollbackMode.RESTORE)
    assert plan.forward is (restart_old and mode is RollbackMode.FORWARD)
    # nothing restarted yet: a needed rollback that restarted nothing leaves no version running
    expected = "rollback failed" if restart_old else "failed"
    assert planner.outcome(run_up_to(steps, step, state), steps) == expected


@pytest.mark.parametrize("path", list(Path))
def test_every_step_done_is_upgraded_and_rolls_nothing_back(path: Path) -> None:
    steps = PATHS[path]
    done = record({s: DONE for s in steps.steps})
    assert planner.outcome(done, steps) == "upgraded"
    assert planner.rollback_plan(done, steps) == RollbackPlan(stop_new=False, restart_old=False)


@pytest.mark.parametrize(("restarts", "expected"), [
    ({"rollback_restart_old": DONE}, "rolled back"),
    ({"rollback_restart_forward": DONE}, "rolled back"),
    ({"rollback_restart_old": FAILED}, "rollback failed"),
    ({"rollback_restart_old": STARTED}, "rollback failed"),  # killed mid-restart and never retried
    ({"rollback_restore": FAILED}, "rollback failed"),  # the restart never began
    ({"rollback_stop_new": FAILED}, "rollback failed"),
    ({}, "rollback failed"),
])
def test_outcome_after_a_rollback(restarts: dict[str, str], expected: str) -> None:
    steps = PATHS[Path.COLD]
    rec = record({"graceful_stop": DONE, "extract_handover": DONE, "export_state": DONE, "archive": DONE,
                  "relaunch": FAILED, "rollback_handover": DONE, **restarts})
    assert planner.outcome(rec, steps) == expected
    assert planner.restart_attempted(rec, steps) is any(k in restarts for k in ("rollback_restore",
                                                                                "rollback_restart_old",
                                                                                "rollback_restart_forward"))


def test_a_step_that_failed_after_recording_done_still_rolls_back() -> None:
    """Airflow failed the relaunch task after its journal said done (its successors never ran):
    the stop is done and the verification is not, so the old version is restarted."""
    rec = record({"graceful_stop": DONE, "extract_handover": DONE, "export_state": DONE, "archive": DONE,
                  "relaunch": DONE})
    assert planner.rollback_plan(rec, PATHS[Path.COLD]) == RollbackPlan(stop_new=True, restart_old=True)


def test_no_journal_is_a_refusal_before_anything() -> None:
    for path in Path:
        assert planner.rollback_plan(None, PATHS[path]) == RollbackPlan(False, False)
        assert planner.outcome(None, PATHS[path]) == "failed"


# -- the approval ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("rec", "require", "ask"), [
    (None, True, True),
    (None, False, False),
    (record(), True, True),
    # an earlier run's answer or path is never reused while nothing began (the journal starts afresh)
    (record(planning={"approve": {"chosen": "Approve"}, "choose_path": path_choice().to_dict()}), True, True),
    (record(planning={"approve": {"chosen": "Reject"}}), True, True),
    # the stop began: approved before it; asking again could not undo it
    (record({"graceful_stop": STARTED}), True, False),
    (record({"start_standby": DONE}), True, False),
])
def test_needs_approval(rec: JournalRecord | None, require: bool, ask: bool) -> None:
    assert planner.needs_approval(rec, require_approval=require) is ask


def test_a_reject_is_the_outcome_and_starts_nothing() -> None:
    """Wiring fault 1 (a Reject that still started the standby): the answer is recorded before
    the approval skips its successors; the plan stops nothing and restarts nothing."""
    rejected = record(planning={"approve": {"chosen": "Reject"}})
    for path in Path:
        assert planner.outcome(rejected, PATHS[path]) == "rejected"
        assert planner.rollback_plan(rejected, PATHS[path]) == RollbackPlan(False, False)
    # had a standby started all the same, it is stopped (and the outcome is not a clean rejection)
    started = record({"start_standby": DONE}, planning={"approve": {"chosen": "Reject"}})
    assert planner.rollback_plan(started, PATHS[Path.STANDBY]).stop_new
    assert planner.outcome(started, PATHS[Path.STANDBY]) == "failed"


def test_a_journaled_choice_does_not_skip_the_next_runs_approval(tmp_path: Any) -> None:  # noqa: ANN401
    """Wiring fault 2: a run that ended before its stop (rejected, or its approval failed) left
    answers in the journal; the next run's preflight starts the journal afresh and asks again."""
    fs = fsspec.filesystem("file")
    journal = UpgradeJournal(fs, str(tmp_path / "_upgrades" / "u.json"))
    journal.open(INTENT, "u", run_id="r1")
    journal.record_planning("choose_path", run_id="r1", result=path_choice(in_place=True).to_dict())
    journal.record_planning("approve", run_id="r1", state=STARTED)
    journal.record_planning("approve", run_id="r1", result={"chosen": "Approve"})
    journal.close("failed", run_id="r1")  # e.g. the stop task was refused before it began
    assert planner.needs_approval(journal.read(), require_approval=True)
    fresh = journal.open(INTENT, "u", run_id="r2")
    assert fresh.planning == {} and fresh.steps == {}
    assert planner.approval_answer(fresh) is None


def test_a_skipped_check_is_no_verdict() -> None:
    """Wiring fault 3 (a skipped check's JSON read as a verdict): the report's verdict of a check
    recorded as skipped is none."""
    from airflow_ckpt_provider.checkpoint.compat import CompatibilityVerdict, TrialKind, TrialResult
    from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult
    from airflow_ckpt_provider.operators.report import _compatibility

    def checked(result: Any) -> object:  # noqa: ANN401 - the check's result as its planning records it
        return recorded(record(planning={"compatibility_check": result}), "compatibility_check")

    assert _compatibility(checked({"skipped": "switched off", "summary_md": ""})) is None
    assert _compatibility(checked({"skipped": "switched off"})) is None
    verdict = CompatibilityVerdict(in_place_ok=True, migrated_ok=None, log_tail="x",
                                   trials=(TrialResult(TrialKind.IN_PLACE, True),))
    shown = _compatibility(checked({**verdict.to_dict(), "summary_md": "# x"}))
    assert shown == {k: v for k, v in verdict.to_dict().items() if k not in ("trials", "log_tail")}
    with pytest.raises(InvalidStepResult, match="found the result compatibility_check recorded"):
        checked({"in_place": "ok", "trials": [1], "log_tail": "x"})


# -- what the report reads ------------------------------------------------------------------------

def test_timings_states_and_errors_come_from_the_record() -> None:
    rec = record({"graceful_stop": DONE, "extract_handover": FAILED, "export_state": STARTED},
                 planning={"approve": {"chosen": "Approve"}})
    rows = {t.name: t for t in planner.timings(rec, ["approve", "graceful_stop", "extract_handover",
                                                     "export_state", "archive"])}
    assert rows["approve"].state == "success" and rows["approve"].seconds == 0.5
    assert rows["graceful_stop"].state == "success" and rows["graceful_stop"].seconds == 2.5
    assert rows["extract_handover"].state == "failed"
    assert rows["export_state"].state == "failed" and rows["export_state"].ended_at is None
    assert rows["archive"].state == "not run" and rows["archive"].started_at is None
    errors = planner.errors(rec, rows)
    assert errors["extract_handover"] == "boom"
    assert errors["export_state"].startswith("interrupted")
    assert set(errors) == {"extract_handover", "export_state"}
    rejected = record(planning={"approve": {"chosen": "Reject"}})
    assert planner.timings(rejected, ["approve"])[0].state == "rejected"


def test_status_and_results() -> None:
    rec = record({"archive": DONE, "verify": STARTED})
    assert planner.status_of(rec, "archive") is StepStatus.DONE
    assert planner.status_of(rec, "verify") is StepStatus.FAILED
    assert planner.status_of(rec, "relaunch") is StepStatus.NOT_RUN
    assert recorded(rec, "verify") is None
    with pytest.raises(ValueError, match="unknown journal state"):
        planner.status_of(record({"archive": "paused"}), "archive")


def test_path_steps_refuse_a_step_outside_the_path() -> None:
    with pytest.raises(ValueError, match="outside its path: verify"):
        PathSteps(steps=("stop", "handover", "archive", "launch"), stop="stop", handover="handover",
                  archive="archive", launch="launch", verify="verify")


# -- what each step does: next_action ------------------------------------------------------------

def planned(path: Path, mode: RollbackMode = RollbackMode.RESTORE, **steps: str) -> JournalRecord:
    """A record whose planning took ``path`` (the preflight's relaunch mode, ``choose_path`` for in
    place) in rollback ``mode``, approved, with ``steps`` (name -> journal state)."""
    relaunch = Path.STANDBY if path is Path.IN_PLACE else path
    return record(steps, planning={
        "preflight": {"resuming": False, "relaunch_mode": relaunch.value, "rollback_mode": mode.value},
        "choose_path": path_choice(in_place=path is Path.IN_PLACE).to_dict(), "approve": {"chosen": "Approve"}})


def acts(rec: JournalRecord | None, steps: tuple[str, ...] | list[str]) -> dict[str, planner.Act]:
    return {step: planner.next_action(rec, step).act for step in steps}


RUN, SKIP, REUSE = planner.Act.RUN, planner.Act.SKIP, planner.Act.REUSE


def test_without_a_journal_a_step_runs() -> None:
    assert planner.next_action(None, "graceful_stop").act is RUN


@pytest.mark.parametrize("rec", [None, record(), planned(Path.COLD),
                                 record(planning={"approve": {"chosen": "Reject"}})],
                         ids=["no journal", "no path", "cold", "rejected"])
@pytest.mark.parametrize("kind", ["my_stop", "", "Graceful_Stop", "rollback", "report"])
def test_a_kind_outside_the_step_table_is_refused(rec: JournalRecord | None, kind: str) -> None:
    """Nothing is planned for a kind the table does not name (it used to run, even after a Reject)."""
    with pytest.raises(UnknownStepKind, match=f"found step kind {kind!r}; expected one of the step table's kinds"):
        planner.next_action(rec, kind)


NO_PATH = [record(), record({"graceful_stop": FAILED}),
           record(planning={"preflight": {"relaunch_mode": ""}, "approve": {"chosen": "Approve"}})]


@pytest.mark.parametrize("rec", NO_PATH, ids=["empty", "a stop failed", "no relaunch mode"])
@pytest.mark.parametrize("step", [s for s in KINDS if s not in PLANNING])
def test_a_record_naming_no_path_refuses_every_step_of_a_path_or_a_rollback(rec: JournalRecord, step: str) -> None:
    """A record without the preflight's modes used to run both the in-place and the migration steps
    ("the DAG's order decides"): no step can be planned from it, so each refuses, naming the step."""
    with pytest.raises(PathNotRecorded, match=f"asked about step {step}; expected the path the preflight"):
        planner.next_action(rec, step)


def test_without_a_path_the_reuse_reject_and_approval_rules_still_decide() -> None:
    """What is decided before the path is read: a done step reuses its result, a Reject skips, an
    unanswered approval skips, a decision runs."""
    assert planner.next_action(record({"graceful_stop": DONE}), "graceful_stop").act is REUSE
    rejected = record(planning={"approve": {"chosen": "Reject"}})
    assert acts(rejected, ["graceful_stop", "in_place_stop", "rollback_stop_new"]) == {
        "graceful_stop": SKIP, "in_place_stop": SKIP, "rollback_stop_new": SKIP}
    waiting = replace(rejected, planning={"approve": JournalStep(name="approve", state=STARTED)})
    assert planner.next_action(waiting, "start_standby").act is SKIP
    assert acts(record(), PLANNING) == {name: RUN for name in PLANNING}


def test_a_step_is_planned_by_its_kind_whatever_task_id_it_ran_under() -> None:
    """Another team's DAG runs the stop as ``stop_orders`` (kind graceful_stop) and the handover as
    ``take_offsets``: the journal keys them by task id, the planner reads them by kind."""
    rec = planned(Path.COLD)
    steps = {"stop_orders": JournalStep(name="stop_orders", state=DONE, kind="graceful_stop", result={"s": 1},
                                        started_at="2026-01-01T00:00:01+00:00"),
             "take_offsets": JournalStep(name="take_offsets", state=FAILED, kind="extract_handover",
                                         started_at="2026-01-01T00:00:02+00:00")}
    rec = replace(rec, steps=steps)
    assert planner.status_of(rec, "graceful_stop") is StepStatus.DONE
    assert planner.status_of(rec, "extract_handover") is StepStatus.FAILED
    assert planner.next_action(rec, "graceful_stop") == planner.NextAction(
        REUSE, "done in run ? at ?: its recorded result is returned, nothing is repeated", {"s": 1})
    assert planner.next_action(rec, "export_state").reason == "extract_handover, before it on the cold path, is failed"
    assert planner.rollback_plan(rec, PATHS[Path.COLD]).restart_old, "the stop under its own task id counts"
    # a Reject skips the reused operator too: it is a step of the table, not "another DAG's task"
    rejected = replace(rec, steps={}, planning={**rec.planning, "approve": JournalStep(
        name="approve", state=DONE, result={"chosen": "Reject"})})
    assert planner.next_action(rejected, "graceful_stop").act is SKIP


def test_a_journal_of_task_ids_that_were_kinds_reads_as_before() -> None:
    """A journal written before kinds were recorded (the reference DAG's task ids are its kinds): its
    entries name no kind and are read by their names."""
    step = JournalStep(name="graceful_stop", state=DONE)
    assert step.kind == "" and step.step_kind == "graceful_stop"
    rec = replace(planned(Path.COLD), steps={"graceful_stop": step})
    assert rec.entry("graceful_stop") is step and rec.entry("extract_handover") is None
    assert JournalRecord.from_json(rec.to_json()).entry("graceful_stop") == step


@pytest.mark.parametrize("path", list(Path))
def test_a_whole_upgrade_runs_its_path_in_order_and_skips_everything_else(path: Path) -> None:
    """Every step of the DAG in the order it runs, each done when it runs: the path's steps run,
    the other path's steps and every rollback step skip themselves."""
    rec = planned(path)
    ran = []
    for step in all_steps(Path.STANDBY if path is Path.IN_PLACE else path):
        if step in PLANNING:
            continue
        decision = planner.next_action(rec, step)
        assert decision.act in (RUN, SKIP), (step, decision)
        if decision.act is RUN:
            ran.append(step)
            rec = replace(rec, steps={**rec.steps, step: JournalStep(name=step, state=DONE, result={"s": step})})
    assert ran == list(PATHS[path].steps)
    # a re-run of the finished upgrade repeats nothing: every step reuses its result
    for step in PATHS[path].steps:
        again = planner.next_action(rec, step)
        assert (again.act, again.result) == (REUSE, {"s": step})


@pytest.mark.parametrize("path", list(Path))
@pytest.mark.parametrize("state", [None, STARTED, FAILED], ids=lambda v: str(v) if v is not None else "not-run")
def test_a_step_runs_only_after_every_earlier_step_of_its_path_is_done(path: Path, state: str | None) -> None:
    steps = PATHS[path].steps
    for index, step in enumerate(steps):
        rec = replace(planned(path), steps=run_up_to(PATHS[path], step, state).steps)
        decision = planner.next_action(rec, step)
        assert decision.act is RUN, (step, decision)  # the step itself, in any unfinished state
        for later in steps[index + 1:]:
            decision = planner.next_action(rec, later)
            assert decision.act is SKIP and f"{step}, before it on the {path.value} path" in decision.reason


@pytest.mark.parametrize(("path", "step", "state"), CASES, ids=lambda v: str(v) if v is not None else "not-run")
@pytest.mark.parametrize("mode", list(RollbackMode))
def test_the_rollback_steps_that_run_after_every_unfinished_step(path: Path, step: str, state: str | None,
                                                                  mode: RollbackMode) -> None:
    """The rollback steps in the DAG's order, each done when it runs: exactly the plan's steps run,
    in the recorded rollback mode (the decision table of the rollback above, step by step)."""
    stop_new, restart_old = EXPECTED[path][step]
    if state is not None:
        stop_new, restart_old = STARTED_ITSELF.get((path, step), (stop_new, restart_old))
    rec = replace(planned(path, mode), steps=run_up_to(PATHS[path], step, state).steps)
    ran = []
    for rollback_step in (*ROLLBACK, *IN_PLACE_ROLLBACK):
        if planner.next_action(rec, rollback_step).act is RUN:
            ran.append(rollback_step)
            rec = replace(rec, steps={**rec.steps, rollback_step: JournalStep(name=rollback_step, state=DONE)})
    if path is Path.IN_PLACE:
        expected = ["in_place_rollback_stop"] * stop_new + ["in_place_rollback_restart"] * restart_old
    else:
        restart = (["rollback_handover", "rollback_restore", "rollback_restart_old"] if mode is RollbackMode.RESTORE
                   else ["rollback_handover", "rollback_restart_forward"])
        expected = ["rollback_stop_new"] * stop_new + restart * restart_old
    assert ran == expected
    assert planner.outcome(rec, PATHS[path]) == ("rolled back" if restart_old else "failed")


def test_a_rollback_step_waits_for_the_one_before_it() -> None:
    rec = planned(Path.COLD, graceful_stop=DONE, extract_handover=FAILED, rollback_stop_new=FAILED)
    decision = planner.next_action(rec, "rollback_handover")
    assert decision.act is SKIP and "rollback_stop_new, before it in the rollback, is failed" in decision.reason
    assert acts(rec, ["rollback_restore", "rollback_restart_old", "rollback_restart_forward"]) == \
        {"rollback_restore": SKIP, "rollback_restart_old": SKIP, "rollback_restart_forward": SKIP}
    assert planner.outcome(rec, PATHS[Path.COLD]) == "rollback failed"


def test_a_verified_upgrade_rolls_nothing_back_when_a_later_step_fails() -> None:
    """The standby path's archive runs after the verification: its failure is retried, never rolled back."""
    steps = {s: DONE for s in PATHS[Path.STANDBY].steps if s != "archive"}
    rec = planned(Path.STANDBY, **steps, archive=FAILED)
    decision = planner.next_action(rec, "rollback_stop_new")
    assert decision.act is SKIP and "the upgrade completed (verified)" in decision.reason
    assert acts(rec, ROLLBACK) == {s: SKIP for s in ROLLBACK}


def test_a_reject_or_an_unanswered_approval_runs_nothing() -> None:
    """Wiring fault 1 as the step decides it: after a Reject no step starts (the standby first)."""
    rejected = record(planning={"preflight": {"relaunch_mode": "standby"}, "approve": {"chosen": "Reject"}})
    for step in (*PATHS[Path.STANDBY].steps, *PATHS[Path.IN_PLACE].steps, *ROLLBACK, *IN_PLACE_ROLLBACK):
        decision = planner.next_action(rejected, step)
        assert decision.act is SKIP and "Reject" in decision.reason, step
    waiting = replace(rejected, planning={**rejected.planning,
                                         "approve": JournalStep(name="approve", state=STARTED)})
    decision = planner.next_action(waiting, "start_standby")
    assert decision.act is SKIP and "without an answer" in decision.reason


def test_the_path_and_modes_come_from_the_planning() -> None:
    assert planner.path_taken(None) is None
    assert planner.path_taken(planned(Path.COLD)) is Path.COLD
    assert planner.path_taken(planned(Path.STANDBY)) is Path.STANDBY
    assert planner.path_taken(planned(Path.IN_PLACE)) is Path.IN_PLACE
    assert planner.path_taken(record(planning={"preflight": {"relaunch_mode": ""}})) is None
    assert planner.recorded_rollback_mode(planned(Path.COLD, RollbackMode.FORWARD)) is RollbackMode.FORWARD
    assert planner.recorded_rollback_mode(record()) is RollbackMode.RESTORE


@pytest.mark.parametrize("outcome", ["upgraded", "rejected", "rolled back"])
def test_once_the_upgrade_ended_nothing_runs_again(outcome: str) -> None:
    """A run of a closed journal (the preflight says "already done") skips every step and every
    rollback step, done or not, saying how and when the upgrade ended."""
    rec = replace(planned(Path.COLD, **{s: DONE for s in PATHS[Path.COLD].steps}), outcome=outcome,
                  closed_at="2026-01-01T00:01:00+00:00", run_log=({"run_id": "run-1", "outcome": outcome},))
    for step in (*PATHS[Path.COLD].steps, *PATHS[Path.IN_PLACE].steps, *ROLLBACK, *IN_PLACE_ROLLBACK):
        decision = planner.next_action(rec, step)
        assert decision.act is SKIP, step
        assert decision.reason.startswith(f"the upgrade ended {outcome} in run run-1 at 2026-01-01T00:01:00")


def test_the_compatibility_check_runs_only_before_the_upgrade_is_under_way() -> None:
    """The decision the reference DAG's template used to make from the preflight's XCom: a new
    upgrade tries its new version, one under way (a step with a side effect began) or ended does not."""
    assert planner.next_action(None, "compatibility_check").act is RUN
    assert planner.next_action(planned(Path.COLD), "compatibility_check").act is RUN
    under_way = planned(Path.COLD, graceful_stop=STARTED)
    decision = planner.next_action(under_way, "compatibility_check")
    assert decision.act is SKIP and decision.reason.startswith("the upgrade is under way (graceful_stop began in run ")
    ended = replace(under_way, outcome="upgraded", closed_at="2026-01-01T00:01:00+00:00")
    assert planner.next_action(ended, "compatibility_check").reason.startswith("the upgrade ended upgraded")


@pytest.mark.parametrize("state", [STARTED, FAILED])
@pytest.mark.parametrize(("noted", "restart_old"), [({planner.OLD_STOPPED_NOTE: True}, True),
                                                    ({planner.OLD_STOPPED_NOTE: False}, False), ({}, False)])
@pytest.mark.parametrize("mode", list(RollbackMode))
def test_a_failed_switchover_restarts_the_old_version_only_if_it_stopped(state: str, noted: dict[str, bool],
                                                                          restart_old: bool,
                                                                          mode: RollbackMode) -> None:
    """The switchover is the stop, the handover and the launch at once: the old version is restarted
    when the step noted that the old query acknowledged its stop, and the standby (the new version)
    is stopped either way."""
    steps = PATHS[Path.SWITCHOVER]
    rec = planned(Path.SWITCHOVER, mode, start_standby=DONE)
    rec = replace(rec, steps={**rec.steps, "switchover": JournalStep(name="switchover", state=state, notes=noted)})
    assert planner.old_stopped(rec, steps) is restart_old
    assert planner.rollback_plan(rec, steps, mode) == RollbackPlan(stop_new=True, restart_old=restart_old, mode=mode)
    ran = []
    for rollback_step in (*ROLLBACK, *IN_PLACE_ROLLBACK):
        if planner.next_action(rec, rollback_step).act is RUN:
            ran.append(rollback_step)
            rec = replace(rec, steps={**rec.steps, rollback_step: JournalStep(name=rollback_step, state=DONE)})
    restart = (["rollback_handover", "rollback_restore", "rollback_restart_old"] if mode is RollbackMode.RESTORE
               else ["rollback_handover", "rollback_restart_forward"])
    assert ran == ["rollback_stop_new"] + restart * restart_old
    assert planner.outcome(rec, steps) == ("rolled back" if restart_old else "failed")


def test_the_switchover_holds_the_stop_the_handover_and_the_handle() -> None:
    steps = PATHS[Path.SWITCHOVER]
    assert steps.stop == steps.handover == steps.launch == steps.switchover == "switchover"
    assert steps.state_export == "export_state" and steps.new == ("start_standby", "switchover")
    assert steps.steps.index("export_state") > steps.steps.index("switchover"), "the export runs after the switch"
    rec = planned(Path.SWITCHOVER)
    assert (stop_of(rec, steps), handover_of(rec, steps), handle_of(rec, "switchover")) == (None, None, None)
    rec = replace(rec, steps={"switchover": JournalStep(name="switchover", state=DONE,
                                                        result=switchover().to_dict())})
    assert (stop_of(rec, steps), handover_of(rec, steps), handle_of(rec, "switchover")) == \
        (stop(), handover(), handle())
    cold = PATHS[Path.COLD]  # the other paths: each step's whole result
    results = {"graceful_stop": stop().to_dict(), "extract_handover": handover(7).to_dict()}
    rec = record({"graceful_stop": DONE, "extract_handover": DONE})
    rec = replace(rec, steps={n: replace(e, result=results[n]) for n, e in rec.steps.items()})
    assert handover_of(rec, cold) == handover(7) and stop_of(rec, cold) == stop()
    assert planner.path_taken(planned(Path.SWITCHOVER)) is Path.SWITCHOVER


def test_a_switchover_step_must_be_the_stop_the_handover_and_the_launch() -> None:
    with pytest.raises(ValueError, match="stop, handover and launch"):
        PathSteps(steps=("a", "b", "c"), stop="a", handover="a", archive="b", launch="b", verify="c", switchover="a")


# -- a refusal before any side effect -------------------------------------------------------------

#: what the compatibility check records when the new version does not start (its whole error: the
#: expectation, the action and the driver's log tail after the first line)
DOES_NOT_START = ("the new version does not start (v2.py): found v2.py fails in its trial: AnalysisException x; "
                  "expected the new version to run its trial batches. Fix the new version.\n"
                  "--- driver log tail ---\nTraceback ...")


def refused_at(step: str, *, error: str = DOES_NOT_START, notes: Mapping[str, Any] | None = None,
               **steps: str) -> JournalRecord:
    """The record of a standby upgrade whose decision ``step`` failed (after the preflight), with ``steps``."""
    rec = record(steps, planning={"preflight": {"resuming": False, "relaunch_mode": "standby",
                                                "rollback_mode": "restore"}})
    failed = JournalStep(name=step, state=FAILED, run_id="run-1", started_at="2026-01-01T00:00:01+00:00",
                         finished_at="2026-01-01T00:00:02+00:00", error=error, notes=dict(notes or {}))
    return replace(rec, planning={**rec.planning, step: failed})


@pytest.mark.parametrize("step", ["compatibility_check", "choose_path"])
def test_a_decision_that_failed_before_any_side_effect_refuses_the_upgrade(step: str) -> None:
    """The outcome is refused (a final one: the report closes the journal and frees the stream),
    nothing is rolled back, every step after it skips itself saying why, the refusing decision is
    ``refused`` in the report, and a retry of the decision itself decides again."""
    noted = "the new version does not start: v2.py fails in its trial: AnalysisException x"
    rec = refused_at(step, notes={planner.REFUSAL_NOTE: noted})
    found = planner.refusal(rec)
    assert found == planner.Refusal(step, noted)
    assert found.describe() == f"{step} refused the upgrade before anything was stopped: {noted}"
    for path in Path:
        assert planner.outcome(rec, PATHS[path]) == "refused"
        assert planner.rollback_plan(rec, PATHS[path]) == RollbackPlan(False, False)
    for name in (*PATHS[Path.STANDBY].steps, *PATHS[Path.IN_PLACE].steps, *ROLLBACK, *IN_PLACE_ROLLBACK):
        decision = planner.next_action(rec, name)
        assert decision.act is SKIP, name
        assert decision.reason == f"{found.describe()}; nothing is stopped or started", name
    assert planner.next_action(rec, step).act is RUN  # Airflow's retry of the decision tries again
    assert {t.name: t.state for t in planner.timings(rec, PLANNING)} == {
        "preflight": "success", "compatibility_check": "refused" if step == "compatibility_check" else "not run",
        "choose_path": "refused" if step == "choose_path" else "not run", "approve": "not run"}
    assert "refused" in FINAL_OUTCOMES


def test_a_refusals_reason_is_its_noted_line_else_its_errors_first_line() -> None:
    assert planner.refusal(refused_at("compatibility_check")) == planner.Refusal(
        "compatibility_check", DOES_NOT_START.splitlines()[0])
    assert planner.refusal(refused_at("choose_path", error="")) == planner.Refusal(
        "choose_path", "its error was not recorded; see its log")
    assert planner.refusal(record(planning={"preflight": {}})) is None  # nothing failed
    assert planner.refusal(None) is None


def test_a_decision_failed_once_a_side_effect_began_is_no_refusal() -> None:
    """A resumed upgrade whose standby began is under way: a failure of its path choice then is a
    failure (the standby is stopped), never a clean refusal that frees the stream."""
    rec = refused_at("choose_path", start_standby=DONE)
    assert planner.refusal(rec) is None
    assert planner.outcome(rec, PATHS[Path.STANDBY]) == "failed"
    assert planner.rollback_plan(rec, PATHS[Path.STANDBY]).stop_new
    # a person's Reject stays the outcome it is
    rejected = replace(refused_at("compatibility_check"), planning={
        **refused_at("compatibility_check").planning,
        "approve": JournalStep(name="approve", state=DONE, result={"chosen": "Reject"})})
    assert planner.outcome(rejected, PATHS[Path.STANDBY]) == "rejected"


def test_a_decisions_failure_notes_why_in_one_line(tmp_path: Any) -> None:  # noqa: ANN401
    """``decided`` records the failure and the reason the planner reads: a typed error's summary and
    what it found (no expectation, action or log tail), another error's type and first line."""
    from airflow_ckpt_provider.checkpoint.errors import NewVersionDoesNotStart
    from airflow_ckpt_provider.operators.journaled import decided, refusal_reason

    journal = UpgradeJournal(fsspec.filesystem("file"), str(tmp_path / "_upgrades" / "u.json"))
    journal.open(INTENT, "u", run_id="r1")

    def crash() -> None:
        raise NewVersionDoesNotStart(found="v2.py fails in its trial: AnalysisException x",
                                     expected="the new version to run its trial batches", log_tail="Traceback ...")

    with pytest.raises(NewVersionDoesNotStart):
        decided(journal, "compatibility_check", {"run_id": "r1"}, crash)  # type: ignore[arg-type]
    entry = journal.read().planning["compatibility_check"]
    assert entry.state == FAILED and "Traceback ..." in entry.error
    assert entry.notes[planner.REFUSAL_NOTE] == \
        "the new version does not start: v2.py fails in its trial: AnalysisException x"
    assert planner.refusal(journal.read()) == planner.Refusal("compatibility_check", entry.notes[planner.REFUSAL_NOTE])
    assert refusal_reason(ValueError("unknown mode 'x'\nmore")) == "ValueError: unknown mode 'x'"
    assert refusal_reason(KeyError()) == "KeyError"


# -- a malformed record is refused, never guessed at ------------------------------------------------

@pytest.mark.parametrize(("planning", "ask", "found"), [
    ({"preflight": {"relaunch_mode": "sideways"}}, lambda rec: planner.next_action(rec, "graceful_stop"),
     "the result preflight recorded"),
    ({"preflight": {"relaunch_mode": "cold", "rollback_mode": "backwards"}},
     lambda rec: planner.recorded_rollback_mode(rec), "the result preflight recorded"),
    ({"preflight": {"relaunch_mode": "cold", "surprise": 1}}, lambda rec: planner.path_taken(rec),
     "the result preflight recorded"),
    ({"choose_path": {"in_place": True}}, lambda rec: planner.path_taken(rec), "the result choose_path recorded"),
    ({"approve": {"chosen": 1}}, lambda rec: planner.rejected(rec), "the result approve recorded"),
    ({"approve": ["Reject"]}, lambda rec: planner.approval_answer(rec), "the result approve recorded"),
])
def test_the_planner_refuses_a_malformed_recorded_result(planning: dict[str, Any], ask: Any, found: str) -> None:  # noqa: ANN401
    from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult

    with pytest.raises(InvalidStepResult) as refused:
        ask(record(planning=planning))
    assert found in refused.value.found and refused.value.expected and "Nothing was changed" in refused.value.action


def test_the_planner_refuses_malformed_notes() -> None:
    from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult

    switchover_path = PATHS[Path.SWITCHOVER]
    failed = JournalStep(name="switchover", state=FAILED, notes={"old_stopped": "yes"})
    with pytest.raises(InvalidStepResult, match="found the notes switchover recorded"):
        planner.old_stopped(replace(planned(Path.SWITCHOVER), steps={"switchover": failed}), switchover_path)
    refused = replace(record(), planning={"compatibility_check": JournalStep(
        name="compatibility_check", state=FAILED, error="boom", notes={"refusal": ["not", "text"]})})
    with pytest.raises(InvalidStepResult, match="found the notes compatibility_check recorded"):
        planner.refusal(refused)
