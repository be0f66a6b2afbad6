"""``bench/archive.py`` still runs end to end (on a tiny tree; its figures are not checked here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_archive_bench_runs_both_source_states(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "archive.py"), "--files", "300", "--gib", "0.01", "--rounds", "2",
         "--dir", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr  # 1: below target, a figure, not a failure
    out = result.stdout
    assert "built 300 files" in out
    for state in ("cached", "disk"):
        assert f"{state}: archive throughput, median of 2 per-round ratios" in out
    assert out.count("best vs best") == 2
    assert list(tmp_path.iterdir()) == []  # cleaned up
