"""Bugs the fuzzing of real checkpoints (tests/integration/test_fuzz_real_checkpoint.py) found, pinned."""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.checkpoint.errors import CorruptCheckpointFile
from airflow_ckpt_provider.checkpoint.logs import parse_initial_offsets, parse_initial_source
from airflow_ckpt_provider.checkpoint.offsets import SourceKind

KAFKA = b'{"t":{"0":0,"1":0}}'


@pytest.mark.parametrize("data", [
    b"\x00x1\n" + KAFKA,  # version line damaged: passed for an "unknown" multi-line source
    b"\x00\n" + KAFKA,  # version line emptied
    b'\x00v1\n{"t":{"0":0\n"1":0}}',  # a flipped byte became a newline inside the JSON
    b"\x00v1\n" + KAFKA + b"\n" + KAFKA,  # a second offset line
    b"\x00v1",  # truncated after the version
])
def test_kafka_initial_offsets_with_the_marker_byte_must_be_exact(data: bytes) -> None:
    with pytest.raises(CorruptCheckpointFile) as refused:
        parse_initial_source(data, "sources/0/0", 0)
    assert "sources/0/0" in str(refused.value)


def test_marker_byte_rules_leave_other_sources_alone() -> None:
    assert parse_initial_offsets(b"\x00v1\n" + KAFKA + b"\n", "s") == KAFKA.decode()  # trailing newline
    assert parse_initial_offsets(b"\x00" + KAFKA, "s") == KAFKA.decode()  # no version line: Spark 2.1, as Spark reads it
    file_log = b'v1\n{"path":"a","timestamp":1,"batchId":0}\n{"path":"b","timestamp":1,"batchId":0}'
    assert parse_initial_source(file_log, "s", 0).kind is SourceKind.UNKNOWN  # no marker: a source's own log
    assert parse_initial_source(b"v1\n1795290389976", "s", 0).kind is SourceKind.RATE
