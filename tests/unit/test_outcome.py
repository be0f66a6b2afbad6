"""Rollback and outcome decisions over recorded step states."""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.checkpoint.outcome import RollbackPlan, rollback_plan, should_roll_back, upgrade_outcome

AFTER = ["extract", "archive", "relaunch", "verify"]


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        ({"stop": "success", "extract": "success", "archive": "success", "relaunch": "failed"}, True),
        ({"stop": "success", "extract": "failed"}, True),
        ({"stop": "success", "extract": "success", "archive": "success", "relaunch": "success",
          "verify": "success"}, False),
        ({"stop": "failed"}, False),  # the old job may still run: never restart it
        ({"stop": "not run", "extract": "failed"}, False),  # e.g. preflight refused
        ({"preflight": "failed"}, False),
        ({}, False),
    ],
)
def test_should_roll_back(states: dict[str, str], expected: bool) -> None:
    assert should_roll_back(states, "stop", AFTER) is expected


@pytest.mark.parametrize(
    ("states", "rejected", "expected"),
    [
        ({s: "success" for s in ["stop", *AFTER]}, False, "upgraded"),
        ({"stop": "success", "extract": "success", "archive": "success", "relaunch": "failed",
          "rollback": "success"}, False, "rolled back"),
        ({"stop": "success", "relaunch": "failed", "rollback": "failed"}, False, "rollback failed"),
        ({"stop": "success", "relaunch": "failed", "rollback": "upstream_failed"}, False, "rollback failed"),
        ({"stop": "success", "relaunch": "failed", "rollback": "skipped"}, False, "failed"),
        ({"stop": "failed"}, False, "failed"),
        ({}, True, "rejected"),
    ],
)
def test_upgrade_outcome(states: dict[str, str], rejected: bool, expected: str) -> None:
    assert upgrade_outcome(states, upgrade_steps=["stop", *AFTER], rollback_step="rollback",
                           rejected=rejected) == expected


class FakeTI:
    """XCom as a real run leaves it: key -> value per task."""

    def __init__(self, xcoms: dict[tuple[str, str], object]) -> None:
        self.xcoms = xcoms

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> object:
        return self.xcoms.get((task_ids, key))


@pytest.mark.parametrize(
    ("xcoms", "rejected"),
    [
        # the real task runner on "Reject": only the start the approval recorded before waiting
        ({("approve", "ckpt_step_started"): "t0"}, True),
        ({("approve", "return_value"): {"chosen_options": ["Reject"]}}, True),
        ({("approve", "ckpt_step_started"): "t0", ("approve", "return_value"): {"chosen_options": ["Approve"]},
          ("graceful_stop", "ckpt_step_started"): "t1"}, False),
        ({("graceful_stop", "ckpt_step_started"): "t1"}, False),  # approval switched off or marked successful
        ({}, False),
    ],
)
def test_report_sees_a_rejection(xcoms: dict, rejected: bool) -> None:
    from airflow_ckpt_provider.operators.report import UpgradeReportOperator

    op = UpgradeReportOperator(task_id="report", stream_name="s", old_checkpoint_uri="/a", new_checkpoint_uri="/b",
                               step_task_ids=[], upgrade_task_ids=["graceful_stop"], handover_task_id="h",
                               archive_task_id="a", approval_task_id="approve")
    assert op._rejected(FakeTI(xcoms), {}) is rejected


@pytest.mark.parametrize(
    ("states", "rejected"),
    [
        ({"approve": "success", "graceful_stop": "skipped"}, True),  # "Reject", or no answer
        ({"approve": "failed", "graceful_stop": "upstream_failed"}, False),  # a broken approval fails
        ({"approve": "success", "graceful_stop": "success"}, False),
        ({"approve": "skipped", "graceful_stop": "success"}, False),  # approval switched off
    ],
)
def test_report_reads_a_rejection_from_airflow_states(states: dict[str, str], rejected: bool) -> None:
    from airflow_ckpt_provider.operators.report import UpgradeReportOperator

    op = UpgradeReportOperator(task_id="report", stream_name="s", old_checkpoint_uri="/a", new_checkpoint_uri="/b",
                               step_task_ids=[], upgrade_task_ids=["graceful_stop"], handover_task_id="h",
                               archive_task_id="a", approval_task_id="approve")
    assert op._rejected(FakeTI({("approve", "ckpt_step_started"): "t0"}), states) is rejected


STANDBY_STEPS = dict(stop_step="graceful_stop", after_stop=["extract_handover", "relaunch", "verify"],
                     new_steps=["start_standby", "relaunch"], done_step="verify")
S, F, N = "success", "failed", "not run"


@pytest.mark.parametrize(("states", "stop_new", "restart_old"), [
    # rejected or refused before the standby started: nothing to undo
    ({"start_standby": N, "graceful_stop": N}, False, False),
    # the standby never became ready: stop what may run of it, v1 was never touched
    ({"start_standby": F, "graceful_stop": N}, True, False),
    # the stop failed (v1 may still run): stop the standby only
    ({"start_standby": S, "graceful_stop": F}, True, False),
    # stopped, then the handover failed: stop the standby, restart v1
    ({"start_standby": S, "graceful_stop": S, "extract_handover": F}, True, True),
    # released, verification failed: today's rollback
    ({"start_standby": S, "graceful_stop": S, "extract_handover": S, "relaunch": S, "verify": F}, True, True),
    # verified; the archive failed afterwards: no rollback (v2 already wrote), the run fails and is resumed
    ({"start_standby": S, "graceful_stop": S, "extract_handover": S, "relaunch": S, "verify": S, "archive": F},
     False, False),
    ({"start_standby": S, "graceful_stop": S, "extract_handover": S, "relaunch": S, "verify": S, "archive": S},
     False, False),
])
def test_rollback_plan_of_a_standby_upgrade(states: dict[str, str], stop_new: bool, restart_old: bool) -> None:
    plan = rollback_plan(states, **STANDBY_STEPS)
    assert (plan.stop_new, plan.restart_old) == (stop_new, restart_old)


def test_rollback_plan_of_a_cold_upgrade_is_todays_rule() -> None:
    cold = dict(stop_step="graceful_stop", after_stop=["extract_handover", "archive", "relaunch", "verify"],
                new_steps=["relaunch"], done_step="verify")
    assert rollback_plan({"graceful_stop": F}, **cold) == RollbackPlan(False, False)
    assert rollback_plan({"graceful_stop": S, "archive": F}, **cold) == RollbackPlan(True, True)
    assert rollback_plan({"graceful_stop": S, "archive": S, "relaunch": F}, **cold) == RollbackPlan(True, True)


@pytest.mark.parametrize(("states", "mode", "restore", "forward"), [
    # released, verification failed: the mode chooses how the old version restarts
    ({"start_standby": S, "graceful_stop": S, "extract_handover": S, "relaunch": S, "verify": F}, "restore", True,
     False),
    ({"start_standby": S, "graceful_stop": S, "extract_handover": S, "relaunch": S, "verify": F}, "forward", False,
     True),
    # the stop failed (v1 may still run): neither, in either mode
    ({"start_standby": S, "graceful_stop": F}, "forward", False, False),
    ({"start_standby": S, "graceful_stop": F}, "restore", False, False),
    # verified: no rollback at all
    ({"start_standby": S, "graceful_stop": S, "extract_handover": S, "relaunch": S, "verify": S}, "forward", False,
     False),
])
def test_rollback_plan_mode_chooses_how_the_old_version_restarts(states: dict[str, str], mode: str, restore: bool,
                                                                 forward: bool) -> None:
    plan = rollback_plan(states, **STANDBY_STEPS, mode=mode)
    assert (plan.restore, plan.forward) == (restore, forward)
    assert plan.restart_old == (restore or forward)
    assert plan.stop_new == rollback_plan(states, **STANDBY_STEPS).stop_new, "the mode never changes the stop"


def test_rollback_plan_refuses_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="sideways"):
        rollback_plan({}, **STANDBY_STEPS, mode="sideways")


def test_either_restart_step_makes_the_outcome_rolled_back() -> None:
    steps = ["graceful_stop", "verify"]
    restarts = ["rollback_restart_old", "rollback_restart_forward"]
    base = {"graceful_stop": S, "verify": F}
    assert upgrade_outcome({**base, "rollback_restart_forward": S}, upgrade_steps=steps,
                           rollback_step=restarts) == "rolled back"
    assert upgrade_outcome({**base, "rollback_restart_old": S}, upgrade_steps=steps, rollback_step=restarts) \
        == "rolled back"
    assert upgrade_outcome({**base, "rollback_restart_forward": F}, upgrade_steps=steps,
                           rollback_step=restarts) == "rollback failed"


@pytest.mark.parametrize(("states", "shown"), [
    ({"rollback_restart_old": "success", "rollback_restart_forward": "skipped"}, True),
    ({"rollback_restart_old": "skipped", "rollback_restart_forward": "failed"}, True),
    # the stop failed: only a standby was stopped, the old version never stopped: no rollback section
    ({"rollback_restart_old": "skipped", "rollback_restart_forward": "skipped"}, False),
    ({}, False),
])
def test_report_shows_the_rollback_offsets_only_when_the_old_version_restarted(states: dict[str, str],
                                                                               shown: bool) -> None:
    from airflow_ckpt_provider.operators.report import UpgradeReportOperator

    op = UpgradeReportOperator(task_id="report", stream_name="s", old_checkpoint_uri="/a", new_checkpoint_uri="/b",
                               step_task_ids=[], upgrade_task_ids=["graceful_stop"], handover_task_id="h",
                               archive_task_id="a", rollback_task_id=["rollback_restart_old", "rollback_restart_forward"],
                               rollback_handover_task_id="rollback_handover")
    value = {"mode": "restore", "partitions": []}
    assert op._rollback(FakeTI({("rollback_handover", "return_value"): value}), states) == (value if shown else None)
