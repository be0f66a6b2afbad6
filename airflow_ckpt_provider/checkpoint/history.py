"""A checkpoint's retained batch history as values: when each batch ran and how many Kafka records
it read (:class:`BatchRecord`). Pure: no I/O (:func:`airflow_ckpt_provider.storage.history.batch_history`
reads it from a checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BatchRecord:
    """One retained batch. ``committed_at`` is the commit file's modification time (epoch s)."""

    batch_id: int
    planned_at_ms: int | None
    committed_at: float | None
    input_rows: int | None  # None when the previous end is unknown (purged history)
