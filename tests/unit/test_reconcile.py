"""Pure reconciliation of handed-over offsets with a broker view."""

from __future__ import annotations

import json

import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    ExpiredOffsets,
    OffsetsAheadOfBroker,
    UnknownTopic,
    VanishedPartitions,
)
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView, reconcile

BROKER = BrokerView({"t": {0: (0, 100), 1: (10, 50), 2: (0, 0)}, "other": {0: (0, 9)}})


def test_everything_in_range_is_unchanged() -> None:
    offsets = KafkaOffsets({"t": {0: 100, 1: 10, 2: 0}})
    result = reconcile(offsets, BROKER)
    assert result.starting_offsets == offsets
    assert result.added_partitions == frozenset() and result.expired == ()


def test_new_partitions_start_at_earliest_and_other_topics_are_ignored() -> None:
    result = reconcile(KafkaOffsets({"t": {0: 40}}), BROKER)
    assert result.starting_offsets.to_json() == '{"t":{"0":40,"1":-2,"2":-2}}'
    assert result.added_partitions == frozenset({("t", 1), ("t", 2)})


def test_sentinels_pass_through() -> None:
    result = reconcile(KafkaOffsets({"t": {0: -1, 1: -2, 2: -2}}), BROKER)
    assert result.starting_offsets == KafkaOffsets({"t": {0: -1, 1: -2, 2: -2}})


def test_unknown_topic() -> None:
    with pytest.raises(UnknownTopic, match="gone_topic") as info:
        reconcile(KafkaOffsets({"gone_topic": {0: 1}, "t": {0: 1}}), BROKER)
    assert info.value.topics == ("gone_topic",)


def test_vanished_partitions_are_all_listed() -> None:
    with pytest.raises(VanishedPartitions, match="t-3, t-7") as info:
        reconcile(KafkaOffsets({"t": {0: 1, 3: 1, 7: 1}}), BROKER)
    assert info.value.partitions == (("t", 3), ("t", 7))


def test_expired_offsets_refused_by_default() -> None:
    with pytest.raises(ExpiredOffsets, match="t-1 at 5 \\(broker 10\\)") as info:
        reconcile(KafkaOffsets({"t": {0: 50, 1: 5, 2: 0}}), BROKER)
    assert info.value.details == (("t", 1, 5, 10),)
    assert "--accept-data-loss" in str(info.value)


def test_expired_offsets_clamped_when_loss_accepted() -> None:
    result = reconcile(KafkaOffsets({"t": {0: 50, 1: 5, 2: 0}}), BROKER, accept_data_loss=True)
    assert result.starting_offsets == KafkaOffsets({"t": {0: 50, 1: 10, 2: 0}})
    assert result.expired == (("t", 1, 5, 10),)
    assert json.loads(result.to_json()) == {
        "startingOffsets": {"t": {"0": 50, "1": 10, "2": 0}},
        "addedPartitions": [],
        "expired": [{"topic": "t", "partition": 1, "offset": 5, "earliest": 10}],
        "acceptDataLoss": True,
    }


def test_offsets_ahead_of_broker_refused_even_when_loss_accepted() -> None:
    for accept in (False, True):
        with pytest.raises(OffsetsAheadOfBroker, match="t-0 at 101 \\(broker 100\\)") as info:
            reconcile(KafkaOffsets({"t": {0: 101, 1: 5}}), BROKER, accept_data_loss=accept)
        assert info.value.details == (("t", 0, 101, 100),)


def test_many_problems_are_summarised() -> None:
    broker = BrokerView({"big": {p: (1000, 2000) for p in range(20)}})
    with pytest.raises(ExpiredOffsets, match="and 15 more") as info:
        reconcile(KafkaOffsets({"big": {p: 0 for p in range(20)}}), broker)
    assert len(info.value.details) == 20


def test_broker_view_validates_and_is_hashable() -> None:
    with pytest.raises(ValueError):
        BrokerView({"t": {0: (5, 4)}})
    with pytest.raises(ValueError):
        BrokerView({"t": {-1: (0, 4)}})
    assert hash(BrokerView({"t": {1: (0, 1), 0: (0, 1)}})) == hash(BrokerView({"t": {0: (0, 1), 1: (0, 1)}}))
    assert BROKER.partitions("nope") == {}


def test_error_messages_compose_and_survive_pickling() -> None:
    import pickle

    from airflow_ckpt_provider.checkpoint.errors import CheckpointError, CorruptCheckpointFile

    error = ExpiredOffsets(details=(("t", 1, 5, 10),), found="t-1 at 5", expected="offsets >= 10")
    assert str(error).startswith("offsets fell out of retention: found t-1 at 5; expected offsets >= 10. ")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.details) == (ExpiredOffsets, str(error), error.details)
    corrupt = CorruptCheckpointFile(path="/ck/offsets/7", line=3, found="x", expected="y", action="Do z.")
    assert str(corrupt) == "corrupt checkpoint file (/ck/offsets/7, line 3): found x; expected y. Do z."
    assert pickle.loads(pickle.dumps(corrupt)).line == 3
    assert isinstance(corrupt, CheckpointError)
