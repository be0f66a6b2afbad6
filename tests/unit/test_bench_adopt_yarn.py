"""``bench/adopt_yarn.py``'s pure parts: the legs' order, the kill's time from the ResourceManager's
answer, the first commit after a moment, where each leg's time went, the per-round ratios and the
summary's verdict (the legs themselves need HDFS, YARN, Kafka and Airflow: run the bench)."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = Path(__file__).parent / "cluster_recordings" / "yarn" / "real-3.4.1"


def _bench() -> ModuleType:
    """``bench/adopt_yarn.py`` as a module (its dataclass needs it in sys.modules while it loads)."""
    name = "bench_adopt_yarn"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "adopt_yarn.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.mark.parametrize(("round_", "first"), [(0, "bare"), (1, "adoption"), (2, "bare"), (3, "adoption")])
def test_the_legs_alternate_which_goes_first(round_: int, first: str) -> None:
    legs = _bench().order(round_)
    assert legs[0] == first and sorted(legs) == ["adoption", "bare"]


def test_the_kill_time_is_the_resource_managers_finish_time_of_a_killed_application() -> None:
    app = json.loads((RECORDINGS / "app-killed.json").read_text())["app"]  # a real ResourceManager's answer
    assert _bench().killed_at(app) == app["finishedTime"] / 1000


@pytest.mark.parametrize("app", [
    json.loads((RECORDINGS / "app-running.json").read_text())["app"],  # not killed: finishedTime 0
    {"id": "application_1_0001", "state": "KILLED", "finishedTime": 0},
    {"id": "application_1_0001", "state": "KILLED"},
    {"id": "application_1_0001", "state": "FINISHED", "finishedTime": 1_700_000_000_000},
    {"id": "application_1_0001", "state": "KILLED", "finishedTime": "1700000000000"},
])
def test_an_application_not_killed_has_no_kill_time(app: dict[str, object]) -> None:
    with pytest.raises(RuntimeError, match=re.escape("expected state 'KILLED' with a finishedTime")):
        _bench().killed_at(app)


@pytest.mark.parametrize(("commits", "not_before", "first"), [
    ({3: 100.0, 4: 105.0, 5: 112.0}, 104.0, 105.0),
    ({3: 100.0, 4: 105.0}, 105.0, 105.0),  # at the moment counts
    ({5: 112.0, 4: 108.0}, 104.0, 108.0),  # the earliest by time, whatever the batch order
    ({3: 100.0, 4: 103.9}, 104.0, None),  # only commits before it: none yet
    ({}, 0.0, None),
])
def test_the_first_commit_after_a_moment(commits: dict[int, float], not_before: float, first: float | None) -> None:
    assert _bench().first_commit_at(commits, not_before) == first


def test_where_a_bare_restart_went_adds_up_from_the_kill_to_the_first_commit() -> None:
    parts = _bench().bare_parts(requested=99.5, killed=100.0, resubmitted=100.25, submitted=104.0, first_commit=130.0)
    assert list(parts.values()) == [0.5, 0.25, 3.75, 26.0]
    assert sum(list(parts.values())[1:]) == 30.0  # the downtime: KILLED -> first commit


def test_where_an_adoption_went_and_what_the_journal_did_not_say() -> None:
    bench = _bench()
    assert list(bench.adoption_parts(90.0, 108.0, 100.0, 112.5).values()) == [10.0, 8.0, 4.5]
    assert list(bench.adoption_parts(None, None, 100.0, 112.5).values()) == [None, None, None]


def leg(name: str, round_: int, downtime: float | None, problem: str = "") -> object:
    return _bench().Leg(name, round_, downtime_s=downtime, problem=problem)


def test_the_ratio_of_each_round_is_its_adoption_over_its_bare_restart() -> None:
    legs = [leg("bare", 0, 40.0), leg("adoption", 0, 20.0), leg("adoption", 1, 30.0), leg("bare", 1, 20.0)]
    assert _bench().round_ratios(legs) == {0: 0.5, 1: 1.5}


def test_a_round_missing_a_leg_has_no_ratio() -> None:
    legs = [leg("bare", 0, 40.0), leg("adoption", 0, None, "TimeoutError: x"), leg("bare", 1, 0.0),
            leg("adoption", 1, 3.0), leg("bare", 2, 10.0), leg("adoption", 2, 5.0)]
    assert _bench().round_ratios(legs) == {2: 0.5}


def test_the_summary_takes_the_median_of_the_rounds_ratios_against_the_target() -> None:
    legs = [leg("bare", 0, 40.0), leg("adoption", 0, 20.0), leg("adoption", 1, 30.0), leg("bare", 1, 20.0),
            leg("bare", 2, 10.0), leg("adoption", 2, 12.0)]  # ratios 0.5, 1.5, 1.2: median 1.2
    lines, met = _bench().summary(legs, 1.5)
    assert met
    assert lines[:3] == ["round 0 ratio adoption/bare: 0.50", "round 1 ratio adoption/bare: 1.50",
                         "round 2 ratio adoption/bare: 1.20"]
    assert lines[3].startswith("median downtime bare       20.0 s  (bare restart")  # 10, 20, 40
    assert lines[4].startswith("median downtime adoption   20.0 s  (adoption")  # 12, 20, 30
    assert lines[-2] == "target adoption <= 1.5x bare: met"
    assert lines[-1] == "downtime ratio adoption/bare (YARN, median of 3 rounds): 1.20"
    lines, met = _bench().summary(legs, 1.1)
    assert not met and lines[-2] == "target adoption <= 1.1x bare: NOT met"


def test_a_failed_leg_fails_the_run_whatever_the_other_rounds_ratio() -> None:
    legs = [leg("bare", 0, 40.0), leg("adoption", 0, 20.0),
            leg("adoption", 1, None, "RuntimeError: stream_upgrade did not upgrade"), leg("bare", 1, 20.0)]
    lines, met = _bench().summary(legs, 1.5)
    assert not met
    assert lines[1] == "round 1 ratio adoption/bare: -"
    assert lines[-2] == "FAILED: adoption (round 1); target adoption <= 1.5x bare: NOT met"
    assert lines[-1] == "downtime ratio adoption/bare (YARN, median of 1 rounds): 0.50"


def test_nothing_measured_is_not_met() -> None:
    lines, met = _bench().summary([leg("bare", 0, None, "TimeoutError: x")], 1.5)
    assert not met
    assert lines[-2] == "FAILED: bare (round 0); target adoption <= 1.5x bare: not measured"
    assert lines[-1].endswith(": -")


def test_a_legs_lines_show_its_downtime_the_reports_and_where_it_went() -> None:
    bench = _bench()
    adoption = bench.Leg("adoption", 1, downtime_s=12.34, report_downtime_s=13.0,
                         parts={"stop step start -> KILLED": 2.0, "unknown": None})
    assert bench.leg_lines(adoption) == [
        "round 1 adoption downtime 12.3 s (kill -> first commit); the report's downtime_s 13.0 s",
        "     2.0 s  stop step start -> KILLED",
        "       - s  unknown",
    ]
    failed = bench.Leg("bare", 0, problem="TimeoutError: version 1's commit 2: not within 600 s")
    assert bench.leg_lines(failed) == [
        "round 0 bare     downtime - (kill -> first commit); FAILED: TimeoutError: version 1's commit 2: not within 600 s"]
