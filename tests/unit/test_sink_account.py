"""The sink ledger at the handover: what the sink holds of a batch the stop cut, decided from the
sink's own record (pure decisions, then the handover operator on checkpoints laid out as Spark lays
them; the broker is faked at the hook boundary). Real Spark and Delta: tests/integration/test_delta_sink.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint import BrokerView, Handover, KafkaOffsets
from airflow_ckpt_provider.checkpoint.errors import InvalidHandover, SinkAheadOfState
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.checkpoint.report import UpgradeReport
from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator
from airflow_ckpt_provider.sinks import CutDisposition, OffsetRange, SinkAccount, SinkSpec, account_cut
from airflow_ckpt_provider.sinks.ledger import cut_ranges
from tests.unit.conftest import QUERY_ID, write_checkpoint
from tests.unit.test_handover_operator import FakeKafkaHook

COMMITTED = KafkaOffsets({"events": {0: 300, 1: 301}})
PLANNED = KafkaOffsets({"events": {0: 400, 1: 301, 2: 7}})
SPECS = {
    "delta": SinkSpec.from_value({"kind": "delta", "location": "/lake/t"}),
    "file": SinkSpec.from_value({"kind": "file", "location": "/out"}),
    "kafka": SinkSpec.from_value({"kind": "kafka"}),
    "none": SinkSpec(),
}


def test_cut_ranges_name_each_partition_the_cut_batch_read() -> None:
    assert cut_ranges(COMMITTED, PLANNED) == (OffsetRange("events", 0, 300, 400), OffsetRange("events", 2, -2, 7))
    assert [r.count for r in cut_ranges(COMMITTED, PLANNED)] == [100, None]  # a new partition: from the earliest


@pytest.mark.parametrize(("kind", "cut", "record", "disposition", "twice"), [
    ("delta", None, None, CutDisposition.NONE, 0),
    ("kafka", None, None, CutDisposition.NONE, 0),
    ("delta", 3, "Delta txn appId q version 3 at table version 9", CutDisposition.HELD, 0),
    ("delta", 3, None, CutDisposition.NOT_HELD, 0),
    ("file", 3, "file sink metadata _spark_metadata/3", CutDisposition.HELD, 0),
    ("file", 3, None, CutDisposition.NOT_HELD, 0),
    ("kafka", 3, None, CutDisposition.MAY_REPEAT, 2),
    ("none", 3, None, CutDisposition.MAY_REPEAT, 2),
])
def test_what_the_sink_holds_of_a_cut_batch(kind: str, cut: int | None, record: str | None,
                                            disposition: CutDisposition, twice: int) -> None:
    account = account_cut(SPECS[kind], cut_batch=cut, committed=COMMITTED, planned=PLANNED, record=record)
    assert account.disposition is disposition
    assert len(account.twice) == twice and account.skipped == ()
    assert account.exact == (twice == 0)
    assert SinkAccount.from_dict(json.loads(json.dumps(account.to_dict()))) == account
    if cut is not None:
        assert f"batch {cut}" in account.why


def view() -> BrokerView:
    return BrokerView({"events": {p: (0, 10_000) for p in range(4)}})


def extract(uri: str, sink: object) -> dict:
    op = CheckpointHandoverOperator(task_id="extract", checkpoint_uri=uri, sink=sink)
    op.kafka_hook = FakeKafkaHook(view())
    return op.execute(context={})


def test_a_file_sink_that_recorded_the_cut_batch_moves_the_handover_past_it(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(4), committed=range(3))  # batch 3 cut
    out = tmp_path / "out"
    (out / "_spark_metadata").mkdir(parents=True)
    (out / "_spark_metadata" / "3").write_text('v1\n{"path":"part-0.parquet"}\n')
    result = extract(built.uri, {"kind": "file", "location": str(out)})

    handover = Handover.from_json(result["handover"])
    assert (handover.batch_id, handover.in_flight_batch) == (3, None)
    assert handover.held_by_sink == "file sink metadata _spark_metadata/3"
    assert {p: handover.kafka_offsets().get("events", p) for p in range(4)} == {p: 400 + p for p in range(4)}
    assert result["sink"]["disposition"] == "held" and result["sink"]["exact"]
    assert HandoverResult.from_json(json.dumps(result)).sink == result["sink"]  # the journal's round trip


def test_a_file_sink_without_the_cut_batch_keeps_the_last_commit(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(4), committed=range(3))
    (tmp_path / "out" / "_spark_metadata").mkdir(parents=True)
    (tmp_path / "out" / "_spark_metadata" / "2").write_text("v1\n")
    result = extract(built.uri, {"kind": "file", "location": str(tmp_path / "out")})
    handover = Handover.from_json(result["handover"])
    assert (handover.batch_id, handover.in_flight_batch, handover.held_by_sink) == (2, 3, None)
    assert result["sink"]["disposition"] == "not_held" and result["sink"]["twice"] == []


def test_an_at_least_once_sink_names_the_cut_batch_input_per_partition(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(4), committed=range(3))
    result = extract(built.uri, {"kind": "kafka"})
    assert Handover.from_json(result["handover"]).batch_id == 2
    assert result["sink"]["disposition"] == "may_repeat" and not result["sink"]["exact"]
    assert [(r["partition"], r["start"], r["end"], r["count"]) for r in result["sink"]["twice"]] == [
        (p, 300 + p, 400 + p, 100) for p in range(4)]
    report = UpgradeReport(stream="s", outcome="upgraded", handover=result["handover"], sink=result["sink"])
    text = report.to_markdown()
    assert "up to 400 records in 4 partition(s) / 0" in text and "| events | 3 | 303 | 403 | 100 |" in text
    assert UpgradeReport.from_json(report.to_json()).sink == result["sink"]


def test_no_cut_batch_is_exact_for_every_sink(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(3), committed=range(3))
    for sink in ({"kind": "kafka"}, None):
        result = extract(built.uri, sink)
        assert result["sink"]["disposition"] == "none" and result["sink"]["exact"]


def test_a_stateful_query_whose_sink_is_ahead_of_its_state_is_refused(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(4), committed=range(3), state_operators=(0,))
    (tmp_path / "out" / "_spark_metadata").mkdir(parents=True)
    (tmp_path / "out" / "_spark_metadata" / "3").write_text("v1\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(SinkAheadOfState) as raised:
        extract(built.uri, {"kind": "file", "location": str(tmp_path / "out")})
    assert "batch 3" in raised.value.found and "committed only batch 2" in raised.value.found
    assert "Restart the old version" in str(raised.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_held_handover_round_trips_and_old_handovers_still_read(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(4), committed=range(3))
    from airflow_ckpt_provider.storage import CheckpointReader
    reader = CheckpointReader(built.uri)
    plain = reader.handover()
    assert "held_by_sink" not in plain.to_dict()  # handovers without one keep their JSON
    held = plain.after_held_batch(3, reader.batch_sources(3), "Delta txn appId q version 3 at table version 5")
    assert Handover.from_json(held.to_json()) == held and held.query_id == QUERY_ID
    with pytest.raises(InvalidHandover):
        plain.after_held_batch(2, reader.batch_sources(2), "x")  # only the batch the stop cut
    bad = {**held.to_dict(), "held_by_sink": 3}
    with pytest.raises(InvalidHandover):
        Handover.from_json(bad)


KAFKA_OUT = SinkSpec.from_value({"kind": "kafka", "location": "out"})


def test_a_kafka_sink_with_source_headers_counts_exactly_what_it_holds_of_the_cut_batch() -> None:
    # batch M read events-0 [300, 400) and events-2 from the earliest to 7; the output holds 300..349
    # and 360 of partition 0, nothing of partition 2, and records of the batch before (proof of headers)
    seen = {("events", 0, o) for o in range(250, 350)} | {("events", 0, 360), ("other", 0, 310)}
    account = account_cut(KAFKA_OUT, cut_batch=3, committed=COMMITTED, planned=PLANNED, record=None, seen=seen)
    assert account.disposition is CutDisposition.COUNTED and not account.exact
    assert account.twice == (OffsetRange("events", 0, 300, 350), OffsetRange("events", 0, 360, 361))
    assert "51 record(s)" in account.why and account.lines()[1].startswith("processed twice: events-0 [300, 350)")


@pytest.mark.parametrize("seen", [None, set()])
def test_a_kafka_sink_whose_records_name_no_source_stays_at_least_once(seen: set | None) -> None:
    account = account_cut(KAFKA_OUT, cut_batch=3, committed=COMMITTED, planned=PLANNED, record=None, seen=seen)
    assert account.disposition is CutDisposition.MAY_REPEAT and len(account.twice) == 2


def test_a_held_cut_batch_seen_in_the_output_of_a_kafka_sink_counts_none_when_none_is_there() -> None:
    seen = {("events", 0, 299)}  # the batch before the cut one wrote; the cut one wrote nothing yet
    account = account_cut(KAFKA_OUT, cut_batch=3, committed=COMMITTED, planned=PLANNED, record=None, seen=seen)
    assert account.disposition is CutDisposition.COUNTED and account.twice == () and account.exact


@pytest.mark.parametrize(("delivered", "disposition", "batch_id"), [
    (3, "held", 3),         # the job's function returned for the cut batch: hand over after it
    (2, "may_repeat", 2),   # cut inside the function: it may have written part of it
    (None, "may_repeat", 2),  # no wrapper (or it never recorded): at-least-once
])
def test_a_foreach_batch_job_is_decided_by_the_wrappers_delivery_record(
        tmp_path: Path, delivered: int | None, disposition: str, batch_id: int) -> None:
    from airflow_ckpt_provider.records.control import DELIVERED, Delivery

    built = write_checkpoint(str(tmp_path / "ck"), batches=range(4), committed=range(3))
    if delivered is not None:
        (tmp_path / "ck" / DELIVERED).parent.mkdir()
        (tmp_path / "ck" / DELIVERED).write_text(Delivery(delivered, "2026-11-27T07:00:00.000+00:00").to_json())
    result = extract(built.uri, {"kind": "foreach_batch"})
    assert result["sink"]["disposition"] == disposition
    assert Handover.from_json(result["handover"]).batch_id == batch_id
    assert result["sink"]["exact"] == (disposition == "held")


@pytest.mark.parametrize("kind", ["foreach_batch", "none", "delta"])
def test_a_batch_held_at_the_gate_wrote_nothing_whatever_the_sink(kind: str) -> None:
    spec = SPECS.get(kind) or SinkSpec.from_value({"kind": kind})
    account = account_cut(spec, cut_batch=3, committed=COMMITTED, planned=PLANNED, record=None, held_at_gate=True)
    assert account.disposition is CutDisposition.NOT_HELD and account.exact and "held batch 3" in account.why


def test_the_handover_step_reads_the_gate_from_the_stop_acknowledgement(tmp_path: Path) -> None:
    from airflow_ckpt_provider.records.control import STOP_ACK, StopAck

    built = write_checkpoint(str(tmp_path / "ck"), batches=range(4), committed=range(3))
    (tmp_path / "ck" / STOP_ACK).parent.mkdir()
    ack = StopAck(request_id="r", query_id=QUERY_ID, run_id="x", outcome="held", last_committed_batch=2,
                  last_planned_batch=3, stopped_at="2026-11-27T07:00:00.000+00:00")
    (tmp_path / "ck" / STOP_ACK).write_text(ack.to_json())
    result = extract(built.uri, {"kind": "foreach_batch"})
    assert result["sink"]["disposition"] == "not_held" and result["sink"]["exact"]
    assert Handover.from_json(result["handover"]).batch_id == 2
