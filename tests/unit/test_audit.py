"""The sink audit finds every lost and duplicated record (synthetic Parquet written by pyarrow), and
`ckpt audit` prints the line the own-job page reads."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.local.audit import audit, json_fields_match, read_sink_records


def write(folder: Path, name: str, rows: list[tuple[str, int, int]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    topics, partitions, offsets = zip(*rows, strict=False) if rows else ((), (), ())
    table = pa.table({"topic": list(topics), "partition": pa.array(partitions, pa.int32()),
                      "offset": pa.array(offsets, pa.int64())})
    pq.write_table(table, folder / name)


RANGES = {("t", 0): (0, 5), ("t", 1): (2, 4)}


def test_exact_sink_is_ok(tmp_path: Path) -> None:
    write(tmp_path / "v1", "a.parquet", [("t", 0, o) for o in range(3)] + [("t", 1, 2)])
    write(tmp_path / "v2", "b.parquet", [("t", 0, 3), ("t", 0, 4), ("t", 1, 3)])
    write(tmp_path / "v2" / "_temporary", "partial.parquet", [("t", 0, 4)])  # uncommitted: ignored
    result = audit(read_sink_records(tmp_path / "v1", tmp_path / "v2"), RANGES)
    assert result.ok
    assert (result.produced, result.in_sink, result.distinct) == (7, 7, 7)


def test_lost_duplicated_and_unexpected_are_counted() -> None:
    seen = Counter({("t", 0, 0): 1, ("t", 0, 1): 3, ("t", 0, 4): 1, ("t", 1, 2): 1, ("t", 1, 9): 1})
    result = audit(seen, RANGES)
    assert not result.ok
    assert result.lost == 3  # t-0: 2, 3; t-1: 3
    assert result.lost_examples == (("t", 0, 2), ("t", 0, 3), ("t", 1, 3))
    assert result.duplicated == 2
    assert result.duplicated_examples == (("t", 0, 1),)
    assert result.unexpected == 1


def test_missing_sink_loses_everything(tmp_path: Path) -> None:
    result = audit(read_sink_records(tmp_path / "nothing"), RANGES)
    assert (result.lost, result.in_sink) == (7, 0)


def test_dropped_records_are_not_expected_and_unexpected_in_the_sink() -> None:
    dropped = {("t", 0, 1), ("t", 0, 3), ("t", 9, 0)}  # the last is outside the ranges: ignored
    seen = Counter({("t", 0, 0): 1, ("t", 0, 2): 1, ("t", 0, 4): 1, ("t", 1, 2): 1, ("t", 1, 3): 1})
    result = audit(seen, RANGES, dropped=dropped)
    assert result.ok and (result.produced, result.dropped, result.lost) == (5, 2, 0)
    leaked = audit(seen + Counter({("t", 0, 3): 1}), RANGES, dropped=dropped)  # a dropped one in the sink
    assert not leaked.ok and leaked.unexpected == 1
    missing = audit(seen - Counter({("t", 0, 4): 1}), RANGES, dropped=dropped)
    assert (missing.lost, missing.lost_examples) == (1, (("t", 0, 4),))


def test_the_one_line_names_every_count_as_the_own_job_page_reads_it() -> None:
    from tests.system.test_own_job_page import AUDIT_LINE

    seen = Counter({("t", 0, 0): 2, ("t", 0, 1): 1, ("t", 0, 4): 1, ("x", 0, 0): 1})
    result = audit(seen, RANGES, dropped={("t", 0, 4), ("t", 1, 3)})
    line = result.describe()
    assert line.startswith(f"audit: {result.produced + result.dropped} records in Kafka, ")
    found = AUDIT_LINE.search(line)
    assert found, line
    assert {k: int(v) for k, v in found.groupdict().items()} == {
        "dropped": 2, "expected": result.produced, "in_sink": 5, "lost": result.lost, "dup": 1, "unexpected": 2}


@pytest.mark.parametrize(("value", "fields", "kept"), [
    (b'{"status": "paid", "n": 3}', {"status": "paid"}, True),
    (b'{"status": "cancelled"}', {"status": "paid"}, False),
    (b'{"n": 3, "ok": true}', {"n": "3", "ok": "true"}, True),
    (b'{"n": 3}', {"status": "paid"}, False),  # a missing field does not match
    (b'{"status": "paid"}', {}, True),
])
def test_json_fields_match(value: bytes, fields: dict[str, str], kept: bool) -> None:
    assert json_fields_match(value, fields) is kept


@pytest.mark.parametrize("value", [b"not json", b"[1, 2]", None])
def test_a_value_that_is_no_json_object_is_refused(value: bytes | None) -> None:
    with pytest.raises(ValueError, match="not a JSON object"):
        json_fields_match(value, {"status": "paid"})


def test_ckpt_audit_refuses_a_keep_without_a_value_and_a_missing_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from airflow_ckpt_provider import cli

    with pytest.raises(SystemExit):
        cli.main(["audit", "sink", "--topic", "t", "--keep", "status"], stdout=io.StringIO(), stderr=io.StringIO())
    monkeypatch.delenv("KAFKA_BOOTSTRAP", raising=False)
    err = io.StringIO()
    assert cli.main(["audit", "sink", "--topic", "t"], stdout=io.StringIO(), stderr=err) == 2
    assert "found no --bootstrap-servers and no $KAFKA_BOOTSTRAP" in err.getvalue()


class _Reader:
    """Stands in for the checkpoint reader at the command's boundary: each call answers the next of
    ``answers`` (an exception is raised, offsets are handed over), the last one for ever."""

    def __init__(self, answers: list[object]) -> None:
        self.answers = answers

    def __call__(self, location: str) -> _Reader:
        return self

    def handover(self) -> _Reader:
        return self

    def kafka_offsets(self) -> object:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_the_audit_waits_for_the_query_to_reach_or_pass_the_log_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_ckpt_provider.checkpoint.errors import CorruptCheckpointFile, CredentialsInLocation
    from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
    from airflow_ckpt_provider.cli import audit as command

    monkeypatch.setattr(command, "POLL_S", 0.0)
    ends = {("t", 0): (0, 10), ("t", 1): (0, 5)}
    partial = CorruptCheckpointFile(found="offsets/3 half written", expected="a whole file")
    short, past = KafkaOffsets({"t": {0: 10, 1: 4}}), KafkaOffsets({"t": {0: 12, 1: 5}})
    monkeypatch.setattr(command, "CheckpointReader", _Reader([partial, short, past]))
    assert command.caught_up("/cp", ends, wait_s=600), "a query that read past the ends (producers on) is caught up"
    monkeypatch.setattr(command, "CheckpointReader", _Reader([short]))
    assert not command.caught_up("/cp", ends, wait_s=0.05)
    secret = CredentialsInLocation(found="s3://key:secret@bucket/cp", expected="no credentials in a location")
    monkeypatch.setattr(command, "CheckpointReader", _Reader([secret]))
    with pytest.raises(CredentialsInLocation):  # waiting cannot mend it: not waited out for 900 s
        command.caught_up("/cp", ends, wait_s=600)
