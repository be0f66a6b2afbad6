"""System tests: the reference DAG on the whole real stack (Kafka, Spark, Airflow)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_ckpt_provider.local.upgrade_demo import UpgradeDemo


@pytest.fixture
def demo(kafka, tmp_path: Path) -> Iterator[UpgradeDemo]:  # noqa: ANN001
    """A fresh topic, producer, sink and checkpoints on the session's broker; v1 not started yet."""
    stack = UpgradeDemo(tmp_path / "demo", kafka=kafka, rate=80.0)
    yield stack
    stack.close()
