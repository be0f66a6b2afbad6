"""A restart on an existing checkpoint never starts a second query next to a live one."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint.errors import QueryStillRunning
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.operators.launch import StreamLaunchOperator
from airflow_ckpt_provider.records.control import HEARTBEAT, RUNNING, Heartbeat
from tests.unit.conftest import write_checkpoint


def test_live_heartbeat_refuses_restart_on_existing_checkpoint(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "cp"))
    beat = Heartbeat("q", "r", RUNNING, utc_iso(timespec="milliseconds"), utc_iso(timespec="milliseconds"), 1.0)
    (tmp_path / "cp" / HEARTBEAT).parent.mkdir(parents=True)
    (tmp_path / "cp" / HEARTBEAT).write_text(beat.to_json())
    before = sorted(p.name for p in (tmp_path / "cp").rglob("*"))
    op = StreamLaunchOperator(task_id="restart_old", application="/jobs/v1.py", checkpoint_uri=built.uri,
                              master="local[2]", allow_existing_checkpoint=True)
    with pytest.raises(QueryStillRunning):
        op.preflight()
    assert sorted(p.name for p in (tmp_path / "cp").rglob("*")) == before


def test_stopped_checkpoint_can_be_resumed(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "cp"), batches=range(4))
    op = StreamLaunchOperator(task_id="restart_old", application="/jobs/v1.py", checkpoint_uri=built.uri,
                              master="local[2]", allow_existing_checkpoint=True)
    op.preflight()
    assert op._resume_after == 3  # the wait is for batch 4, one this launch commits
