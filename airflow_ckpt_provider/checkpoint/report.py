"""The upgrade report: handover, step times, downtime and input rows per batch, old vs new.
Pure: no I/O.

:class:`UpgradeReport` is a value object (JSON round-trip); :meth:`to_markdown` and
:meth:`to_html` (:mod:`~airflow_ckpt_provider.checkpoint.report_html`) render it for people;
:func:`airflow_ckpt_provider.storage.timeline.render_timeline_png` draws input rows per batch of
the old and the new query on one time axis into a PNG file (needs matplotlib: the ``report``
extra).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import ErrorLine, InvalidUpgradeReport, read_error_line
from airflow_ckpt_provider.checkpoint.history import BatchRecord
from airflow_ckpt_provider.checkpoint.report_html import render_html
from airflow_ckpt_provider.checkpoint.rewind import StartPlan
from airflow_ckpt_provider.checkpoint.secrets import redact_location
from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit
from airflow_ckpt_provider.clock import epoch_seconds, utc_iso
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, array_of, object_of


@dataclass(frozen=True)
class StepTiming:
    """One step of the upgrade as it ran."""

    name: str
    state: str
    seconds: float | None = None
    started_at: str | None = None
    ended_at: str | None = None


@dataclass(frozen=True)
class StepError:
    """A failed step's error as the upgrade journal recorded it: ``error`` is the error's line
    (``str(error)``, at most 2,000 characters), or what the planner says of a step that began and
    never ended."""

    step: str
    error: str

    def note(self) -> str:
        """The report's note of it: ``<step> failed: <error>``."""
        return f"{self.step} failed: {self.error}"

    def fields(self) -> ErrorLine | None:
        """Its found / expected / action (:func:`~airflow_ckpt_provider.checkpoint.errors.read_error_line`);
        None when the line is not one typed error's."""
        return read_error_line(self.error)


@dataclass(frozen=True)
class UpgradeReport:
    """Everything a person needs to trust (or question) one upgrade run."""

    stream: str
    outcome: str  # upgraded | rolled back | rejected | failed
    run_id: str = ""
    old_checkpoint: str = ""
    new_checkpoint: str = ""
    archive: str = ""
    handover: Mapping[str, Any] | None = None
    starting_offsets: str = ""
    steps: Sequence[StepTiming] = ()
    downtime_s: float | None = None
    old_batches: Sequence[BatchRecord] = ()
    new_batches: Sequence[BatchRecord] = ()
    audit: Mapping[str, Any] | None = None
    notes: Sequence[str] = ()
    start_plan: Mapping[str, Any] | None = None  # StartPlan.to_dict() of a start other than resume
    #: a rollback's RollbackHandover dict: how the old version restarted, what it processes twice
    rollback: Mapping[str, Any] | None = None
    #: the state export step's StateExport dict: where the old query's state went, or why it did not
    state_export: Mapping[str, Any] | None = None
    #: the compatibility check's verdict (CompatibilityVerdict dict without its trials and log tail)
    compatibility: Mapping[str, Any] | None = None
    #: the upgrade path chosen (PathChoice.describe()), "" when no path step ran
    path: str = ""
    #: epoch seconds of the graceful stop's request: the downtime starts there when the old query
    #: was idle before it (its last commit earlier); None: from the old query's last commit
    stop_requested_at: float | None = None
    #: epoch seconds when the new version was up (its launch step ended): the downtime's end when
    #: the new query committed nothing yet (caught up on an idle topic)
    ready_at: float | None = None
    #: the sink ledger's account of the switch (the handover step's SinkAccount dict): what the sink
    #: holds of a batch the stop cut, and per partition what it may receive twice or never, and why
    sink: Mapping[str, Any] | None = None
    #: a switchover's DowntimeSplit dict: where the downtime went inside the drivers (the old query's
    #: stop, the standby noticing it, its handover read, the query start, the first batch)
    switchover: Mapping[str, Any] | None = None
    #: each failed step's recorded error, in step order (each is also a note: :meth:`StepError.note`)
    errors: Sequence[StepError] = ()
    created_at: str = field(default_factory=lambda: utc_iso(timespec="seconds"))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types only (lists, not tuples), as XCom stores them; with the computed
        ``downtime_by_step`` (see :meth:`downtime_by_step`); ``switchover`` only when there was one."""
        data = json.loads(redact_location(json.dumps(asdict(self))))  # no credentials of a location, anywhere
        data["downtime_by_step"] = self.downtime_by_step()
        if data.get("switchover") is None:  # as the release before the switchover path wrote it
            del data["switchover"]
        if not data.get("errors"):  # as the release before the errors were kept apart wrote it
            del data["errors"]
        return _REPORT.encode(data)

    def window(self) -> tuple[float, float] | None:
        """This upgrade's downtime window (see :func:`downtime_window`)."""
        return downtime_window(self.old_batches, self.new_batches, stop_requested_at=self.stop_requested_at,
                               ready_at=self.ready_at)

    def downtime_by_step(self) -> dict[str, float]:
        """Seconds of the downtime (:meth:`window`) spent in each step, in step order, plus
        ``between steps`` (scheduling, task start-up) and ``first batch`` (after the last step that
        overlaps it ended: the new query's start and first batch); empty when the downtime or the
        step times are unknown."""
        window = self.window()
        if window is None or window[1] <= window[0]:
            return {}
        start, end = window
        parts: dict[str, float] = {}
        covered: list[tuple[float, float]] = []
        for step in self.steps:
            if not step.started_at or not step.ended_at:
                continue
            begin, finish = epoch_seconds(step.started_at), epoch_seconds(step.ended_at)
            if begin is None or finish is None:
                continue
            overlap = min(finish, end) - max(begin, start)
            if overlap > 0:
                parts[step.name] = round(overlap, 3)
                covered.append((max(begin, start), min(finish, end)))
        if not covered:
            return {}
        last = max(b for _, b in covered)
        parts["between steps"] = round(max(0.0, (last - start) - _union(covered)), 3)
        if end - last > 0.0005:  # the downtime went on after the last step that overlaps it
            parts["first batch"] = round(end - last, 3)
        return parts

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, indent=2)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> UpgradeReport:
        """From :meth:`to_json` (``report/upgrade-report.json``) or its dict (the report step's XCom)
        through its strict codec; :class:`InvalidUpgradeReport` on anything else. The step results
        it shows (handover, rollback, state export, ...) are kept as the objects they were."""
        return cls(**_REPORT.decode(data))

    # -- rendering -------------------------------------------------------------------------------

    def facts(self) -> list[tuple[str, str]]:
        """The report's facts as (name, value) rows, in the order the renderings show them."""
        handover = self.handover or {}
        facts = [
            ("outcome", self.outcome),
            ("DAG run", self.run_id or "-"),
            ("old checkpoint", self.old_checkpoint or "-"),
            ("new checkpoint", self.new_checkpoint or "-"),
            ("archive", self.archive or "-"),
            ("handed over at batch", str(handover.get("batch_id", "-"))
             + (f" (cut by the stop; the sink holds it: {handover['held_by_sink']})"
                if handover.get("held_by_sink") else "")),
            ("in-flight batch (not used)",
             "none" if handover.get("in_flight_batch") is None else str(handover["in_flight_batch"])),
            ("startingOffsets", self.starting_offsets or "-"),
            ("downtime", "-" if self.downtime_s is None else f"{self.downtime_s:.1f} s"),
        ]
        if self.sink:
            twice = self.sink.get("twice") or ()
            counts = [r.get("count") for r in twice]
            facts.append(("sink: processed twice / skipped",
                          "0 / 0 (exact)" if self.sink.get("exact") else
                          ("up to " + (f"{sum(c for c in counts if c):,} records" if None not in counts else
                                       "an unknown number of records") + f" in {len(twice)} partition(s) / 0")))
        if self.state_export:
            export = self.state_export
            seeded = DowntimeSplit.from_json(self.switchover).state_wait_s if self.switchover else None
            facts.append(("state carried", f"no: {export.get('skipped')}" if export.get("skipped") or not
                          export.get("location") else
                          f"after batch {export.get('batch_id')}: {export.get('stores', 0)} stores, "
                          f"{export.get('rows', 0):,} rows, {export.get('bytes', 0):,} bytes in "
                          f"{export.get('seconds', 0):.1f} s, verified, at {export.get('location')}"
                          + (f"; seeded by the standby in its own session in {seeded:.1f} s, before the export, "
                             "which equals it store by store" if seeded is not None else "")))
        if self.switchover:
            facts.append(("switchover in the drivers", DowntimeSplit.from_json(self.switchover).describe()))
        if self.path:
            facts.append(("upgrade path", self.path))
        if self.compatibility:
            facts.append(("compatibility check", str(self.compatibility.get("headline") or "-")))
        if self.rollback:
            facts += [("rollback", f"{self.rollback.get('mode', '-')} on {self.rollback.get('checkpoint', '-')}"),
                      ("processed twice by the old version",
                       f"{self.rollback.get('again_committed', 0)} committed by the new version, "
                       f"{self.rollback.get('again_planned', 0)} of its uncommitted batch")]
        if self.audit:
            facts += [(k, str(self.audit[k])) for k in ("produced", "in_sink", "lost", "duplicated")
                      if k in self.audit]
        return facts

    def to_markdown(self, png_name: str | None = None) -> str:
        """The report as Markdown; locations' credentials masked (:func:`redact_location`)."""
        return redact_location(self._markdown(png_name))

    def to_html(self, png_name: str | None = None) -> str:
        """The report as one self-contained HTML page
        (:func:`~airflow_ckpt_provider.checkpoint.report_html.render_html`: inline style, no script,
        no other file but the timeline ``png_name``); every text escaped, locations' credentials and
        secrets in free text masked."""
        return render_html(self, png_name)

    def _markdown(self, png_name: str | None = None) -> str:
        lines = [f"# Upgrade report: {self.stream}", "", "| | |", "| --- | --- |"]
        lines += [f"| {k} | `{v}` |" if k == "startingOffsets" else f"| {k} | {v} |" for k, v in self.facts()]
        down = self.downtime_by_step()
        lines += ["", "## Steps", "", "| step | state | seconds | of the downtime |", "| --- | --- | ---: | ---: |"]
        lines += [f"| {s.name} | {s.state} | {'-' if s.seconds is None else f'{s.seconds:.1f}'} | "
                  f"{f'{down[s.name]:.1f}' if s.name in down else '-'} |" for s in self.steps]
        lines += [f"| ({name}) | | | {down[name]:.1f} |" for name in ("between steps", "first batch") if name in down]
        if self.switchover:
            split = DowntimeSplit.from_json(self.switchover)
            lines += ["", "## The switchover inside the drivers", "", "| part | seconds |", "| --- | ---: |"]
            lines += [f"| {name} | {'-' if value is None else f'{value:.1f}'} |" for name, value in split.parts()]
        for title, batches in (("old query", self.old_batches), ("new query", self.new_batches)):
            shown = list(batches)[-10:]
            lines += ["", f"## Input rows per batch, {title} (last {len(shown)})", "",
                      "| batch | input rows |", "| ---: | ---: |"]
            lines += [f"| {b.batch_id} | {'-' if b.input_rows is None else b.input_rows} |" for b in shown]
        if self.compatibility and (self.compatibility.get("old") or self.compatibility.get("error_class")):
            lines += ["", "## Compatibility check (trial runs on copies)", ""]
            lines += [f"- {k}: {self.compatibility[k]}" for k in ("rule", "operator", "old", "new", "error_class")
                      if self.compatibility.get(k)]
        if self.sink:
            lines += ["", "## The sink at the switch", "", f"- {self.sink.get('why', '-')}"]
            for key, title in (("twice", "may be processed twice"), ("skipped", "skipped")):
                ranges = self.sink.get(key) or ()
                if ranges:
                    lines += ["", f"| topic | partition | {title}: from | to (exclusive) | records |",
                              "| --- | ---: | ---: | ---: | ---: |"]
                    lines += [f"| {r['topic']} | {r['partition']} | {'earliest' if r['start'] < 0 else r['start']} "
                              f"| {r['end']} | {'-' if r.get('count') is None else r['count']} |" for r in ranges]
        if self.start_plan:
            lines += ["", "## Where the new version started", "", *StartPlan.from_dict(self.start_plan).markdown()]
        if png_name:
            lines += ["", f"![input rows per batch]({png_name})"]
        if self.rollback:
            lines += ["", "## Rollback: offsets the old version processes a second time", ""]
            lines += [f"- {line}" for line in self.rollback.get("summary", ())]
            lines += ["", "| topic | partition | handover | old version resumes at | new version started at "
                      "| again, committed by the new version | again, its uncommitted batch |",
                      "| --- | ---: | ---: | ---: | ---: | --- | --- |"]
            for p in self.rollback.get("partitions", ()):
                ranges = [f"[{p[k][0]}, {p[k][1]}): {p[k + '_count']}" if p[k + "_count"] else "0"
                          for k in ("again_committed", "again_planned")]
                start = "-" if p.get("new_start") is None else p["new_start"]
                lines.append(f"| {p['topic']} | {p['partition']} | {p['handover']} | {p['resume']} | {start} "
                             f"| {ranges[0]} | {ranges[1]} |")
        if self.notes:
            lines += ["", "## Notes", ""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


# -- the codecs of the report and its rows (airflow_ckpt_provider.records.codec) ----------------------
# Written without a format number, as today's release writes it.

_TEXT_OR_NULL = Field((str,), required=False, nullable=True)
_NUMBER_OR_NULL = Field((float,), required=False, nullable=True)
_STEP = Codec("report step", InvalidUpgradeReport, {
    "name": Field((str,)),
    "state": Field((str,)),
    "seconds": _NUMBER_OR_NULL,
    "started_at": _TEXT_OR_NULL,
    "ended_at": _TEXT_OR_NULL,
}, version=None)
_BATCH = Codec("report batch", InvalidUpgradeReport, {
    "batch_id": Field((int,)),
    "planned_at_ms": Field((int,), nullable=True),
    "committed_at": Field((float,), nullable=True),
    "input_rows": Field((int,), nullable=True),
}, version=None)


def _batches(value: Any) -> tuple[BatchRecord, ...]:  # noqa: ANN401 - a checked JSON array
    return array_of(dict, decode=lambda b: BatchRecord(**_BATCH.decode(b)))(value)


_STEP_ERROR = Codec("report error", InvalidUpgradeReport, {
    "step": Field((str,)),
    "error": Field((str,)),
}, version=None)
_OBJECT_OR_NULL = Field((dict,), required=False, nullable=True)
_REPORT = Codec("UpgradeReport", InvalidUpgradeReport, {
    "stream": Field((str,)),
    "outcome": Field((str,)),
    **{name: Field((str,), required=False, default="")
       for name in ("run_id", "old_checkpoint", "new_checkpoint", "archive", "starting_offsets", "path")},
    "steps": Field((list,), required=False, default=(),
                   decode=array_of(dict, decode=lambda s: StepTiming(**_STEP.decode(s)))),
    "downtime_s": _NUMBER_OR_NULL,
    "old_batches": Field((list,), required=False, default=(), decode=_batches),
    "new_batches": Field((list,), required=False, default=(), decode=_batches),
    "notes": Field((list,), required=False, default=(), decode=array_of(str)),
    "errors": Field((list,), required=False, default=(),
                    decode=array_of(dict, decode=lambda e: StepError(**_STEP_ERROR.decode(e)))),
    **{name: _OBJECT_OR_NULL
       for name in ("handover", "audit", "start_plan", "rollback", "state_export", "compatibility", "sink",
                    "switchover")},
    "stop_requested_at": _NUMBER_OR_NULL,
    "ready_at": _NUMBER_OR_NULL,
    "created_at": Field((str,)),
    "downtime_by_step": Field((dict,), required=False, derived=True, decode=object_of(float)),
}, versions=(UNVERSIONED,))


def _union(spans: list[tuple[float, float]]) -> float:
    """Total length covered by ``spans`` (overlaps counted once)."""
    total, reach = 0.0, float("-inf")
    for begin, finish in sorted(spans):
        if finish > reach:
            total += finish - max(begin, reach)
            reach = finish
    return total


def downtime_window(old: Sequence[BatchRecord], new: Sequence[BatchRecord], *, stop_requested_at: float | None = None,
                    ready_at: float | None = None) -> tuple[float, float] | None:
    """(start, end) of the downtime, epoch seconds; None if unknown.

    It starts at the old query's last commit — or at the stop request when that came later (an
    idle old query: the time it had nothing to do before the stop is no downtime) — and ends at the
    new query's first commit, or at ``ready_at`` (the new version up and caught up) when the new
    query has committed nothing (an idle topic)."""
    old_commits = [b.committed_at for b in old if b.committed_at is not None]
    new_commits = [b.committed_at for b in new if b.committed_at is not None]
    starts = [max(old_commits)] if old_commits else []
    if stop_requested_at is not None:
        starts.append(stop_requested_at)
    end = min(new_commits) if new_commits else ready_at
    if not starts or end is None:
        return None
    return max(starts), end


def downtime_seconds(old: Sequence[BatchRecord], new: Sequence[BatchRecord], *, stop_requested_at: float | None = None,
                     ready_at: float | None = None) -> float | None:
    """The length of :func:`downtime_window` (None if unknown)."""
    window = downtime_window(old, new, stop_requested_at=stop_requested_at, ready_at=ready_at)
    return None if window is None else window[1] - window[0]
