"""A real headless browser for the UI tests: the system's Chromium, driven by Playwright.

Playwright's own browser builds come from a download server of its own, not from a package
registry; this tier does not use them. Playwright (from PyPI) drives the Chromium the operating
system installs (Debian's ``chromium``) through ``executable_path``: :func:`find_chromium` looks
for ``$CKPT_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH, and says what to do when
there is none (``make browser``).

:class:`BrowserPages` wraps one page: every page a test visits is checked as a person would see
it (the expected text shows up, no error banner, no HTTP error on the main document or on the
calls the page makes, not blank) and saved as ``NN-<name>.png`` in the test's screenshot folder.
:func:`serve_directory` serves a local folder over HTTP on 127.0.0.1, so a stored file (the
upgrade report) is opened like a web page, with real HTTP statuses.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_ckpt_provider.local.errors import ToolMissing

if TYPE_CHECKING:
    from playwright.sync_api import Page, Response

CHROMIUM_ENV = "CKPT_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser")
#: One click, or one wait for text, on a loaded 2-core machine (the Airflow API server behind the
#: UI took over a minute for one call there): minutes, not Playwright's default 30 s.
ACTION_TIMEOUT_MS = 180_000
NAVIGATION_TIMEOUT_MS = 300_000
#: Width and height of the browser window (CSS pixels); screenshots take the full page height.
VIEWPORT = (1280, 900)
#: What an error page or an error banner says (Airflow's UI answers every route with HTTP 200).
ERROR_TEXT = re.compile(r"\b(?:400 Bad Request|401 Unauthorized|403 Forbidden|404 Not Found|405 Method Not Allowed|"
                        r"409 Conflict|422 Unprocessable (?:Entity|Content)|Internal Server Error|Bad Gateway|"
                        r"Service Unavailable|Gateway Timeout|Page Not Found|No Task Instance found|"
                        r"Something went wrong|Not authenticated)\b")
#: Banners of Airflow's UI (Chakra UI alerts), and what makes one an error banner.
ALERT_SELECTOR = ".chakra-alert__root, [role=alert]"
ALERT_ERROR = re.compile(r"error|fail|not found|denied|forbidden|unauthori[sz]ed|invalid", re.IGNORECASE)
#: Less visible text than this is a blank page.
MIN_TEXT_CHARS = 20
#: Tallest screenshot (CSS pixels): a long page is cut there.
MAX_SCREENSHOT_HEIGHT = 6000
#: How much content the tallest scrolling panel hides below its visible part (CSS pixels).
_HIDDEN_HEIGHT_JS = """() => Math.max(0, ...[...document.querySelectorAll("*")]
    .filter(e => /auto|scroll/.test(getComputedStyle(e).overflowY))
    .map(e => e.scrollHeight - e.clientHeight))"""
_TWO_FRAMES_JS = "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def find_chromium(env: Mapping[str, str] | None = None,
                  which: Callable[[str], str | None] = shutil.which) -> str:
    """Path of the Chromium binary to drive: ``$CKPT_CHROMIUM`` (a path or a command name), else
    the first of ``chromium``, ``chromium-browser`` on PATH. :class:`ToolMissing` if none runs."""
    env = os.environ if env is None else env
    explicit = env.get(CHROMIUM_ENV, "").strip()
    if explicit:
        path = which(explicit)
        if path is None:
            raise ToolMissing(
                found=f"{CHROMIUM_ENV}={explicit!r}, which is not an executable file or a command on PATH",
                expected="the path of a Chromium (or Chrome) binary",
                action=f"Fix or unset {CHROMIUM_ENV}; unset, chromium or chromium-browser on PATH is used.",
            )
        return path
    for name in CHROMIUM_NAMES:
        path = which(name)
        if path is not None:
            return path
    raise ToolMissing(
        found=f"no {' or '.join(CHROMIUM_NAMES)} on PATH, and {CHROMIUM_ENV} is not set",
        expected="a Chromium binary for the browser tests (Debian's chromium; Playwright drives it, "
        "Playwright's own browser download is not used)",
        action="Run `make browser` (installs Debian's chromium when run as root), or "
        "`sudo apt-get install chromium`, or set CKPT_CHROMIUM=/path/to/chromium.",
    )


def chromium_args() -> list[str]:
    """Command line flags for a headless Chromium in a container or CI machine."""
    args = ["--disable-dev-shm-usage"]  # a small /dev/shm (containers) crashes tabs otherwise
    if os.geteuid() == 0:  # Chromium refuses to start as root with its sandbox on
        args.append("--no-sandbox")
    return args


class PageCheckFailed(AssertionError):
    """A visited page is blank, shows an error, or lacks the text the test expects."""


class BrowserPages:
    """One browser page whose every visit is checked and saved as ``NN-<name>.png`` in ``shots``."""

    def __init__(self, page: Page, shots: Path) -> None:
        self.page = page
        self.shots = shots
        self.count = 0
        self._document: Response | None = None
        self._failed: list[tuple[int, str]] = []
        page.set_default_timeout(ACTION_TIMEOUT_MS)
        page.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        page.on("response", self._on_response)

    def _on_response(self, response: Response) -> None:
        if response.status >= 400 and not response.url.endswith("/favicon.ico"):
            self._failed.append((response.status, f"{response.request.method} {response.url}: HTTP {response.status}"))

    def goto(self, url: str) -> Response | None:
        """Open ``url`` as the main document; the next :meth:`check` fails on its HTTP error."""
        self._failed.clear()
        self._document = self.page.goto(url, wait_until="domcontentloaded")
        return self._document

    def check(self, name: str, expect: Iterable[str] = (), *, ignore_case: bool = True,
              allow_status: Collection[int] = ()) -> Path:
        """Wait until every text in ``expect`` shows on the page, then fail on an error banner,
        an HTTP error (the main document of the last :meth:`goto`, or any response the page got
        since the last check) or a blank page; save the screenshot as ``NN-<name>.png`` (also
        when a check fails) and return it. A page reached by a click is checked the same way.
        ``allow_status``: statuses of the page's own calls that are no error here (a 401 before
        signing in)."""
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import expect as page_expect

        self.count += 1
        shot = self.shots / f"{self.count:02d}-{name}.png"
        body = self.page.locator("body")
        try:
            for text in expect:
                page_expect(body).to_contain_text(text, ignore_case=ignore_case, use_inner_text=True,
                                                  timeout=ACTION_TIMEOUT_MS)
            # not "networkidle": Airflow's pages poll the API server, on a busy machine without pause
            self.page.wait_for_load_state("load", timeout=ACTION_TIMEOUT_MS)
            problems = self._problems(allow_status)
        except (AssertionError, PlaywrightError) as exc:
            self._screenshot(shot)
            raise PageCheckFailed(f"page {name!r} ({self.page.url}): {exc}\nscreenshot: {shot}") from exc
        self._screenshot(shot)
        if not problems and _uniform(shot):
            problems.append("the screenshot is one single colour")
        if problems:
            raise PageCheckFailed(f"page {name!r} ({self.page.url}): " + "; ".join(problems) + f"\nscreenshot: {shot}")
        self._document = None  # the next page is reached by a click, or by its own goto()
        self._failed.clear()
        return shot

    def _problems(self, allow_status: Collection[int]) -> list[str]:
        problems = []
        if self._document is not None and self._document.status >= 400:
            problems.append(f"the main document answered HTTP {self._document.status}")
        problems += [failure for status, failure in self._failed if status not in allow_status]
        for alert in self.page.locator(ALERT_SELECTOR).all():
            text = " ".join(alert.inner_text().split())
            if alert.is_visible() and (ERROR_TEXT.search(text) or ALERT_ERROR.search(text)):
                problems.append(f"error banner: {text[:300]}")
        text = " ".join(self.page.locator("body").inner_text().split())
        if len(text) < MIN_TEXT_CHARS:
            problems.append(f"blank page: visible text {text!r}")
        elif match := ERROR_TEXT.search(text):
            problems.append(f"error text on the page: {text[max(0, match.start() - 80):match.end() + 200]!r}")
        return problems

    def _screenshot(self, path: Path) -> None:
        """The whole page. Airflow's UI scrolls inside panels, not the document, so a "full page"
        screenshot would stop at the window: the window is made as tall as the tallest scrolled
        panel's content for the screenshot."""
        path.parent.mkdir(parents=True, exist_ok=True)
        width, height = VIEWPORT
        hidden = int(self.page.evaluate(_HIDDEN_HEIGHT_JS))
        tall = min(height + hidden, MAX_SCREENSHOT_HEIGHT)
        if tall > height:
            self.page.set_viewport_size({"width": width, "height": tall})
            self.page.evaluate(_TWO_FRAMES_JS)  # let the layout follow the new size
        try:
            self.page.screenshot(path=str(path), full_page=True, timeout=ACTION_TIMEOUT_MS)
        finally:
            if tall > height:
                self.page.set_viewport_size({"width": width, "height": height})

    def leave(self) -> None:
        """Go to an empty page: no polling of the server while the test waits for something else."""
        self._document = None
        self.page.goto("about:blank")
        self._failed.clear()


def _uniform(png: Path) -> bool:
    """Whether the image has one colour only (a blank page)."""
    from PIL import Image

    with Image.open(png) as image:
        extrema = image.convert("RGB").getextrema()
    return all(low == high for low, high in extrema)


@contextmanager
def serve_directory(root: Path) -> Iterator[str]:
    """Serve ``root`` over HTTP on 127.0.0.1 (a free port) and yield its base URL."""

    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, name=f"serve {root}", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
