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
        assert value is None or isinstance(value, str)


def test_source_must_be_index_or_name() -> None:
    with pytest.raises(TypeError):
        CheckpointHandoverOperator(task_id="x", checkpoint_uri="/cp", source=1.5)  # type: ignore[arg-type]
