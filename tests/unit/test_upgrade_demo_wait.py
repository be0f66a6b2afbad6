"""UpgradeDemo.wait_for_batch compares batch ids, not the number of commit files Spark retains."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.upgrade_demo import UpgradeDemo


def purged_checkpoint(root: Path, first: int, last: int) -> Path:
    """commits/<first..last> only (older ones purged, as after minBatchesToRetain), with the
    .crc and temp files Spark leaves beside them."""
    commits = root / "commits"
    commits.mkdir(parents=True)
    for batch in range(first, last + 1):
        (commits / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
        (commits / f".{batch}.crc").write_bytes(b"crc\x00")
    (commits / f".{last + 1}.0b1c.tmp").write_text("v1")
    return root


def test_a_batch_id_beyond_the_retained_file_count_is_reached(tmp_path: Path) -> None:
    checkpoint = purged_checkpoint(tmp_path / "ck", 150, 249)  # 100 files, last batch 249
    demo = UpgradeDemo(tmp_path / "demo")
    assert demo.wait_for_batch(checkpoint, 249, timeout=5) == 249
    assert demo.wait_for_batch(checkpoint, 0, timeout=5) == 249


def test_a_batch_not_committed_yet_times_out(tmp_path: Path) -> None:
    checkpoint = purged_checkpoint(tmp_path / "ck", 150, 249)
    with pytest.raises(TimeoutError, match="last committed batch 249"):
        UpgradeDemo(tmp_path / "demo").wait_for_batch(checkpoint, 250, timeout=1)
    with pytest.raises(TimeoutError, match="last committed batch None"):
        UpgradeDemo(tmp_path / "demo").wait_for_batch(tmp_path / "empty", 0, timeout=1)
