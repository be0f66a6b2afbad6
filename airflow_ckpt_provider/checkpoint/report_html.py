"""The upgrade report as one self-contained HTML page: what a person opens from the archive.
Pure: no I/O.

:func:`render_html` writes one page with its style inline and no script, and links no file but the
timeline image it is given (``timeline.png``, stored beside it). The page opens with a banner
coloured by the outcome (its class ``outcome-<outcome>``: ``outcome-upgraded``,
``outcome-rolled-back``, ``outcome-rollback-failed``, ``outcome-refused``, ``outcome-failed``, ...),
then the figures (downtime; records, lost and duplicated from the report's sink audit, else from
the sink ledger's account of the switch and a rollback's offsets processed twice; "not measured"
when the report holds none), every failed step's error with its found / expected / action, every
note (the first says what to do when no version runs), the steps with their state (class
``state-<state>``) and times, then the facts and the details the Markdown report shows. The
title is ``Upgrade report: <stream>``. Every text is escaped (:func:`html.escape`); free text (errors,
notes) has its secrets masked (:func:`~airflow_ckpt_provider.checkpoint.secrets.redact_text`) and
every text its locations' credentials (:func:`~airflow_ckpt_provider.checkpoint.secrets.redact_location`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.checkpoint.rewind import StartPlan
from airflow_ckpt_provider.checkpoint.secrets import redact_location, redact_text
from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit

if TYPE_CHECKING:
    from airflow_ckpt_provider.checkpoint.report import StepError, UpgradeReport

#: What each outcome means, in the banner under it (an outcome not listed gets no sentence).
OUTCOME_MEANING: Mapping[str, str] = {
    "upgraded": "The new version runs from the handover; every step of the path is done.",
    "rolled back": "A step after the stop failed: the new version was stopped and the old version restarted "
                   "(see the rollback below for what it processes a second time).",
    "rollback failed": "The old version was stopped, the upgrade failed and the rollback could not restart it: "
                       "NO VERSION RUNS. The first note says what to do.",
    "refused": "A decision before any side effect refused the upgrade: nothing was stopped, copied or started.",
    "rejected": "The approver rejected the upgrade: nothing was stopped, copied or started.",
    "failed": "The upgrade failed before it stopped the old version. See the errors below.",
    "already done": "An earlier run finished this upgrade; this run did nothing.",
}

_STYLE = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;margin:0;background:#f6f8fa}
main{max-width:1100px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.banner{border-left:8px solid #6e7781;background:#eaeef2;border-radius:6px;padding:16px 20px}
.banner .outcome{font-size:26px;font-weight:700;text-transform:uppercase;letter-spacing:.03em}
.banner p{margin:6px 0 0}.banner .meta{color:#57606a;font-size:13px}
.outcome-upgraded,.outcome-already-done{border-color:#1a7f37;background:#dafbe1}
.outcome-upgraded .outcome,.outcome-already-done .outcome{color:#1a7f37}
.outcome-rolled-back{border-color:#bf8700;background:#fff8c5}.outcome-rolled-back .outcome{color:#9a6700}
.outcome-rollback-failed{border-color:#82071e;background:#ffd8d3}.outcome-rollback-failed .outcome{color:#82071e}
.outcome-refused{border-color:#0969da;background:#ddf4ff}.outcome-refused .outcome{color:#0550ae}
.outcome-rejected{border-color:#57606a;background:#eaeef2}.outcome-rejected .outcome{color:#424a53}
.outcome-failed{border-color:#cf222e;background:#ffebe9}.outcome-failed .outcome{color:#cf222e}
.figures{display:flex;flex-wrap:wrap;gap:12px;margin-top:16px}
.figure{flex:1 1 180px;background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:10px 14px}
.figure .value{font-size:22px;font-weight:700}.figure .label{color:#57606a;font-size:13px}
.figure .source{color:#6e7781;font-size:12px}
table{border-collapse:collapse;background:#fff;width:100%}
th,td{border:1px solid #d0d7de;padding:5px 9px;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
table.facts th{width:240px}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:13px;word-break:break-all}
tr.state-success td.state{color:#1a7f37}tr.state-failed td.state{color:#cf222e;font-weight:700}
tr.state-failed{background:#fff5f5}tr.state-refused td.state,tr.state-rejected td.state{color:#0550ae}
tr.state-not-run td,tr.state-skipped td{color:#6e7781}
.error{background:#fff;border:1px solid #ff8182;border-left:6px solid #cf222e;border-radius:6px;
padding:10px 14px;margin:10px 0}
.error h3{margin:0 0 6px;font-size:15px}.error dl{display:grid;grid-template-columns:110px 1fr;gap:4px 12px;margin:0}
.error dt{font-weight:600;color:#57606a}.error dd{margin:0}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;border:1px solid #d0d7de;padding:8px;margin:6px 0 0}
ul.notes li{margin:4px 0}
details{margin-top:10px}summary{cursor:pointer;font-weight:600}
img{max-width:100%;background:#fff;border:1px solid #d0d7de;margin-top:8px}
"""


def css_word(text: str) -> str:
    """``text`` as a CSS class word: lower case, every run of other characters one ``-``
    (``rolled back`` and ``rolled_back`` -> ``rolled-back``); ``unknown`` when nothing is left."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def _text(value: object) -> str:
    """A value as escaped text, its locations' credentials masked."""
    return html.escape(redact_location(str(value)))


def _free(value: object) -> str:
    """Free text (an error, a note) escaped, with its secrets and locations' credentials masked."""
    return html.escape(redact_location(redact_text(str(value))))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], *, numeric: Sequence[int] = ()) -> str:
    """A table of already escaped cells; ``numeric`` column indexes are right-aligned."""
    out = ["<table><tr>", *(f"<th>{_text(h)}</th>" for h in head), "</tr>"]
    for row in rows:
        cells = "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(row))
        out.append(f"<tr>{cells}</tr>")
    out.append("</table>")
    return "".join(out)


def _figure(label: str, value: str, source: str) -> str:
    return (f'<div class="figure"><div class="label">{_text(label)}</div><div class="value">{_text(value)}</div>'
            f'<div class="source">{_text(source)}</div></div>')


def _count(ranges: Sequence[Mapping[str, Any]]) -> int | None:
    counts = [r.get("count") for r in ranges]
    return None if any(c is None for c in counts) else sum(int(c) for c in counts if c is not None)


def figures(report: UpgradeReport) -> list[tuple[str, str, str]]:
    """The banner's figures as (label, value, where it comes from): the downtime; the records,
    the lost and the duplicated ones by the report's sink audit when it has one, else by the sink
    ledger's account of the switch (and, after a rollback, the offsets the old version processes a
    second time); "not measured" when the report holds neither."""
    downtime = ("downtime", f"{report.downtime_s:.1f} s", "last old commit to first new commit") \
        if report.downtime_s is not None else ("downtime", "-", "only measured for an upgraded stream")
    audit = report.audit or {}
    if audit:
        return [downtime,
                ("records", f"{audit.get('in_sink', '-')} of {audit.get('produced', '-')}", "in the sink, of produced"),
                ("lost", str(audit.get("lost", "-")), "sink audit"),
                ("duplicated", str(audit.get("duplicated", "-")), "sink audit")]
    rows = sum(b.input_rows or 0 for b in report.new_batches)
    records = ("records", f"{rows:,}", "read by the new query (its retained batches)") if report.new_batches \
        else ("records", "-", "the new query read none")
    sink = report.sink or {}
    if sink:
        skipped, twice = _count(sink.get("skipped") or ()), _count(sink.get("twice") or ())
        lost = ("lost", "0" if sink.get("exact") or skipped == 0 else
                ("unknown" if skipped is None else f"{skipped:,}"), "sink ledger at the switch")
        duplicated = ("duplicated", "0" if sink.get("exact") or twice == 0 else
                      (f"up to {twice:,}" if twice is not None else "unknown"), "sink ledger at the switch")
    else:
        lost = ("lost", "not measured", "no sink audit or ledger in this report")
        duplicated = ("duplicated", "not measured", "no sink audit or ledger in this report")
    if report.rollback:
        again = int(report.rollback.get("again_committed", 0)) + int(report.rollback.get("again_planned", 0))
        duplicated = ("processed twice", f"{again:,}", "offsets the old version processes again after the rollback")
    return [downtime, records, lost, duplicated]


def _banner(report: UpgradeReport) -> str:
    meaning = OUTCOME_MEANING.get(report.outcome.replace("_", " "), "")
    meta = " · ".join(_text(v) for v in (f"run {report.run_id}" if report.run_id else "",
                                          f"report made {report.created_at}") if v)
    return (f'<section class="banner outcome-{css_word(report.outcome)}" id="outcome">'
            f'<div class="outcome">{_text(report.outcome)}</div>'
            + (f"<p>{_text(meaning)}</p>" if meaning else "") + f'<p class="meta">{meta}</p></section>')


def _error(error: StepError) -> str:
    fields = error.fields()
    title = f"<h3>{_text(error.step)} failed" + (f": {_free(fields.summary)}" if fields and fields.summary else "") \
        + "</h3>"
    if fields is None:
        return f'<div class="error">{title}<pre>{_free(error.error)}</pre></div>'
    parts = [("where", fields.path), ("found", fields.found), ("expected", fields.expected),
             ("action", fields.action)]
    rows = "".join(f"<dt>{name}</dt><dd>{_free(value)}</dd>" for name, value in parts if value)
    detail = f"<pre>{_free(fields.detail)}</pre>" if fields.detail else ""
    return f'<div class="error">{title}<dl>{rows}</dl>{detail}</div>'


def _steps(report: UpgradeReport) -> str:
    """The steps' table: each row's class ``state-<state>``, its state cell's ``state``."""
    down = report.downtime_by_step()
    out = ["<table><tr>", *(f"<th>{h}</th>" for h in ("step", "state", "seconds", "of the downtime", "started",
                                                    "ended")), "</tr>"]
    for s in report.steps:
        out.append(f'<tr class="state-{css_word(s.state)}"><td>{_text(s.name)}</td><td class="state">{_text(s.state)}'
                   f'</td><td class="num">{_seconds(s.seconds)}</td><td class="num">'
                   f'{f"{down[s.name]:.1f}" if s.name in down else "-"}</td><td class="mono">'
                   f'{_text(s.started_at or "-")}</td><td class="mono">{_text(s.ended_at or "-")}</td></tr>')
    out += [f'<tr class="part"><td>({_text(name)})</td><td></td><td></td><td class="num">{down[name]:.1f}</td>'
            "<td></td><td></td></tr>" for name in ("between steps", "first batch") if name in down]
    out.append("</table>")
    return "".join(out)


def _details(report: UpgradeReport) -> list[str]:
    out: list[str] = []
    if report.switchover:
        split = DowntimeSplit.from_json(report.switchover)
        out += ["<h2>The switchover inside the drivers</h2>",
                _table(["part", "seconds"], [[_text(n), _seconds(v)] for n, v in split.parts()], numeric=(1,))]
    if report.rollback:
        rollback = report.rollback
        out += ["<h2>Rollback: offsets the old version processes a second time</h2>",
                '<ul class="notes">' + "".join(f"<li>{_free(line)}</li>" for line in rollback.get("summary", ()))
                + "</ul>"]
        rows = []
        for p in rollback.get("partitions", ()):
            again = [f"[{p[k][0]}, {p[k][1]}): {p[k + '_count']}" if p.get(k + "_count") else "0"
                     for k in ("again_committed", "again_planned")]
            rows.append([_text(p["topic"]), _text(p["partition"]), _text(p["handover"]), _text(p["resume"]),
                         _text("-" if p.get("new_start") is None else p["new_start"]), _text(again[0]),
                         _text(again[1])])
        out.append(_table(["topic", "partition", "handover", "old version resumes at", "new version started at",
                           "again, committed by the new version", "again, its uncommitted batch"], rows,
                          numeric=(1, 2, 3, 4)))
    if report.sink:
        out += ["<h2>The sink at the switch</h2>", f"<p>{_free(report.sink.get('why', '-'))}</p>"]
        for key, title in (("twice", "may be processed twice"), ("skipped", "skipped")):
            ranges = report.sink.get(key) or ()
            if ranges:
                out.append(_table(["topic", "partition", f"{title}: from", "to (exclusive)", "records"], [
                    [_text(r["topic"]), _text(r["partition"]), _text("earliest" if r["start"] < 0 else r["start"]),
                     _text(r["end"]), _text("-" if r.get("count") is None else r["count"])] for r in ranges],
                    numeric=(1, 2, 3, 4)))
    if report.start_plan:
        plan = StartPlan.from_dict(report.start_plan)
        out += ["<h2>Where the new version started</h2>",
                f"<p>{_text(plan.choice.describe())}: {plan.reprocessed:,} records processed again, "
                f"{plan.skipped:,} skipped.</p>",
                _table(["partition", "old stopped at", "v2 starts at", "processed again", "skipped"],
                       [[_text(f"{p.topic}-{p.partition}"), _text(p.resume_at), _text(p.start_at),
                         f"{p.reprocessed:,}", f"{p.skipped:,}"] for p in plan.partitions], numeric=(1, 2, 3, 4))]
    if report.compatibility and (report.compatibility.get("old") or report.compatibility.get("error_class")):
        out += ["<h2>Compatibility check (trial runs on copies)</h2>", '<ul class="notes">'
                + "".join(f"<li>{_text(k)}: {_free(report.compatibility[k])}</li>"
                          for k in ("rule", "operator", "old", "new", "error_class") if report.compatibility.get(k))
                + "</ul>"]
    return out


def render_html(report: UpgradeReport, png_name: str | None = None) -> str:
    """``report`` as one self-contained HTML page (see the module doc); ``png_name``: the
    timeline image stored beside the page, shown when given."""
    shown_as_errors = {error.note() for error in report.errors}
    notes = [note for note in report.notes if note not in shown_as_errors]
    facts = "".join(f"<tr><th>{_text(k)}</th><td>{f'<code>{_text(v)}</code>' if k == 'startingOffsets' else _text(v)}"
                    "</td></tr>" for k, v in report.facts())
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Upgrade report: {_text(report.stream)}</title>",
        f"<style>{_STYLE}</style></head><body><main>",
        f"<h1>Upgrade report: {_text(report.stream)}</h1>",
        _banner(report),
        '<div class="figures" id="figures">' + "".join(_figure(*f) for f in figures(report)) + "</div>",
    ]
    if report.errors:
        parts += ['<h2 id="errors">Errors</h2>', *(_error(e) for e in report.errors)]
    if notes:
        parts += ['<h2 id="notes">Notes</h2>', '<ul class="notes">' + "".join(f"<li>{_free(n)}</li>" for n in notes)
                  + "</ul>"]
    parts += ['<h2 id="steps">Steps</h2>', _steps(report), '<h2 id="facts">Facts</h2>',
              f'<table class="facts">{facts}</table>', *_details(report)]
    if png_name:
        parts += ["<h2>Input rows per batch</h2>", f'<img src="{_text(png_name)}" alt="input rows per batch">']
    for title, batches in (("old query", report.old_batches), ("new query", report.new_batches)):
        shown = list(batches)[-10:]
        if shown:
            parts.append(f"<details><summary>Input rows per batch, {_text(title)} (last {len(shown)})</summary>"
                         + _table(["batch", "input rows"], [[str(b.batch_id), "-" if b.input_rows is None else
                                                            str(b.input_rows)] for b in shown], numeric=(0, 1))
                         + "</details>")
    parts.append("</main></body></html>\n")
    return redact_location("".join(parts))


__all__ = ["OUTCOME_MEANING", "css_word", "figures", "render_html"]
