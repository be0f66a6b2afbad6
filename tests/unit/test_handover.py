"""Handover value object: JSON round trip, source selection, validation."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    AmbiguousSource,
    InvalidHandover,
    NoOffsets,
    SourceNotKafka,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, handover_from_snapshot
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind, SourceOffsets
from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot

TAKEN = "2026-11-21T19:47:00.000001+00:00"
KAFKA_A = SourceOffsets.parse(0, '{"a":{"1":7,"0":23}}')
RATE = SourceOffsets.parse(1, "11")
KAFKA_B = SourceOffsets.parse(2, '{"b":{"0":5}}', name="src_b")
FILE_LOG = SourceOffsets(index=3, kind=SourceKind.UNKNOWN, raw='{"path":"x"}\n{"path":"y"}')


def make(sources: tuple[SourceOffsets, ...] = (KAFKA_A, RATE), **kw: object) -> Handover:
    fields: dict[str, object] = dict(query_id="9abfa032-811f-4801-b1cb-101f6a0769c2", checkpoint_uri="s3://b/ck",
                                     batch_id=41, from_initial=False, sources=sources, in_flight_batch=42,
                                     taken_at=TAKEN)
    fields.update(kw)
    return Handover(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "handover",
    [
        make(),
        make((KAFKA_A, RATE, KAFKA_B, FILE_LOG, SourceOffsets.parse(4, None))),
        make(batch_id=None, from_initial=True, in_flight_batch=0, query_id=None),
        make(in_flight_batch=None),
    ],
)
def test_json_round_trip_is_exact(handover: Handover) -> None:
    text = handover.to_json()
    again = Handover.from_json(text)
    assert again == handover
    assert again.to_json() == text
    assert Handover.from_json(text.encode()) == Handover.from_json(json.loads(text)) == handover


def test_json_shape() -> None:
    data = json.loads(make().to_json())
    assert data["batch_id"] == 41 and data["from_initial"] is False and data["in_flight_batch"] == 42
    assert data["sources"][0] == {"index": 0, "name": None, "kind": "kafka", "raw": '{"a":{"1":7,"0":23}}',
                                  "offsets": {"a": {"0": 23, "1": 7}}}
    assert data["sources"][1]["offsets"] == 11


def test_kafka_offsets_selection() -> None:
    assert make().kafka_offsets() == KafkaOffsets({"a": {0: 23, 1: 7}})
    both = make((KAFKA_A, RATE, KAFKA_B))
    with pytest.raises(AmbiguousSource, match="0, src_b"):
        both.kafka_offsets()
    assert both.kafka_offsets(2) == both.kafka_offsets("2") == both.kafka_offsets("src_b") == KafkaOffsets({"b": {0: 5}})
    with pytest.raises(SourceNotKafka, match="kind rate"):
        both.kafka_offsets(1)
    with pytest.raises(SourceNotKafka, match="no source 7"):
        both.kafka_offsets(7)
    with pytest.raises(SourceNotKafka, match="0=rate"):
        make((replace(RATE, index=0),)).kafka_offsets()


@pytest.mark.parametrize(
    "kw",
    [
        {"batch_id": None},
        {"from_initial": True},
        {"batch_id": -1},
        {"batch_id": True},
        {"in_flight_batch": 41},
        {"sources": ()},
        {"sources": (KAFKA_A, replace(RATE, index=0))},
        {"taken_at": "yesterday"},
        {"taken_at": "2026-11-21T19:47:00"},
        {"taken_at": "2026-11-21T19:47:00+02:00"},
    ],
)
def test_constructor_rejects_inconsistent_fields(kw: dict[str, object]) -> None:
    with pytest.raises(InvalidHandover):
        make(**kw)


def _mutated(change) -> str:  # type: ignore[no-untyped-def]
    data = json.loads(make().to_json())
    change(data)
    return json.dumps(data)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        _mutated(lambda d: d.pop("taken_at")),
        _mutated(lambda d: d.update(extra=1)),
        _mutated(lambda d: d.update(format=2)),
        _mutated(lambda d: d.update(checkpoint_uri=5)),
        _mutated(lambda d: d.update(from_initial="no")),
        _mutated(lambda d: d["sources"][0].update(kind="rate")),
        _mutated(lambda d: d["sources"][0].update(offsets={"a": {"0": 24, "1": 7}})),
        _mutated(lambda d: d["sources"][0].update(raw='{"a":{"0":"x"}}')),
        _mutated(lambda d: d["sources"][0].update(raw="{broken")),
        _mutated(lambda d: d["sources"][0].pop("raw")),
        _mutated(lambda d: d["sources"][0].update(index="0")),
    ],
)
def test_from_json_rejects(text: str) -> None:
    with pytest.raises(InvalidHandover):
        Handover.from_json(text)


def _snapshot(**kw: object) -> CheckpointSnapshot:
    fields: dict[str, object] = dict(uri="/ck", query_id="q", last_committed_batch=3, last_planned_batch=4,
                                     in_flight_batch=4, sources=(KAFKA_A,), initial_sources=(KAFKA_B,))
    fields.update(kw)
    return CheckpointSnapshot(**fields)  # type: ignore[arg-type]


def test_from_snapshot_prefers_last_committed() -> None:
    handover = handover_from_snapshot(_snapshot(), taken_at=TAKEN)
    assert (handover.batch_id, handover.from_initial, handover.sources, handover.taken_at) == (3, False, (KAFKA_A,), TAKEN)


def test_from_snapshot_initial_when_nothing_committed() -> None:
    snap = _snapshot(last_committed_batch=None, sources=(), last_planned_batch=0, in_flight_batch=0)
    handover = handover_from_snapshot(snap)
    assert (handover.batch_id, handover.from_initial, handover.sources) == (None, True, (KAFKA_B,))
    assert handover.taken_at.endswith("+00:00")


def test_from_snapshot_without_anything() -> None:
    with pytest.raises(NoOffsets, match="batch 0 planned, not committed"):
        handover_from_snapshot(_snapshot(last_committed_batch=None, sources=(), initial_sources=(),
                                         last_planned_batch=0, in_flight_batch=0))

