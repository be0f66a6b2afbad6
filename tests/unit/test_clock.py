"""One UTC clock, light enough for the Spark driver."""

from __future__ import annotations

import ast
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from airflow_ckpt_provider import clock
from airflow_ckpt_provider.clock import epoch_seconds, utc_iso, utc_now

PACKAGE = Path(clock.__file__).parent


def test_utc_now_is_aware_utc() -> None:
    before = datetime.now(timezone.utc)
    now = utc_now()
    assert now.tzinfo is timezone.utc and before <= now <= datetime.now(timezone.utc)


@pytest.mark.parametrize(
    ("timespec", "text"),
    [("auto", "2026-03-01T12:34:56.123456+00:00"), ("seconds", "2026-03-01T12:34:56+00:00"),
     ("milliseconds", "2026-03-01T12:34:56.123+00:00"), ("microseconds", "2026-03-01T12:34:56.123456+00:00")],
)
def test_utc_iso_keeps_each_callers_timespec(timespec: str, text: str) -> None:
    moment = datetime(2026, 3, 1, 12, 34, 56, 123456, tzinfo=timezone.utc)
    assert utc_iso(moment, timespec) == text
    assert datetime.fromisoformat(text) <= moment


def test_utc_iso_defaults_to_now() -> None:
    stamp = datetime.fromisoformat(utc_iso(timespec="milliseconds"))
    assert stamp.tzinfo is not None and abs(stamp - datetime.now(timezone.utc)) < timedelta(seconds=5)
    with pytest.raises(ValueError):
        utc_iso(timespec="fortnights")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2026-03-01T12:00:00+00:00", 1772366400.0), ("2026-03-01T12:00:00.250Z", 1772366400.25),
     ("2026-03-01T13:00:00+01:00", 1772366400.0), ("2026-03-01T12:00:00", 1772366400.0),  # no zone: UTC
     ("", None), (None, None), ("yesterday", None), ("2026-03-01T12:00:00+00:00Z", None), (1772366400, None)],
)
def test_epoch_seconds_reads_every_recorded_time_and_nothing_else(text: object, seconds: float | None) -> None:
    """The one reader of recorded times (the downtime split, stop timelines and reports all use it)."""
    assert epoch_seconds(text) == seconds  # type: ignore[arg-type]


def test_clock_imports_only_the_standard_library() -> None:
    tree = ast.parse((PACKAGE / "clock.py").read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert modules <= set(sys.stdlib_module_names) | {"__future__"}, modules


def test_the_spark_side_loads_neither_fsspec_nor_airflow_nor_the_core() -> None:
    code = ("import sys, airflow_ckpt_provider.spark.graceful_stop, airflow_ckpt_provider.spark.kafka; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('fsspec', 'airflow', 'pyspark') "
            "or m.startswith('airflow_ckpt_provider.checkpoint')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PACKAGE.parent).stdout.strip()
    assert out == "[]"
