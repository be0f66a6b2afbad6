"""A checkpoint's retained batch history: when each batch ran and how many Kafka records it read.
Reads through an fsspec filesystem.

Unlike the handover (which reads a constant number of files), this reads every retained
``offsets/N`` — it serves reports and downtime measurements, not decisions. Input rows of batch
N are the growth of the Kafka offsets (all Kafka sources, all partitions) from batch N-1, or
from the recorded start (``sources/<i>/0``) for the first retained batch of a new query.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.history import BatchRecord
from airflow_ckpt_provider.checkpoint.logs import parse_initial_source, parse_offset_log
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.storage.files import read_file
from airflow_ckpt_provider.storage.listing import list_batch_ids, list_names


def _mtime(fs: AbstractFileSystem, path: str) -> float | None:
    try:
        value = fs.modified(path)
    except (NotImplementedError, OSError, KeyError, AttributeError):
        return None
    return value.timestamp()


def _kafka_ends(offsets: tuple[KafkaOffsets, ...]) -> dict[tuple[str, int], int]:
    ends: dict[tuple[str, int], int] = {}
    for kafka in offsets:
        for topic, partition, offset in kafka.items():
            ends[(topic, partition)] = offset
    return ends


def _growth(previous: Mapping[tuple[str, int], int], current: Mapping[tuple[str, int], int]) -> int:
    """Records between two Kafka offset maps; a partition new in ``current`` counts from 0."""
    return sum(end - max(previous.get(key, 0), 0) for key, end in current.items() if end >= 0)


def batch_history(fs: AbstractFileSystem, root: str, *, limit: int = 500) -> list[BatchRecord]:
    """The last ``limit`` retained batches of the checkpoint at ``root``, oldest first.

    Raises the reader's typed errors for corrupt offset files.
    """
    root = root.rstrip("/")
    planned = list_batch_ids(fs, posixpath.join(root, "offsets"))[-limit:]
    commit_dir = posixpath.join(root, "commits")
    committed = set(list_batch_ids(fs, commit_dir))
    previous: dict[tuple[str, int], int] | None = _initial_ends(fs, root) if planned and planned[0] == 0 else None
    records = []
    for batch in planned:
        path = posixpath.join(root, "offsets", str(batch))
        entry = parse_offset_log(read_file(fs, path), path)
        ends = _kafka_ends(tuple(s.kafka for s in entry.sources if s.kafka is not None))
        rows = _growth(previous, ends) if previous is not None else None
        records.append(
            BatchRecord(
                batch_id=batch,
                planned_at_ms=entry.batch_timestamp_ms,
                committed_at=_mtime(fs, posixpath.join(commit_dir, str(batch))) if batch in committed else None,
                input_rows=rows,
            )
        )
        previous = ends
    return records


def _initial_ends(fs: AbstractFileSystem, root: str) -> dict[tuple[str, int], int] | None:
    sources = posixpath.join(root, "sources")
    if not fs.exists(sources):
        return None
    offsets = []
    for index, folder in enumerate(sorted(list_names(fs, sources))):
        path = posixpath.join(folder, "0")
        if not fs.exists(path):
            continue
        label = posixpath.basename(folder.rstrip("/"))
        source = parse_initial_source(read_file(fs, path), path, index, None if label.isdigit() else label)
        if source.kafka is not None:
            offsets.append(source.kafka)
    return _kafka_ends(tuple(offsets)) if offsets else None
