"""Benchmark: handover cost vs. reading the two files it needs, and files opened vs. history.

Builds synthetic Spark checkpoints (with Hadoop .crc files, as Spark writes on local disk) in a
temporary directory: 100 retained batches and 10,000 retained batches, the last committed batch
holding 10,000 Kafka partitions plus one in-flight batch. Prints a table; exits 1 if the number
of files opened depends on the history length.

    python bench/handover.py [--runs 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from airflow_ckpt_provider.checkpoint.logs import hadoop_crc
from airflow_ckpt_provider.storage.reader import CheckpointReader

PARTITIONS = 10_000
QUERY_ID = "abab5a79-a66c-41f4-85f8-55b2a371bf7e"
META = {"batchWatermarkMs": 0, "batchTimestampMs": 1795290400000,
        "conf": {"spark.sql.shuffle.partitions": "200"}}


def _put(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    (path.parent / f".{path.name}.crc").write_bytes(hadoop_crc(data))


def _offsets(batch: int, partitions: int) -> bytes:
    kafka = {"events": {str(p): 1_000 * (batch + 1) + p for p in range(partitions)}}
    compact = (",", ":")
    return f"v1\n{json.dumps(META, separators=compact)}\n{json.dumps(kafka, separators=compact)}".encode()


def build(root: Path, retained: int, history_partitions: int) -> int:
    """Write ``retained`` committed batches (purged before them) plus one in-flight batch.

    Only the last committed and the in-flight batch carry all PARTITIONS; older batches carry
    ``history_partitions`` (the reader never opens them, so their size does not matter).
    Returns the last committed batch id.
    """
    first = 5_000
    last = first + retained - 1
    _put(root / "metadata", json.dumps({"id": QUERY_ID}, separators=(",", ":")).encode())
    commit = b'v1\n{"nextBatchWatermarkMs":0}'
    for batch in range(first, last + 2):
        size = PARTITIONS if batch >= last else history_partitions
        _put(root / "offsets" / str(batch), _offsets(batch, size))
        if batch <= last:
            _put(root / "commits" / str(batch), commit)
    _put(root / "sources" / "0" / "0", b"\x00v1\n" + json.dumps({"events": {"0": 0}}).encode())
    return last


def median_ms(action: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


def measure(root: Path, last: int, runs: int) -> dict[str, float]:
    reader = CheckpointReader(str(root))
    handover = reader.handover()
    assert handover.batch_id == last and len(handover.kafka_offsets()) == PARTITIONS
    opened, listings = reader.files_opened, reader.listings

    def raw() -> None:
        for name in (f"offsets/{last}", f"commits/{last}"):
            with open(root / name, "rb") as handle:
                handle.read()

    def raw_and_parse() -> None:  # what a hand-written script minimally does: read + json.loads
        with open(root / f"offsets/{last}", "rb") as handle:
            json.loads(handle.read().split(b"\n")[2])
        with open(root / f"commits/{last}", "rb") as handle:
            handle.read()

    handover_ms = median_ms(lambda: CheckpointReader(str(root)).handover(), runs)
    raw_ms = median_ms(raw, runs)
    parse_ms = median_ms(raw_and_parse, runs)
    return {"opened": opened, "listings": listings, "handover_ms": handover_ms, "raw_ms": raw_ms,
            "parse_ms": parse_ms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per measurement (median)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-") as tmp:
        for retained, history in ((100, PARTITIONS), (10_000, 10)):
            root = Path(tmp) / f"ck{retained}"
            last = build(root, retained, history)
            rows.append((retained, measure(root, last, args.runs)))
    print(f"{'retained batches':>16} {'partitions':>10} {'files opened':>12} {'listings':>8} "
          f"{'handover ms':>11} {'raw read ms':>11} {'ratio':>7} {'read+json.loads ms':>18} {'ratio':>6}")
    for retained, m in rows:
        print(f"{retained:>16} {PARTITIONS:>10} {m['opened']:>12.0f} {m['listings']:>8.0f} "
              f"{m['handover_ms']:>11.2f} {m['raw_ms']:>11.3f} {m['handover_ms'] / m['raw_ms']:>7.0f} "
              f"{m['parse_ms']:>18.2f} {m['handover_ms'] / m['parse_ms']:>6.1f}")
    counts = {m["opened"] for _, m in rows}
    if len(counts) != 1:
        print(f"FAIL: files opened depends on history length: {sorted(counts)}", file=sys.stderr)
        return 1
    print(f"files opened is independent of history length ({counts.pop():.0f} files incl. .crc)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
