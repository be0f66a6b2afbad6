"""System tests: the reference DAG on the whole real stack (Kafka, Spark, Airflow)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.system.browser import BrowserPages

REPO = Path(__file__).resolve().parents[2]
#: Screenshots of the browser tests: artifacts/browser/<test>/NN-<page>.png (not committed).
SCREENSHOTS = REPO / "artifacts" / "browser"


@pytest.fixture(scope="session")
def chromium() -> str:
    """The system Chromium the browser tests drive; fails (never skips) with what to do when missing."""
    from airflow_ckpt_provider.local.errors import ToolMissing
    from tests.system.browser import find_chromium

    try:
        return find_chromium()
    except ToolMissing as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def browser_pages(chromium: str, request: pytest.FixtureRequest) -> Iterator[BrowserPages]:
    """A page of a headless Chromium (Playwright on the system browser); every checked visit is
    saved in artifacts/browser/<test>/, emptied first."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        pytest.fail(f"browser tests: found no playwright module ({exc}); expected the `dev` extra installed; "
                    "run `make venv` or `.venv/bin/pip install -c .ci/constraints.txt -e '.[dev]'`.", pytrace=False)
    from tests.system.browser import VIEWPORT, BrowserPages, chromium_args

    shots = SCREENSHOTS / request.node.name
    shutil.rmtree(shots, ignore_errors=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=chromium_args())
        try:
            width, height = VIEWPORT
            context = browser.new_context(viewport={"width": width, "height": height})
            yield BrowserPages(context.new_page(), shots)
        finally:
            browser.close()
