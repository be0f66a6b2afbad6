"""The approval in the Airflow UI, clicked through in a real headless browser, on an Airflow whose
triggerer runs in its own PID namespace.

Airflow on SQLite runs the reference DAG on the real stack, its parts apart as they often are
(containers, hosts): the API server, scheduler and DAG processor as separate processes and the
triggerer under ``unshare --pid --fork --mount-proc`` (its own ``/proc``), so it cannot see the
processes that tasks started. A headless Chromium driven by Playwright does what the approver
does: signs in on the login page (Simple auth manager), opens *Required Actions* from the home
page, the pending action of the run, reads the preflight summary on the task's *Required Action*
tab and clicks **Reject** (first run: the upgrade is skipped, v1 keeps committing), then
**Approve** (second run: upgraded, nothing lost, nothing duplicated). The upgrade report stored
next to the archive is opened as a web page: its facts, steps and timeline image must show. Every
page visited is checked (expected text, no error banner or HTTP error, not blank) and saved in
``artifacts/browser/<test>/NN-<page>.png``. Last, on the same Airflow and its isolated triggerer, a
third run (approval off) upgrades a second stream to a new version that crashes once released:
it is rolled back, v1 runs again on its checkpoint, nothing lost or duplicated.

The runs are triggered over REST (a trigger form is not what this test is about).
"""

from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint import LaunchHandle
from airflow_ckpt_provider.local.kafka import LocalKafka
from airflow_ckpt_provider.records.control import CONF_STANDBY_REHEARSAL
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.airflow_server import PASSWORD_FILE, USER, LocalAirflow
from tests.harness.upgrade_demo import DAG_ID, DAGS, STREAM, UpgradeDemo, read_dag_report, stop_jobs_under
from tests.system.browser import ACTION_TIMEOUT_MS, BrowserPages, serve_directory

pytestmark = pytest.mark.system

RUN_TIMEOUT_S = 1800.0  # one DAG run on a loaded 2-core machine: minutes, not seconds
CRASHING_V2 = Path(__file__).parent / "jobs" / "crash_after_release.py"
#: The reference DAG's operator modules, imported once by Airflow's components (see LocalAirflow).
PRELOAD = tuple(f"airflow_ckpt_provider.operators.{name}" for name in (
    "approval", "archive", "compat", "handover", "launch", "preflight", "report", "state", "stop", "switchover"))
ROLLBACK_STREAM = "demo-events-rollback"
APPROVAL_TASK = "approve"
#: How long the scheduler may take to take in the executor's report of the paused approval task.
PAUSE_SEEN_TIMEOUT_S = 600.0
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
    """Wait until the run's approval waits for a person and the scheduler has taken in the
    executor's report that the pausing task process finished; return its details from REST
    (subject, Markdown body, options). An answer that re-queues the task before that report makes
    the scheduler mark it failed ("state changed externally"), an Airflow race."""
    af.wait_for_task_state(DAG_ID, run_id, APPROVAL_TASK, {"awaiting_input"}, timeout=RUN_TIMEOUT_S)
    af.wait_for_scheduler_log(f"TaskInstance Finished: dag_id={DAG_ID}, task_id={APPROVAL_TASK}, run_id={run_id},",
                              "state=awaiting_input", timeout=PAUSE_SEEN_TIMEOUT_S)
    details = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{APPROVAL_TASK}/-1/hitlDetails",
                     deadline=time.monotonic() + 600)
    assert not details.get("response_received"), details
    assert {"Approve", "Reject"} <= set(details["options"]), details
    return dict(details)


def assert_own_pid_namespace(af: LocalAirflow) -> None:
    """The triggerer runs as PID 1 of a PID namespace other than this test's."""
    pid = af.triggerer_pid()
    assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    nspid = next(line.split()[1:] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                 if line.startswith("NSpid:"))
    assert nspid == [str(pid), "1"], nspid


def task_states(af: LocalAirflow, run_id: str) -> dict[str, str | None]:
    tis = af.api("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
    return {ti["task_id"]: ti["state"] for ti in tis}


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


def roll_back_a_crashing_version(af: LocalAirflow, second: UpgradeDemo, v1: LaunchHandle) -> None:
    """A new version that crashes once released, approval off: rolled back, v1 runs again on its
    checkpoint, nothing lost or duplicated."""
    logs = f"logs: {af.home}"
    last_before = CheckpointReader(str(second.old_cp)).snapshot().last_committed_batch
    assert last_before is not None
    run_id = af.trigger(DAG_ID, second.dag_conf(v1, stream_name=ROLLBACK_STREAM, require_approval=False,
                                                new_application=str(CRASHING_V2)), timeout=600)
    state = af.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT_S)
    states = task_states(af, run_id)
    assert state == "failed", (states, logs)  # a rolled-back upgrade fails the run loudly
    assert states["relaunch"] == "failed", states
    assert states["rollback_stop_new"] == states["rollback_restore"] == \
        states["rollback_restart_old"] == "success", (states, logs)
    report = read_dag_report(second.archive_root, ROLLBACK_STREAM)
    assert report is not None and report["outcome"] == "rolled back", report
    assert any("relaunch failed" in note and "exited with code 3" in note for note in report["notes"]), \
        report["notes"]
    second.wait_for_batch(second.old_cp, last_before + 3, timeout=600)
    audit = second.finish(second.old_cp)
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples


@pytest.mark.timeout(3 * RUN_TIMEOUT_S + 1800)
def test_reject_then_approve_in_the_browser_then_a_rollback_with_the_triggerer_in_its_own_pid_namespace(
        kafka: LocalKafka, demo: UpgradeDemo, browser_pages: BrowserPages, tmp_path: Path) -> None:
    pages = browser_pages
    env = {"AIRFLOW_CONN_KAFKA_DEFAULT": demo.kafka_connection()}
    second = UpgradeDemo(tmp_path / "demo-rollback", kafka=kafka, rate=80.0,
                         conf={CONF_STANDBY_REHEARSAL: "false"})  # no downtime measured: no rehearsal
    af = LocalAirflow(tmp_path / "airflow", DAGS, env=env, isolate_triggerer=True, preload=PRELOAD,
                      startup_timeout=600)
    try:
        with ThreadPoolExecutor(1) as pool:  # Airflow starts while v1 does
            airflow_up = pool.submit(af.start)
            v1 = demo.start(timeout=600)
            airflow_up.result()
        logs = f"logs: {af.home}"
        assert_own_pid_namespace(af)
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

        # (2) Approve: upgraded and verified, with the triggerer unable to see the jobs' processes
        approved = af.trigger(DAG_ID, demo.dag_conf(v1), timeout=600)
        answer_in_ui(pages, af, approved, "Approve", await_approval(af, approved), "approve")
        assert af.wait_for_run(DAG_ID, approved, timeout=RUN_TIMEOUT_S) == "success", \
            (task_states(af, approved), logs)
        assert af.task_state(DAG_ID, approved, "verify") == "success"
        report = read_dag_report(demo.archive_root)
        assert report is not None and report["outcome"] == "upgraded", report
        check_report_page(pages, demo.archive_root)
        with ThreadPoolExecutor(1) as pool:  # the second stream's v1 starts while the first is audited
            second_up = pool.submit(second.start, timeout=600)
            audit = demo.finish(demo.new_cp)
            v1_again = second_up.result()
        assert audit.produced > 500, "the producer must have run through the upgrade"
        assert audit.lost == 0, audit.lost_examples
        assert audit.duplicated == 0, audit.duplicated_examples

        # (3) a new version that crashes once released, on the same isolated triggerer: rolled back
        roll_back_a_crashing_version(af, second, v1_again)
        assert_own_pid_namespace(af)  # the same isolated triggerer served every run
    finally:
        af.stop()
        second.close()
        stop_jobs_under(demo.work, second.work)
