"""The last task of an upgrade: what happened, with proof, stored next to the archive."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint.errors import CheckpointError, UpgradeFailed
from airflow_ckpt_provider.checkpoint.history import BatchRecord, batch_history
from airflow_ckpt_provider.checkpoint.journal import UpgradeJournal
from airflow_ckpt_provider.checkpoint.outcome import (
    ALREADY_DONE,
    REJECTED,
    ROLLBACK_FAILED,
    UPGRADED,
    TaskState,
    UpgradeSteps,
    upgrade_outcome,
)
from airflow_ckpt_provider.checkpoint.report import UpgradeReport, downtime_seconds, render_timeline_png
from airflow_ckpt_provider.checkpoint.stop import describe_stop_timeline
from airflow_ckpt_provider.clock import epoch_seconds
from airflow_ckpt_provider.faults import fault_point
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.operators.compat import path_of
from airflow_ckpt_provider.operators.journaled import journal_at
from airflow_ckpt_provider.operators.timing import STARTED, step_error, step_timings, task_states


class UpgradeReportOperator(BaseOperator):
    """Build the upgrade report from the steps' XComs and the two checkpoints' histories.

    Runs whatever happened before it (use ``trigger_rule="all_done"``). Logs the report as
    Markdown and writes ``report/upgrade-report.md``, ``.html``, ``.json`` and ``timeline.png``
    into the archive the archive step produced or, when there is none (an upgrade that ended
    before its archive), into ``<journal without .json>/`` next to the upgrade journal. A stored
    report is never replaced: a later run of the same upgrade adds ``report/run-<n>/``. Fails
    with :class:`UpgradeFailed` unless the outcome is ``upgraded`` or ``rejected``, so a
    rolled-back or broken upgrade fails the DAG run loudly. Returns the report as a dict (XCom).
    With ``rollback_handover_task_id`` (:class:`RollbackHandoverOperator`) a rollback's report
    states how the old version restarted and exactly which Kafka offsets, per partition, it
    processes a second time (``rollback`` in the dict, a section in the Markdown).
    ``state_export_task_id``'s StateExport says whether the old query's state was carried (where,
    which batch, how many rows) or why not (``state carried`` in the facts).
    ``compatibility_task_id``'s verdict (:class:`CompatibilityCheckOperator`) is the
    ``compatibility check`` fact, with the rule, the operator and both sides in its own section.
    The notes say where the graceful stop's time went (``stop_task_id``'s StopResult timeline:
    the driver seeing the request, the batch boundary, the acknowledgement, the quiet check).

    ``path_task_id``'s choice (:class:`UpgradePathOperator`) is the ``upgrade path`` fact; when it
    chose the in-place restart, the report is of ``in_place``'s steps (:class:`UpgradeSteps`): its
    steps decide the outcome, its handover and archive are shown, the "new" checkpoint is the old
    one and its batches after the handover's are the new version's.

    With ``journal`` (the upgrade journal's URI) the report lists the upgrade id, its runs and
    the steps taken over from earlier runs, then closes the journal with the outcome and where
    the report is stored; a final outcome (upgraded, rejected, rolled back) releases the stream's
    lock.

    When ``preflight_task_id``'s XCom says ``already_done`` (an earlier run finished this upgrade),
    the outcome is ``already done``: the report says this run did nothing and names the first
    run's report, is stored beside it as ``report/run-<n>/``, and the journal gets a run entry
    but is not closed again (its outcome and the first report stay as they are). The task succeeds.
    """

    template_fields: Sequence[str] = ("stream_name", "old_checkpoint_uri", "new_checkpoint_uri", "storage_conn_id",
                                      "archive_conn_id", "journal", "journal_conn_id")

    def __init__(
        self,
        *,
        stream_name: str,
        old_checkpoint_uri: str,
        new_checkpoint_uri: str,
        step_task_ids: Sequence[str],
        upgrade_task_ids: Sequence[str],
        handover_task_id: str,
        archive_task_id: str,
        approval_task_id: str | None = None,
        rollback_task_id: str | Sequence[str] | None = None,
        rollback_handover_task_id: str | None = None,
        preflight_task_id: str | None = None,
        stop_task_id: str | None = "graceful_stop",
        launch_task_id: str | None = "relaunch",
        state_export_task_id: str | None = "export_state",
        compatibility_task_id: str | None = None,
        path_task_id: str | None = None,
        in_place: UpgradeSteps | None = None,
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
        self.step_task_ids = list(step_task_ids)
        self.upgrade_task_ids = list(upgrade_task_ids)
        self.handover_task_id = handover_task_id
        self.archive_task_id = archive_task_id
        self.approval_task_id = approval_task_id
        self.rollback_task_id = rollback_task_id if isinstance(rollback_task_id, str) or rollback_task_id is None \
            else list(rollback_task_id)
        self.rollback_handover_task_id = rollback_handover_task_id
        self.preflight_task_id = preflight_task_id
        self.stop_task_id = stop_task_id
        self.launch_task_id = launch_task_id
        self.state_export_task_id = state_export_task_id
        self.compatibility_task_id = compatibility_task_id
        self.path_task_id = path_task_id
        self.in_place = in_place
        self.storage_conn_id = storage_conn_id
        self.archive_conn_id = archive_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        airflow_states = task_states(ti, self.step_task_ids)
        steps = step_timings(ti, self.step_task_ids, airflow_states)
        preflight = (ti.xcom_pull(task_ids=self.preflight_task_id) or {}) if self.preflight_task_id else {}
        if isinstance(preflight, dict) and preflight.get("already_done"):
            return self._already_done(context, preflight, steps)
        path = path_of(ti.xcom_pull(task_ids=self.path_task_id)) if self.path_task_id else None
        in_place = path is not None and path.in_place and self.in_place is not None
        if in_place:
            assert self.in_place is not None
            self._take(self.in_place)
        rejected = self._rejected(ti, airflow_states)
        if rejected:  # the approval ended by skipping its downstream: it did not fail
            steps = [replace(s, state="rejected") if s.name == self.approval_task_id else s for s in steps]
        states = {s.name: s.state for s in steps}
        outcome = upgrade_outcome(states, upgrade_steps=self.upgrade_task_ids, rollback_step=self.rollback_task_id,
                                  rejected=rejected)
        extract = ti.xcom_pull(task_ids=self.handover_task_id) or {}
        archive = ti.xcom_pull(task_ids=self.archive_task_id) or {}
        archive_uri = archive.get("location", "")
        notes = [f"{name} failed: {step_error(ti, name) or 'see its log'}" for name, state in states.items()
                 if state == TaskState.FAILED]
        if outcome == ROLLBACK_FAILED:
            notes.insert(0, self._no_version_runs())
            self.log.error("%s", notes[0])
        stop = ti.xcom_pull(task_ids=self.stop_task_id) if self.stop_task_id else None
        if isinstance(stop, dict) and stop.get("timeline"):
            notes.append(f"{self.stop_task_id}: {describe_stop_timeline(stop['timeline'])}")
        rollback = self._rollback(ti, states)
        if isinstance(rollback, dict) and rollback.get("error"):
            notes.append(f"{self.rollback_handover_task_id}: what the old version processes twice is unknown: "
                         f"{rollback['error']}")
        journal = journal_at(self.journal, self.journal_conn_id or self.archive_conn_id)
        if journal is not None:
            notes.extend(self._journal_notes(journal, str(context.get("run_id", ""))))

        storage = CheckpointStorageHook(storage_conn_id=self.storage_conn_id)
        old_batches = self._history(storage, self.old_checkpoint_uri, notes)
        if in_place:  # one checkpoint, read once: the new version's batches are those after the handover's
            last_old = (extract.get("handover") or {}).get("batch_id")
            cut = last_old if isinstance(last_old, int) else max((b.batch_id for b in old_batches), default=-1)
            new_batches = [b for b in old_batches if b.batch_id > cut] if outcome != REJECTED else []
            old_batches = [b for b in old_batches if b.batch_id <= cut]
        else:
            new_batches = self._history(storage, self.new_checkpoint_uri, notes) if outcome != REJECTED else []
        timed = {s.name: s for s in steps}
        stopped = timed.get(self.stop_task_id or "")
        launched = timed.get(self.launch_task_id or "")
        stop_requested_at = epoch_seconds(stopped.started_at) if stopped and stopped.started_at else None
        ready_at = epoch_seconds(launched.ended_at) if launched and launched.ended_at \
            and launched.state == TaskState.SUCCESS else None
        report = UpgradeReport(
            stream=self.stream_name, outcome=outcome, run_id=str(context.get("run_id", "")),
            old_checkpoint=self.old_checkpoint_uri, new_checkpoint=self.new_checkpoint_uri,
            archive=archive_uri, handover=extract.get("handover"),
            starting_offsets=extract.get("starting_offsets", ""), steps=tuple(steps),
            downtime_s=downtime_seconds(old_batches, new_batches, stop_requested_at=stop_requested_at,
                                        ready_at=ready_at) if outcome == UPGRADED else None,
            stop_requested_at=stop_requested_at, ready_at=ready_at,
            old_batches=tuple(old_batches), new_batches=tuple(new_batches), notes=tuple(notes),
            start_plan=extract.get("start_plan"), sink=extract.get("sink"),
            rollback=rollback if isinstance(rollback, dict) and "partitions" in rollback else None,
            state_export=self._state_export(ti), compatibility=self._compatibility(ti),
            path=path.describe() if path is not None else "",
        )
        self.log.info("upgrade report\n%s", report.to_markdown())
        # next to the archive; without one (an upgrade that ended before its archive), next to the journal
        where = archive_uri or (self.journal[:-len(".json")] if self.journal and self.journal.endswith(".json") else "")
        folder = self._store(report, where) if where else ""
        fault_point(f"{self.task_id}:stored")
        if journal is not None:
            journal.close(outcome, run_id=str(context.get("run_id", "")), report=folder)
        if outcome == ROLLBACK_FAILED:
            raise UpgradeFailed(found=f"outcome {outcome!r}: {'; '.join(notes) or 'see the steps'}",
                                expected="outcome 'upgraded', or 'rolled back' with the old version running",
                                action=self._no_version_runs())
        if outcome not in (UPGRADED, REJECTED):
            raise UpgradeFailed(found=f"outcome {outcome!r}: {'; '.join(notes) or 'see the steps'}",
                                expected="outcome 'upgraded'")
        return report.to_dict()

    def _no_version_runs(self) -> str:
        """What to do when the rollback could not restart the old version (no version runs)."""
        return (f"NO VERSION OF STREAM {self.stream_name!r} IS RUNNING: the old version was stopped and the rollback "
                f"could not restart it. Start the old version on its checkpoint {self.old_checkpoint_uri} yourself "
                "(`ckpt launch`; if the rollback's restore failed, restore the archive first with `ckpt restore`), "
                "check that it commits batches, then release the stream's lock (`ckpt journal <journal> "
                "--release-lock`) or re-trigger this DAG run to resume the upgrade. The journal stays open and the "
                "stream locked until then.")

    def _take(self, steps: UpgradeSteps) -> None:
        """Report on the in-place path: its steps, handover, archive, stop and rollback, and one
        checkpoint (the old one, which the new version goes on)."""
        self.upgrade_task_ids = list(steps.steps)
        self.handover_task_id, self.archive_task_id = steps.handover, steps.archive
        self.stop_task_id, self.state_export_task_id = steps.stop, steps.state_export
        self.launch_task_id = steps.launch
        self.rollback_task_id, self.rollback_handover_task_id = list(steps.rollback), None
        self.new_checkpoint_uri = self.old_checkpoint_uri

    def _state_export(self, ti: Any) -> dict[str, Any] | None:
        value = ti.xcom_pull(task_ids=self.state_export_task_id) if self.state_export_task_id else None
        return dict(value) if isinstance(value, Mapping) else None

    def _compatibility(self, ti: Any) -> dict[str, Any] | None:
        """The compatibility check's verdict, without its trials and log tail (they are in its task log)."""
        value = ti.xcom_pull(task_ids=self.compatibility_task_id) if self.compatibility_task_id else None
        if not isinstance(value, Mapping) or value.get("skipped"):
            return None
        return {k: v for k, v in value.items() if k not in ("trials", "log_tail", "summary_md")}

    def _rollback(self, ti: Any, states: dict[str, str]) -> Any:  # noqa: ANN401 - an XCom value
        """The rollback step's result, when a restart of the old version was attempted (a standby
        stopped while the old version still ran processed nothing: no section then)."""
        restarts = [self.rollback_task_id] if isinstance(self.rollback_task_id, str) else self.rollback_task_id or []
        attempted = {TaskState.SUCCESS, TaskState.FAILED, TaskState.RUNNING}
        if not self.rollback_handover_task_id or not any(states.get(t) in attempted for t in restarts):
            return None
        return ti.xcom_pull(task_ids=self.rollback_handover_task_id)

    def _already_done(self, context: Context, preflight: dict[str, Any], steps: list[Any]) -> dict[str, Any]:
        """The report of a run that found its upgrade finished: nothing done, the first report named,
        stored beside it without touching it; the journal gets a run entry and stays closed."""
        run_id = str(context.get("run_id", ""))
        first = str(preflight.get("first_report") or "")
        notes = [f"upgrade {preflight.get('upgrade_id', '?')} was already done: upgraded at "
                 f"{preflight.get('done_at', '?')} by run {preflight.get('done_by_run', '?')}; this run did nothing "
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
    def _journal_notes(journal: UpgradeJournal, run_id: str) -> list[str]:
        try:
            record = journal.read()
        except (CheckpointError, OSError) as exc:
            return [f"journal {journal.uri} unreadable: {exc}"]
        notes = [f"upgrade {record.upgrade_id}, journal {journal.uri}, runs: {', '.join(record.runs)}"]
        earlier = [f"{name} (run {step.run_id})" for name, step in record.steps.items()
                   if step.done and step.run_id != run_id]
        if earlier:
            notes.append(f"taken over from earlier runs, not repeated: {', '.join(earlier)}")
        retried = [f"{name} x{step.attempts}" for name, step in record.steps.items() if step.attempts > 1]
        if retried:
            notes.append(f"steps resumed after an interruption or failure: {', '.join(retried)}")
        return notes

    def _rejected(self, ti: Any, states: dict[str, str]) -> bool:
        """The approval did not let the upgrade start: "Reject", or no answer before its response
        timeout ("Reject" is its default). On "Reject" the approval task succeeds and skips the
        stop; Airflow keeps no return value then, so the states decide, with the answer XCom
        and the recorded starts as a fallback where the runtime gives no states."""
        if not self.approval_task_id:
            return False
        first_step = self.upgrade_task_ids[0] if self.upgrade_task_ids else ""
        if states:
            return (states.get(self.approval_task_id) == TaskState.SUCCESS
                    and states.get(first_step) == TaskState.SKIPPED)
        answer = ti.xcom_pull(task_ids=self.approval_task_id) or {}
        if "Reject" in (answer.get("chosen_options") or []):
            return True
        asked = ti.xcom_pull(task_ids=self.approval_task_id, key=STARTED) is not None
        stopped = first_step is not None and ti.xcom_pull(task_ids=first_step, key=STARTED) is not None
        return asked and not stopped

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


def _report_base(folder: str) -> str:
    """The location a report folder (``<base>/report`` or ``<base>/report/run-<n>``) was stored
    under; "" for anything else."""
    head, sep, tail = folder.rstrip("/").rpartition("/report")
    return head if sep and (tail == "" or tail.startswith("/run-")) else ""
