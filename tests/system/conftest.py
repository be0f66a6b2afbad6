"""System tests: the reference DAG on the whole real stack (Kafka, Spark, Airflow)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.harness.upgrade_demo import UpgradeDemo

if TYPE_CHECKING:
    from tests.system.browser import BrowserPages

REPO = Path(__file__).resolve().parents[2]
#: Screenshots of the browser tests: artifacts/browser/<test>/NN-<page>.png (not committed).
SCREENSHOTS = REPO / "artifacts" / "browser"


@pytest.fixture
def make_demo(kafka, tmp_path: Path) -> Iterator[Callable[..., UpgradeDemo]]:  # noqa: ANN001
    """``make_demo(**options)``: an :class:`UpgradeDemo` on the session's broker (a fresh topic,
    producer, sink and checkpoints; v1 not started yet). Every Spark job running on its checkpoints
    is killed at the end (a failed test leaves none)."""
    made: list[UpgradeDemo] = []

    def make(**options: Any) -> UpgradeDemo:
        stack = UpgradeDemo(tmp_path / ("demo" if not made else f"demo-{len(made)}"), kafka=kafka, **options)
        made.append(stack)
        return stack

    yield make
    for stack in made:
        stack.close()
        stop_jobs_under(stack.work)  # the versions the DAG launched, whatever the test's outcome


@pytest.fixture
def demo(make_demo: Callable[..., UpgradeDemo]) -> UpgradeDemo:
    """The demo stream: a steady trickle (80 records/s) on a 1 s processing-time trigger."""
    return make_demo(rate=80.0)


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


def stop_jobs_under(*roots: Path) -> None:
    """Kill the process groups of Spark jobs still running on these paths: the versions Airflow
    launched are not in UpgradeDemo.handles, and a failed assertion must not leave them running."""
    from airflow_ckpt_provider.jobs.local import kill_group

    needles = [str(root).encode() for root in roots]
    groups = set()
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
            group = os.getpgid(int(entry.name)) if any(n in cmdline for n in needles) else None
        except (OSError, ValueError):
            continue
        if group is not None and group != os.getpgrp():
            groups.add(group)
    for group in groups:
        kill_group(group)
