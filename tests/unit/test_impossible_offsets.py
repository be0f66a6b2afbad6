"""Impossible offsets: what Spark's KafkaSourceOffset cannot hold is refused everywhere, and what
Spark never records for a committed batch (a -1/-2 sentinel) is refused where a committed batch is
read (the reader, a rewind, a handover) - while -2 for a new partition stays legitimate where the
provider's reconciliation and the user's startingOffsets put it."""

from __future__ import annotations

import json

import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    CorruptCheckpointFile,
    ImpossibleOffsets,
    InvalidHandover,
    InvalidOffsets,
)
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.logs import parse_initial_source
from airflow_ckpt_provider.checkpoint.offsets import MAX_OFFSET, MAX_PARTITION, KafkaOffsets, SourceOffsets
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView, reconcile
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.unit.conftest import kafka_json, write_checkpoint

TAKEN = "2026-01-01T00:00:00+00:00"


@pytest.mark.parametrize("text, culprit", [
    ('{"t":{"0":9223372036854775808}}', "9223372036854775808"),          # 2^63: beyond a Java long
    ('{"t":{"0":18446744073709551616}}', "18446744073709551616"),        # 2^64
    ('{"t":{"9223372036854775808":5}}', "9223372036854775808"),          # partition 2^63
    ('{"t":{"2147483648":5}}', "2147483648"),                            # partition 2^31: beyond a Java int
    ('{"t":{"0":-3}}', "-3"),
    ('{"t":{"' + "9" * 5000 + '":1}}', "5002 characters"),              # no int() of 5000 digits, short message
])
def test_out_of_range_offsets_and_partitions_are_refused_everywhere(text: str, culprit: str) -> None:
    with pytest.raises(InvalidOffsets) as info:
        KafkaOffsets.from_json(text)
    assert culprit in str(info.value) and len(str(info.value)) < 400
    assert f"offset -2..{MAX_OFFSET}" in str(info.value)


def test_the_largest_values_spark_holds_are_accepted() -> None:
    offsets = KafkaOffsets({"t": {MAX_PARTITION: MAX_OFFSET, 0: 0}})
    assert KafkaOffsets.from_json(offsets.to_json()) == offsets
    with pytest.raises(InvalidOffsets, match="integer of 4097 bits"):
        KafkaOffsets({"t": {0: 2**4096}})  # the message does not print a 1,234-digit number


def test_sentinels_stay_legitimate_in_starting_offsets_and_initial_offsets() -> None:
    assert KafkaOffsets.from_json('{"t":{"0":-1,"1":-2}}').get("t", 1) == -2
    broker = BrokerView({"t": {0: (0, 50), 1: (0, 10)}})
    assert reconcile(KafkaOffsets({"t": {0: 40}}), broker).starting_offsets.get("t", 1) == -2
    initial = parse_initial_source(b'\x00v1\n{"t":{"0":-2}}', "/ck/sources/0/0", 0)
    handover = Handover(query_id=None, checkpoint_uri="/ck", batch_id=None, from_initial=True,
                        sources=(initial,), in_flight_batch=0, taken_at=TAKEN)
    assert handover.kafka_offsets().get("t", 0) == -2


@pytest.mark.parametrize("sentinel", [-1, -2])
@pytest.mark.parametrize("crc", [False, True])
def test_a_committed_batch_with_a_sentinel_is_refused_naming_batch_and_file(tmp_path, sentinel: int, crc: bool) -> None:  # noqa: ANN001
    location = str(tmp_path / "ck")

    def lines(batch: int) -> list[str | None]:
        return [kafka_json({"events": {0: 100 * (batch + 1), 1: sentinel if batch == 1 else 7}})]

    write_checkpoint(location, batches=range(3), committed=range(2), sources=lines, crc=crc)
    later = str(tmp_path / "later")  # batch 1 is no longer the last committed one: a rewind reads it
    write_checkpoint(later, batches=range(3), committed=range(3), sources=lines, crc=crc)
    reader, rewinder = CheckpointReader(location), CheckpointReader(later)
    for call, root in ((reader.snapshot, location), (reader.handover, location),
                       (lambda: rewinder.batch_start(2, taken_at=TAKEN), later)):
        with pytest.raises(ImpossibleOffsets) as info:
            call()
        error = info.value
        assert isinstance(error, CorruptCheckpointFile) and error.batch == 1
        assert error.path == f"{root}/offsets/1"
        text = str(error)
        assert f"events-1={sentinel}" in text and "committed batch 1" in text and "restore it from a backup" in text
    # batches whose offsets hold no sentinel are read as before
    assert reader.batch_start(1, taken_at=TAKEN).kafka_offsets().get("events", 1) == 7
    assert rewinder.snapshot().last_committed_batch == 2


def test_a_handover_file_from_a_committed_batch_with_a_sentinel_is_refused() -> None:
    good = Handover(query_id=None, checkpoint_uri="/ck", batch_id=4, from_initial=False,
                    sources=(SourceOffsets.parse(0, '{"t":{"0":5}}'),), in_flight_batch=None, taken_at=TAKEN)
    data = json.loads(good.to_json())
    data["sources"][0]["raw"] = '{"t":{"0":-1}}'
    data["sources"][0]["offsets"] = {"t": {"0": -1}}
    with pytest.raises(ImpossibleOffsets) as info:
        Handover.from_json(json.dumps(data))
    assert isinstance(info.value, InvalidHandover)  # callers that refuse a bad handover file still do
    assert info.value.path == "/ck/offsets/4" and "t-0=-1" in str(info.value)
