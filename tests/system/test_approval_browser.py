"""The approval in the Airflow UI, clicked through in a real headless browser.

Airflow (``airflow standalone`` on SQLite) runs the reference DAG on the real stack; a headless
Chromium driven by Playwright does what the approver does: signs in on the login page (Simple auth
manager), opens *Required Actions* from the home page, the pending action of the run, reads the
preflight summary on the task's *Required Action* tab and clicks **Reject** (first run: the upgrade
is skipped, v1 keeps committing), then **Approve** (second run: upgraded, nothing lost, nothing
duplicated). Last, the upgrade report stored next to the archive is opened as a web page: its
facts, steps and timeline image must show. Every page visited is checked (expected text, no
error banner or HTTP error, not blank) and saved in ``artifacts/browser/<test>/NN-<page>.png``.

The runs are triggered over REST (a trigger form is not what this test is about).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.airflow_server import PASSWORD_FILE, USER, LocalAirflow
from tests.harness.upgrade_demo import DAG_ID, DAGS, STREAM, UpgradeDemo, read_dag_report, stop_jobs_under
from tests.system.browser import ACTION_TIMEOUT_MS, BrowserPages, serve_directory

pytestmark = pytest.mark.system

RUN_TIMEOUT_S = 1800.0  # one DAG run on a loaded 2-core machine: minutes, not seconds
APPROVAL_TASK = "approve"
#: The approver answers this long after the task entered ``awaiting_input``, as a person would:
#: an answer that re-queues the task before the executor has reported the pausing task process
#: as finished makes the scheduler mark it failed ("state changed externally"), an Airflow race.
ANSWER_DELAY_S = 20.0
#: In every preflight summary: what the approver decides on.
SUMMARY_PHRASES = ("last committed batch", "startingOffsets")
#: Words of the summary's per-partition table, checked on the page when the summary has them.
PARTITION_PHRASES = ("partition", "handed over", "retention margin")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_SEPARATOR = re.compile(r"^:?-{3,}:?$")


def _plain(cell: str) -> str:
    """A Markdown table cell as the page shows it: links as their text, no emphasis or code marks."""
    return " ".join(_LINK.sub(r"\1", cell).replace("**", "").replace("`", "").split())


def table_labels(markdown: str) -> list[str]:
    """The header cells and the first cell of every row of the Markdown tables in ``markdown``."""
    rows = [[_plain(c) for c in line.strip().strip("|").split("|")]
            for line in markdown.splitlines() if line.strip().startswith("|")]
    labels: list[str] = []
    for row, following in zip(rows, [*rows[1:], []], strict=True):
        if all(_SEPARATOR.match(cell) for cell in row if cell):
            continue
        header = bool(following) and all(_SEPARATOR.match(cell) for cell in following if cell)
        labels += row if header else row[:1]
    return [label for label in dict.fromkeys(labels) if label]


def summary_phrases(body: str, stream: str) -> list[str]:
    """What the approval page must show, taken from the summary the REST API returned, so the test
    follows the preflight's wording: the stream, the fixed phrases, the per-partition words if the
    summary has them, and every table label."""
    lower = body.lower()
    missing = [p for p in (stream, *SUMMARY_PHRASES) if p.lower() not in lower]
    assert not missing, f"the approval summary lacks {missing}:\n{body}"
    return list(dict.fromkeys([stream, *SUMMARY_PHRASES, *(p for p in PARTITION_PHRASES if p in lower),
                               *table_labels(body)]))


def await_approval(af: LocalAirflow, run_id: str) -> dict[str, Any]:
    """Wait until the run's approval waits for a person, then a while longer (see ANSWER_DELAY_S);
    return its details from REST (subject, Markdown body, options)."""
    af.wait_for_task_state(DAG_ID, run_id, APPROVAL_TASK, {"awaiting_input"}, timeout=RUN_TIMEOUT_S)
    time.sleep(ANSWER_DELAY_S)
    details = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{APPROVAL_TASK}/-1/hitlDetails",
                     deadline=time.monotonic() + 600)
    assert not details.get("response_received"), details
    assert {"Approve", "Reject"} <= set(details["options"]), details
    return dict(details)


def log_in(pages: BrowserPages, af: LocalAirflow) -> None:
    """Sign in on the Airflow login page as the Simple auth manager's admin."""
    password = json.loads((af.home / PASSWORD_FILE).read_text())[USER]
    page = pages.page
    pages.goto(f"{af.url}/")
    # the UI asks for its config first and gets 401 until signed in: that is what sends it here
    pages.check("login", ["Sign into Airflow", "Username", "Password"], allow_status={401})
    page.get_by_label("Username").fill(USER)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(lambda url: "/auth/login" not in url)
    pages.check("home", ["Welcome", "Dag Runs"])  # "Required Actions" shows only when one is pending
    pages.leave()


def answer_in_ui(pages: BrowserPages, af: LocalAirflow, run_id: str, option: str,
                 details: dict[str, Any], label: str) -> dict[str, Any]:
    """From the home page to the run's pending approval, read the summary, click ``option``;
    return the answer Airflow recorded (the PATCH the page sent)."""
    from playwright.sync_api import expect

    page = pages.page
    pages.goto(f"{af.url}/")
    pages.check(f"{label}-home", ["Welcome", "Required Actions"])

    page.get_by_test_id("stats-card").filter(has_text="Required Actions").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Pending required actions", timeout=ACTION_TIMEOUT_MS)
    pages.check(f"{label}-required-actions", ["Pending required actions", DAG_ID, run_id])

    dialog.get_by_role("link", name="View all required actions").click()
    page.wait_for_url(lambda url: "/required_actions" in url and "/dags/" not in url)
    pages.check(f"{label}-required-actions-list", [details["subject"], run_id])

    task_page = f"/dags/{DAG_ID}/runs/{run_id}/tasks/{APPROVAL_TASK}/required_actions"
    page.locator(f'a[href$="{task_page}"]').first.click()  # the subject links to the task's action
    page.wait_for_url(lambda url: url.endswith(task_page))
    pages.check(f"{label}-approval", [details["subject"], *summary_phrases(details["body"], STREAM)])

    button = page.get_by_role("button", name=option, exact=True)
    expect(button).to_be_enabled(timeout=ACTION_TIMEOUT_MS)
    with page.expect_response(lambda r: r.request.method == "PATCH" and r.url.endswith("/hitlDetails")) as sent:
        button.click()
    response = sent.value
    assert response.status == 200, f"the answer got HTTP {response.status}: {response.text()[:500]}"
    recorded = dict(response.json())
    assert recorded["chosen_options"] == [option] and recorded["responded_by"]["name"] == USER, recorded
    pages.check(f"{label}-answered", ["Response received", f"from {USER}"])
    pages.leave()
    return recorded


def check_report_page(pages: BrowserPages, archive_root: Path) -> Path:
    """Open the stored upgrade report as a web page: title, facts, steps and its timeline image."""
    reports = sorted((archive_root / STREAM).glob("*/report/upgrade-report.html"))
    assert reports, f"no upgrade-report.html under {archive_root / STREAM}"
    page = pages.page
    with serve_directory(reports[-1].parent) as base:
        pages.goto(f"{base}/upgrade-report.html")
        shot = pages.check("upgrade-report", [f"Upgrade report: {STREAM}", "outcome", "upgraded", "startingOffsets",
                                              "Steps", "verify"], ignore_case=False)
        assert page.title() == f"Upgrade report: {STREAM}", page.title()
        page.wait_for_function("() => document.images.length > 0 && "
                               "[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        images = page.eval_on_selector_all("img", "images => images.map(i => [i.getAttribute('src'), i.naturalWidth])")
        assert ["timeline.png"] == [src for src, width in images if width > 0], images
        pages.leave()
    return shot


@pytest.mark.timeout(2 * RUN_TIMEOUT_S + 1800)
def test_reject_then_approve_in_the_browser(demo: UpgradeDemo, browser_pages: BrowserPages, tmp_path: Path) -> None:
    pages = browser_pages
    v1 = demo.start(timeout=600)
    env = {"AIRFLOW_CONN_KAFKA_DEFAULT": demo.kafka_connection()}
    try:
        with LocalAirflow(tmp_path / "airflow", DAGS, env=env, startup_timeout=600) as af:
            logs = f"logs: {af.home}"
            log_in(pages, af)

            # (1) Reject: the upgrade is skipped, the run succeeds, v1 keeps committing
            rejected = af.trigger(DAG_ID, demo.dag_conf(v1), timeout=600)
            answer_in_ui(pages, af, rejected, "Reject", await_approval(af, rejected), "reject")
            assert af.wait_for_run(DAG_ID, rejected, timeout=RUN_TIMEOUT_S) == "success", logs
            assert af.task_state(DAG_ID, rejected, "graceful_stop") == "skipped"
            assert af.task_state(DAG_ID, rejected, "report") == "success"
            before = CheckpointReader(str(demo.old_cp)).snapshot().last_committed_batch
            demo.wait_for_batch(demo.old_cp, (before or 0) + 3, timeout=600, handle=v1)
            assert not demo.new_cp.exists()

            # (2) Approve: upgraded and verified
            approved = af.trigger(DAG_ID, demo.dag_conf(v1), timeout=600)
            answer_in_ui(pages, af, approved, "Approve", await_approval(af, approved), "approve")
            assert af.wait_for_run(DAG_ID, approved, timeout=RUN_TIMEOUT_S) == "success", logs
            assert af.task_state(DAG_ID, approved, "verify") == "success"

        report = read_dag_report(demo.archive_root)
        assert report is not None and report["outcome"] == "upgraded", report
        check_report_page(pages, demo.archive_root)
        audit = demo.finish(demo.new_cp)
        assert audit.lost == 0, audit.lost_examples
        assert audit.duplicated == 0, audit.duplicated_examples
    finally:
        stop_jobs_under(demo.work)
