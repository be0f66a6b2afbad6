"""Driver-to-driver handover without Spark: the switchover release's strict decoding, the old
query's stop as the standby reads it, the start planned from the old checkpoint and compared with
the approved plan, and the standby's wait (:func:`await_handover`) going or refusing.

Hadoop's FileSystem is replaced at its boundary as in tests/unit/test_standby.py (a local-disk
``HadoopFiles``; the driver's ``read_handover`` and ``read_batch_start`` by the provider's own
reader over the same files); checkpoints and control files are real files. The real path runs in
tests/integration/test_switchover.py.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.errors import InvalidSwitchoverRelease, SwitchoverRecordNotWritten
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.state import ExportedStore, StateManifest
from airflow_ckpt_provider.records.control import (
    CONF_HANDOVER_JSON,
    CONF_INITIAL_STATE_PATH,
    CONF_STARTING_OFFSETS,
    STANDBY_RELEASE,
    STOP_ACK,
    STOP_REQUEST,
    SWITCHOVER_HANDOVER,
    SWITCHOVER_REFUSAL,
    SWITCHOVER_RELEASE,
    InvalidControlRecord,
    StandbyRelease,
    StopAck,
    StopRequest,
)
from airflow_ckpt_provider.spark import switchover
from airflow_ckpt_provider.spark.standby import await_handover
from airflow_ckpt_provider.spark.switchover import (
    RefusalReason,
    StopState,
    SwitchoverHandover,
    SwitchoverRefusal,
    SwitchoverRefused,
    SwitchoverRelease,
    old_query_stop,
    plan_switchover,
)
from airflow_ckpt_provider.storage import CheckpointReader
from tests.unit.conftest import kafka_json, kafka_offsets_at, write_checkpoint
from tests.unit.test_standby import (  # noqa: F401 - files is a fixture
    Background,
    DiskFiles,
    a_request,
    files,
    iso,
    now,
    put,
    standby_beat_on,
    standby_spark,
    wait_until,
)


def end_of(batch: int) -> str:
    """Batch ``batch``'s end offsets in the test checkpoints, as startingOffsets JSON."""
    return KafkaOffsets.from_json(kafka_json(kafka_offsets_at(batch))).to_json()


END_OF_2 = end_of(2)  # where the old query stopped


def release(**fields: Any) -> SwitchoverRelease:
    values: dict[str, Any] = {"release_id": "sw-1", "released_at": iso(now()), "standby_run_id": "run-a",
                              "old_checkpoint": "/ck/v1", "stop_request_id": "stop-1"}
    return SwitchoverRelease(**{**values, **fields})


def ack(outcome: str = "clean", committed: int | None = 2, planned: int | None = 2,
        request_id: str = "stop-1") -> StopAck:
    return StopAck(request_id=request_id, query_id="q", run_id="old-run", outcome=outcome,
                   last_committed_batch=committed, last_planned_batch=planned, stopped_at=iso(now()))


# -- the release -----------------------------------------------------------------------------------


def test_release_round_trips_and_amounts_to_a_standby_release() -> None:
    sw = release(start_mode="rewind_to_batch", start_value="1", expected_batch_id=2, expected_starting_offsets=END_OF_2,
                 accept_reprocessing=True, conf={"spark.ckpt.sinkMode": "append"}, requested_by="dag.switch")
    assert SwitchoverRelease.from_json(sw.to_json()) == sw
    assert SwitchoverRelease.from_json(sw.to_json().encode()).choice().batch == 1
    standby = sw.standby_release('{"events":{"0":1}}', '{"batch_id":2}', "2026-11-28T10:00:00.000+00:00")
    assert standby.spark_conf() == {CONF_STARTING_OFFSETS: '{"events":{"0":1}}', CONF_HANDOVER_JSON: '{"batch_id":2}',
                                    "spark.ckpt.sinkMode": "append"}
    assert (standby.release_id, standby.standby_run_id) == ("sw-1", "run-a")


def test_an_old_standby_release_still_reads_beside_the_switchover_fields() -> None:
    old = {"release_id": "rel-1", "released_at": "t", "starting_offsets": END_OF_2, "standby_run_id": "run-a"}
    assert StandbyRelease.from_json(json.dumps(old)).spark_conf() == {CONF_STARTING_OFFSETS: END_OF_2}
    assert STANDBY_RELEASE != SWITCHOVER_RELEASE, "a driver of an earlier version never sees a switchover"


@pytest.mark.parametrize(("fields", "found"), [
    pytest.param({"start_mode": "at_time", "start_value": "2026-11-28T10:00:00Z"}, "start mode at_time", id="at-time"),
    pytest.param({"start_mode": "offsets", "start_value": '{"events":{"0":-1,"1":5}}'}, "-1/-2",
                 id="offsets-latest"),
    pytest.param({"start_mode": "offsets", "start_value": '{"events":{"0":-2}}'}, "-1/-2", id="offsets-earliest"),
    pytest.param({"start_mode": "offsets", "start_value": '{"events":{"0":1.5}}'}, "offset", id="offsets-float"),
    pytest.param({"start_mode": "offsets", "start_value": ""}, "without a value", id="offsets-missing"),
    pytest.param({"start_mode": "resume", "start_value": "3"}, "with mode resume", id="resume-with-value"),
    pytest.param({"start_mode": "rewind_to_batch", "start_value": "-1"}, "batch", id="rewind-negative"),
    pytest.param({"start_mode": " resume"}, "start mode", id="mode-not-exact"),
    pytest.param({"expected_starting_offsets": '{"events":{"0":-1}}'}, "-1/-2", id="expected-sentinel"),
    pytest.param({"expected_starting_offsets": "not json"}, "expected_starting_offsets", id="expected-not-json"),
    pytest.param({"expected_batch_id": True}, "expected_batch_id", id="expected-batch-bool"),
    pytest.param({"expected_batch_id": -3}, "expected_batch_id", id="expected-batch-negative"),
    pytest.param({"accept_data_loss": "yes"}, "accept_data_loss", id="consent-not-bool"),
    pytest.param({"seed_state": "True"}, "seed_state", id="seed-not-bool"),
    pytest.param({"conf": {CONF_INITIAL_STATE_PATH: "/elsewhere"}}, CONF_INITIAL_STATE_PATH, id="conf-sets-state"),
    pytest.param({"conf": {CONF_STARTING_OFFSETS: END_OF_2}}, CONF_STARTING_OFFSETS, id="conf-sets-offsets"),
    pytest.param({"conf": {"spark.sql.shuffle.partitions": "4"}}, "conf", id="conf-not-ckpt"),
    pytest.param({"released_at": "2026-11-28T10:00:00"}, "released_at", id="time-without-zone"),
    pytest.param({"standby_run_id": ""}, "standby_run_id", id="no-run"),
    pytest.param({"old_checkpoint": 7}, "old_checkpoint", id="checkpoint-not-text"),
])
def test_a_release_the_standby_cannot_carry_out_is_refused_by_constructor_and_decoder(
        fields: dict[str, Any], found: str) -> None:
    with pytest.raises(InvalidSwitchoverRelease, match="invalid switchover release") as made:
        release(**fields)
    assert found in made.value.found
    raw = json.loads(release().to_json())
    with pytest.raises(InvalidSwitchoverRelease):
        SwitchoverRelease.from_json(json.dumps({**raw, **fields}))


def test_the_decoder_refuses_missing_fields_and_non_objects() -> None:
    with pytest.raises(InvalidControlRecord, match="without 'standby_run_id'"):
        SwitchoverRelease.from_json('{"release_id": "sw-1", "released_at": "2026-11-28T10:00:00Z"}')
    with pytest.raises(ValueError, match="JSON object"):
        SwitchoverRelease.from_json("[]")


# -- the old query's stop --------------------------------------------------------------------------


def request(request_id: str = "stop-1", *, at_offset_s: float = 3600.0, expires_in: float = 7200.0) -> StopRequest:
    return StopRequest(request_id=request_id, requested_at=iso(now() + timedelta(seconds=at_offset_s)),
                       requested_by="dag.switch", expires_at=iso(now() + timedelta(seconds=expires_in)))


@pytest.mark.parametrize(("named", "req", "answer", "state"), [
    pytest.param(True, None, None, StopState.WAITING, id="no-request-yet"),
    pytest.param(True, request(), None, StopState.WAITING, id="asked-not-answered"),
    pytest.param(True, request(), ack("clean"), StopState.STOPPED, id="clean"),
    pytest.param(True, request(), ack("held", 2, 3), StopState.STOPPED, id="held-at-the-gate"),
    pytest.param(True, None, ack("clean"), StopState.STOPPED, id="named-ack-request-file-gone"),
    pytest.param(True, request(), ack("interrupted", 2, 3), StopState.NOT_CLEAN, id="interrupted"),
    pytest.param(True, request(expires_in=-1), None, StopState.EXPIRED, id="expired-unanswered"),
    pytest.param(True, request("an-earlier-stop"), ack("clean", request_id="an-earlier-stop"), StopState.WAITING,
                 id="another-request-answered"),
    pytest.param(False, request("any", at_offset_s=3600), ack("clean", request_id="any"), StopState.STOPPED,
                 id="unnamed-asked-after-the-release"),
    pytest.param(False, request("old", at_offset_s=-3600), ack("clean", request_id="old"), StopState.WAITING,
                 id="unnamed-asked-before-the-release"),
])
def test_the_old_query_stop_counts_only_an_answer_to_this_switchover(
        named: bool, req: StopRequest | None, answer: StopAck | None, state: StopState) -> None:
    sw = release(stop_request_id="stop-1" if named else "")
    assert old_query_stop(sw, req, answer).state is state


# -- the start, planned from the old checkpoint ----------------------------------------------------


@pytest.fixture
def old_cp(tmp_path: Path) -> Path:
    cp = tmp_path / "v1"
    write_checkpoint(str(cp), batches=range(3))
    return cp


def plan(cp: Path, sw: SwitchoverRelease, stopped: StopAck | None = None) -> Any:  # noqa: ANN401
    reader = CheckpointReader(str(cp))
    return plan_switchover(sw, reader.handover(), stopped or ack(), reader.batch_start)


def test_resume_as_approved_goes_at_the_last_committed_batch_end(old_cp: Path) -> None:
    started = plan(old_cp, release(expected_batch_id=2, expected_starting_offsets=END_OF_2))
    assert started.starting_offsets.to_json() == END_OF_2 and started.reprocessed == started.skipped == 0


@pytest.mark.parametrize(("fields", "found", "expected"), [
    pytest.param({"expected_batch_id": 1}, "handover from batch 2", "handover from batch 1", id="batch"),
    pytest.param({"expected_starting_offsets": end_of(1)},
                 f"starting offsets {END_OF_2}", "starting offsets", id="offsets"),
])
def test_a_start_that_differs_from_the_approved_plan_is_refused(
        old_cp: Path, fields: dict[str, Any], found: str, expected: str) -> None:
    with pytest.raises(SwitchoverRefused) as refused:
        plan(old_cp, release(**fields))
    assert refused.value.reason is RefusalReason.PLAN_CHANGED
    assert found in refused.value.found and expected in refused.value.expected
    assert refused.value.expected.startswith("the approved plan")


def test_rewind_to_a_batch_starts_at_its_start_read_from_the_checkpoint_with_consent(old_cp: Path) -> None:
    sw = release(start_mode="rewind_to_batch", start_value="2", accept_reprocessing=True)
    assert plan(old_cp, sw).starting_offsets.to_json() == end_of(1)
    with pytest.raises(SwitchoverRefused) as refused:
        plan(old_cp, release(start_mode="rewind_to_batch", start_value="2"))
    assert refused.value.reason is RefusalReason.START_UNAVAILABLE and "accept_reprocessing" in refused.value.expected
    with pytest.raises(SwitchoverRefused) as refused:
        plan(old_cp, release(start_mode="rewind_to_batch", start_value="7", accept_reprocessing=True))
    assert refused.value.reason is RefusalReason.START_UNAVAILABLE and "not committed" in refused.value.found


def test_explicit_offsets_must_name_every_partition_the_old_query_read(old_cp: Path) -> None:
    with pytest.raises(SwitchoverRefused) as refused:
        plan(old_cp, release(start_mode="offsets", start_value='{"events":{"0":300}}', accept_reprocessing=True))
    assert refused.value.reason is RefusalReason.START_UNAVAILABLE and "missing partitions" in refused.value.found


@pytest.mark.parametrize("stopped", [
    pytest.param(ack("clean", 1, 1), id="ack-names-an-earlier-batch"),
    pytest.param(ack("held", 2, 3), id="held-batch-not-in-the-checkpoint"),
])
def test_a_checkpoint_not_where_the_ack_says_the_query_stopped_is_refused(old_cp: Path, stopped: StopAck) -> None:
    with pytest.raises(SwitchoverRefused) as refused:
        plan(old_cp, release(), stopped)
    assert refused.value.reason is RefusalReason.CHECKPOINT_MOVED


def test_a_batch_in_flight_held_at_the_gate_is_never_handed_over(tmp_path: Path) -> None:
    cp = tmp_path / "v1"
    write_checkpoint(str(cp), batches=range(4), committed=range(3))  # batch 3 planned, held, not committed
    assert plan(cp, release(), ack("held", 2, 3)).starting_offsets.to_json() == END_OF_2
    with pytest.raises(SwitchoverRefused) as refused:  # a "clean" stop with a batch in flight: not what it says
        plan(cp, release(), ack("clean", 2, 2))
    assert refused.value.reason is RefusalReason.CHECKPOINT_MOVED


# -- the standby's wait ----------------------------------------------------------------------------


@pytest.fixture
def driver_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The driver's Hadoop readers replaced by the provider's reader over the same files."""
    reads: list[str] = []

    def read_handover_and_operators(spark: Any, uri: str, **_: Any) -> tuple[Handover, tuple[int, ...]]:  # noqa: ANN401
        reads.append(uri)
        reader = CheckpointReader(uri)
        return reader.handover(), reader.snapshot().state_operators

    monkeypatch.setattr(switchover, "read_handover_and_operators", read_handover_and_operators)
    monkeypatch.setattr(switchover, "read_batch_start", lambda spark, uri, batch: CheckpointReader(uri).batch_start(batch))
    return reads


def run_switchover(tmp_path: Path, old: Path, outcome: str, **fields: Any) -> tuple[Any, Path]:  # noqa: ANN401
    """A standby on ``tmp_path/v2`` released for a switchover from ``old``; the old query acks
    ``outcome``; then (if the standby is still waiting) the provider stops it."""
    cp = tmp_path / "v2"
    spark = standby_spark(cp)

    def provider() -> None:
        run_id = standby_beat_on(cp).run_id
        put(cp, SWITCHOVER_RELEASE, release(standby_run_id=run_id, old_checkpoint=str(old), **fields).to_json())
        put(old, STOP_REQUEST, a_request("stop-1").to_json())
        put(old, STOP_ACK, ack(outcome, 2, 2 if outcome == "clean" else 3).to_json())
        wait_until(lambda: (cp / SWITCHOVER_HANDOVER).exists() or (cp / SWITCHOVER_REFUSAL).exists())
        if (cp / SWITCHOVER_REFUSAL).exists():  # not started: the provider decides (here: stop the standby)
            put(cp, STOP_REQUEST, a_request("abort").to_json())

    feeder = Background(provider)
    try:
        result: Any = await_handover(spark, poll_interval=0.005, heartbeat_interval=0.05, timeout_s=30)
    except SystemExit as ended:
        result = ended
    feeder.join()
    return result, spark


def test_a_standby_switches_over_once_the_old_query_stopped_clean(
        tmp_path: Path, old_cp: Path, files: list[DiskFiles], driver_reads: list[str]) -> None:  # noqa: F811
    result, spark = run_switchover(tmp_path, old_cp, "clean", expected_batch_id=2, expected_starting_offsets=END_OF_2)
    cp = tmp_path / "v2"
    assert isinstance(result, StandbyRelease) and result.release_id == "sw-1"
    assert driver_reads == [str(old_cp)], "the handover was read once, by the driver, after the ack"
    assert spark.conf.values[CONF_STARTING_OFFSETS] == END_OF_2 and spark.stops == 0
    used = SwitchoverHandover.from_json((cp / SWITCHOVER_HANDOVER).read_bytes())
    assert used.handover().batch_id == 2 and used.starting_offsets == END_OF_2
    assert spark.conf.values[CONF_HANDOVER_JSON] == used.handover_json
    assert used.stop_acknowledged_at <= used.ack_seen_at <= used.handover_read_at <= used.released_at
    assert not (cp / SWITCHOVER_REFUSAL).exists()


@pytest.mark.parametrize(("outcome", "fields", "reason", "reads"), [
    pytest.param("clean", {"expected_batch_id": 1}, RefusalReason.PLAN_CHANGED, 1, id="plan-differs"),
    pytest.param("interrupted", {}, RefusalReason.STOP_NOT_CLEAN, 0, id="interrupted-ack"),
])
def test_a_refused_switchover_writes_why_and_never_starts(
        tmp_path: Path, old_cp: Path, files: list[DiskFiles], driver_reads: list[str],  # noqa: F811
        outcome: str, fields: dict[str, Any], reason: RefusalReason, reads: int) -> None:
    result, spark = run_switchover(tmp_path, old_cp, outcome, **fields)
    cp = tmp_path / "v2"
    assert isinstance(result, SystemExit) and result.code == 0, "kept waiting until the provider stopped it"
    assert CONF_STARTING_OFFSETS not in spark.conf.values and not (cp / SWITCHOVER_HANDOVER).exists()
    refusal = SwitchoverRefusal.from_json((cp / SWITCHOVER_REFUSAL).read_bytes())
    assert (refusal.release_id, refusal.reason, refusal.ack_outcome) == ("sw-1", reason.value, outcome)
    assert refusal.found and refusal.expected and len(driver_reads) == reads
    if reason is RefusalReason.PLAN_CHANGED:
        assert (refusal.found, refusal.expected) == ("handover from batch 2", "the approved plan: handover from batch 1")
        assert Handover.from_json(refusal.handover_json).batch_id == 2
    assert {p.relative_to(cp).parts[0] for p in cp.rglob("*") if p.is_file()} == {"_ckpt"}, "never a checkpoint file"


def refusal_writes_fail(monkeypatch: pytest.MonkeyPatch, times: int) -> list[str]:
    """The store refuses the first ``times`` writes of the standby's refusal (every one: a large
    number); the retries' pauses are shortened. Returns the failed attempts."""
    failed: list[str] = []
    write = DiskFiles.write

    def failing(self: DiskFiles, rel: str, data: bytes) -> None:
        if rel == SWITCHOVER_REFUSAL and len(failed) < times:
            failed.append(rel)
            raise OSError(f"the store refused the write of {rel}")
        write(self, rel, data)

    monkeypatch.setattr(DiskFiles, "write", failing)
    monkeypatch.setattr(switchover, "WRITE_RETRY_S", 0.001)
    return failed


def test_a_refusal_whose_write_fails_once_is_written_on_the_retry(
        tmp_path: Path, old_cp: Path, files: list[DiskFiles], driver_reads: list[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    failed = refusal_writes_fail(monkeypatch, times=1)
    result, spark = run_switchover(tmp_path, old_cp, "interrupted")
    cp = tmp_path / "v2"
    assert failed == [SWITCHOVER_REFUSAL]
    refusal = SwitchoverRefusal.from_json((cp / SWITCHOVER_REFUSAL).read_bytes())
    assert (refusal.release_id, refusal.reason) == ("sw-1", RefusalReason.STOP_NOT_CLEAN.value)
    assert isinstance(result, SystemExit) and result.code == 0, "kept waiting until the provider stopped it"
    assert CONF_STARTING_OFFSETS not in spark.conf.values


def test_a_refusal_that_cannot_be_written_fails_the_standby_driver_at_once(
        tmp_path: Path, old_cp: Path, files: list[DiskFiles], driver_reads: list[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Never a refusal marked in memory and missing on disk (the provider would wait out its deadline):
    the driver ends with the typed error, its heartbeat stopped and its session stopped."""
    failed = refusal_writes_fail(monkeypatch, times=1_000)
    cp = tmp_path / "v2"
    spark = standby_spark(cp)

    def provider() -> None:
        run_id = standby_beat_on(cp).run_id
        put(cp, SWITCHOVER_RELEASE, release(standby_run_id=run_id, old_checkpoint=str(old_cp)).to_json())
        put(old_cp, STOP_REQUEST, a_request("stop-1").to_json())
        put(old_cp, STOP_ACK, ack("interrupted", 2, 3).to_json())

    feeder = Background(provider)
    with pytest.raises(SwitchoverRecordNotWritten) as failing:
        await_handover(spark, poll_interval=0.005, heartbeat_interval=0.05, timeout_s=600)
    feeder.join()
    assert len(failed) == switchover.WRITE_ATTEMPTS and not (cp / SWITCHOVER_REFUSAL).exists()
    assert "its refusal" in failing.value.found and str(cp) in failing.value.expected
    assert spark.stops == 1 and files[0].heartbeats()[-1].state == "stopped"
    assert CONF_STARTING_OFFSETS not in spark.conf.values


# -- a stateful switchover: the standby seeds the state in its own session -----------------------


def seeded_manifest(batch: int) -> StateManifest:
    store = ExportedStore(operator_id=0, operator_name="stateStoreSave", store_name="default", state_variable=None,
                          path="state/0/default", num_partitions=4, key_schema={}, value_schema={}, void_fields=(),
                          rows=50, checksum="123456789")
    return StateManifest(checkpoint_uri="/old", query_id="q", batch_id=batch, upgrade_id="sw-1",
                         state_store_provider="hdfs", checkpoint_format_version=1, batch_watermark_ms=0,
                         next_batch_watermark_ms=0, spark_version="4.2.0", created_at="2026-11-28T10:00:00+00:00",
                         stores=(store,))


def test_a_stateful_switchover_seeds_the_state_where_the_new_version_starts_then_starts(
        tmp_path: Path, old_cp: Path, files: list[DiskFiles], driver_reads: list[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    seeds: list[tuple[int | None, str]] = []

    def seed(spark: Any, handover: Handover, batch: int | None, target: str, *, upgrade_id: str,  # noqa: ANN401
             operators: tuple[int, ...]) -> StateManifest:
        assert operators == CheckpointReader(str(old_cp)).snapshot().state_operators, "the handover's own listing"
        seeds.append((batch, target))
        return seeded_manifest(batch or 0)

    monkeypatch.setattr(switchover, "seed_state", seed)
    result, spark = run_switchover(tmp_path, old_cp, "clean", seed_state=True)
    cp = tmp_path / "v2"
    assert isinstance(result, StandbyRelease) and seeds == [(2, f"{cp}/_ckpt/seed-state/sw-1")], \
        "the state after the handover batch, under the new checkpoint's control folder"
    assert spark.conf.values[CONF_INITIAL_STATE_PATH] == f"{cp}/_ckpt/seed-state/sw-1" == result.spark_conf()[
        CONF_INITIAL_STATE_PATH]
    used = SwitchoverHandover.from_json((cp / SWITCHOVER_HANDOVER).read_bytes())
    assert (used.state_path, used.state_rows) == (f"{cp}/_ckpt/seed-state/sw-1", 50)
    assert used.handover_read_at <= used.state_seeded_at <= used.released_at


def test_a_rewind_seeds_the_state_before_the_batch_it_starts_at(
        tmp_path: Path, old_cp: Path, files: list[DiskFiles], driver_reads: list[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    seeds: list[int | None] = []
    monkeypatch.setattr(switchover, "seed_state", lambda spark, handover, batch, target, upgrade_id, operators: seeds.append(
        batch) or seeded_manifest(batch))
    result, _ = run_switchover(tmp_path, old_cp, "clean", seed_state=True, start_mode="rewind_to_batch",
                               start_value="2", accept_reprocessing=True)
    assert isinstance(result, StandbyRelease) and seeds == [1], "the state after batch 1: batch 2 runs again"


@pytest.mark.parametrize("failure", [OSError("state/0/default/3.delta is missing"), "no state"])
def test_a_standby_that_cannot_seed_the_state_refuses_and_never_starts(
        tmp_path: Path, old_cp: Path, files: list[DiskFiles], driver_reads: list[str],  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, failure: Any) -> None:  # noqa: ANN401
    def seed(*_: Any, **__: Any) -> StateManifest:  # noqa: ANN401
        if isinstance(failure, Exception):
            raise failure
        return None  # type: ignore[return-value]  # a stateless checkpoint: nothing seeded, starts anyway

    monkeypatch.setattr(switchover, "seed_state", seed)
    result, spark = run_switchover(tmp_path, old_cp, "clean", seed_state=True)
    cp = tmp_path / "v2"
    if not isinstance(failure, Exception):
        assert isinstance(result, StandbyRelease) and CONF_INITIAL_STATE_PATH not in spark.conf.values
        used = SwitchoverHandover.from_json((cp / SWITCHOVER_HANDOVER).read_bytes())
        assert used.state_path == "" and used.state_seeded_at, "asked to seed, found no state: said so"
        return
    assert isinstance(result, SystemExit) and result.code == 0, "kept waiting until the provider stopped it"
    refusal = SwitchoverRefusal.from_json((cp / SWITCHOVER_REFUSAL).read_bytes())
    assert refusal.reason == RefusalReason.STATE_NOT_SEEDED.value and "3.delta is missing" in refusal.found
    assert CONF_STARTING_OFFSETS not in spark.conf.values and not (cp / SWITCHOVER_HANDOVER).exists()
