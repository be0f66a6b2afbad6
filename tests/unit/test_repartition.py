"""Spark 4.2's offline state repartition batches (SPARK-54345): recognised by the reader, handed over
with the offsets of the batch they repartition, and shown by ``ckpt inspect``. The "real" entries
were written by pyspark 4.2.0 (``spark._streamingCheckpointManager.repartition(path, 2)`` after
three batches of a RocksDB aggregation); ``tests/integration/test_spark42_repartition.py`` writes
such a checkpoint again on every run, with Kafka, and resumes it."""

from __future__ import annotations

import io
import json
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.logs import parse_offset_log
from airflow_ckpt_provider.checkpoint.repartition import (
    RepartitionBatch,
    repartition_batch,
    shuffle_partitions,
)
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.unit.conftest import write_checkpoint

_REAL_CONF = ('"conf":{"spark.sql.streaming.stateStore.providerClass":"org.apache.spark.sql.execution.streaming.'
              'state.RocksDBStateStoreProvider","spark.sql.streaming.stateStore.encodingFormat":"unsaferow",'
              '"spark.sql.shuffle.partitions":"{n}","spark.sql.streaming.multipleWatermarkPolicy":"min"}}')
#: offsets/2 and offsets/3 as Spark 4.2.0 wrote them (conf cut to four keys): batch 3 is the repartition
REAL_2 = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1795774571358,' + _REAL_CONF.replace("{n}", "4") + \
         '\n{"offset":150,"timestamp":3000}'
REAL_3 = REAL_2.replace('"spark.sql.shuffle.partitions":"4"', '"spark.sql.shuffle.partitions":"2"')


def _entry(text: str) -> Any:
    return parse_offset_log(text.encode(), "offsets/N")


def test_a_real_spark42_repartition_batch_is_recognised_by_sparks_own_rule() -> None:
    assert repartition_batch(3, _entry(REAL_3), _entry(REAL_2), committed=True) == RepartitionBatch(
        batch=3, from_partitions=4, to_partitions=2, committed=True, same_offsets=True)
    assert repartition_batch(3, _entry(REAL_2), _entry(REAL_2), committed=True) is None  # partitions unchanged
    assert repartition_batch(0, _entry(REAL_3), _entry(REAL_2), committed=True) is None  # never batch 0
    no_conf = 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1}\n{"offset":150,"timestamp":3000}'
    assert repartition_batch(3, _entry(REAL_3), _entry(no_conf), committed=True) is None


@pytest.mark.parametrize(("conf", "expected"), [({"spark.sql.shuffle.partitions": "200"}, 200), ({}, None),
                                                ({"spark.sql.shuffle.partitions": "x"}, None)])
def test_shuffle_partitions(conf: dict[str, str], expected: int | None) -> None:
    assert shuffle_partitions(conf) == expected


def _repartition(location: str, *, of: int, batch: int, partitions: str = "1", commit: bool = True) -> None:
    """Write batch ``batch`` as Spark's repartition does: ``offsets/<of>`` with another
    ``spark.sql.shuffle.partitions``, and (when finished) ``commits/<of>`` copied."""
    fs, root = fsspec.core.url_to_fs(location)
    text = fs.cat_file(f"{root}/offsets/{of}").decode()
    fs.pipe_file(f"{root}/offsets/{batch}", text.replace('"spark.sql.shuffle.partitions":"2"',
                                                         f'"spark.sql.shuffle.partitions":"{partitions}"').encode())
    if commit:
        fs.pipe_file(f"{root}/commits/{batch}", fs.cat_file(f"{root}/commits/{of}"))


def test_a_finished_repartition_hands_over_the_offsets_of_the_batch_it_repartitions(location: str) -> None:
    built = write_checkpoint(location, batches=range(4), state_operators=(0,))
    _repartition(location, of=3, batch=4)
    reader = CheckpointReader(location)
    snap = reader.snapshot()
    assert (snap.last_committed_batch, snap.in_flight_batch, snap.unfinished_repartition) == (4, None, None)
    assert snap.repartitions == (RepartitionBatch(4, 2, 1, committed=True, same_offsets=True),)
    handover = reader.handover()
    assert (handover.batch_id, handover.in_flight_batch) == (4, None)
    assert handover.kafka_offsets() == built.kafka(3)  # nothing skipped, nothing read twice
    assert "state repartition of batch 3 (spark.sql.shuffle.partitions 2 -> 1); it read no records: its " \
           "offsets are those of batch 3" in snap.repartitions[0].describe()


def test_an_unfinished_repartition_is_in_flight_and_named(location: str) -> None:
    built = write_checkpoint(location, batches=range(4), state_operators=(0,))
    _repartition(location, of=3, batch=4, commit=False)
    reader = CheckpointReader(location)
    snap = reader.snapshot()
    assert snap.unfinished_repartition == RepartitionBatch(4, 2, 1, committed=False, same_offsets=True)
    assert "STREAMING_UNFINISHED_REPARTITION_DETECTED" in snap.unfinished_repartition.describe()
    handover = reader.handover()
    assert (handover.batch_id, handover.in_flight_batch, handover.kafka_offsets()) == (3, 4, built.kafka(3))


def test_a_repartition_that_skipped_an_uncommitted_batch_says_its_records_are_read_again(location: str) -> None:
    """enforceExactlyOnceSink=false: Spark commits the uncommitted batch 3 empty and copies the
    offsets of batch 2, the last one committed before it."""
    built = write_checkpoint(location, batches=range(4), committed=range(3), state_operators=(0,))
    fs, root = fsspec.core.url_to_fs(location)
    fs.pipe_file(f"{root}/commits/3", b'v1\n{"nextBatchWatermarkMs":0}')
    _repartition(location, of=2, batch=4)
    reader = CheckpointReader(location)
    (repartition,) = reader.snapshot().repartitions
    assert (repartition.batch, repartition.committed, repartition.same_offsets) == (4, True, False)
    assert "the records of batch 3 are read again" in repartition.describe()
    assert reader.handover().kafka_offsets() == built.kafka(2)


def test_a_stateless_checkpoint_reads_no_extra_offsets(location: str) -> None:
    write_checkpoint(location, batches=range(4))
    _repartition(location, of=3, batch=4)  # not Spark's doing: repartition needs state
    reader = CheckpointReader(location)
    assert reader.snapshot().repartitions == () and reader.files_opened == 3


def test_a_stateful_checkpoint_reads_at_most_two_more_offset_entries(location: str) -> None:
    write_checkpoint(location, batches=range(5), committed=range(4), state_operators=(0,))
    reader = CheckpointReader(location)
    assert reader.snapshot().repartitions == () and reader.files_opened == 3 + 2


def _inspect(*argv: str) -> str:
    out = io.StringIO()
    assert cli.main(["inspect", *argv], stdout=out, stderr=io.StringIO()) == 0
    return out.getvalue()


def test_ckpt_inspect_says_which_batch_is_a_repartition(tmp_path: Any) -> None:
    location = str(tmp_path / "ck")
    write_checkpoint(location, batches=range(4), state_operators=(0,))
    _repartition(location, of=3, batch=4)
    assert ("repartition      batch 4 is a state repartition of batch 3 (spark.sql.shuffle.partitions 2 -> 1)"
            in _inspect(location, "--recent", "0"))
    assert json.loads(_inspect(location, "--json"))["repartitions"] == [
        {"batch": 4, "of_batch": 3, "from_partitions": 2, "to_partitions": 1, "committed": True,
         "same_offsets": True}]


@pytest.mark.parametrize("sink", [{"kind": "kafka"}, None])
def test_the_sink_ledger_counts_an_unfinished_repartition_as_no_cut_batch(tmp_path: Any,
                                                                         sink: dict[str, str] | None) -> None:
    """Spark's failed repartition left batch 4 in flight: it read nothing, so no sink can hold any of it
    (without this the ledger would warn that an at-least-once sink may hold part of it)."""
    from tests.unit.test_sink_account import extract

    location = str(tmp_path / "ck")
    built = write_checkpoint(location, batches=range(4), state_operators=(0,))
    _repartition(location, of=3, batch=4, commit=False)
    result = extract(location, sink)
    handover = Handover.from_json(result["handover"])
    assert (handover.batch_id, handover.in_flight_batch, handover.kafka_offsets()) == (3, 4, built.kafka(3))
    assert result["sink"]["disposition"] == "none" and result["sink"]["exact"] and result["sink"]["twice"] == []
    assert "unfinished state repartition" in result["sink"]["why"]
