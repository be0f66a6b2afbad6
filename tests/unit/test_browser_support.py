"""The browser tier's support code without a browser: finding Chromium, reading the approval
summary the page must show, serving a stored report."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from airflow_ckpt_provider.local.errors import ToolMissing
from tests.system.browser import CHROMIUM_ENV, ERROR_TEXT, find_chromium, serve_directory
from tests.system.test_approval_browser import summary_phrases, table_labels

SUMMARY = """### Upgrade of stream `orders` to a new checkpoint

| | |
| --- | --- |
| old checkpoint | [`/ckpt/v1`](file:///ckpt/v1) |
| **last committed batch** (handed over) | batch 41 |

#### Where the new version starts, per partition

| partition | handed over (next offset) | retention margin |
| --- | --- | --- |
| orders-0 | 1,200 | 1,200 records |

The offsets are taken again after the graceful stop (startingOffsets of the last committed batch then)."""


def fake_which(available: dict[str, str]):  # noqa: ANN201
    return available.get


def test_chromium_from_path_in_order() -> None:
    assert find_chromium({}, fake_which({"chromium-browser": "/usr/bin/chromium-browser"})) == "/usr/bin/chromium-browser"
    both = fake_which({"chromium": "/usr/bin/chromium", "chromium-browser": "/snap/bin/chromium-browser"})
    assert find_chromium({}, both) == "/usr/bin/chromium"


def test_chromium_from_the_environment_wins() -> None:
    which = fake_which({"/opt/chrome/chrome": "/opt/chrome/chrome", "chromium": "/usr/bin/chromium"})
    assert find_chromium({CHROMIUM_ENV: "/opt/chrome/chrome"}, which) == "/opt/chrome/chrome"


def test_no_chromium_says_what_to_do() -> None:
    with pytest.raises(ToolMissing) as missing:
        find_chromium({}, fake_which({}))
    assert "no chromium or chromium-browser on PATH" in missing.value.found
    assert "make browser" in missing.value.action and "apt-get install chromium" in missing.value.action


def test_a_wrong_chromium_variable_is_not_ignored() -> None:
    with pytest.raises(ToolMissing) as missing:
        find_chromium({CHROMIUM_ENV: "/nowhere/chrome"}, fake_which({"chromium": "/usr/bin/chromium"}))
    assert "/nowhere/chrome" in missing.value.found


def test_table_labels_are_what_the_page_shows() -> None:
    assert table_labels(SUMMARY) == ["old checkpoint", "last committed batch (handed over)", "partition",
                                     "handed over (next offset)", "retention margin", "orders-0"]


def test_summary_phrases_follow_the_summary() -> None:
    phrases = summary_phrases(SUMMARY, "orders")
    assert phrases[:6] == ["orders", "last committed batch", "startingOffsets", "partition", "handed over",
                           "retention margin"]
    assert "last committed batch (handed over)" in phrases
    older = "### Upgrade of stream `orders`\n\n| | |\n| --- | --- |\n| last committed batch | 7 |\n\nstartingOffsets now"
    assert "retention margin" not in summary_phrases(older, "orders")
    with pytest.raises(AssertionError, match="startingOffsets"):
        summary_phrases("| last committed batch | 7 |", "orders")


@pytest.mark.parametrize(("text", "error"), [
    ("404 Not Found The Mapped Task Instance was not found", True),
    ("404 Page Not Found. Please check the URL and try again.", True),
    ("handed over at batch 412 Steps verify success", False),
    ("partition handed over retention margin 404 records", False),
])
def test_error_text(text: str, error: bool) -> None:
    assert bool(ERROR_TEXT.search(text)) is error


def test_serve_directory(tmp_path: Path) -> None:
    (tmp_path / "report.html").write_text("<h1>report</h1>")
    with serve_directory(tmp_path) as base:
        assert urllib.request.urlopen(f"{base}/report.html", timeout=30).read() == b"<h1>report</h1>"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/nothing.png", timeout=30)
        assert missing.value.code == 404
