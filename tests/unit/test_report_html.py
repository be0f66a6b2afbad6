"""The stored HTML report: one self-contained page that shows the outcome (a banner with the
outcome's class), the figures, every failed step's error with its found / expected / action, the
steps with their states and times, and every note of the journal (those that explain a rollback
included), escaped and without credentials. The reports are made by the report step from the
previous release's literal journal (``previous_release/journal-cold.json``) and from that journal
carried on to each outcome with the step results and the typed errors the steps record."""

from __future__ import annotations

import html
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint import errors as error_module
from airflow_ckpt_provider.checkpoint.errors import (
    LaunchFailed,
    NewVersionDoesNotStart,
    ProviderError,
    RunningWithoutGracefulStop,
    StartMismatch,
    read_error_line,
)
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.checkpoint.report import StepError, StepTiming, UpgradeReport
from airflow_ckpt_provider.checkpoint.report_html import OUTCOME_MEANING, css_word
from airflow_ckpt_provider.operators.report import UpgradeReportOperator
from airflow_ckpt_provider.records.codec import TypedError
from airflow_ckpt_provider.upgrade.steps import PATHS
from airflow_ckpt_provider.upgrade.steps import Path as StepPath
from tests.unit.step_results import OLD, handle, rollback, stop
from tests.unit.test_journaled_operators import ReportTI, context

COLD_JOURNAL = json.loads((Path(__file__).parent / "previous_release" / "journal-cold.json").read_text())

#: what the steps record when they fail (the typed errors they raise, as the journal keeps them)
VERIFY_ERROR = str(StartMismatch(details=(("orders", 0, 120, 131, "gap"),), found="orders-0: gap, given 120, "
                                 "recorded 131", expected="every partition to start exactly at the handed-over "
                                 "offset (partitions added since: at earliest)", path="/lake/ck/orders-v2"))
RESTART_ERROR = str(LaunchFailed(found="the driver exited with code 1 before its first commit",
                                 expected="a driver that commits its first batch",
                                 log_tail="Traceback (most recent call last):\n  <module> & 'quoted' <b>",
                                 path="/lake/ck/orders-v1"))
STOP_ERROR = str(RunningWithoutGracefulStop(found="batches 42..44 committed with no heartbeat",
                                            expected="a query that runs GracefulStop", path=OLD))
REFUSAL_ERROR = str(NewVersionDoesNotStart(found="the trial's driver failed: AnalysisException <orders.currency>",
                                           expected="the new version to start on a copy of the old checkpoint"))


def _step(name: str, state: str, *, result: Any = None, error: str = "") -> dict[str, Any]:  # noqa: ANN401
    return {"attempts": 1, "error": error, "finished_at": "2026-11-21T19:50:00+00:00", "name": name, "notes": {},
            "result": result, "run_id": "manual__1", "started_at": "2026-11-21T19:49:00+00:00", "state": state}


def journal_of(outcome: str) -> dict[str, Any]:
    """The previous release's cold journal carried on to ``outcome`` with what the steps record."""
    data = json.loads(json.dumps(COLD_JOURNAL))
    steps = data["steps"]
    if outcome in ("rolled back", "rollback failed"):
        steps["verify"] = _step("verify", "failed", error=VERIFY_ERROR)
        steps["rollback_stop_new"] = _step("rollback_stop_new", "done", result=stop().to_dict())
        steps["rollback_handover"] = _step("rollback_handover", "done",
                                           result=rollback(RollbackMode.RESTORE).to_dict())
        steps["rollback_restart_old"] = _step("rollback_restart_old", "done", result=handle("orders-v1", OLD).to_dict()) \
            if outcome == "rolled back" else _step("rollback_restart_old", "failed", error=RESTART_ERROR)
    elif outcome == "failed":
        data["steps"] = {"graceful_stop": _step("graceful_stop", "failed", error=STOP_ERROR)}
    elif outcome == "refused":
        data["steps"] = {}
        data["planning"] = {name: step for name, step in data["planning"].items() if name == "preflight"}
        data["planning"]["compatibility_check"] = {
            **_step("compatibility_check", "failed", error=REFUSAL_ERROR),
            "notes": {"refusal": "the new version does not start: the trial's driver failed"}}
    elif outcome == "rejected":
        data["steps"] = {}
        data["planning"]["approve"]["result"]["chosen"] = "Reject"
    return data


def stored_report(tmp_path: Path, data: dict[str, Any]) -> tuple[UpgradeReport, str]:
    """Run the report step on the journal ``data`` and read back what it stored: the report and its page."""
    if "archive" in data["steps"]:
        data["steps"]["archive"]["result"]["location"] = str(tmp_path / "archive-root" / "orders" / "a1")
    target = tmp_path / "archive" / "orders" / "_upgrades" / "up-0123456789ab.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(data, indent=2, sort_keys=True))
    op = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                               new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.COLD],
                               in_place=PATHS[StepPath.IN_PLACE], journal=str(target))
    try:
        op.execute(context("manual__1", ReportTI({})))  # type: ignore[arg-type]
    except ProviderError:
        pass  # every outcome but upgraded and rejected fails the task, once its report is stored
    (page,) = tmp_path.rglob("upgrade-report.html")
    return UpgradeReport.from_json(page.with_suffix(".json").read_text()), page.read_text()


def banner_class(page: str) -> str:
    (found,) = re.findall(r'<section class="banner (outcome-[a-z-]+)"', page)
    return found


def text_of(page: str) -> str:
    """The page's text as a person reads it: tags left out, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


OUTCOMES = ["upgraded", "rolled back", "rollback failed", "failed", "refused", "rejected"]


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_each_outcome_has_its_banner_class_and_meaning(tmp_path: Path, outcome: str) -> None:
    report, page = stored_report(tmp_path, journal_of(outcome))
    assert report.outcome == outcome
    assert banner_class(page) == f"outcome-{outcome.replace(' ', '-')}"
    assert f".{banner_class(page)}" in page, "the style colours this outcome"
    assert html.escape(OUTCOME_MEANING[outcome]) in page


def test_the_banner_classes_differ_and_the_stored_word_of_an_older_release_maps_to_the_same() -> None:
    assert len({css_word(o) for o in OUTCOMES}) == len(OUTCOMES)
    assert css_word("rolled_back") == css_word("rolled back") == "rolled-back"
    assert css_word("") == "unknown"


@pytest.mark.parametrize("outcome", OUTCOMES)
def test_every_note_is_on_the_page_and_every_error_once_with_its_fields(tmp_path: Path, outcome: str) -> None:
    report, page = stored_report(tmp_path, journal_of(outcome))
    shown = text_of(page)
    assert report.notes, "the report step writes notes for every outcome"
    errors = {e.note() for e in report.errors}
    for note in report.notes:
        if note in errors:
            assert shown.count(note) == 0, "an error is shown with its fields, not again as a note"
        else:
            assert " ".join(note.split()) in " ".join(shown.split()), note
    for error in report.errors:
        fields = error.fields()
        assert fields is not None, error.error
        for value in (fields.found, fields.expected, fields.action):
            assert html.escape(value) in page, (error.step, value)


def test_a_rollback_page_explains_it(tmp_path: Path) -> None:
    report, page = stored_report(tmp_path, journal_of("rolled back"))
    assert [e.step for e in report.errors] == ["verify"] and report.errors[0].error == VERIFY_ERROR
    assert f"verify failed: {VERIFY_ERROR}" in report.notes, "the error stays a note of the JSON and the Markdown"
    assert "<h2>Rollback: offsets the old version processes a second time</h2>" in page
    assert report.rollback is not None
    for line in report.rollback["summary"]:
        assert html.escape(line) in page
    (processed,) = re.findall(r'processed twice</div><div class="value">([^<]*)<', page)
    assert processed == f"{report.rollback['again_committed'] + report.rollback['again_planned']:,}"
    assert '<tr class="state-failed"><td>verify</td><td class="state">failed</td>' in page
    assert '<tr class="state-success"><td>rollback_restart_old</td>' in page


def test_a_failed_rollback_page_says_no_version_runs_first_and_shows_both_errors(tmp_path: Path) -> None:
    report, page = stored_report(tmp_path, journal_of("rollback failed"))
    assert [e.step for e in report.errors] == ["verify", "rollback_restart_old"]
    assert report.notes[0].startswith("NO VERSION OF STREAM 'orders' IS RUNNING")
    assert html.escape(report.notes[0]) in page
    assert "NO VERSION RUNS" in page
    restart = report.errors[1].fields()
    assert restart is not None and restart.summary == "launch failed" and restart.path == "/lake/ck/orders-v1"
    assert restart.detail.startswith("--- driver log tail ---")
    # the log tail's markup is text on the page, never markup
    assert "&lt;b&gt;" in page and "<b>" not in page and "&amp; &#x27;quoted&#x27;" in page


def test_a_refused_page_shows_the_refusal_first_and_the_decision_s_error(tmp_path: Path) -> None:
    report, page = stored_report(tmp_path, journal_of("refused"))
    assert report.notes[0].startswith("compatibility_check refused the upgrade")
    assert page.index(html.escape(report.notes[0])) < page.index('id="steps"'), "what happened, before the steps"
    assert [e.step for e in report.errors] == ["compatibility_check"]
    assert "AnalysisException &lt;orders.currency&gt;" in page
    assert '<tr class="state-refused"><td>compatibility_check</td>' in page


def test_the_upgraded_page_of_the_previous_release_s_journal(tmp_path: Path) -> None:
    report, page = stored_report(tmp_path, journal_of("upgraded"))
    assert report.errors == () and 'id="errors"' not in page
    assert "<title>Upgrade report: orders</title>" in page, "the title the browser test waits for"
    assert "errors" not in json.loads(report.to_json()), "written as the release before it wrote an error-free report"
    assert page.count('<tr class="state-success">') == len(PATHS[StepPath.COLD].steps) + 4  # with the planning
    for step in report.steps:
        assert f"<td>{step.name}</td>" in page
        if step.started_at:
            assert f'<td class="mono">{html.escape(step.started_at)}</td>' in page
    assert "<script" not in page and "<link" not in page and "@import" not in page, "self-contained"
    assert re.findall(r'src="([^"]*)"', page) in ([], ["timeline.png"]), "no file but the timeline"


def test_figures_come_from_the_audit_else_the_sink_ledger_else_say_not_measured() -> None:
    base = UpgradeReport(stream="orders", outcome="upgraded", downtime_s=2.7059)
    audited = UpgradeReport(stream="orders", outcome="upgraded", downtime_s=2.7059,
                            audit={"produced": 8037, "in_sink": 8037, "lost": 0, "duplicated": 0}).to_html()
    assert re.findall(r'<div class="label">([^<]*)</div><div class="value">([^<]*)</div>', audited) == [
        ("downtime", "2.7 s"), ("records", "8037 of 8037"), ("lost", "0"), ("duplicated", "0")]
    ledger = {"exact": False, "why": "a Kafka sink without source headers",
              "twice": [{"topic": "t", "partition": 0, "start": 10, "end": 25, "count": 15}], "skipped": []}
    from dataclasses import replace

    shown = replace(base, sink=ledger).to_html()
    assert '<div class="label">duplicated</div><div class="value">up to 15</div>' in shown
    assert '<div class="label">lost</div><div class="value">0</div>' in shown
    assert '<div class="value">not measured</div>' in base.to_html()


def test_everything_is_escaped_and_no_credential_is_shown() -> None:
    secret = "s3cr3tPass"
    report = UpgradeReport(
        stream="<orders>", outcome="failed", run_id="manual__<1>",
        old_checkpoint=f"s3a://AKIAKEY:{secret}@bucket/ck/orders", archive=f"hdfs://alice:{secret}@nn:8020/a",
        steps=(StepTiming("relaunch", "failed", 1.0),),
        notes=("a note with <script>alert(1)</script> & more", f"launched with --conf spark.hadoop.fs.s3a.secret.key={secret}"),
        errors=(StepError("relaunch", str(LaunchFailed(
            found=f"spark-submit --conf spark.kafka.sasl.password={secret} exited 1", expected="a running driver",
            path=f"s3a://AKIAKEY:{secret}@bucket/ck/orders-v2", log_tail="<img src=x onerror=alert(1)>"))),))
    page = report.to_html()
    assert secret not in page and "AKIAKEY" not in page
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;orders&gt;" in page and "manual__&lt;1&gt;" in page


# -- the error line read back into its fields -------------------------------------------------------

def _provider_errors() -> list[type[ProviderError]]:
    def below(cls: type[ProviderError]) -> list[type[ProviderError]]:
        return [sub for direct in cls.__subclasses__() for sub in (direct, *below(direct))]

    return sorted({c for c in below(ProviderError) if c.__module__ == error_module.__name__},
                  key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", _provider_errors(), ids=lambda c: c.__name__)
def test_every_typed_error_s_line_reads_back_into_its_fields(cls: type[ProviderError]) -> None:
    params = inspect.signature(cls.__init__).parameters
    kwargs: dict[str, Any] = {p.name: () if p.name == "details" else "x" for p in params.values()
                              if p.default is p.empty and p.kind is p.KEYWORD_ONLY
                              and p.name not in ("found", "expected")}
    if "path" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs["path"] = "/lake/ck/orders (v1)"
    error = cls(found="batch 7 (of 9); in flight: yes", expected="a quiet checkpoint: no batch in flight", **kwargs)
    fields = read_error_line(str(error))
    assert fields is not None, str(error)
    assert (fields.summary, fields.found, fields.expected, fields.action) == \
        (error.summary, error.found, error.expected, error.action), str(error)
    assert (f" ({fields.path})" if fields.path else "") == error._where(), "the path as the line shows it"
    assert fields.detail == error.detail


def test_a_codec_error_and_a_cut_line_read_back_and_other_text_does_not() -> None:
    codec = read_error_line(str(TypedError(found="a list", expected="an object")))
    assert codec is not None and (codec.summary, codec.found, codec.expected) == ("", "a list", "an object")
    cut = read_error_line(VERIFY_ERROR[:VERIFY_ERROR.index(". Stop the new query") + 2])
    assert cut is not None and cut.expected.startswith("every partition") and cut.action == ""
    assert read_error_line("interrupted: it began and never recorded an end") is None
    assert read_error_line("ValueError: bad value") is None
    quoting = str(LaunchFailed(found=f"the report said: {VERIFY_ERROR}", expected="a driver"))
    assert read_error_line(quoting) is None, "an error that quotes another cannot be split for sure"
