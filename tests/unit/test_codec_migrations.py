"""The decoders moved onto :mod:`airflow_ckpt_provider.records.codec` keep their error types:
decision tables written against the hand-written decoders, plus round trips of what the provider
itself writes. The launch handle accepts and refuses what it did before; the verdict and its trials
are strict now (only the keys their writers write, each of its JSON type), so the leniencies the
hand-written decoders had (coerced texts and counts, unknown keys) are refused rows."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_ckpt_provider.checkpoint.compat import (
    CompatibilityVerdict,
    Rule,
    StatefulOperator,
    TrialKind,
    TrialResult,
)
from airflow_ckpt_provider.checkpoint.errors import InvalidLaunchHandle, InvalidVerdict, JsonTooLarge
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode

DEEP = "[" * 100 + "]" * 100  # beyond the depth limit of every JSON the core reads

TRIAL = TrialResult(TrialKind.IN_PLACE, started=False, batches_committed=2, contract_honoured=True,
                    error_class="STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", error_message="boom", log_tail="tail",
                    operators=(StatefulOperator(0, "StateStoreSaveExec", "keys: user"),), seconds=12.3)
VERDICT = CompatibilityVerdict(in_place_ok=False, migrated_ok=True, rule=Rule.STATE_KEY_SCHEMA, operator="0",
                               old="struct<a>", new="struct<b>", error_class="STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
                               driver_error="err", log_tail="tail", trials=(TRIAL,), state_batch=4, state_rows=10)
HANDLE = LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri="/cp", app_name="v2", started_at="2026-01-01T00:00:00Z",
                      pid=4242, log_path="/tmp/v2.log", launch_id="l1", host="h", boot_id="b", pid_namespace="pid:[1]")


def verdict_with(**changes: Any) -> dict[str, Any]:  # noqa: ANN401
    return {**VERDICT.to_dict(), **changes}


def verdict_without(key: str) -> dict[str, Any]:
    return {k: v for k, v in VERDICT.to_dict().items() if k != key}


def trial_with(**changes: Any) -> dict[str, Any]:  # noqa: ANN401
    return {**TRIAL.to_dict(), **changes}


def handle_with(**changes: Any) -> dict[str, Any]:  # noqa: ANN401
    return {**HANDLE.to_dict(), **changes}


Check = Callable[[Any], bool]


def same(value: object) -> Check:
    return lambda decoded: decoded == value


# -- CompatibilityVerdict.from_json: (input, a check of the value or the error type) ----------------

VERDICT_TABLE: list[tuple[str, Any, Check | type[Exception]]] = [
    ("its JSON", VERDICT.to_json(), same(VERDICT)),
    ("its dict (XCom), derived keys and all", VERDICT.to_dict(), same(VERDICT)),
    ("bytes", VERDICT.to_json().encode(), same(VERDICT)),
    ("a read-only mapping", MappingProxyType(VERDICT.to_dict()), same(VERDICT)),
    ("the check step's summary_md (XCom)", verdict_with(summary_md="# x"), same(VERDICT)),
    ("the minimum", {"in_place_ok": True, "migrated_ok": None},
     same(CompatibilityVerdict(in_place_ok=True, migrated_ok=None))),
    ("no rule", verdict_with(rule=None), lambda v: v.rule is None),
    ("no state", verdict_with(state_batch=None, state_rows=None), lambda v: v.state_batch is v.state_rows is None),
    ("an unknown key", verdict_with(extra=1), InvalidVerdict),
    ("an empty rule", verdict_with(rule=""), InvalidVerdict),
    ("strings from numbers", verdict_with(operator=7, old=1.5), InvalidVerdict),
    ("null strings", verdict_with(operator=None, log_tail=None), InvalidVerdict),
    ("in_place_ok as text", verdict_with(in_place_ok="true"), InvalidVerdict),
    ("a state batch as text", verdict_with(state_batch="3"), InvalidVerdict),
    ("a trial as JSON text", verdict_with(trials=[TRIAL.to_json()]), InvalidVerdict),
    ("trials null", verdict_with(trials=None), InvalidVerdict),
    ("a derived key of another type", verdict_with(headline=5), InvalidVerdict),
    ("format 1, as this release writes it", verdict_with(format=1), same(VERDICT)),
    ("no format number, as the previous release wrote it", verdict_without("format"), same(VERDICT)),
    ("a newer format", verdict_with(format=2), InvalidVerdict),
    ("format 0 written out", verdict_with(format=0), InvalidVerdict),
    ("not JSON", "{nope", InvalidVerdict),
    ("empty text", "", InvalidVerdict),
    ("a JSON array", "[]", InvalidVerdict),
    ("a JSON string", '"x"', InvalidVerdict),
    ("JSON null", "null", InvalidVerdict),
    ("nested past the depth limit", DEEP, JsonTooLarge),
    ("an unknown rule", '{"rule": "nope"}', InvalidVerdict),
    ("an unknown rule with both flags", verdict_with(rule="nope"), InvalidVerdict),
    ("no in_place_ok", verdict_without("in_place_ok"), InvalidVerdict),
    ("no migrated_ok", verdict_without("migrated_ok"), InvalidVerdict),
    ("a state batch that is no number", verdict_with(state_batch="x"), InvalidVerdict),
    ("state rows of a list", verdict_with(state_rows=[1]), InvalidVerdict),
    ("trials not a list of trials", verdict_with(trials=[5]), InvalidVerdict),
    ("a trial of an unknown kind", verdict_with(trials=[trial_with(kind="sideways")]), InvalidVerdict),
    ("a trial nested past the limit", verdict_with(trials=[DEEP]), InvalidVerdict),
    ("a trial that is not JSON", verdict_with(trials=["{"]), InvalidVerdict),
]

# -- TrialResult.from_json ------------------------------------------------------------------------

TRIAL_TABLE: list[tuple[str, Any, Check | type[Exception]]] = [
    ("its JSON", TRIAL.to_json(), same(TRIAL)),
    ("its dict", TRIAL.to_dict(), same(TRIAL)),
    ("an unknown key", trial_with(extra=1), InvalidVerdict),
    ("the minimum", {"kind": "migrated", "started": None}, same(TrialResult(TrialKind.MIGRATED, None))),
    ("no operators recorded", trial_with(operators=None), lambda t: t.operators is None),
    ("no operators", trial_with(operators=[]), lambda t: t.operators == ()),
    ("contract_honoured absent", {"kind": "in_place", "started": True}, lambda t: t.contract_honoured is True),
    ("an operator without detail", trial_with(operators=[{"operator_id": 3, "name": "X"}]),
     lambda t: t.operators == (StatefulOperator(3, "X"),)),
    ("null counts and texts", trial_with(batches_committed=None, error_class=None, seconds=None), InvalidVerdict),
    ("an operator's id as text", trial_with(operators=[{"operator_id": "3", "name": "X"}]), InvalidVerdict),
    ("an operator's unknown key", trial_with(operators=[{"operator_id": 3, "name": "X", "rows": 1}]), InvalidVerdict),
    ("started as text", trial_with(started="yes"), InvalidVerdict),
    ("not JSON", "nope", InvalidVerdict),
    ("a JSON array", "[1]", InvalidVerdict),
    ("nested past the depth limit", DEEP, JsonTooLarge),
    ("no kind", {"started": True}, InvalidVerdict),
    ("an unknown kind", trial_with(kind="sideways"), InvalidVerdict),
    ("no started", {"kind": "in_place"}, InvalidVerdict),
    ("a count that is no number", trial_with(batches_committed="many"), InvalidVerdict),
    ("an operator without an id", trial_with(operators=[{"name": "X"}]), InvalidVerdict),
    ("operators not a list of objects", trial_with(operators=[3]), InvalidVerdict),
]

# -- LaunchHandle.from_json -----------------------------------------------------------------------

HANDLE_TABLE: list[tuple[str, Any, Check | type[Exception]]] = [
    ("its JSON", HANDLE.to_json(), same(HANDLE)),
    ("its dict (XCom)", HANDLE.to_dict(), same(HANDLE)),
    ("bytes", HANDLE.to_json().encode(), same(HANDLE)),
    ("a read-only mapping", MappingProxyType(HANDLE.to_dict()), same(HANDLE)),
    ("the minimum of a local handle", {"mode": "local", "checkpoint_uri": "/cp", "app_name": "a", "started_at": "t",
                                       "pid": 7}, lambda h: h.pid == 7 and h.kind == "local"),
    ("a yarn handle", {"mode": "yarn-cluster", "checkpoint_uri": "/cp", "app_name": "a", "started_at": "t",
                       "application_id": "application_1_2"}, lambda h: h.application_id == "application_1_2"),
    ("a registered job kind", handle_with(mode="k8s-driver"), lambda h: h.kind == "k8s-driver"),
    ("extra values made text", handle_with(extra={"n": 5}), lambda h: h.extra == {"n": "5"}),
    ("a host only in extra (older handles)", handle_with(host="", extra={"host": "w1"}), lambda h: h.host == "w1"),
    ("not JSON", "{nope", InvalidLaunchHandle),
    ("a Python repr", "{'pid': 42}", InvalidLaunchHandle),
    ("a JSON array", "[]", InvalidLaunchHandle),
    ("JSON null", "null", InvalidLaunchHandle),
    ("nested past the depth limit", DEEP, InvalidLaunchHandle),
    ("a number, not a mapping", 5, InvalidLaunchHandle),
    ("an unknown key", handle_with(colour="blue"), InvalidLaunchHandle),
    ("no checkpoint_uri", {k: v for k, v in HANDLE.to_dict().items() if k != "checkpoint_uri"}, InvalidLaunchHandle),
    ("no mode", {k: v for k, v in HANDLE.to_dict().items() if k != "mode"}, InvalidLaunchHandle),
    ("a local handle without a pid", handle_with(pid=None), InvalidLaunchHandle),
    ("pid 1", handle_with(pid=1), InvalidLaunchHandle),
    ("a pid as text", handle_with(pid="4242"), InvalidLaunchHandle),
    ("a pid of true", handle_with(pid=True), InvalidLaunchHandle),
    ("a mode that is no name", handle_with(mode="Not A Kind!"), InvalidLaunchHandle),
    ("extra null", handle_with(extra=None), InvalidLaunchHandle),
    ("extra not a mapping", handle_with(extra=5), InvalidLaunchHandle),
    ("a standalone handle without its master", handle_with(mode="standalone-cluster", driver_id="d"),
     InvalidLaunchHandle),
]


def decide(decoder: Callable[[Any], Any], given: Any, outcome: Check | type[Exception]) -> None:  # noqa: ANN401
    if isinstance(outcome, type):
        with pytest.raises(Exception) as raised:  # noqa: PT011 - the exact type is checked below
            decoder(given)
        assert type(raised.value) is outcome, f"{type(raised.value).__name__}: {raised.value}"
        assert raised.value.found and raised.value.expected  # type: ignore[attr-defined]
    else:
        assert outcome(decoder(given))


@pytest.mark.parametrize(("case", "given", "outcome"), VERDICT_TABLE, ids=[row[0] for row in VERDICT_TABLE])
def test_verdict_decision_table(case: str, given: Any, outcome: Check | type[Exception]) -> None:  # noqa: ANN401
    decide(CompatibilityVerdict.from_json, given, outcome)


@pytest.mark.parametrize(("case", "given", "outcome"), TRIAL_TABLE, ids=[row[0] for row in TRIAL_TABLE])
def test_trial_decision_table(case: str, given: Any, outcome: Check | type[Exception]) -> None:  # noqa: ANN401
    decide(TrialResult.from_json, given, outcome)


@pytest.mark.parametrize(("case", "given", "outcome"), HANDLE_TABLE, ids=[row[0] for row in HANDLE_TABLE])
def test_launch_handle_decision_table(case: str, given: Any, outcome: Check | type[Exception]) -> None:  # noqa: ANN401
    decide(LaunchHandle.from_json, given, outcome)


# -- round trips of what the provider writes -------------------------------------------------------

text = st.text(max_size=30)
operators = st.builds(StatefulOperator, st.integers(0, 10**6), text, text)
trials = st.builds(TrialResult, st.sampled_from(TrialKind), st.sampled_from([True, False, None]),
                   st.integers(0, 10**6), st.booleans(), text, text, text,
                   st.none() | st.lists(operators, max_size=3).map(tuple),
                   st.integers(0, 10**5).map(lambda n: n / 10))
verdicts = st.builds(CompatibilityVerdict, st.sampled_from([True, False, None]), st.sampled_from([True, False, None]),
                     st.none() | st.sampled_from(Rule), text, text, text, text, text, text,
                     st.lists(trials, max_size=2).map(tuple), st.none() | st.integers(0, 10**9),
                     st.none() | st.integers(0, 10**9)).filter(lambda v: v.in_place_ok is not False or v.rule)
ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_:/.", min_size=1, max_size=20)
handles = st.one_of(
    st.builds(LaunchHandle, mode=st.just(LaunchMode.LOCAL), checkpoint_uri=ids, app_name=text, started_at=text,
              pid=st.integers(2, 2**22), launch_id=ids, host=ids, boot_id=ids, pid_namespace=ids,
              log_path=st.none() | ids, ui_url=st.none() | ids),
    st.builds(LaunchHandle, mode=st.just(LaunchMode.YARN_CLUSTER), checkpoint_uri=ids, app_name=text,
              started_at=text, application_id=ids),
    st.builds(LaunchHandle, mode=st.just(LaunchMode.STANDALONE_CLUSTER), checkpoint_uri=ids, app_name=text,
              started_at=text, driver_id=ids, master=st.just("spark://m:7077")),
)


@settings(max_examples=60, deadline=None)
@given(verdicts)
def test_a_verdict_round_trips(verdict: CompatibilityVerdict) -> None:
    again = CompatibilityVerdict.from_json(verdict.to_json())
    assert again == verdict and [t.to_dict() for t in again.trials] == [t.to_dict() for t in verdict.trials]
    assert CompatibilityVerdict.from_json(json.loads(verdict.to_json())) == verdict


@settings(max_examples=60, deadline=None)
@given(handles)
def test_a_launch_handle_round_trips(handle: LaunchHandle) -> None:
    assert LaunchHandle.from_json(handle.to_json()) == handle
    assert LaunchHandle.from_json(handle.to_dict()) == handle
