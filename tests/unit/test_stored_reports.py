"""The stored upgrade reports of a stream: the newest found wherever the report step stores it
(`ckpt report`, `latest_report`), a damaged one refused with its path."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.errors import InvalidUpgradeReport, UnsafeStreamName
from airflow_ckpt_provider.checkpoint.report import UpgradeReport
from airflow_ckpt_provider.storage.reports import latest_report


def store(folder: Path, created_at: str, outcome: str, markdown: str | None = "") -> None:
    folder.mkdir(parents=True)
    (folder / "upgrade-report.json").write_text(UpgradeReport("orders", outcome, created_at=created_at).to_json())
    if markdown is not None:
        (folder / "upgrade-report.md").write_text(markdown or f"# Upgrade report: {outcome}\n")


def test_the_newest_report_wins_wherever_it_is_stored(tmp_path: Path) -> None:
    stream = tmp_path / "orders"
    store(stream / "orders-a" / "report", "2026-01-01T00:00:00Z", "rolled_back")
    store(stream / "orders-a" / "report" / "run-2", "2026-01-03T00:00:00Z", "upgraded")
    store(stream / "_upgrades" / "up-1" / "report", "2026-01-02T00:00:00Z", "failed")
    store(tmp_path / "other" / "x" / "report", "2027-01-01T00:00:00Z", "upgraded")  # another stream
    found = latest_report(tmp_path, "orders")
    assert found is not None
    assert (found.outcome, found.markdown) == ("upgraded", "# Upgrade report: upgraded\n")
    assert found.folder.endswith("orders-a/report/run-2") and found.data["created_at"] == "2026-01-03T00:00:00Z"
    store(stream / "_upgrades" / "up-2" / "report", "2026-01-04T00:00:00Z", "refused", markdown=None)
    newest = latest_report(str(tmp_path), "orders")
    assert newest is not None and (newest.outcome, newest.markdown) == ("refused", "")


def test_no_report_yet_is_none_and_ckpt_report_exits_2(tmp_path: Path) -> None:
    assert latest_report(tmp_path, "orders") is None
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["report", str(tmp_path), "--name", "orders"], stdout=out, stderr=err) == 2
    assert "found no upgrade report for the stream orders" in err.getvalue() and out.getvalue() == ""


def test_ckpt_report_prints_the_newest_markdown_or_json(tmp_path: Path) -> None:
    store(tmp_path / "orders" / "a" / "report", "2026-01-01T00:00:00Z", "upgraded", "# the report\n")
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["report", str(tmp_path), "--name", "orders"], stdout=out, stderr=err) == 0
    assert out.getvalue() == "# the report\n"
    assert "(outcome: upgraded; 1 stored)" in err.getvalue()
    out = io.StringIO()
    assert cli.main(["report", str(tmp_path), "--name", "orders", "--json"], stdout=out, stderr=io.StringIO()) == 0
    assert json.loads(out.getvalue())["outcome"] == "upgraded"


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"stream": "orders"}'])
def test_a_damaged_report_is_refused_with_its_path(tmp_path: Path, content: str) -> None:
    folder = tmp_path / "orders" / "a" / "report"
    folder.mkdir(parents=True)
    (folder / "upgrade-report.json").write_text(content)
    with pytest.raises(InvalidUpgradeReport, match="upgrade-report.json"):
        latest_report(tmp_path, "orders")


def test_an_unsafe_stream_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafeStreamName):
        latest_report(tmp_path, "../orders")
