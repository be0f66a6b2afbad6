"""The approval's load line: how the old query runs, from its batch times and how far it is behind (pure)."""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.checkpoint.history import BatchRecord
from airflow_ckpt_provider.checkpoint.summary import load_line

T0 = 1_800_000_000.0


def batches(count: int, *, duration: float, gap: float, rows: int = 1000) -> list[BatchRecord]:
    out, at = [], T0
    for batch in range(count):
        out.append(BatchRecord(batch, int(at * 1000), at + duration, rows))
        at += duration + gap
    return out


def test_back_to_back_batches_read_as_busy() -> None:
    history = batches(12, duration=0.8, gap=0.05)  # the default trigger under load
    line = load_line(history, behind=900, now_s=history[-1].committed_at + 0.1)
    assert line.startswith("**Load: busy**") and "11 of 11 gaps" in line and "900 records behind" in line


def test_a_backlog_of_many_batches_reads_as_falling_behind() -> None:
    history = batches(12, duration=2.5, gap=0.0, rows=500)
    line = load_line(history, behind=50_000, now_s=history[-1].committed_at)
    assert line.startswith("**Load: falling behind**") and "about 100 batches' worth" in line


def test_nothing_waiting_long_after_the_last_batch_reads_as_idle() -> None:
    history = batches(5, duration=0.5, gap=1.5)
    line = load_line(history, behind=0, now_s=history[-1].committed_at + 600)
    assert line.startswith("**Load: idle**") and "600 s ago" in line


def test_batches_with_room_between_them_read_as_steady() -> None:
    history = batches(8, duration=0.4, gap=1.6)
    line = load_line(history, behind=120, now_s=history[-1].committed_at + 1)
    assert line.startswith("**Load:** steady") and "1.6 s apart" in line


@pytest.mark.parametrize("history", [[], batches(1, duration=1, gap=0),
                                     [BatchRecord(0, None, T0, 5), BatchRecord(1, int(T0 * 1000), None, 5)]])
def test_too_little_history_says_so(history: list[BatchRecord]) -> None:
    assert load_line(history, behind=3, now_s=T0).startswith("**Load:** too few committed batches")
