"""Preflight of an upgrade: every refusal happens here, before anything is stopped or copied."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any, NoReturn

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint import CheckpointReader
from airflow_ckpt_provider.checkpoint.archive import check_archive_location
from airflow_ckpt_provider.checkpoint.errors import InvalidLaunchHandle, JournalCorrupt, UpgradeRolledBack
from airflow_ckpt_provider.checkpoint.journal import (
    JournalRecord,
    JournalStep,
    Rerun,
    UpgradeIntent,
    UpgradeJournal,
    derive_upgrade_id,
    rerun_of,
)
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.manifest import check_name
from airflow_ckpt_provider.checkpoint.stop import ControlFiles
from airflow_ckpt_provider.checkpoint.summary import UpgradePlan, approval_summary
from airflow_ckpt_provider.checkpoint.transfer import list_tree
from airflow_ckpt_provider.checkpoint.verify import check_launch_target
from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.operators.handover import reconciled_handover_view


class UpgradePreflightOperator(BaseOperator):
    """Check that an upgrade of ``stream_name`` can run, and summarise it for the approver.

    Read-only. Refuses with a typed error, changing nothing, when: the old checkpoint cannot be
    handed over (missing, corrupt, no Kafka source), its offsets fell out of retention (unless
    ``accept_data_loss``), topics or partitions vanished or offsets are past the log end, the new
    checkpoint is the old one or is not empty, the new sink path already has
    ``_spark_metadata`` (file sink), the archive location overlaps the checkpoint or the stream
    name is unsafe as a folder name.

    With ``journal=True`` (default) it then opens the upgrade journal next to the archives
    (:mod:`~airflow_ckpt_provider.checkpoint.journal`) and takes the stream's lock
    (:class:`UpgradeInProgress` if another upgrade holds it; nothing is written then). The
    upgrade id is ``upgrade_id`` or derived from the stream, both checkpoints and
    ``new_application``, so a re-triggered run finds the same journal. When that journal shows
    steps already started, the run RESUMES it: the checks above describe the state before an
    upgrade and are skipped (the old checkpoint may be archived away, the new one is in use).
    A journal closed after a rollback is refused at once (:class:`UpgradeRolledBack`: its id,
    journal and rollback time, and the ``upgrade_id`` param to change); one closed after a
    finished upgrade makes this run ALREADY DONE: it returns ``already_done`` True with the first
    run's report, and the DAG skips every step (see :func:`~airflow_ckpt_provider.checkpoint.journal.rerun_of`).
    Either way the journal gets a ``run_log`` entry for this run and nothing else changes. A
    rejected upgrade (nothing was stopped) starts afresh.

    ``relaunch_mode`` (``standby`` or ``cold``, as the DAG starts the new version) is shown to
    the approver with what it costs: a standby runs beside the old version until the stop.

    Returns (XCom) ``{"summary_md": Markdown for the approval, "handover": ...,
    "starting_offsets": ..., "reconciliation": ..., "old_query_running": bool, "upgrade_id",
    "journal": its URI or "", "resuming": bool, "steps_done": [...], "already_done": bool,
    "first_report": the finished upgrade's report folder or ""}``. The offsets are those of
    NOW; the upgrade takes them again after the graceful stop.
    """

    template_fields: Sequence[str] = (
        "stream_name", "old_checkpoint_uri", "new_checkpoint_uri", "archive_root", "new_sink_path",
        "kafka_conn_id", "storage_conn_id", "archive_conn_id", "upgrade_id", "old_application", "new_application",
        "old_launch_handle",
    )
    ui_color = "#eef7ee"

    def __init__(
        self,
        *,
        stream_name: str,
        old_checkpoint_uri: str,
        new_checkpoint_uri: str,
        archive_root: str,
        new_sink_path: str | None = None,
        kafka_conn_id: str = KafkaBrokerHook.default_conn_name,
        storage_conn_id: str | None = None,
        archive_conn_id: str | None = None,
        source: int | str | None = None,
        accept_data_loss: bool = False,
        upgrade_id: str | None = None,
        old_application: str = "",
        new_application: str = "",
        journal: bool = True,
        old_launch_handle: str | None = None,
        relaunch_mode: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.relaunch_mode = relaunch_mode
        self.old_launch_handle = old_launch_handle
        self.upgrade_id = upgrade_id
        self.old_application = old_application
        self.new_application = new_application
        self.journal = bool(journal)
        self.stream_name = stream_name
        self.old_checkpoint_uri = old_checkpoint_uri
        self.new_checkpoint_uri = new_checkpoint_uri
        self.archive_root = archive_root
        self.new_sink_path = new_sink_path
        self.kafka_conn_id = kafka_conn_id
        self.storage_conn_id = storage_conn_id
        self.archive_conn_id = archive_conn_id
        self.source = source
        self.accept_data_loss = bool(accept_data_loss)

    @cached_property
    def kafka_hook(self) -> KafkaBrokerHook:
        return KafkaBrokerHook(kafka_conn_id=self.kafka_conn_id)

    def _journal(self, archive: tuple[Any, str]) -> tuple[UpgradeIntent, str, UpgradeJournal]:
        stream = check_name(self.stream_name)
        intent = UpgradeIntent(stream_name=stream, old_checkpoint=self.old_checkpoint_uri,
                               new_checkpoint=self.new_checkpoint_uri, old_application=self.old_application or "",
                               new_application=self.new_application or "", archive_root=self.archive_root)
        upgrade_id = check_name(self.upgrade_id, "upgrade id") if self.upgrade_id else derive_upgrade_id(intent)
        fs, root = archive
        journal = UpgradeJournal(fs, UpgradeJournal.location(root, stream, upgrade_id),
                                 uri=UpgradeJournal.location(self.archive_root, stream, upgrade_id))
        return intent, upgrade_id, journal

    def execute(self, context: Context) -> dict[str, Any]:
        storage = CheckpointStorageHook(storage_conn_id=self.storage_conn_id)
        old = storage.filesystem(self.old_checkpoint_uri)
        new = storage.filesystem(self.new_checkpoint_uri)
        archive = CheckpointStorageHook(storage_conn_id=self.archive_conn_id).filesystem(self.archive_root)
        sink = storage.filesystem(self.new_sink_path) if self.new_sink_path else None
        run_id = str(context.get("run_id") or "")
        check_archive_location(old, archive, self.stream_name, source_uri=self.old_checkpoint_uri)
        if self.journal:
            intent, upgrade_id, journal = self._journal(archive)
            record = journal.read() if journal.exists() else None
            rerun = rerun_of(record)
            if record is not None and rerun is not Rerun.NEW and record.intent.key() != intent.key():
                raise JournalCorrupt(found=f"journal {upgrade_id} of another upgrade ({record.intent.key()})",
                                     expected=f"the journal of {intent.key()}", path=journal.uri,
                                     action="Set the `upgrade_id` param to a new value; nothing was changed.")
            if record is not None and rerun is Rerun.ROLLED_BACK:
                self._refuse_rolled_back(journal, record, run_id)
            if record is not None and rerun is Rerun.UPGRADED:
                return self._already_done(journal, record, run_id)
            if rerun is Rerun.RESUME:
                return self._resume(journal, intent, upgrade_id, run_id)

        handover, result, broker = reconciled_handover_view(
            CheckpointReader(self.old_checkpoint_uri, fs=old[0]), self.kafka_hook,
            source=self.source, accept_data_loss=self.accept_data_loss, log=self.log,
        )
        check_launch_target(new, self.new_checkpoint_uri, old=old, sink=sink)
        heartbeat = ControlFiles(*old, uri=self.old_checkpoint_uri).heartbeat()
        running = heartbeat is not None and heartbeat.is_alive()
        self.log.info("old query %s", "running" if running else "not running (no live heartbeat)")

        offsets = result.starting_offsets.to_json()
        files, _ = list_tree(*old)
        summary = approval_summary(UpgradePlan(
            stream_name=self.stream_name, old_checkpoint=self.old_checkpoint_uri,
            new_checkpoint=self.new_checkpoint_uri,
            archive_location=f"{self.archive_root.rstrip('/')}/{self.stream_name}/",
            handover=handover, reconciliation=result, broker=broker, old_query_running=running,
            checkpoint_files=len(files), checkpoint_bytes=sum(files.values()), spark_ui_url=self._spark_ui_url(),
            relaunch_mode=str(self.relaunch_mode or ""),
        ))
        value: dict[str, Any] = {
            "summary_md": summary,
            "handover": handover.to_dict(),
            "starting_offsets": offsets,
            "reconciliation": result.to_dict(),
            "old_query_running": running,
            "upgrade_id": "", "journal": "", "resuming": False, "steps_done": [], "already_done": False,
            "first_report": "",
        }
        if self.journal:
            journal.open(intent, upgrade_id, run_id=run_id, planned_handover=handover.to_dict())
            value.update(upgrade_id=upgrade_id, journal=journal.uri)
            value["summary_md"] += f"\n\nUpgrade id `{upgrade_id}`; journal `{journal.uri}`."
        return value

    def _spark_ui_url(self) -> str | None:
        """The old job's Spark UI, when its launch handle (``old_launch_handle``) knows it."""
        text = (self.old_launch_handle or "").strip()
        if text in ("", "None", "null"):
            return None
        try:
            return LaunchHandle.from_json(text).ui_url
        except InvalidLaunchHandle as exc:
            self.log.warning("old_launch_handle is not a launch handle (%s); no Spark UI link", exc)
            return None

    def _resume(self, journal: UpgradeJournal, intent: UpgradeIntent, upgrade_id: str, run_id: str) -> dict[str, Any]:
        """Take up an upgrade whose journal shows started steps (see the class docstring)."""
        record = journal.open(intent, upgrade_id, run_id=run_id)
        done = [name for name, step in record.steps.items() if step.done]
        open_steps = [f"{name} ({step.state})" for name, step in record.steps.items() if not step.done]
        self.log.warning("RESUMING upgrade %s of stream %s from its journal: done %s; unfinished %s; "
                         "the preflight checks of a fresh upgrade are skipped", upgrade_id, intent.stream_name,
                         ", ".join(done) or "nothing", ", ".join(open_steps) or "nothing")
        summary = "\n".join([
            f"### Resuming upgrade `{upgrade_id}` of stream `{intent.stream_name}`", "",
            f"Journal `{journal.uri}`, runs {', '.join(record.runs)}, phase {record.phase}"
            f"{', outcome ' + record.outcome if record.outcome else ''}.", "",
            f"Steps done (not repeated): {', '.join(done) or 'none'}.",
            f"Steps to finish: {', '.join(open_steps) or 'none'}.",
        ])
        planned = record.planned_handover or {}
        journal.record_run(run_id, f"resumed: steps done {', '.join(done) or 'none'}; "
                                   f"unfinished {', '.join(open_steps) or 'none'}")
        return {"summary_md": summary, "handover": planned, "starting_offsets": "", "reconciliation": {},
                "old_query_running": False, "upgrade_id": upgrade_id, "journal": journal.uri, "resuming": True,
                "steps_done": done, "already_done": False, "first_report": ""}

    def _refuse_rolled_back(self, journal: UpgradeJournal, record: JournalRecord, run_id: str) -> NoReturn:
        """A rolled-back upgrade never goes forward again: say so before anything replays."""
        closing = record.closing_entry() or {}
        by = f" by run {closing['run_id']}" if closing.get("run_id") else ""
        journal.record_run(run_id, f"refused by the preflight: upgrade rolled back at {record.closed_at}{by}")
        self.log.error("upgrade %s was rolled back at %s%s: refusing to run it again", record.upgrade_id,
                       record.closed_at, by)
        raise UpgradeRolledBack(
            found=f"upgrade {record.upgrade_id} rolled back at {record.closed_at}{by} (journal {journal.uri})",
            expected="an upgrade id that was not rolled back",
            action="Nothing was stopped, copied or started (the refusal is noted in the journal's run_log): a "
                   "rolled-back upgrade does not go forward again (the old version runs again). To try again, set "
                   "the `upgrade_id` param to a new value (or leave it empty after changing the new checkpoint), "
                   "with a new, empty new checkpoint.",
            path=journal.uri,
        )

    def _already_done(self, journal: UpgradeJournal, record: JournalRecord, run_id: str) -> dict[str, Any]:
        """A finished upgrade: nothing runs again; say where its report is."""
        closing = record.closing_entry() or {}
        first_report = str(closing.get("report") or "")
        if not first_report:  # a journal closed before run entries were kept: the archive's report folder
            archived = (record.steps.get("archive") or JournalStep(name="archive", state="")).result
            location = archived.get("location", "") if isinstance(archived, dict) else ""
            first_report = f"{location.rstrip('/')}/report" if location else ""
        by = str(closing.get("run_id") or (record.runs[-1] if record.runs else "?"))
        journal.record_run(run_id, f"already done: upgraded at {record.closed_at} by run {by}; no step runs again",
                           first_report=first_report)
        self.log.warning("upgrade %s of stream %s is ALREADY DONE (upgraded at %s by run %s; report %s): this run "
                         "does nothing. To upgrade again, set the `upgrade_id` param to a new value (or leave it empty "
                         "after changing the new checkpoint).", record.upgrade_id, record.intent.stream_name,
                         record.closed_at, by, first_report or "unknown")
        summary = "\n".join([
            f"### Upgrade `{record.upgrade_id}` of stream `{record.intent.stream_name}` is already done", "",
            f"Upgraded at {record.closed_at} by run {by}; its report: `{first_report or 'unknown'}`.",
            "This run does nothing (no step runs again); to upgrade again, set the `upgrade_id` param to a new value "
            "(or leave it empty after changing the new checkpoint).",
        ])
        return {"summary_md": summary, "handover": record.planned_handover or {}, "starting_offsets": "",
                "reconciliation": {}, "old_query_running": False, "upgrade_id": record.upgrade_id,
                "journal": journal.uri, "resuming": False,
                "steps_done": [name for name, step in record.steps.items() if step.done],
                "already_done": True, "first_report": first_report, "done_by_run": by, "done_at": record.closed_at}

