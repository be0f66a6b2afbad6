"""Real Structured Streaming runs for the integration tests: Kafka -> Parquet with a checkpoint."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.spark.state_seed import session_conf as spark_conf  # noqa: F401 - the tests' name for it


def kafka_reader(spark: Any, bootstrap: str, topics: list[str], starting_offsets: str = "earliest",
                 max_per_trigger: int | None = None) -> Any:
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(topics))
        .option("startingOffsets", starting_offsets)
        .option("failOnDataLoss", "true")
    )
    if max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", max_per_trigger)
    return reader.load().selectExpr("topic", "partition", "offset")


def drain(spark: Any, frame: Any, checkpoint: Path, sink: Path, timeout: float = 180) -> None:
    """Run ``frame`` into a Parquet sink until everything available now is processed."""
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(timeout), f"query did not finish within {timeout} s"
    assert query.exception() is None, query.exception()


def sink_records(spark: Any, *sinks: Path) -> Counter[tuple[str, int, int]]:
    """How often each Kafka (topic, partition, offset) landed in the sinks."""
    counts: Counter[tuple[str, int, int]] = Counter()
    for sink in sinks:
        if not (sink / "_spark_metadata").exists():
            continue
        for row in spark.read.parquet(str(sink)).collect():
            counts[(row.topic, row.partition, row.offset)] += 1
    return counts


def raw_source_line(checkpoint: Path, batch: int, source: int = 0) -> str:
    """Line ``source`` of ``offsets/<batch>`` as Spark wrote it (v1 layout)."""
    return (checkpoint / "offsets" / str(batch)).read_text().split("\n")[2 + source]


def batch_ids(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def fail_commit_of_a_coming_batch(checkpoint: Path) -> int:
    """Fault injection in the driver: an empty directory where Spark will write ``commits/<M>`` for
    a batch it has not committed yet, so the driver fails right AFTER the sink wrote batch M and
    before Spark's own commit (as a stop or a crash that cuts the batch there). Returns M; the
    caller removes the directory once the query failed (it is the fault, not Spark's data)."""
    while True:
        commits = checkpoint / "commits"
        cut = max(batch_ids(commits), default=-1) + 2 if commits.is_dir() else 1
        try:
            (commits / str(cut)).mkdir()
            return cut
        except FileExistsError:
            continue


def batch_times(checkpoint: Path) -> dict[int, tuple[float, float | None]]:
    """Per batch in ``offsets/``: (planned, committed) in epoch seconds — planned from its
    ``batchTimestampMs`` (offsets/N metadata), committed from the mtime of ``commits/N`` (None: not
    committed)."""
    commits = checkpoint / "commits"
    times: dict[int, tuple[float, float | None]] = {}
    for batch in batch_ids(checkpoint / "offsets"):
        planned = json.loads((checkpoint / "offsets" / str(batch)).read_text().split("\n")[1])["batchTimestampMs"]
        commit = commits / str(batch)
        times[batch] = (planned / 1000, commit.stat().st_mtime if commit.exists() else None)
    return times


def gaps_between_batches(checkpoint: Path) -> dict[int, float]:
    """Seconds from commit N being written to batch N+1 being planned, keyed by N+1."""
    return batch_gaps(batch_times(checkpoint))


def batch_gaps(times: dict[int, tuple[float, float | None]]) -> dict[int, float]:
    """:func:`gaps_between_batches` of :func:`batch_times` taken earlier (Spark purges old batches)."""
    return {batch + 1: times[batch + 1][0] - committed for batch, (_, committed) in times.items()
            if committed is not None and batch + 1 in times}
