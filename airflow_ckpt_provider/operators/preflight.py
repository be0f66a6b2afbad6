"""Preflight of an upgrade: every refusal happens here, before anything is stopped or copied."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cached_property
from typing import Any, NoReturn

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint import BrokerView, Handover
from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    CheckpointNotEmpty,
    FileSinkHazard,
    ForwardRollbackRefused,
    InvalidLaunchHandle,
    JournalCorrupt,
    SharedCheckpoint,
    StateStartUnsupported,
    SwitchoverUnsupported,
    UpgradeInProgress,
    UpgradeRolledBack,
)
from airflow_ckpt_provider.checkpoint.handover import kafka_offsets_of
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, RelaunchMode
from airflow_ckpt_provider.checkpoint.manifest import check_name
from airflow_ckpt_provider.checkpoint.old_job import AdoptionPlan, OldJobKind, OldJobSpec, adoption_plan
from airflow_ckpt_provider.checkpoint.outcome import REFUSED, RollbackMode
from airflow_ckpt_provider.checkpoint.reconcile import Reconciliation
from airflow_ckpt_provider.checkpoint.rewind import (
    DEFAULT_BATCHES_TO_RETAIN,
    StartChoice,
    StartMode,
    rewind_warning,
)
from airflow_ckpt_provider.checkpoint.rollback import forward_checkpoint
from airflow_ckpt_provider.checkpoint.state import export_location
from airflow_ckpt_provider.checkpoint.summary import LOAD_BATCHES, UpgradePlan, approval_summary, load_line
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.jobs import job_for
from airflow_ckpt_provider.jobs.adopt import adopt
from airflow_ckpt_provider.operators.handover import flag, planned_start, reconciled_handover_view, start_choice
from airflow_ckpt_provider.sinks import SinkFinding, SinkKind, SinkSpec, inspect_sink
from airflow_ckpt_provider.sinks.ledger import cut_ranges
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.archive import check_archive_location, checkpoint_tree
from airflow_ckpt_provider.storage.history import batch_history
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.storage.locations import check_launch_target
from airflow_ckpt_provider.storage.state import plan_state_export
from airflow_ckpt_provider.storage.stop import ControlFiles
from airflow_ckpt_provider.upgrade.notes import DecisionNotes
from airflow_ckpt_provider.upgrade.record import (
    FAILED,
    JournalRecord,
    Rerun,
    UpgradeIntent,
    derive_upgrade_id,
    rerun_of,
)
from airflow_ckpt_provider.upgrade.results import ArchiveResult, PreflightPlanning, PreflightResult
from airflow_ckpt_provider.upgrade.steps import PREFLIGHT
from airflow_ckpt_provider.upgrade.table import recorded


class UpgradePreflightOperator(BaseOperator):
    """Check that an upgrade of ``stream_name`` can run, and summarise it for the approver.

    Read-only. Refuses with a typed error, changing nothing, when: the old checkpoint cannot be
    handed over (missing, corrupt, no Kafka source), its offsets fell out of retention (unless
    ``accept_data_loss``), topics or partitions vanished or offsets are past the log end, the new
    checkpoint is the old one or is not empty, the new sink path already has
    ``_spark_metadata`` (file sink), the archive location overlaps the checkpoint or the stream
    name is unsafe as a folder name.

    ``sink`` declares the job's sink (:class:`~airflow_ckpt_provider.sinks.SinkSpec`: a mapping or
    its JSON, e.g. ``{"kind": "delta", "location": "s3a://lake/events"}``; docs "Sinks"). For a
    Delta sink the table's own log is read: a new version writing Delta idempotent writes under a
    constant ``txnAppId`` the table already recorded is refused (:class:`DeltaWritesSkipped`:
    Delta would skip its batches); the approver is told whether the sink is exact or
    at-least-once, and the old query's last batch the table holds. A ``file`` sink's ``location``
    is the OLD version's output path: its ``_spark_metadata`` log is read and must follow the old
    checkpoint's commits (:class:`FileSinkLocationMismatch`); the new version's output path is
    ``new_sink_path``, required then (:class:`FileSinkHazard`). A sink that is not declared is
    refused (:class:`UndeclaredSink`) unless ``accept_undeclared_sink``; the approver then reads
    that the sink may skip or duplicate a batch the stop cuts and that exactness is not proven,
    and the journal's planning records the consent for the report.

    A refusal of a fresh upgrade (any :class:`CheckpointError` of the checks) with ``journal=True``
    is recorded before it is raised: the journal's planning gets the preflight ``failed`` with the
    reason in the user's words, the journal is closed ``refused`` (the stream's lock released at
    once) and the XCom names the journal, so the report stores a ``refused`` report beside it.

    With ``journal=True`` (default) it then opens the upgrade journal next to the archives
    (:mod:`~airflow_ckpt_provider.storage.journal`) and takes the stream's lock
    (:class:`UpgradeInProgress` if another upgrade holds it; nothing is written then). The
    upgrade id is ``upgrade_id`` or derived from the stream, both checkpoints and
    ``new_application``, so a re-triggered run finds the same journal. When that journal shows
    steps already started, the run RESUMES it: the checks above describe the state before an
    upgrade and are skipped (the old checkpoint may be archived away, the new one is in use).
    A journal closed after a rollback is refused at once (:class:`UpgradeRolledBack`: its id,
    journal and rollback time, and the ``upgrade_id`` param to change); one closed after a
    finished upgrade makes this run ALREADY DONE: it returns ``already_done`` True with the first
    run's report, and the DAG skips every step (see :func:`~airflow_ckpt_provider.upgrade.record.rerun_of`).
    Either way the journal gets a ``run_log`` entry for this run and nothing else changes (an
    already-done run's entry says so, with the first report, the run that finished the upgrade
    and when: the report reads it there). A rejected upgrade (nothing was stopped) starts afresh.

    The journal's ``planning`` gets this step's decisions for the steps after it: the relaunch and
    rollback modes, where the state export goes (``state_export``) and a forward rollback's fresh
    checkpoint (``rollback_checkpoint``), which the steps read from the record
    (:class:`~airflow_ckpt_provider.upgrade.inputs.RecordInput`). A resumed upgrade keeps those of
    its first run, whatever this run's params say.

    An ``old_launch_handle`` that is not a launch handle's JSON is refused
    (:class:`InvalidLaunchHandle`).

    ``old_job`` declares an old job the provider did not launch by what runs it
    (:class:`~airflow_ckpt_provider.checkpoint.old_job.OldJobSpec`: a YARN application, a standalone
    driver, a Kubernetes pod, a process, or ``external``). Its cluster manager is asked (read only)
    whether it runs (:class:`OldJobNotFound`, :class:`OldJobAmbiguous`), and the adoption is planned
    (:func:`~airflow_ckpt_provider.checkpoint.old_job.adoption_plan`): without a live GracefulStop
    heartbeat the stop is a kill, which may cut one batch, so an undeclared sink is refused
    (:class:`KillNeedsSinkLedger`), an at-least-once sink unless ``accept_cut_batch``
    (:class:`CutBatchNotAccepted`, with the range in flight per partition now), the switchover
    (:class:`SwitchoverUnsupported`), and a local old checkpoint for a driver on a cluster node
    (:class:`CheckpointOnDriverDisk`). The approver reads the job as its manager shows it and how it
    will be stopped.

    ``relaunch_mode`` (``standby``, ``cold`` or ``switchover``, as the DAG starts the new version)
    is shown to the approver with what it costs: a standby runs beside the old version until the
    stop. For ``switchover`` (the standby takes its start from the old checkpoint's files alone,
    inside the drivers) the preflight refuses with :class:`SwitchoverUnsupported` a start
    ``at_time`` and partitions added since the old query's last commit; a stateful old query's
    state is checked as for the export (below) and seeded by the standby in its own session.

    ``start`` (as for :class:`CheckpointHandoverOperator`: rewind to a batch, a time, explicit
    offsets) is planned against where the old version is now; the records it processes again or
    skips per partition are shown to the approver and returned as ``start_plan``, and the
    preflight refuses (:class:`ReprocessingNotAccepted`, :class:`BatchNotRewindable`,
    :class:`InvalidStartChoice`) before anything stops unless ``accept_reprocessing`` (and
    ``accept_data_loss`` for a skip).
    ``rollback_mode="forward"`` (a rollback restarts the old version on the fresh checkpoint
    ``rollback_checkpoint_uri``, default ``<new checkpoint>.rollback``, from the new version's
    handover) is refused with
    :class:`ForwardRollbackRefused` when the old checkpoint has state (``state/`` with operators)
    or the rollback checkpoint is missing, is one of the two checkpoints or is not empty.
    For a stateful old query with ``carry_state`` (default) the state is checked as the export
    will read it (:func:`~airflow_ckpt_provider.checkpoint.state.plan_state_export`: RocksDB
    checkpoint format v2 when the Spark that exports it — ``state_spark_home`` /
    ``state_spark_binary``, the new version's; default this environment's pyspark — is older than
    4.1, operator metadata missing; a start at a time or explicit offsets, which falls between
    batches: :class:`StateStartUnsupported`), and the approver is told whether the state is carried;
    ``carry_state=False`` says the new version starts with EMPTY state.

    Returns (XCom) ``{"summary_md": Markdown for the approval, "handover": ...,
    "starting_offsets": ..., "reconciliation": ..., "old_query_running": bool, "upgrade_id",
    "journal": its URI or "", "resuming": bool, "steps_done": [...], "start_plan": StartPlan dict
    or None, "already_done": bool, "first_report": the finished upgrade's report folder or "",
    "sink": SinkFinding dict, "state_export": where the state export goes ("" without a journal),
    "rollback_checkpoint": a forward rollback's fresh checkpoint}``. The
    offsets are those of NOW; the upgrade takes them again after the graceful stop.
    """

    template_fields: Sequence[str] = (
        "stream_name", "old_checkpoint_uri", "new_checkpoint_uri", "archive_root", "new_sink_path",
        "kafka_conn_id", "storage_conn_id", "archive_conn_id", "upgrade_id", "old_application", "new_application",
        "old_launch_handle", "start", "accept_reprocessing", "accept_data_loss", "carry_state", "rollback_mode",
        "state_spark_home", "state_spark_binary",
        "rollback_checkpoint_uri", "sink", "accept_undeclared_sink", "old_job", "accept_cut_batch",
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
        accept_data_loss: bool | str = False,
        start: StartChoice | Mapping[str, Any] | str | None = None,
        accept_reprocessing: bool | str = False,
        upgrade_id: str | None = None,
        old_application: str = "",
        new_application: str = "",
        journal: bool = True,
        old_launch_handle: str | None = None,
        relaunch_mode: str = "",
        rollback_mode: str = RollbackMode.RESTORE.value,
        rollback_checkpoint_uri: str = "",
        carry_state: bool | str = True,
        state_spark_home: str | None = None,
        state_spark_binary: str | None = None,
        sink: SinkSpec | Mapping[str, Any] | str | None = None,
        accept_undeclared_sink: bool | str = False,
        old_job: OldJobSpec | Mapping[str, Any] | str | None = None,
        accept_cut_batch: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.old_job = old_job.to_json() if isinstance(old_job, OldJobSpec) else old_job
        self.accept_cut_batch = accept_cut_batch
        self.sink = sink.to_json() if isinstance(sink, SinkSpec) else sink
        self.accept_undeclared_sink = accept_undeclared_sink
        self.carry_state = carry_state
        self.state_spark_home = state_spark_home
        self.state_spark_binary = state_spark_binary
        self.rollback_mode = rollback_mode
        self.rollback_checkpoint_uri = rollback_checkpoint_uri
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
        self.accept_data_loss = accept_data_loss
        self.start = start
        self.accept_reprocessing = accept_reprocessing

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
        self._started_at = utc_iso(timespec="milliseconds")
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

        try:
            return self._fresh(storage, old, new, sink, run_id, (intent, upgrade_id, journal) if self.journal else None)
        except CheckpointError as exc:
            if self.journal and not isinstance(exc, (UpgradeInProgress, JournalCorrupt)):
                self._record_refusal(context, journal, intent, upgrade_id, run_id, exc)
            raise

    def _fresh(self, storage: CheckpointStorageHook, old: tuple[Any, str], new: tuple[Any, str],
               sink: tuple[Any, str] | None, run_id: str,
               journaled: tuple[UpgradeIntent, str, UpgradeJournal] | None) -> dict[str, Any]:
        """The checks of a fresh upgrade, its summary, and (``journaled``) the journal opened."""
        reader = CheckpointReader(self.old_checkpoint_uri, fs=old[0])
        accept_loss = flag(self.accept_data_loss, "accept_data_loss")
        choice = start_choice(self.start)
        handover, result, broker = reconciled_handover_view(
            reader, self.kafka_hook, source=self.source, accept_data_loss=accept_loss, log=self.log,
        )
        if str(self.relaunch_mode or "") == RelaunchMode.SWITCHOVER.value:
            self._check_switchover(reader, choice, result)
        start_plan, start_warning = None, ""
        if choice.mode is not StartMode.RESUME:
            start_plan = planned_start(choice, handover.kafka_offsets(self.source), reader=reader, broker=broker,
                                       kafka_hook=self.kafka_hook, source=self.source, log=self.log)
            start_plan.require_consent(accept_reprocessing=flag(self.accept_reprocessing, "accept_reprocessing"),
                                       accept_data_loss=accept_loss)
            if choice.batch is not None:
                start_warning = self._rewind_warning(reader, choice.batch)
        state = self._state_line(reader, choice)
        spec = SinkSpec.from_value(self.sink)
        if spec.kind is SinkKind.FILE and sink is None:
            raise FileSinkHazard(
                found=f"a file sink declared at {spec.location} and no new_sink_path",
                expected="the new version's output path in new_sink_path: a folder without _spark_metadata, other "
                         "than the old version's", path=spec.location)
        check_launch_target(new, self.new_checkpoint_uri, old=old, sink=sink)
        found_sink = self._sink_finding(storage, spec, handover.query_id, handover.batch_id,
                                        reader.snapshot().last_planned_batch)
        rollback = self._check_rollback(storage, old, new)
        heartbeat = ControlFiles(*old, uri=self.old_checkpoint_uri).heartbeat()
        running = heartbeat is not None and heartbeat.is_alive()
        adoption = self._adoption(spec, reader, running, old)
        if adoption is not None and adoption.may_cut_batch:  # a job the cluster manager runs (or a person's)
            running = True
        self.log.info("old query %s", "running" if running else "not running (no live heartbeat)")

        offsets = result.starting_offsets.to_json()
        files, _, _ = checkpoint_tree(*old)  # what the archive copies
        summary = approval_summary(UpgradePlan(
            stream_name=self.stream_name, old_checkpoint=self.old_checkpoint_uri,
            new_checkpoint=self.new_checkpoint_uri,
            archive_location=f"{self.archive_root.rstrip('/')}/{self.stream_name}/",
            handover=handover, reconciliation=result, broker=broker, old_query_running=running,
            checkpoint_files=len(files), checkpoint_bytes=sum(files.values()), spark_ui_url=self._spark_ui_url(),
            relaunch_mode=str(self.relaunch_mode or ""), start_plan=start_plan, start_warning=start_warning,
            load=self._load_line(old, handover, broker),
        ))
        summary += f"\n\n{state}\n\n{found_sink.line}\n\n{rollback}"
        if adoption is not None:
            summary += "\n\n" + "\n\n".join(adoption.lines)
        upgrade_id_found, journal_uri = "", ""
        if journaled is not None:
            intent, upgrade_id, journal = journaled
            journal.open(intent, upgrade_id, run_id=run_id, planned_handover=handover.to_dict())
            upgrade_id_found, journal_uri = upgrade_id, journal.uri
            summary += f"\n\nUpgrade id `{upgrade_id}`; journal `{journal.uri}`."
            planning = replace(self._planning(upgrade_id), resuming=False, old_query_running=running,
                               accepted_undeclared_sink=True if found_sink.accepted_undeclared else None)
            journal.record_planning(PREFLIGHT, run_id=run_id, started_at=self._started_at, result=planning.to_dict(),
                                    notes=DecisionNotes(summary_md=summary).to_dict())
        return PreflightResult(
            summary_md=summary, handover=handover.to_dict(), starting_offsets=offsets,
            reconciliation=result.to_dict(), old_query_running=running, upgrade_id=upgrade_id_found,
            journal=journal_uri, start_plan=start_plan.to_dict() if start_plan is not None else None,
            sink=found_sink.to_dict(), state_export=self._state_export(upgrade_id_found),
            rollback_checkpoint=self._rollback_target(),
        ).to_dict()

    def _adoption(self, spec: SinkSpec, reader: CheckpointReader, heartbeat_alive: bool,
                  old: tuple[Any, str]) -> AdoptionPlan | None:
        """The declared old job (``old_job``) as its manager shows it, and how it will be stopped
        (:func:`adoption_plan`, which raises the refusals); None when no old job is declared."""
        declared = OldJobSpec.from_value(self.old_job)
        if declared is None or declared.kind is OldJobKind.LAUNCHED:
            return None
        adopted = adopt(declared, checkpoint_uri=self.old_checkpoint_uri)
        application = adopted.application
        if application is not None:
            state = application.state
            self.log.info("old job: %s", application.describe())
        else:  # a process (its group's members), or a person's job (unknown)
            state = job_for(adopted.handle).state()
        snapshot = reader.snapshot()
        in_flight: list[str] = []
        if snapshot.in_flight_batch is not None:
            planned = kafka_offsets_of(reader.batch_sources(snapshot.in_flight_batch), self.source)
            committed = reader.handover_of(snapshot).kafka_offsets(self.source)
            in_flight = [f"{r.topic}-{r.partition} [{r.start}, {r.end})" for r in cut_ranges(committed, planned)]
        try:
            sizes = [b.input_rows for b in batch_history(*old, limit=LOAD_BATCHES + 1) if b.input_rows is not None]
        except CheckpointError:
            sizes = []
        plan = adoption_plan(declared, state=state, heartbeat_alive=heartbeat_alive,
                             exposure=spec.kind.cut_exposure(), old_checkpoint=self.old_checkpoint_uri,
                             relaunch_mode=str(self.relaunch_mode or ""),
                             accept_cut_batch=flag(self.accept_cut_batch, "accept_cut_batch"),
                             application=application, in_flight=in_flight, recent_batch_sizes=sizes)
        self.log.info("adoption: the old job's stop is %s (%s)", plan.stop_method.value, plan.exposure.value)
        return plan

    def _record_refusal(self, context: Context, journal: UpgradeJournal, intent: UpgradeIntent, upgrade_id: str,
                        run_id: str, exc: CheckpointError) -> None:
        """A check of a fresh upgrade refused it, before anything was stopped: record the refusal in
        the journal's planning (its reason in the user's words) and close the journal ``refused``,
        which releases the stream's lock; the journal's URI goes to XCom, so the report stores the
        refusal's report beside it. Another upgrade holding the stream: nothing is recorded."""
        try:
            journal.open(intent, upgrade_id, run_id=run_id)
        except CheckpointError as busy:  # another upgrade holds the stream, or its journal is unreadable
            self.log.warning("the refusal is not recorded in a journal: %s", busy)
            return
        reason = exc.reason()
        journal.record_planning(self.task_id, run_id=run_id, started_at=getattr(self, "_started_at", ""),
                                state=FAILED, error=exc, notes=DecisionNotes(refusal=reason).to_dict())
        journal.close(REFUSED.value, run_id=run_id, reason=reason)
        self.log.error("the upgrade is REFUSED before anything was stopped: %s; journal %s closed (refused), stream "
                       "%s unlocked", reason, journal.uri, intent.stream_name)
        ti = context.get("ti")
        if ti is not None:  # what the report reads to find the journal (the task fails: it returns nothing)
            ti.xcom_push(key="return_value", value=PreflightResult(
                summary_md=f"Refused before anything was stopped: {reason}", handover={}, upgrade_id=upgrade_id,
                journal=journal.uri).to_dict())

    def _check_switchover(self, reader: CheckpointReader, choice: StartChoice, result: Reconciliation) -> None:
        """Refuse what the switchover cannot honour (:class:`SwitchoverUnsupported`): the standby takes
        its start from the old checkpoint's files alone."""
        refusals = []
        if choice.mode is StartMode.AT_TIME:
            refusals.append(("a start at_time (it needs the broker's offsets for the time)",
                             "a start resume, rewind_to_batch or offsets"))
        if result.added_partitions:
            added = ", ".join(f"{t}-{p}" for t, p in sorted(result.added_partitions))
            refusals.append((f"partition(s) {added} added since the old query's last commit (the standby's start "
                             "from the old checkpoint would not name them)", "the partitions the old query reads"))
        if refusals:
            raise SwitchoverUnsupported(found="; ".join(f for f, _ in refusals),
                                        expected="; ".join(e for _, e in refusals), path=self.old_checkpoint_uri)

    def _load_line(self, old: tuple[Any, str], handover: Handover, broker: BrokerView) -> str:
        """How the old query runs (:func:`load_line`): its newest batches and how far it is behind;
        "" when the history cannot be read (the summary then says nothing about load)."""
        try:
            history = batch_history(*old, limit=LOAD_BATCHES + 1)
        except CheckpointError as exc:
            self.log.warning("the old query's batch history is unreadable (%s): no load line", exc)
            return ""
        offsets = handover.kafka_offsets(self.source)
        behind = 0
        for topic, partition, start in offsets.items():
            _, latest = broker.partitions(topic).get(partition, (0, 0))
            behind += max(0, latest - max(start, 0))
        line = load_line(history, behind, now_s=time.time())
        self.log.info("%s", line.replace("**", ""))
        return line

    def _sink_finding(self, storage: CheckpointStorageHook, spec: SinkSpec, old_query_id: str | None,
                      old_committed_batch: int | None, old_planned_batch: int | None) -> SinkFinding:
        """What the sink's own record says (Delta: its log; a file sink: its ``_spark_metadata``),
        logged; refuses a sink that is not declared (unless ``accept_undeclared_sink``), what Delta
        would skip, and a declaration the sink's record contradicts."""
        read = spec.kind.is_delta or spec.kind is SinkKind.FILE
        fs, path = storage.filesystem(spec.location) if read else (None, spec.location)
        finding = inspect_sink(fs, path, spec, old_query_id=old_query_id, uri=spec.location,
                               old_committed_batch=old_committed_batch, old_planned_batch=old_planned_batch,
                               accept_undeclared_sink=flag(self.accept_undeclared_sink, "accept_undeclared_sink"))
        if finding.accepted_undeclared:
            self.log.warning("the sink is not declared and accept_undeclared_sink is on: the sink may skip or "
                             "duplicate a batch the stop cuts; exactness is not proven")
        self.log.info("sink %s: %s", spec.describe(), "exact (its own record is read)" if finding.exact
                      else "at-least-once (the provider cannot read what it holds)")
        if finding.old_last_batch is not None:
            self.log.info("the table holds the old query's batches up to %d (appId %s, table version %s)",
                          finding.old_last_batch, finding.old_app_id, finding.table_version)
        return finding

    def _state_line(self, reader: CheckpointReader, choice: StartChoice) -> str:
        """What happens to the old query's state, for the approver; refuses what the export would."""
        if not flag(self.carry_state, "carry_state"):
            operators = ", ".join(map(str, reader.snapshot().state_operators))
            if not operators:
                return "**State:** the old query is stateless: there is no state to carry."
            return (f"**State: NOT carried** (`carry_state` off): the new version starts with EMPTY state for "
                    f"stateful operator(s) {operators}.")
        exporter = SparkLauncherHook(master="local", spark_home=self.state_spark_home or None,
                                     spark_binary=self.state_spark_binary or None).spark_version
        plan = plan_state_export(reader, reader_spark=exporter)
        if not plan.stateful:
            return "**State:** the old query is stateless: there is no state to carry."
        operators = ", ".join(map(str, plan.operators))
        if choice.mode in (StartMode.AT_TIME, StartMode.OFFSETS):
            raise StateStartUnsupported(
                found=f"a stateful old query (operators {operators}) and a start {choice.mode.value}, between batches",
                expected="a start at a batch boundary (resume or rewind_to_batch), where the old state is exact",
                path=self.old_checkpoint_uri)
        exporting = exporter or "of the new version: the export checks it is 4.1 or later"
        fmt = (f", state checkpoint format v{plan.checkpoint_format_version} read on Spark {exporting}"
               if plan.checkpoint_format_version >= 2 else "")
        provider = plan.state_store_provider.rsplit(".", 1)[-1]
        if str(self.relaunch_mode or "") == RelaunchMode.SWITCHOVER.value:
            return (f"**State:** operator(s) {operators} ({provider}{fmt}): seeded by the standby in its own session "
                    f"from the old checkpoint at the handover batch, given to the new version as "
                    f"`spark.ckpt.initialStatePath` (it must read it: docs \"Starting from the old query's state\"); "
                    f"exported and verified after the switch, and compared with the seed store by store.")
        return (f"**State:** operator(s) {operators} ({provider}{fmt}): exported at "
                f"the handover batch and verified, then given to the new version as `spark.ckpt.initialStatePath` "
                f"(it must read it: docs \"Starting from the old query's state\").")

    def _check_rollback(self, storage: CheckpointStorageHook, old: tuple[Any, str], new: tuple[Any, str]) -> str:
        """Refuse a forward rollback that cannot be honoured (see the class docstring); say how a
        rollback would restart the old version."""
        try:
            mode = RollbackMode(str(self.rollback_mode or RollbackMode.RESTORE.value))
        except ValueError:
            raise ForwardRollbackRefused(found=f"rollback_mode {self.rollback_mode!r}",
                                         expected="'restore' or 'forward'",
                                         action="Nothing was changed. Set the param rollback_mode to 'restore' or "
                                                "'forward'.") from None
        if mode is RollbackMode.RESTORE:
            return "Rollback (if needed): the old version restarts on its old checkpoint and processes again " \
                   "what the new version processed (the report lists the offsets)."
        operators = CheckpointReader(self.old_checkpoint_uri, fs=old[0]).snapshot().state_operators
        if operators:
            raise ForwardRollbackRefused(
                found=f"state/ with stateful operator(s) {', '.join(map(str, operators))} in the old checkpoint",
                expected="a stateless old query (no state/ operators) for rollback_mode 'forward'",
                path=self.old_checkpoint_uri)
        target = self._rollback_target()
        if not target:
            raise ForwardRollbackRefused(found="an empty rollback checkpoint location",
                                         expected="a fresh checkpoint location for a forward rollback")
        fs_path = storage.filesystem(target)
        try:
            check_launch_target(fs_path, target, old=old)
            check_launch_target(fs_path, target, old=new)
        except (CheckpointNotEmpty, SharedCheckpoint) as exc:
            raise ForwardRollbackRefused(
                found=f"rollback checkpoint {target}: {exc.found}",
                expected="an empty location, neither the old nor the new checkpoint, for a forward rollback",
                action="Nothing was changed. Set the param rollback_checkpoint to a new, empty location (or empty "
                       "it), or use rollback_mode 'restore'.", path=target) from None
        return (f"Rollback (if needed): **forward**: the old version restarts on the fresh checkpoint `{target}` "
                "from the new version's handover; nothing is processed twice.")

    def _planning(self, upgrade_id: str, record: JournalRecord | None = None) -> PreflightPlanning:
        """The modes and locations for the journal's planning (:class:`PreflightPlanning`), which the
        steps' planner and inputs read (:func:`~airflow_ckpt_provider.upgrade.planner.next_action`):
        the relaunch and rollback modes this preflight checked, or on a resumed upgrade those its first
        run recorded (a re-run's params do not change its course), and the locations
        (:meth:`_locations`)."""
        first = recorded(record, PREFLIGHT, as_type=PreflightPlanning)
        if first is not None and first.relaunch_mode is not None:
            relaunch, rollback = first.relaunch_mode, first.rollback
        else:
            relaunch = str(self.relaunch_mode or "")
            rollback = RollbackMode(str(self.rollback_mode or RollbackMode.RESTORE.value))
        locations = self._locations(upgrade_id, record)
        return PreflightPlanning(relaunch_mode=relaunch, rollback_mode=rollback, state_export=locations["state_export"],
                                 rollback_checkpoint=locations["rollback_checkpoint"])

    def _locations(self, upgrade_id: str, record: JournalRecord | None = None) -> dict[str, str]:
        """The locations the steps read from the journal's planning
        (:class:`~airflow_ckpt_provider.upgrade.inputs.RecordInput`): where the state export goes and
        a forward rollback's fresh checkpoint; on a resumed upgrade those its first run recorded (a
        re-run's params do not move them), else those of this run's params."""
        first = recorded(record, PREFLIGHT, as_type=PreflightPlanning)
        return {"state_export": (first.state_export if first is not None else None) or self._state_export(upgrade_id),
                "rollback_checkpoint": (first.rollback_checkpoint if first is not None else None)
                or self._rollback_target()}

    def _rollback_target(self) -> str:
        """A forward rollback's fresh checkpoint: the one given, else beside the new checkpoint."""
        return forward_checkpoint(self.new_checkpoint_uri, self.rollback_checkpoint_uri)

    def _state_export(self, upgrade_id: str) -> str:
        """Where the state export goes: one folder per upgrade next to the stream's archives ("" without an id)."""
        return export_location(self.archive_root, self.stream_name, upgrade_id) if upgrade_id else ""

    def _rewind_warning(self, reader: CheckpointReader, batch: int) -> str:
        """The approver's warning when the rewound batch's start is close to Spark's purge (logged too)."""
        planned, _ = reader.retained_batches()
        if not planned:
            return ""
        # once Spark has purged, what it keeps shows its minBatchesToRetain; before, the default
        keep = planned[-1] - planned[0] if planned[0] > 0 else DEFAULT_BATCHES_TO_RETAIN
        warning = rewind_warning(batch, planned[-1], keep)
        if warning:
            self.log.warning("%s", warning.replace("**", ""))
        return warning

    def _spark_ui_url(self) -> str | None:
        """The old job's Spark UI, when its launch handle (``old_launch_handle``) knows it. A
        handle that does not parse is refused here, before anything starts or stops (the stop
        would fail on it later): :class:`InvalidLaunchHandle`."""
        text = (self.old_launch_handle or "").strip()
        if text in ("", "None", "null"):
            return None
        try:
            return LaunchHandle.from_json(text).ui_url
        except InvalidLaunchHandle as exc:
            raise InvalidLaunchHandle(
                found=f"old_launch_handle {text[:80]!r}: {exc.found}", expected=exc.expected,
                action="Set the old_launch_handle param to the JSON the old job's launch printed "
                       "(ckpt launch, StreamLaunchOperator's XCom), unchanged, or leave it empty "
                       "(the stop then cannot kill a job that does not acknowledge). Nothing was changed.",
            ) from None

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
        locations = self._locations(upgrade_id, record)
        journal.record_planning(PREFLIGHT, run_id=run_id, started_at=getattr(self, "_started_at", ""),
                                result=replace(self._planning(upgrade_id, record), resuming=True).to_dict(),
                                notes=DecisionNotes(summary_md=summary).to_dict())
        return PreflightResult(summary_md=summary, handover=planned, upgrade_id=upgrade_id, journal=journal.uri,
                               resuming=True, steps_done=tuple(done), state_export=locations["state_export"],
                               rollback_checkpoint=locations["rollback_checkpoint"]).to_dict()

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
            archived = recorded(record, "archive", as_type=ArchiveResult)
            location = archived.location if archived is not None else ""
            first_report = f"{location.rstrip('/')}/report" if location else ""
        by = str(closing.get("run_id") or (record.runs[-1] if record.runs else "?"))
        # what this run's report reads (UpgradeReportOperator): the journal is closed, its planning stays as it is
        journal.record_run(run_id, f"already done: upgraded at {record.closed_at} by run {by}; no step runs again",
                           already_done=True, first_report=first_report, done_by_run=by, done_at=record.closed_at)
        self.log.warning("upgrade %s of stream %s is ALREADY DONE (upgraded at %s by run %s; report %s): this run "
                         "does nothing. To upgrade again, set the `upgrade_id` param to a new value (or leave it empty "
                         "after changing the new checkpoint).", record.upgrade_id, record.intent.stream_name,
                         record.closed_at, by, first_report or "unknown")
        locations = self._locations(record.upgrade_id, record)
        summary = "\n".join([
            f"### Upgrade `{record.upgrade_id}` of stream `{record.intent.stream_name}` is already done", "",
            f"Upgraded at {record.closed_at} by run {by}; its report: `{first_report or 'unknown'}`.",
            "This run does nothing (no step runs again); to upgrade again, set the `upgrade_id` param to a new value "
            "(or leave it empty after changing the new checkpoint).",
        ])
        return PreflightResult(
            summary_md=summary, handover=record.planned_handover or {}, upgrade_id=record.upgrade_id,
            journal=journal.uri, steps_done=tuple(name for name, step in record.steps.items() if step.done),
            already_done=True, first_report=first_report, done_by_run=by, done_at=record.closed_at,
            state_export=locations["state_export"], rollback_checkpoint=locations["rollback_checkpoint"],
        ).to_dict()

