"""The last task of an upgrade: what happened, with proof, stored next to the archive."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint.compat import CompatibilityVerdict
from airflow_ckpt_provider.checkpoint.errors import CheckpointError, UpgradeFailed, UpgradeRefused
from airflow_ckpt_provider.checkpoint.history import BatchRecord
from airflow_ckpt_provider.checkpoint.outcome import (
    ALREADY_DONE,
    REFUSED,
    REJECTED,
    ROLLBACK_FAILED,
    UPGRADED,
    TaskState,
)
from airflow_ckpt_provider.checkpoint.path import PathChoice
from airflow_ckpt_provider.checkpoint.report import StepError, UpgradeReport, downtime_seconds
from airflow_ckpt_provider.checkpoint.rollback import RollbackHandover, RollbackHandoverUnread
from airflow_ckpt_provider.checkpoint.state import StateExport
from airflow_ckpt_provider.checkpoint.switchover import SwitchoverResult
from airflow_ckpt_provider.clock import epoch_seconds
from airflow_ckpt_provider.faults import fault_point
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.operators.journaled import journal_at
from airflow_ckpt_provider.storage.history import batch_history
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.storage.timeline import render_timeline_png
from airflow_ckpt_provider.upgrade import planner
from airflow_ckpt_provider.upgrade.record import JournalRecord
from airflow_ckpt_provider.upgrade.results import ArchiveResult, PreflightPlanning
from airflow_ckpt_provider.upgrade.steps import (
    COMPATIBILITY_CHECK,
    IN_PLACE_ROLLBACK,
    PATH_CHOICE,
    PLANNING,
    PREFLIGHT,
    ROLLBACK,
    PathSteps,
)
from airflow_ckpt_provider.upgrade.table import handover_of, recorded, stop_of


class UpgradeReportOperator(BaseOperator):
    """Build the upgrade report from the upgrade journal and the two checkpoints' histories.

    Runs whatever happened before it (use ``trigger_rule="all_done"``). Everything about the
    steps comes from the journal (``journal``): each step's state, times and error, the answer
    of the approval, the results of the stop, the handover, the state export, the archive and the
    rollback, the compatibility verdict and the path; Airflow's task states are not read
    (:mod:`airflow_ckpt_provider.upgrade.planner` decides the outcome). Logs the report as
    Markdown and writes ``report/upgrade-report.md``, ``.html`` (one styled page: the outcome, the
    figures, each failed step's error with its found / expected / action, the steps and every note),
    ``.json`` and ``timeline.png``
    into the archive the archive step produced or, when there is none (an upgrade that ended
    before its archive), into ``<journal without .json>/`` next to the upgrade journal. A stored
    report is never replaced: a later run of the same upgrade adds ``report/run-<n>/``. Fails
    with :class:`UpgradeFailed` unless the outcome is ``upgraded`` or ``rejected``, so a
    rolled-back or broken upgrade fails the DAG run loudly; a ``refused`` one (the preflight, the
    compatibility check or the path choice failed before any side effect) with
    :class:`UpgradeRefused`, once its journal is closed (the preflight closes it itself when it
    refuses; the report then only adds where it is stored). Returns the report as a dict (XCom).
    When the preflight's record says the trigger accepted a sink that is not declared, the report
    notes that exactness is not proven.
    Every recorded result and note is read through its row of the step table
    (:func:`~airflow_ckpt_provider.upgrade.table.recorded`): one that is not its row's type fails
    the report with :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult` (which step,
    what it found, what it expected) before anything is stored and with the journal left open.

    ``path`` (:class:`~airflow_ckpt_provider.upgrade.steps.PathSteps`) names the path's steps:
    its stop's StopResult gives the notes on where the stop's time went, its handover and archive
    are shown, its state export says whether the old query's state was carried, and a rollback's
    report states how the old version restarted and exactly which Kafka offsets, per partition,
    it processes a second time. When the journal's path choice (``choose_path``) is the in-place
    restart, the report is of ``in_place``'s steps: the "new" checkpoint is the old one and its
    batches after the handover's are the new version's. The compatibility verdict is the
    ``compatibility check`` fact.

    The report lists the upgrade id, its runs and the steps taken over from earlier runs, then
    closes the journal with the outcome and where the report is stored; a final outcome
    (upgraded, rejected, refused, rolled back) releases the stream's lock. A refusal's reason (the
    refusing step's error, in the user's words) is the report's first note and the journal's
    closing entry: nothing was stopped, copied or started. Without a journal (the preflight ran
    without one, or failed before it could record anything: nothing was changed) the outcome is
    ``failed`` and the report is only logged.

    When the journal's ``run_log`` says this run found the upgrade already done (the preflight's
    entry for this run: an earlier run finished this upgrade), the outcome is ``already done``: the
    report says this run did nothing and names the first run's report, is stored beside it as
    ``report/run-<n>/``, and the journal gets a run entry but is not closed again (its outcome and
    the first report stay as they are). The task succeeds.

    :param stream_name: the stream's name (templated)
    :param old_checkpoint_uri: the old version's checkpoint (templated)
    :param new_checkpoint_uri: the new checkpoint (templated)
    :param path: the steps of the path the DAG runs
    :param in_place: the steps of the in-place path, when the DAG has one
    :param step_names: every step to list in the report, in order (default: the planning, ``path``, ``in_place``);
        the rollback steps that began are listed after them in any case
    :param storage_conn_id: Airflow connection of the checkpoints' storage (templated)
    :param archive_conn_id: Airflow connection of the archive's storage (templated)
    :param journal: the upgrade journal's URI (templated)
    :param journal_conn_id: Airflow connection of the journal's storage (templated)
    """

    template_fields: Sequence[str] = ("stream_name", "old_checkpoint_uri", "new_checkpoint_uri", "storage_conn_id",
                                      "archive_conn_id", "journal", "journal_conn_id")

    def __init__(
        self,
        *,
        stream_name: str,
        old_checkpoint_uri: str,
        new_checkpoint_uri: str,
        path: PathSteps,
        in_place: PathSteps | None = None,
        step_names: Sequence[str] | None = None,
        storage_conn_id: str | None = None,
        archive_conn_id: str | None = None,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.journal = journal
        self.journal_conn_id = journal_conn_id
        self.stream_name = stream_name
        self.old_checkpoint_uri = old_checkpoint_uri
        self.new_checkpoint_uri = new_checkpoint_uri
        self.path = path
        self.in_place = in_place
        self.step_names = list(step_names) if step_names is not None else [
            *PLANNING, *path.steps, *(s for s in (in_place.steps if in_place else ()) if s not in path.steps)]
        self.storage_conn_id = storage_conn_id
        self.archive_conn_id = archive_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        journal = journal_at(self.journal, self.journal_conn_id or self.archive_conn_id)
        record, notes = self._record(journal)
        names = self._listed(record)
        steps = planner.timings(record, names)
        done = already_done(record, str(context.get("run_id", "")))
        if record is not None and done is not None:  # this run ran none of the steps
            return self._already_done(context, record, done, planner.timings(None, self.step_names))
        chosen = recorded(record, PATH_CHOICE, as_type=PathChoice)
        in_place = chosen is not None and chosen.in_place and self.in_place is not None
        path = self.in_place if in_place and self.in_place is not None else self.path
        new_checkpoint = self.old_checkpoint_uri if in_place else self.new_checkpoint_uri
        outcome = planner.outcome(record, path)
        refused = planner.refusal(record) if outcome == REFUSED else None
        if record is None:
            notes.append("no upgrade journal: the preflight refused the upgrade before opening one (nothing was "
                         "stopped, copied or started); its log says why")
        handover = handover_of(record, path)
        archive = recorded(record, path.archive, as_type=ArchiveResult)
        archive_uri = archive.location if archive is not None else ""
        errors = tuple(StepError(name, error) for name, error in planner.errors(record, names).items())
        notes.extend(error.note() for error in errors)
        if refused is not None:
            notes.insert(0, f"{refused.describe()}; nothing was stopped, copied or started (the old version runs on "
                            "as before): the upgrade ends refused, its journal closed and the stream's lock released")
            self.log.warning("%s", notes[0])
        if outcome == ROLLBACK_FAILED:
            notes.insert(0, self._no_version_runs())
            self.log.error("%s", notes[0])
        stop = stop_of(record, path)
        if stop is not None and stop.timeline:
            notes.append(f"{path.stop}: {stop.describe_timeline()}")
        rollback = _rollback(record, path.rollback_handover, notes) \
            if path.rollback_handover and planner.restart_attempted(record, path) else None
        compatibility = _compatibility(recorded(record, COMPATIBILITY_CHECK))
        preflight = recorded(record, PREFLIGHT, as_type=PreflightPlanning)
        if preflight is not None and preflight.accepted_undeclared_sink is True:
            notes.append("the sink was not declared and the trigger accepted that (accept_undeclared_sink): the sink "
                         "may have skipped or duplicated a batch the stop cut; exactness is not proven")
        if journal is not None and record is not None:
            notes.extend(self._journal_notes(journal, record, str(context.get("run_id", ""))))

        storage = CheckpointStorageHook(storage_conn_id=self.storage_conn_id)
        old_batches = self._history(storage, self.old_checkpoint_uri, notes)
        if in_place:  # one checkpoint, read once: the new version's batches are those after the handover's
            last_old = handover.handover.batch_id if handover is not None else None
            cut = last_old if last_old is not None else max((b.batch_id for b in old_batches), default=-1)
            new_batches = [b for b in old_batches if b.batch_id > cut] if outcome not in (REJECTED, REFUSED) else []
            old_batches = [b for b in old_batches if b.batch_id <= cut]
        else:
            new_batches = self._history(storage, new_checkpoint, notes) if outcome not in (REJECTED, REFUSED) else []
        timed = {s.name: s for s in steps}
        stopped, launched = timed.get(path.stop), timed.get(path.launch)
        stop_requested_at = epoch_seconds(stopped.started_at) if stopped and stopped.started_at else None
        ready_at = epoch_seconds(launched.ended_at) if launched and launched.ended_at \
            and launched.state == TaskState.SUCCESS else None
        state_export = recorded(record, path.state_export, as_type=StateExport) if path.state_export else None
        switched = recorded(record, path.switchover, as_type=SwitchoverResult) if path.switchover else None
        if switched is not None and switched.refusal is not None:
            reason, found = switched.refusal
            notes.append(f"{path.switchover}: the standby refused ({reason}: {found}); the provider took the handover "
                         "with the sink ledger and released the standby at it")
        report = UpgradeReport(
            stream=self.stream_name, outcome=outcome, run_id=str(context.get("run_id", "")),
            old_checkpoint=self.old_checkpoint_uri, new_checkpoint=new_checkpoint,
            archive=archive_uri, handover=handover.handover.to_dict() if handover is not None else None,
            starting_offsets=handover.starting_offsets.to_json() if handover is not None and
            handover.starting_offsets is not None else "", steps=tuple(steps),
            downtime_s=downtime_seconds(old_batches, new_batches, stop_requested_at=stop_requested_at,
                                        ready_at=ready_at) if outcome == UPGRADED else None,
            stop_requested_at=stop_requested_at, ready_at=ready_at,
            old_batches=tuple(old_batches), new_batches=tuple(new_batches), notes=tuple(notes),
            start_plan=handover.start_plan.to_dict() if handover is not None and handover.start_plan is not None
            else None,
            sink=dict(handover.sink) if handover is not None and handover.sink is not None else None,
            rollback=rollback.to_dict() if rollback is not None else None,
            state_export=state_export.to_dict() if state_export is not None else None,
            compatibility=compatibility,
            path=chosen.describe() if chosen is not None else "",
            switchover=(dict(switched.downtime) or None) if switched is not None else None,
            errors=errors,
        )
        self.log.info("upgrade report\n%s", report.to_markdown())
        # next to the archive; without one (an upgrade that ended before its archive), next to the journal
        where = archive_uri or (self.journal[:-len(".json")] if self.journal and self.journal.endswith(".json") else "")
        folder = self._store(report, where) if where else ""
        fault_point(f"{self.task_id}:stored")
        if journal is not None and record is not None and record.closed and record.outcome == outcome:
            # closed by the step that refused (the preflight): the report only adds where it is stored
            journal.record_run(str(context.get("run_id", "")), f"report of the {outcome} upgrade stored",
                               outcome=str(outcome), report=folder,
                               **({"reason": refused.reason} if refused is not None else {}))
        elif journal is not None and record is not None:
            journal.close(outcome, run_id=str(context.get("run_id", "")), report=folder,
                          reason=refused.reason if refused is not None else "")
        if refused is not None:
            raise UpgradeRefused(found=f"outcome '{REFUSED.value}': {refused.describe()}",
                                 expected="outcome 'upgraded'", path=journal.uri if journal is not None else None)
        if outcome == ROLLBACK_FAILED:
            raise UpgradeFailed(found=f"outcome '{outcome}': {'; '.join(notes) or 'see the steps'}",
                                expected="outcome 'upgraded', or 'rolled back' with the old version running",
                                action=self._no_version_runs())
        if outcome not in (UPGRADED, REJECTED):
            raise UpgradeFailed(found=f"outcome '{outcome}': {'; '.join(notes) or 'see the steps'}",
                                expected="outcome 'upgraded'")
        return report.to_dict()

    def _listed(self, record: JournalRecord | None) -> list[str]:
        """The steps the report lists: ``step_names``, then each rollback step that began (its row
        and, when it failed, its error), whether or not ``step_names`` names it."""
        began = [name for name in (*ROLLBACK, *IN_PLACE_ROLLBACK) if name not in self.step_names
                 and planner.status_of(record, name) is not planner.StepStatus.NOT_RUN]
        return [*self.step_names, *began]

    @staticmethod
    def _record(journal: UpgradeJournal | None) -> tuple[JournalRecord | None, list[str]]:
        """The journal's record (None without one) and a note when it cannot be read."""
        if journal is None:
            return None, []
        try:
            return (journal.read() if journal.exists() else None), []
        except (CheckpointError, OSError) as exc:
            return None, [f"journal {journal.uri} unreadable: {exc}"]

    def _no_version_runs(self) -> str:
        """What to do when the rollback could not restart the old version (no version runs)."""
        return (f"NO VERSION OF STREAM {self.stream_name!r} IS RUNNING: the old version was stopped and the rollback "
                f"could not restart it. Start the old version on its checkpoint {self.old_checkpoint_uri} yourself "
                "(`ckpt launch`; if the rollback's restore failed, restore the archive first with `ckpt restore`), "
                f"check that it commits batches, then release the stream's lock (`ckpt journal {self._archive_root()} "
                f"--name {self.stream_name} --release-lock`) or re-trigger this DAG run to resume the upgrade. The "
                "journal stays open and the stream locked until then.")

    def _archive_root(self) -> str:
        """The archive root the journal lives under (``ROOT/STREAM/_upgrades/NAME.json``), for the
        ``ckpt journal`` command a person runs; ``ARCHIVE_ROOT`` when the journal is not known."""
        parts = self.journal.rstrip("/").split("/") if self.journal else []
        if len(parts) < 4 or parts[-2] != "_upgrades":
            return "ARCHIVE_ROOT"
        return "/".join(parts[:-3]) or "/"

    def _already_done(self, context: Context, record: JournalRecord, done: Mapping[str, Any],
                      steps: list[Any]) -> dict[str, Any]:
        """The report of a run that found its upgrade finished (``done``: the preflight's run entry):
        nothing done, the first report named, stored beside it without touching it; the journal gets
        a run entry and stays closed."""
        run_id = str(context.get("run_id", ""))
        first = str(done.get("first_report") or "")
        notes = [f"upgrade {record.upgrade_id or '?'} was already done: upgraded at "
                 f"{done.get('done_at') or '?'} by run {done.get('done_by_run') or '?'}; this run did nothing "
                 "(no step ran, nothing was stopped, archived or launched)",
                 f"the upgrade's report: {first or 'unknown'}"]
        report = UpgradeReport(stream=self.stream_name, outcome=ALREADY_DONE, run_id=run_id,
                               old_checkpoint=self.old_checkpoint_uri, new_checkpoint=self.new_checkpoint_uri,
                               steps=tuple(steps), notes=tuple(notes))
        self.log.info("upgrade report\n%s", report.to_markdown())
        journal = journal_at(self.journal, self.journal_conn_id or self.archive_conn_id)
        where = _report_base(first)
        if not where and self.journal and self.journal.endswith(".json"):
            where = self.journal[:-len(".json")]
        folder = self._store(report, where) if where else ""
        if journal is not None:
            journal.record_run(run_id, "report: already done, nothing done", report=folder)
        return report.to_dict()

    @staticmethod
    def _journal_notes(journal: UpgradeJournal, record: JournalRecord, run_id: str) -> list[str]:
        notes = [f"upgrade {record.upgrade_id}, journal {journal.uri}, runs: {', '.join(record.runs)}"]
        earlier = [f"{name} (run {step.run_id})" for name, step in record.steps.items()
                   if step.done and step.run_id != run_id]
        if earlier:
            notes.append(f"taken over from earlier runs, not repeated: {', '.join(earlier)}")
        retried = [f"{name} x{step.attempts}" for name, step in record.steps.items() if step.attempts > 1]
        if retried:
            notes.append(f"steps resumed after an interruption or failure: {', '.join(retried)}")
        return notes

    def _history(self, storage: CheckpointStorageHook, uri: str, notes: list[str]) -> list[BatchRecord]:
        try:
            fs, path = storage.filesystem(uri)
            return batch_history(fs, path) if fs.exists(path.rstrip("/") + "/offsets") else []
        except (CheckpointError, OSError) as exc:
            notes.append(f"history of {uri} unreadable: {exc}")
            return []

    def _store(self, report: UpgradeReport, archive_uri: str) -> str:
        """Write the report under ``<archive_uri>/report/``; a report already there (an earlier
        run of the same upgrade) is never replaced: this one goes to ``report/run-<n>/``.
        Returns the folder written, as a URI under ``archive_uri``."""
        fs, root = CheckpointStorageHook(storage_conn_id=self.archive_conn_id).filesystem(archive_uri)
        folder = root.rstrip("/") + "/report"
        number = 1
        while fs.exists(f"{folder}/upgrade-report.json"):
            number += 1
            folder = f"{root.rstrip('/')}/report/run-{number}"
        fs.makedirs(folder, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            png = os.path.join(tmp, "timeline.png")
            has_png = render_timeline_png(report, png)
            if has_png:
                fs.put_file(png, f"{folder}/timeline.png")
        name = "timeline.png" if has_png else None
        fs.pipe_file(f"{folder}/upgrade-report.md", report.to_markdown(name).encode())
        fs.pipe_file(f"{folder}/upgrade-report.html", report.to_html(name).encode())
        fs.pipe_file(f"{folder}/upgrade-report.json", report.to_json().encode())
        uri = archive_uri.rstrip("/") + folder[len(root.rstrip("/")):]  # with its protocol, as given
        self.log.info("report stored in %s", uri)
        return uri


def already_done(record: JournalRecord | None, run_id: str) -> Mapping[str, Any] | None:
    """The ``run_log`` entry in which the preflight of run ``run_id`` found the upgrade already done
    (``first_report``, ``done_by_run``, ``done_at``); None when this run found no finished upgrade."""
    if record is None or not run_id:
        return None
    return next((entry for entry in reversed(record.run_log)
                 if entry.get("run_id") == run_id and entry.get("already_done") is True), None)


def _compatibility(result: object) -> dict[str, Any] | None:
    """The compatibility check's recorded verdict, without its trials and log tail (they are in its
    task log); None when it did not run or tried nothing."""
    if not isinstance(result, CompatibilityVerdict):
        return None
    return {k: v for k, v in result.to_dict().items() if k not in ("trials", "log_tail")}


def _rollback(record: JournalRecord | None, step: str, notes: list[str]) -> RollbackHandover | None:
    """The rollback step's recorded handover; None when it did not run, or (with a note) when it
    could not compute one (its error)."""
    result = recorded(record, step)
    if isinstance(result, RollbackHandoverUnread):
        notes.append(f"{step}: {result.describe()}")
        return None
    return result if isinstance(result, RollbackHandover) else None


def _report_base(folder: str) -> str:
    """The location a report folder (``<base>/report`` or ``<base>/report/run-<n>``) was stored
    under; "" for anything else."""
    head, sep, tail = folder.rstrip("/").rpartition("/report")
    return head if sep and (tail == "" or tail.startswith("/run-")) else ""
