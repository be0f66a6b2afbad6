"""KafkaOffsets value object and source classification."""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.checkpoint.errors import CheckpointError, InvalidOffsets
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind, SourceOffsets, classify


def test_from_json_normalises_key_order_and_round_trips() -> None:
    offsets = KafkaOffsets.from_json('{"b":{"10":5,"2":7},"a":{"1":3,"0":-2}}')
    assert offsets.to_json() == '{"a":{"0":-2,"1":3},"b":{"2":7,"10":5}}'
    assert offsets.topics == ("a", "b")
    assert KafkaOffsets.from_json(offsets.to_json()) == offsets
    assert KafkaOffsets.from_json(offsets.to_dict()) == offsets


def test_accessors() -> None:
    offsets = KafkaOffsets({"t": {0: 10, 1: -1, 2: 5}, "u": {0: -2}})
    assert offsets.partitions() == frozenset({("t", 0), ("t", 1), ("t", 2), ("u", 0)})
    assert offsets.get("t", 2) == 5
    assert offsets.get("t", 9) is None
    assert offsets.get("nope", 0, default=-7) == -7
    assert offsets.total() == 15
    assert len(offsets) == 4
    assert list(offsets.items()) == [("t", 0, 10), ("t", 1, -1), ("t", 2, 5), ("u", 0, -2)]


def test_equality_and_hash_ignore_construction_order() -> None:
    one = KafkaOffsets({"t": {1: 2, 0: 1}, "a": {0: 0}})
    two = KafkaOffsets({"a": {0: 0}, "t": {0: 1, 1: 2}})
    assert one == two and hash(one) == hash(two)
    assert one != KafkaOffsets({"a": {0: 0}, "t": {0: 1, 1: 3}})
    assert len({one, two}) == 1


def test_is_immutable() -> None:
    offsets = KafkaOffsets({"t": {0: 1}})
    with pytest.raises(TypeError):
        offsets.offsets["t"][0] = 5  # type: ignore[index]
    with pytest.raises(AttributeError):
        offsets.offsets = {}  # type: ignore[misc]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"t": 5}',
        '{"t": {"x": 1}}',
        '{"t": {"01": 1}}',
        '{"t": {"-1": 1}}',
        '{"t": {"0": -3}}',
        '{"t": {"0": 1.5}}',
        '{"t": {"0": true}}',
        '{"t": {"0": "5"}}',
        '{"t": {"0": 1, "0": 2}}',
        '{"": {"0": 1}}',
        '{"t": {"0": NaN}}',
    ],
)
def test_from_json_rejects(text: str) -> None:
    with pytest.raises(InvalidOffsets) as info:
        KafkaOffsets.from_json(text)
    assert isinstance(info.value, ValueError) and isinstance(info.value, CheckpointError)
    assert "expected topic -> partition -> offset" in str(info.value)


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ('{"events":{"1":7,"0":23}}', SourceKind.KAFKA),
        ("11", SourceKind.RATE),  # real Spark 4.2 rate source line
        ('{"offset":90,"timestamp":9000}', SourceKind.RATE_MICRO_BATCH),  # real rate-micro-batch
        ('{"logOffset":2}', SourceKind.FILE),  # real file source
        ('{"sourceVersion":1,"reservoirId":"x","reservoirVersion":3,"index":-1,"isStartingVersion":false}', SourceKind.DELTA),
        (None, SourceKind.NONE),
        ("{}", SourceKind.UNKNOWN),
        ('"text"', SourceKind.UNKNOWN),
        ('{"a":1,"b":{"0":1}}', SourceKind.UNKNOWN),
    ],
)
def test_classify(raw: str | None, kind: SourceKind) -> None:
    found, kafka = classify(raw)
    assert found is kind
    assert (kafka is not None) == (kind is SourceKind.KAFKA)


def test_kafka_shaped_but_invalid_is_an_error_not_unknown() -> None:
    with pytest.raises(InvalidOffsets):
        classify('{"events":{"0":"x"}}')
    with pytest.raises(InvalidOffsets):
        classify('{"events":{"0":1}')


def test_source_offsets_json_view() -> None:
    kafka = SourceOffsets.parse(0, '{"t":{"1":2,"0":1}}')
    assert kafka.offsets_json() == {"t": {"0": 1, "1": 2}}
    assert kafka.kafka == KafkaOffsets({"t": {0: 1, 1: 2}})
    assert SourceOffsets.parse(1, "42").offsets_json() == 42
    assert SourceOffsets.parse(2, None).offsets_json() is None
    assert SourceOffsets.parse(3, "7", name="src_a").label == "src_a"
