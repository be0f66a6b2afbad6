"""CheckpointHandoverOperator with a fake Kafka hook (the broker is faked at the hook boundary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint import BrokerView, ExpiredOffsets, Handover, KafkaOffsets
from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator
from tests.unit.conftest import write_checkpoint


class FakeKafkaHook:
    def __init__(self, view: BrokerView) -> None:
        self.view = view
        self.asked: list[list[str]] = []

    def broker_view(self, topics) -> BrokerView:  # noqa: ANN001
        self.asked.append(sorted(topics))
        return self.view


def operator(uri: str, view: BrokerView, **kwargs) -> CheckpointHandoverOperator:  # noqa: ANN003
    op = CheckpointHandoverOperator(task_id="extract", checkpoint_uri=uri, **kwargs)
    op.kafka_hook = FakeKafkaHook(view)  # cached_property: the instance attribute wins
    return op


def test_returns_last_committed_batch_reconciled(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(4), committed=range(3))
    # batch 2 is the last committed: offsets 300 + p; 4 live partitions plus a new one
    view = BrokerView({"events": {p: (0, 1000) for p in range(5)}})
    op = operator(built.uri, view)
    result = op.execute(context={})

    handover = Handover.from_json(result["handover"])
    assert handover.batch_id == 2 and handover.in_flight_batch == 3
    starting = KafkaOffsets.from_json(result["starting_offsets"])
    assert {p: starting.get("events", p) for p in range(5)} == {0: 300, 1: 301, 2: 302, 3: 303, 4: -2}
    assert result["reconciliation"]["addedPartitions"] == [{"topic": "events", "partition": 4}]
    assert op.kafka_hook.asked == [["events"]]


def test_expired_offsets_refused_unless_accepted(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"))
    view = BrokerView({"events": {p: (350, 1000) for p in range(4)}})
    with pytest.raises(ExpiredOffsets):
        operator(built.uri, view).execute(context={})
    result = operator(built.uri, view, accept_data_loss=True).execute(context={})
    assert KafkaOffsets.from_json(result["starting_offsets"]).get("events", 0) == 350


def test_template_fields_are_strings_only() -> None:
    op = CheckpointHandoverOperator(task_id="x", checkpoint_uri="{{ params.cp }}")
    for field in op.template_fields:
        value = getattr(op, field)
        assert value is None or isinstance(value, (str, bool)), field  # a bool renders as itself


class FakeBroker:
    def __init__(self, found: dict[tuple[str, int], int | None]) -> None:
        self.found = found
        self.asked: list[int] = []

    def offsets_for_time(self, partitions, timestamp_ms: int) -> dict:  # noqa: ANN001
        self.asked.append(timestamp_ms)
        return {tp: self.found.get(tp) for tp in partitions}


def test_rewind_hands_over_the_start_of_batch_k_with_its_plan(tmp_path: Path) -> None:
    from airflow_ckpt_provider.checkpoint.handover import HandoverResult

    built = write_checkpoint(str(tmp_path / "ck"), batches=range(6), committed=range(5))
    view = BrokerView({"events": {p: (0, 1000) for p in range(4)}})
    start = '{"mode": "rewind_to_batch", "value": "3"}'
    result = operator(built.uri, view, start=start, accept_reprocessing="True").execute(context={})
    given = HandoverResult.from_json(result)
    assert given.handover.batch_id == 4  # where the old query stopped, kept for the report
    assert given.offsets() == given.expected_start() == built.kafka(2)  # batch 3 starts where 2 ended
    assert given.start_plan is not None and given.start_plan.reprocessed == 4 * 200
    assert HandoverResult.from_json(given.to_json()) == given


def test_a_start_other_than_resume_needs_consent_and_changes_nothing(tmp_path: Path) -> None:
    from airflow_ckpt_provider.checkpoint.errors import InvalidStartChoice, ReprocessingNotAccepted

    built = write_checkpoint(str(tmp_path / "ck"), batches=range(6), committed=range(5))
    before = {f: built.read(f) for f in built.files()}
    view = BrokerView({"events": {p: (0, 1000) for p in range(4)}})
    with pytest.raises(ReprocessingNotAccepted, match="accept_reprocessing=True"):
        operator(built.uri, view, start={"mode": "rewind_to_batch", "value": 3}).execute(context={})
    with pytest.raises(InvalidStartChoice, match="accept_reprocessing='maybe'"):
        operator(built.uri, view, start={"mode": "rewind_to_batch", "value": 3},
                 accept_reprocessing="maybe").execute(context={})
    assert {f: built.read(f) for f in built.files()} == before


def test_at_time_asks_the_broker_and_ends_partitions_without_newer_records(tmp_path: Path) -> None:
    from airflow_ckpt_provider.checkpoint.handover import HandoverResult

    built = write_checkpoint(str(tmp_path / "ck"), batches=range(6), committed=range(5))
    view = BrokerView({"events": {p: (0, 1000) for p in range(4)}})
    op = operator(built.uri, view, start={"mode": "at_time", "value": "2026-11-23T10:00:00+00:00"},
                  accept_reprocessing=True, accept_data_loss=True)
    broker = FakeBroker({("events", 0): 450, ("events", 1): 510, ("events", 2): 480})
    op.kafka_hook.broker = broker  # type: ignore[attr-defined]
    given = HandoverResult.from_json(op.execute(context={}))
    assert broker.asked == [1795428000000]  # 2026-11-23T10:00Z in epoch ms
    assert given.offsets() == KafkaOffsets({"events": {0: 450, 1: 510, 2: 480, 3: 1000}})
    assert given.start_plan is not None
    assert [(p.reprocessed, p.skipped) for p in given.start_plan.partitions] == [(50, 0), (0, 9), (22, 0), (0, 497)]


def test_source_must_be_index_or_name() -> None:
    with pytest.raises(TypeError):
        CheckpointHandoverOperator(task_id="x", checkpoint_uri="/cp", source=1.5)  # type: ignore[arg-type]
