"""The compatibility verdict from Spark's own errors (texts as Spark 4.0 prints them) and plans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.compat import (
    CompatibilityVerdict,
    Rule,
    StatefulOperator,
    StatefulOperators,
    TrialKind,
    TrialRecord,
    TrialResult,
    check_trial_location,
    classify,
    declares_contract,
    read_failure,
    spark_error,
)
from airflow_ckpt_provider.checkpoint.errors import InvalidTrialRecord, InvalidVerdict, TrialRefused
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.jobs import DriverState
from airflow_ckpt_provider.spark.trial import OPERATORS_RECORD, TRIAL_RECORD, parse_stateful_operators

WRAP = ("[STREAM_FAILED] Query [id = 74c78bbd-4366-427f-b609-6eede63c354f, runId = b141cfd9-7e07-4c76-bc93-"
        "a52ce9233397] terminated with exception: ")
KEY = (WRAP + "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key "
       "schema.\nPlease check number and type of fields.\nExisting key_schema=StructType(StructField(k,LongType,true))"
       " and new key_schema=StructType(StructField(k,LongType,true),StructField(_groupingexpression,LongType,true))."
       "\nIf you want to force running the query without schema validation, please set spark.sql.streaming."
       "stateStore.stateSchemaCheck to false.\nHowever, please note that running the query with incompatible schema "
       "could cause non-deterministic behavior. SQLSTATE: XXKST SQLSTATE: XXKST\n=== Streaming Query ===")
VALUE = (WRAP + "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match existing state "
         "value schema.\nPlease check number and type of fields.\nExisting value_schema=StructType(StructField(count,"
         "LongType,false)) and new value_schema=StructType(StructField(sum,LongType,true)).\nIf you want to force "
         "running the query without schema validation, please set spark.sql.streaming.stateStore.stateSchemaCheck to "
         "false.")
OPS = (WRAP + "[STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA] Streaming stateful operator name does not "
       "match with the operator in state metadata. This likely to happen when user adds/removes/changes stateful "
       "operator of existing streaming query.\nStateful operators in the metadata: [(OperatorId: 0 -> OperatorName: "
       "stateStoreSave)]; Stateful operators in current batch: [(OperatorId: 0 -> OperatorName: dedupe)]. "
       "SQLSTATE: 42K03")
MISSING_STATE = (WRAP + "[CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS] An error occurred during loading "
                 "state. Error reading delta file file:/tmp/ck/state/1/0/1.delta of HDFSStateStoreProvider[id = "
                 "(op=1,part=0),dir = file:/tmp/ck/state/1/0]: file:/tmp/ck/state/1/0/1.delta does not exist. "
                 "SQLSTATE: 58030")
#: Spark 4.2's text, verbatim from a real restart of ``tests/integration/jobs/compat_job.py``'s
#: ``dedup`` checkpoint as ``dedup_cols`` (``dropDuplicates(["key"])`` ->
#: ``dropDuplicates(["topic", "partition", "offset"])``): the deduplication case of the guide's table,
#: which fails with the same error class as the aggregation key case the integration test restarts
DEDUP_KEY_42 = (
    "[STREAM_FAILED] Query [id = ebd1cd76-651f-4d04-a386-d69e406a854c, runId = 9d1daf46-42f3-4392-9134-509cd9e93e4b] "
    "terminated with exception: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing "
    "state key schema.\nPlease check number and type of fields.\nExisting key_schema=StructType(StructField(key,"
    "StringType,true)) and new key_schema=StructType(StructField(topic,StringType,true),StructField(partition,"
    "IntegerType,true),StructField(offset,LongType,true)).\nIf you want to force running the query without schema "
    "validation, please set spark.sql.streaming.stateStore.stateSchemaCheck to false.\nHowever, please note that "
    "running the query with incompatible schema could cause non-deterministic behavior. SQLSTATE: XXKST SQLSTATE: "
    "XXKST\n=== Streaming Query ===\nIdentifier: [id = ebd1cd76-651f-4d04-a386-d69e406a854c, runId = "
    "9d1daf46-42f3-4392-9134-509cd9e93e4b]\nCurrent Committed Offsets: {KafkaV2[Subscribe[compat-dedup-b89d5d]]: "
    "{\"compat-dedup-b89d5d\":{\"0\":26,\"1\":34}}}")
#: the same failure as the driver's log shows it first (the JVM's exception line, then the stack)
DEDUP_KEY_42_LOG = (
    "26/11/28 05:58:55 ERROR MicroBatchExecution: Query [id = ebd1cd76-651f-4d04-a386-d69e406a854c, runId = "
    "9d1daf46-42f3-4392-9134-509cd9e93e4b] terminated with error\norg.apache.spark.sql.execution.streaming.state."
    "StateStoreKeySchemaNotCompatible: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match "
    "existing state key schema.\nPlease check number and type of fields.\nExisting key_schema=StructType(StructField("
    "key,StringType,true)) and new key_schema=StructType(StructField(topic,StringType,true),StructField(partition,"
    "IntegerType,true),StructField(offset,LongType,true)).\n\tat org.apache.spark.sql.execution.streaming.state."
    "StateStoreErrors$.stateStoreKeySchemaNotCompatible(StateStoreErrors.scala:164)\n")
SOURCES = ("java.lang.AssertionError: assertion failed: There are [1] sources in the checkpoint offsets and now "
           "there are [2] sources requested by the query. Cannot continue.")


@pytest.mark.parametrize(("text", "error_class", "rule", "old", "new", "operator"), [
    (KEY, "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", Rule.STATE_KEY_SCHEMA, "StructType(StructField(k,LongType,true))",
     "StructType(StructField(k,LongType,true),StructField(_groupingexpression,LongType,true))", ""),
    (VALUE, "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", Rule.STATE_VALUE_SCHEMA,
     "StructType(StructField(count,LongType,false))", "StructType(StructField(sum,LongType,true))", ""),
    (OPS, "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA", Rule.OPERATOR_CHANGED,
     "(OperatorId: 0 -> OperatorName: stateStoreSave)", "(OperatorId: 0 -> OperatorName: dedupe)",
     "0: stateStoreSave -> dedupe"),
    (DEDUP_KEY_42, "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", Rule.STATE_KEY_SCHEMA,
     "StructType(StructField(key,StringType,true))",
     "StructType(StructField(topic,StringType,true),StructField(partition,IntegerType,true),StructField(offset,"
     "LongType,true))", ""),
    (SOURCES, "ASSERTION_FAILED", Rule.SOURCE_CHANGED, "1 source(s)", "2 source(s)", ""),
    (MISSING_STATE, "CANNOT_LOAD_STATE_STORE.CANNOT_READ_DELTA_FILE_NOT_EXISTS", Rule.OPERATOR_ADDED,
     "no state for stateful operator 1 in the old checkpoint (file:/tmp/ck/state/1/0/1.delta is missing); Spark "
     "calls a state store change file a 'delta file': this is not about Delta Lake",
     "stateful operator 1 (added by the new version)", "1"),
    ("Traceback (most recent call last):\nRuntimeError: deliberate crash", "", Rule.UNKNOWN, "", "", ""),
])
def test_spark_errors_name_the_rule_and_both_sides(text: str, error_class: str, rule: Rule, old: str, new: str,
                                                   operator: str) -> None:
    failure = read_failure(text)
    assert failure is not None
    assert (failure.error_class, failure.rule, failure.old, failure.new, failure.operator) == (
        error_class, rule, old, new, operator)


@pytest.mark.parametrize(("before", "after", "rule", "operator"), [
    ("", "(OperatorId: 0 -> OperatorName: dedupe)", Rule.OPERATOR_ADDED, "0 dedupe"),
    ("(OperatorId: 0 -> OperatorName: dedupe), (OperatorId: 1 -> OperatorName: stateStoreSave)",
     "(OperatorId: 0 -> OperatorName: dedupe)", Rule.OPERATOR_REMOVED, "1 stateStoreSave"),
])
def test_operators_added_or_removed(before: str, after: str, rule: Rule, operator: str) -> None:
    text = OPS.split("Stateful operators in the metadata")[0] + (
        f"Stateful operators in the metadata: [{before}]; Stateful operators in current batch: [{after}].")
    failure = read_failure(text)
    assert failure is not None and (failure.rule, failure.operator) == (rule, operator)


def test_the_wrapper_is_not_the_error() -> None:
    assert spark_error(KEY)[0] == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
    assert spark_error(WRAP + "java.lang.RuntimeException: boom")[0] == "STREAM_FAILED"
    assert spark_error("") == ("", "")
    exit_message = ("WARNING: Using incubator modules: jdk.incubator.vector\nUsing Spark's default log4j profile: x\n"
                    "deliberate crash on start: orders.currency is not set\n"
                    "26/11/25 05:24:01 INFO ShutdownHookManager: Shutdown hook called\n")
    assert spark_error(exit_message) == ("", "deliberate crash on start: orders.currency is not set")


def ok(kind: TrialKind, operators: tuple[StatefulOperator, ...] | None = None) -> TrialResult:
    return TrialResult(kind, started=True, batches_committed=1, operators=operators)


def failed(kind: TrialKind, text: str) -> TrialResult:
    return TrialResult(kind, started=False, error_class=spark_error(text)[0], error_message=text, log_tail="tail")


JOIN_OLD = (StatefulOperator(0, "StreamingSymmetricHashJoin", "Inner"),)
JOIN_NEW = (StatefulOperator(0, "StreamingSymmetricHashJoin", "LeftOuter"),)


def test_in_place_ok_offers_a_plain_restart() -> None:
    verdict = classify(ok(TrialKind.IN_PLACE, ()), ok(TrialKind.MIGRATED), old_operators=())
    assert verdict.in_place_ok and verdict.migrated_ok and verdict.new_version_starts
    assert verdict.needs_new_checkpoint is False
    assert verdict.headline().startswith("in place OK: no new checkpoint needed")


def test_state_schema_needs_a_new_checkpoint_with_both_schemas() -> None:
    verdict = classify(failed(TrialKind.IN_PLACE, KEY), ok(TrialKind.MIGRATED))
    assert (verdict.in_place_ok, verdict.rule, verdict.migrated_ok) == (False, Rule.STATE_KEY_SCHEMA, True)
    assert verdict.error_class == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
    assert "_groupingexpression" in verdict.new and "_groupingexpression" not in verdict.old
    assert verdict.new_version_starts
    assert any(line.startswith("Spark: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE]") for line in verdict.describe())


def test_deduplication_columns_changed_needs_a_new_checkpoint() -> None:
    """The guide's deduplication case, from Spark 4.2's own texts of a real restart: the verdict
    names the state key schema with both sides, and its error class is the one the driver's log
    shows (what the integration test compares for the aggregation key case on a live restart)."""
    recorded = (StatefulOperator(0, "StreamingDeduplicate", "key"),)  # the old version's real record
    verdict = classify(failed(TrialKind.IN_PLACE, DEDUP_KEY_42), ok(TrialKind.MIGRATED), old_operators=recorded)
    assert (verdict.in_place_ok, verdict.rule, verdict.migrated_ok) == (False, Rule.STATE_KEY_SCHEMA, True)
    assert verdict.error_class == spark_error(DEDUP_KEY_42_LOG)[0] == "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE"
    assert verdict.old == "StructType(StructField(key,StringType,true))"
    assert verdict.new.startswith("StructType(StructField(topic,StringType,true)") and verdict.old != verdict.new
    assert verdict.needs_new_checkpoint and verdict.new_version_starts


def test_join_type_from_the_plans_where_spark_does_not_fail() -> None:
    verdict = classify(ok(TrialKind.IN_PLACE, JOIN_NEW), ok(TrialKind.MIGRATED), old_operators=JOIN_OLD)
    assert (verdict.in_place_ok, verdict.rule) == (False, Rule.JOIN_TYPE)
    assert "Inner" in verdict.old and "LeftOuter" in verdict.new
    # without the old version's record only Spark's errors count
    assert classify(ok(TrialKind.IN_PLACE, JOIN_NEW), ok(TrialKind.MIGRATED)).in_place_ok is True


def test_operator_added_from_the_plans() -> None:
    verdict = classify(ok(TrialKind.IN_PLACE, JOIN_OLD + (StatefulOperator(1, "StateStoreSave", "k"),)),
                       old_operators=JOIN_OLD)
    assert (verdict.rule, verdict.operator) == (Rule.OPERATOR_ADDED, "1 StateStoreSave (k)")


def test_a_new_version_that_does_not_start() -> None:
    crash = "Traceback (most recent call last):\nRuntimeError: deliberate crash on start"
    verdict = classify(failed(TrialKind.IN_PLACE, crash), failed(TrialKind.MIGRATED, crash))
    assert not verdict.new_version_starts and verdict.migrated_ok is False
    assert verdict.headline().startswith("the new version does not start")
    assert verdict.log_tail == "tail"


def test_no_batch_proves_nothing() -> None:
    verdict = classify(TrialResult(TrialKind.IN_PLACE, started=None), ok(TrialKind.MIGRATED))
    assert verdict.in_place_ok is None and verdict.needs_new_checkpoint is None and verdict.new_version_starts


def test_json_round_trip_and_refusal() -> None:
    verdict = classify(failed(TrialKind.IN_PLACE, VALUE), ok(TrialKind.MIGRATED, ()), old_operators=())
    again = CompatibilityVerdict.from_json(verdict.to_json())
    assert again == verdict and again.trials == verdict.trials
    with pytest.raises(InvalidVerdict):
        CompatibilityVerdict.from_json('{"rule": "nope"}')
    with pytest.raises(InvalidVerdict):
        CompatibilityVerdict.from_json("[]")


@pytest.mark.parametrize("trial", ["/data/ckpt", "/data/ckpt/trial", "/data", "file:///data/ckpt/x", "/sink/a"])
def test_trial_location_overlapping_a_live_one_is_refused(trial: str) -> None:
    with pytest.raises(TrialRefused, match="overlaps"):
        check_trial_location(trial, {"old checkpoint": "/data/ckpt", "sink": "/sink", "new checkpoint": ""})
    check_trial_location("/tmp/trials", {"old checkpoint": "/data/ckpt", "sink": "/sink"})


def test_a_job_without_the_contract_is_refused() -> None:
    with pytest.raises(TrialRefused, match="never uses sink_location"):
        declares_contract({"job.py": "query.awaitTermination()  # GracefulStop"}, "job.py")
    declares_contract({"a.py": "from b import run", "b.py": "sink_location(spark, x); GracefulStop(spark, q, c)"},
                      "a.py")


def test_stateful_operators_from_a_physical_plan() -> None:
    plan = """== Physical Plan ==
WriteToDataSourceV2 MicroBatchWrite[epoch: 3]
+- *(4) HashAggregate(keys=[k#2L], functions=[count(1)])
   +- StateStoreSave [k#2L], state info [ checkpoint = file:/x/state, runId = b7, opId = 0, ver = 3, numPartitions = 2]
      +- StateStoreRestore [k#2L], state info [ checkpoint = file:/x/state, runId = b7, opId = 0, ver = 3]
+- StreamingSymmetricHashJoin [lk#2L], [rk#6L], LeftOuter, condition = [ leftOnly = null ], state info [ \
checkpoint = file:/x, runId = 1, opId = 1, ver = 0]"""
    assert parse_stateful_operators(plan) == [
        {"operator_id": 0, "name": "StateStoreSave", "detail": "k"},
        {"operator_id": 1, "name": "StreamingSymmetricHashJoin", "detail": "LeftOuter"}]


def fake_check(monkeypatch: pytest.MonkeyPatch, verdict: CompatibilityVerdict, where: str) -> list[dict]:
    """Replace check_upgrade (the hook boundary: trials on real Spark) in ``where``; returns its calls."""
    import importlib

    calls: list[dict] = []

    def check(**kwargs: object) -> CompatibilityVerdict:
        calls.append(kwargs)
        return verdict

    monkeypatch.setattr(importlib.import_module(where), "check_upgrade", check)
    return calls


CRASH = classify(failed(TrialKind.IN_PLACE, "Traceback (most recent call last):\nRuntimeError: deliberate crash"),
                 failed(TrialKind.MIGRATED, "Traceback (most recent call last):\nRuntimeError: deliberate crash"))
SCHEMA = classify(failed(TrialKind.IN_PLACE, KEY), ok(TrialKind.MIGRATED))


@pytest.mark.parametrize(("verdict", "code", "says"), [
    (SCHEMA, 0, "needs a new checkpoint: a stateful operator's state key schema changed"),
    (CRASH, 6, "the new version does not start"),
])
def test_cli_check_upgrade(monkeypatch: pytest.MonkeyPatch, verdict: CompatibilityVerdict, code: int,
                           says: str) -> None:
    import io

    from airflow_ckpt_provider.cli import main

    hook = "airflow_ckpt_provider.hooks.compat"
    calls = fake_check(monkeypatch, verdict, hook)
    out = io.StringIO()
    assert main(["check-upgrade", "--old", "/data/ckpt", "--new-application", "v2.py", "--live", "/data/out",
                 "--batches", "3", "--", "--sink", "/data/out"], stdout=out, stderr=io.StringIO()) == code
    assert out.getvalue().startswith(says)
    (call,) = calls
    assert call["application_args"] == ["--sink", "/data/out"] and call["batches"] == 3
    assert call["live_locations"] == {"live location 1": "/data/out"} and call["old_checkpoint"] == "/data/ckpt"
    assert call["carry_state"] is True
    out = io.StringIO()
    main(["check-upgrade", "--old", "/data/ckpt", "--new-application", "v2.py", "--json", "--no-state"], stdout=out,
         stderr=io.StringIO())
    assert CompatibilityVerdict.from_json(json.loads(out.getvalue())) == verdict
    assert calls[1]["carry_state"] is False


def test_operator_refuses_a_version_that_does_not_start_and_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) \
        -> None:
    from airflow_ckpt_provider.checkpoint.errors import NewVersionDoesNotStart
    from airflow_ckpt_provider.operators.compat import CompatibilityCheckOperator

    calls = fake_check(monkeypatch, CRASH, "airflow_ckpt_provider.operators.compat")
    op = CompatibilityCheckOperator(task_id="c", old_checkpoint_uri="/ckpt", new_application="v2.py",
                                    conf={"spark.x": 1}, live_locations={"sink": "/out", "new checkpoint": ""})
    with pytest.raises(NewVersionDoesNotStart, match="deliberate crash"):
        op.execute({})
    assert calls[0]["live_locations"] == {"sink": "/out"} and calls[0]["conf"] == {"spark.x": "1"}
    assert calls[0]["carry_state"] is True
    no_state = CompatibilityCheckOperator(task_id="e", old_checkpoint_uri="/ckpt", new_application="v2.py",
                                          carry_state="False", fail_if_does_not_start=False)
    no_state.execute({})
    assert calls[1]["carry_state"] is False  # the DAG's carry_state param, rendered
    fake_check(monkeypatch, SCHEMA, "airflow_ckpt_provider.operators.compat")
    result = op.execute({})
    assert result["rule"] == "state_key_schema" and "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in result["summary_md"]
    off = CompatibilityCheckOperator(task_id="d", old_checkpoint_uri="/ckpt", new_application="v2.py",
                                     enabled="False")
    assert off.execute({})["skipped"] == "switched off"


def test_the_migrated_trial_given_the_old_state_says_so() -> None:
    verdict = CompatibilityVerdict(in_place_ok=False, migrated_ok=True, rule=Rule.STATE_VALUE_SCHEMA,
                                   state_batch=7, state_rows=1234)
    assert verdict.headline().endswith("at the handover with the old query's state")
    assert verdict.describe()[-1] == ("migrated trial given the old query's state after batch 7 (1,234 rows), "
                                      "as the upgrade will give it")
    assert CompatibilityVerdict.from_json(verdict.to_json()) == verdict
    empty = CompatibilityVerdict(in_place_ok=False, migrated_ok=True, rule=Rule.STATE_VALUE_SCHEMA)
    assert "state" not in empty.headline().split(";")[-1] and CompatibilityVerdict.from_json(empty.to_json()) == empty


class TrialLauncher:
    """A launcher at the hook boundary: each launch "runs" its trial at once, writing the trial
    record a job following the contract writes (or ``record``); remembers each launch's conf."""

    def __init__(self, record: str | None = None) -> None:
        self.launches: list[dict[str, Any]] = []
        self.record = record if record is not None else TrialRecord(
            batches=1, operators=(), outputs={"output": "/lake/orders"}).to_json()

    def launch(self, application: str, *, checkpoint_uri: str, conf: dict[str, str], name: str,
               **kwargs: Any) -> LaunchHandle:
        self.launches.append({"application": application, "checkpoint": checkpoint_uri, "conf": dict(conf),
                              "name": name})
        record = Path(checkpoint_uri) / TRIAL_RECORD
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(self.record)
        return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=checkpoint_uri, app_name=name,
                            started_at="2026-11-26T00:00:00+00:00", pid=4242)

    def driver_state(self, handle: LaunchHandle) -> DriverState:
        return DriverState.FINISHED

    def log_tail(self, handle: LaunchHandle, lines: int) -> str:
        return ""

    def kill(self, handle: LaunchHandle) -> str:
        return "killed"


def spark_checkpoint(root: Path, *, stateful: bool) -> Path:
    """A checkpoint as Spark 4.0 writes it after batch 0: offsets, commit, metadata (and, for a
    stateful query, its state folder)."""
    ckpt = root / "old"
    (ckpt / "offsets").mkdir(parents=True)
    (ckpt / "commits").mkdir()
    (ckpt / "metadata").write_text('{"id":"5e5fa1e0-3c7a-4c57-9b42-0b6d38d1c0f4"}')
    (ckpt / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
                                        '{"t":{"0":5,"1":3}}')
    (ckpt / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    if stateful:
        (ckpt / "state" / "0" / "0").mkdir(parents=True)
        (ckpt / "state" / "0" / "0" / "1.delta").write_bytes(b"\0")
    return ckpt


@pytest.mark.parametrize("carry_state", [True, False])
def test_the_migrated_trial_gets_the_state_the_upgrade_carries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                                carry_state: bool) -> None:
    from airflow_ckpt_provider.checkpoint.state import StateExportPlan
    from airflow_ckpt_provider.hooks import compat as hook
    from airflow_ckpt_provider.records.control import CONF_INITIAL_STATE_PATH

    old = spark_checkpoint(tmp_path, stateful=True)
    exports: list[dict[str, Any]] = []

    def export(*, checkpoint_uri: str, export_uri: str, **kwargs: Any) -> tuple[Any, Any]:
        # the copy, complete, before any trial ran on it
        assert (Path(checkpoint_uri) / "commits" / "0").is_file() and launcher.launches == []
        exports.append({"checkpoint": checkpoint_uri, "export": export_uri})
        manifest = type("Manifest", (), {"batch_id": 0, "rows": 42})()
        return StateExportPlan(checkpoint_uri=checkpoint_uri, query_id=None, batch_id=0, operators=(0,)), manifest

    monkeypatch.setattr(hook.state_export, "export_checkpoint_state", export)
    launcher = TrialLauncher()
    verdict = hook.check_upgrade(old_checkpoint=str(old), new_application="v2.jar", launcher=launcher,  # type: ignore[arg-type]
                                 trial_root=str(tmp_path / "trials"), carry_state=carry_state, poll_interval=0.01)
    in_place, migrated = launcher.launches
    assert CONF_INITIAL_STATE_PATH not in in_place["conf"]  # in place, the state is the copy's own
    if carry_state:
        assert exports[0]["checkpoint"] == in_place["checkpoint"]
        assert migrated["conf"][CONF_INITIAL_STATE_PATH] == exports[0]["export"]
        assert (verdict.state_batch, verdict.state_rows) == (0, 42)
    else:
        assert exports == [] and CONF_INITIAL_STATE_PATH not in migrated["conf"]
        assert verdict.state_batch is None
    assert verdict.in_place_ok is True and verdict.migrated_ok is True
    assert list((tmp_path / "trials").iterdir()) == [], "the trial files, the export among them, are deleted"


class Launched(Exception):
    """The fake launcher's answer: the check got as far as launching a trial."""


class NoLaunch:
    def launch(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
        raise Launched(kwargs.get("starting_offsets"))


def test_check_upgrade_selects_the_kafka_source_by_the_handovers_rule(tmp_path: Path) -> None:
    """``ckpt check-upgrade`` refuses what the handover refuses — two Kafka sources, even with
    offsets that agree (a self-join of one topic) — before it copies or launches anything; a
    chosen source is used as the handover would use it."""
    from airflow_ckpt_provider.checkpoint.errors import AmbiguousSource
    from airflow_ckpt_provider.hooks.compat import check_upgrade
    from tests.unit.conftest import kafka_json, kafka_offsets_at, write_checkpoint

    def self_join(batch: int) -> list[str | None]:
        line = kafka_json(kafka_offsets_at(batch))
        return [line, line]

    built = write_checkpoint(str(tmp_path / "ck"), sources=self_join)
    trials = tmp_path / "trials"
    trials.mkdir()
    common = dict(old_checkpoint=built.uri, new_application=str(tmp_path / "v2.py"), launcher=NoLaunch(),
                  trial_root=str(trials), contract_check=False, carry_state=False)
    with pytest.raises(AmbiguousSource):
        check_upgrade(**common)  # type: ignore[arg-type]
    assert list(trials.iterdir()) == [], "nothing copied before the refusal"
    with pytest.raises(Launched):
        check_upgrade(**common, source=1, migrated=True)  # type: ignore[arg-type]


def test_the_old_versions_operators_file_of_the_previous_release_reads_and_a_damaged_one_is_refused(
        tmp_path: Path) -> None:
    """The previous release's driver wrote the bare array (its ids once as text); this one writes the
    record with its format number. A damaged file is refused before anything starts, naming it."""
    import fsspec

    from airflow_ckpt_provider.hooks.compat import _old_operators

    fs = fsspec.filesystem("file")
    (tmp_path / "_ckpt").mkdir()
    assert _old_operators(fs, str(tmp_path)) is None  # the old version recorded none
    (tmp_path / OPERATORS_RECORD).write_text('[{"detail": "Inner", "name": "StreamingSymmetricHashJoinExec", '
                                              '"operator_id": "0"}]')
    join = (StatefulOperator(0, "StreamingSymmetricHashJoinExec", "Inner"),)
    assert _old_operators(fs, str(tmp_path)) == join
    assert json.loads(StatefulOperators(join).to_json())["format"] == 1
    (tmp_path / OPERATORS_RECORD).write_text(StatefulOperators(join).to_json())
    assert _old_operators(fs, str(tmp_path)) == join
    (tmp_path / OPERATORS_RECORD).write_text('{"operators": [{"name": "x"}]}')
    with pytest.raises(InvalidTrialRecord) as refused:
        _old_operators(fs, str(tmp_path))
    assert "without 'operator_id'" in refused.value.found and refused.value.path == str(tmp_path / OPERATORS_RECORD)


def test_a_damaged_trial_record_is_refused_and_the_trial_files_are_deleted(tmp_path: Path) -> None:
    from airflow_ckpt_provider.hooks.compat import check_upgrade

    old = spark_checkpoint(tmp_path, stateful=False)
    launcher = TrialLauncher(record='{"batches": "one", "outputs": {"output": "/lake/orders"}}')
    with pytest.raises(InvalidTrialRecord, match="'batches' of JSON string") as refused:
        check_upgrade(old_checkpoint=str(old), new_application="v2.jar", launcher=launcher,  # type: ignore[arg-type]
                      trial_root=str(tmp_path / "trials"), carry_state=False, poll_interval=0.01)
    assert str(refused.value.path).endswith(TRIAL_RECORD)
    assert list((tmp_path / "trials").iterdir()) == [], "the trial files are deleted"
