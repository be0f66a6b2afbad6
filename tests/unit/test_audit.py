"""The sink audit finds every lost and duplicated record (synthetic Parquet written by pyarrow)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_ckpt_provider.local.audit import audit, read_sink_records


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
