"""``bench/downtime.py``'s pure parts: the scenario choice, the stateful audit's arithmetic, the
report reading and the summary's ratio lines (the scenarios themselves need the embedded stack
and an ``airflow standalone``: run the bench)."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from airflow_ckpt_provider.checkpoint.history import BatchRecord
from airflow_ckpt_provider.checkpoint.report import StepTiming, UpgradeReport
from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    """``bench/downtime.py`` as a module (its dataclasses need it in sys.modules while it loads)."""
    name = "bench_downtime"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "downtime.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.mark.parametrize(("given", "chosen"), [
    ("bare,switchover", ("bare", "switchover")),
    ("switchover, bare", ("bare", "switchover")),  # in the bench's order, spaces ignored
    ("standby,bare,switchover,cold", ("bare", "cold", "standby", "switchover")),
    ("bare,bare", ("bare",)),
    ("sched-stateful,stateful-bare,sched-standby,bare",
     ("bare", "sched-standby", "stateful-bare", "sched-stateful")),
    ("bare,sched-switchover,switchover-dag", ("bare", "switchover-dag", "sched-switchover")),
])
def test_scenarios_are_read_in_the_bench_order(given: str, chosen: tuple[str, ...]) -> None:
    assert _bench()._scenarios(given) == chosen


@pytest.mark.parametrize(("given", "says"), [
    ("bare,warm", "unknown scenario(s) warm"),
    ("standby,switchover", "include bare"),  # the ratios need the baseline of the same run
    ("bare,sched-stateful", "include stateful-bare"),  # the stateful ratio needs its own baseline
])
def test_scenarios_refused(given: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(says)):
        _bench()._scenarios(given)


def test_the_default_is_every_scenario() -> None:
    bench = _bench()
    assert bench._scenarios(",".join(bench.SCENARIOS)) == bench.SCENARIOS
    assert set(bench.SCHEDULED) <= set(bench.DAG_IDS) and bench.DAG_IDS["sched-stateful"] == bench.SWITCHOVER_DAG_ID


@pytest.mark.parametrize(("switchover_dag", "runs", "missing"), [
    (True, ("bare", "switchover-dag", "sched-standby", "sched-switchover"), ()),
    (False, ("bare", "sched-standby"), ("switchover-dag", "sched-switchover")),
])
def test_the_switchover_dag_scenarios_need_the_dag(switchover_dag: bool, runs: tuple[str, ...],
                                                   missing: tuple[str, ...]) -> None:
    chosen = ("bare", "switchover-dag", "sched-standby", "sched-switchover")
    assert _bench().available(chosen, switchover_dag) == (runs, missing)


@pytest.mark.parametrize(("seen", "lost", "duplicated", "mismatched"), [
    ({1: (30, 3), 2: (7, 1)}, 0, 0, 0),
    ({1: (20, 2), 2: (7, 1)}, 1, 0, 1),  # a purchase of customer 1 missing
    ({1: (40, 4), 2: (7, 1)}, 0, 1, 1),  # one counted twice
    ({1: (30, 3)}, 1, 0, 1),  # customer 2 not in the sink at all
    ({1: (30, 3), 2: (7, 1), 3: (5, 1)}, 0, 1, 1),  # a customer Kafka never had
    ({1: (31, 3), 2: (7, 1)}, 0, 0, 1),  # a wrong total with the right count is still not exact
])
def test_state_sink_audit(seen: dict[int, tuple[int, int]], lost: int, duplicated: int, mismatched: int) -> None:
    audit = _bench().state_sink_audit({1: (30, 3), 2: (7, 1)}, seen)
    assert (audit.produced, audit.customers) == (4, 2)
    assert (audit.lost, audit.duplicated, audit.mismatched) == (lost, duplicated, mismatched)
    assert audit.ok == (mismatched == 0)


def test_a_state_audit_without_customers_is_not_exact() -> None:
    assert not _bench().state_sink_audit({}, {}).ok


def _report(outcome: str) -> dict[str, object]:
    """A report whose downtime runs from the old last commit (t=100) to the new first (t=110)."""
    return UpgradeReport(
        stream="demo-events", outcome=outcome,
        steps=[StepTiming("graceful_stop", "success", 2.0, "1970-01-01T00:01:41+00:00", "1970-01-01T00:01:43+00:00"),
               StepTiming("relaunch", "success", 4.0, "1970-01-01T00:01:44+00:00", "1970-01-01T00:01:48+00:00")],
        old_batches=[BatchRecord(7, None, 100.0, 5)], new_batches=[BatchRecord(0, None, 110.0, 5)],
    ).to_dict()


def test_report_parts_are_the_reports_downtime_by_step() -> None:
    parts = _bench().report_parts(_report("upgraded"), "stream_upgrade", "success")
    assert parts == {"graceful_stop": 2.0, "relaunch": 4.0, "between steps": 2.0, "first batch": 2.0}


def test_report_split_is_the_switchover_path_s_only() -> None:
    bench = _bench()
    assert bench.report_split(_report("upgraded")) == "" and bench.report_split(None) == ""
    split = DowntimeSplit(stop_s=0.4, notice_s=0.2, handover_read_s=0.1, state_wait_s=0.0, query_start_s=0.5,
                          first_batch_s=2.0, downtime_s=2.8).to_dict()  # as the report stores it
    assert bench.report_split({**_report("upgraded"), "switchover": split}) == (
        "downtime 2.8 s: notice 0.2 s, handover read 0.1 s, state wait 0.0 s, query start 0.5 s, first batch 2.0 s "
        "(the old query took 0.4 s to stop)")


@pytest.mark.parametrize(("stored", "says"), [
    (None, "stream_upgrade did not upgrade: run failed, outcome no report"),
    (_report("rolled back"), "stream_upgrade did not upgrade: run failed, outcome rolled back"),
])
def test_report_parts_refuse_a_run_that_did_not_upgrade(stored: dict[str, object] | None, says: str) -> None:
    with pytest.raises(RuntimeError, match=re.escape(says)):
        _bench().report_parts(stored, "stream_upgrade", "failed")


MEDIANS = {"bare": 20.0, "cold": 21.0, "standby": 6.0, "sched-cold": 24.0, "sched-standby": 8.0,
           "sched-switchover": 3.0, "stateful-bare": 25.0, "sched-stateful": 10.0}


def test_ratio_lines_end_with_the_two_headline_ratios_with_the_switchover_dag() -> None:
    chosen = ("bare", "cold", "standby", "sched-cold", "sched-standby", "sched-switchover", "stateful-bare",
              "sched-stateful")
    lines = _bench().ratio_lines(MEDIANS, chosen, switchover_dag=True)
    assert lines == [
        "downtime ratio cold/bare (dag.test): 1.05",
        "downtime ratio classic standby/bare (dag.test): 0.30",
        "downtime ratio cold/bare (real scheduler): 1.20",
        "downtime ratio classic standby/bare (real scheduler): 0.40",
        "downtime ratio switchover/bare (real scheduler): 0.15",
        "standby upgrade path (real scheduler): switchover (stream_upgrade_switchover)",
        "stateful upgrade path: switchover, the state seeded in the standby's session",
        "downtime ratio standby/bare (real scheduler): 0.15",
        "downtime ratio stateful standby/bare (real scheduler): 0.40",
    ]


def test_ratio_lines_without_the_switchover_dag_take_the_classic_standby() -> None:
    measured = {"bare": MEDIANS["bare"], "sched-standby": MEDIANS["sched-standby"]}
    lines = _bench().ratio_lines(measured, ("bare", "sched-standby"), switchover_dag=False)
    missing = "not available (no DAG stream_upgrade_switchover in dags/)"
    assert lines == [
        f"downtime ratio switchover/bare (dag.test): {missing}",
        "downtime ratio classic standby/bare (real scheduler): 0.40",
        f"downtime ratio switchover/bare (real scheduler): {missing}",
        "standby upgrade path (real scheduler): classic standby (stream_upgrade; no DAG stream_upgrade_switchover "
        "in dags/)",
        "stateful upgrade path: none (no DAG stream_upgrade_switchover in dags/)",
        "downtime ratio standby/bare (real scheduler): 0.40",
        f"downtime ratio stateful standby/bare (real scheduler): {missing}",
    ]


def test_ratios_need_both_medians() -> None:
    bench = _bench()
    assert bench.ratio({"bare": 20.0}, "sched-standby") is None
    assert bench.ratio({"sched-stateful": 5.0}, "sched-stateful", "stateful-bare") is None
    assert bench.ratio({"bare": 20.0, "sched-standby": 5.0}, "sched-standby") == 0.25


def test_medians_skip_runs_without_a_downtime() -> None:
    bench = _bench()
    runs = [bench.Run("bare", 0, 10.0), bench.Run("bare", 1, 14.0), bench.Run("bare", 2, 30.0),
            bench.Run("sched-standby", 0, None, problem="RuntimeError: did not upgrade")]
    assert bench.medians(runs) == {"bare": 14.0}


def test_outcome_names_inexact_audits_and_failed_runs_apart() -> None:
    bench = _bench()
    exact = bench.state_sink_audit({1: (30, 3)}, {1: (30, 3)})
    lost = bench.state_sink_audit({1: (30, 3)}, {1: (20, 2)})
    assert bench.outcome([bench.Run("bare", 0, 10.0, audit=exact)]) == "every sink audit exact"
    assert bench.outcome([bench.Run("bare", 0, 10.0, audit=exact),
                          bench.Run("switchover", 0, None, problem="SwitchoverUnsupported: ...")]) == \
        "every sink audit made was exact; FAILED: switchover (round 0)"
    assert bench.outcome([bench.Run("bare", 0, 10.0, audit=lost)]) == "sink audit NOT exact: bare (round 0)"
