"""Archive a stopped query's checkpoint (verified, with a manifest) and restore it for a rollback."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import timedelta
from functools import cached_property
from typing import Any, ClassVar

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint.errors import ArchiveNotFound
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.manifest import RESTORE_MARKER, check_name, human_bytes, sanitize_upgrade_id
from airflow_ckpt_provider.faults import armed, fault_point
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.operators.journaled import JOURNAL_FIELDS, JournaledStep, given
from airflow_ckpt_provider.storage.archive import CheckpointArchive, default_actor
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.storage.listing import holds_anything
from airflow_ckpt_provider.storage.restore import restore_archive
from airflow_ckpt_provider.upgrade.inputs import FromRecord
from airflow_ckpt_provider.upgrade.record import ROLLBACK_PHASE, UPGRADE_PHASE, StepStart
from airflow_ckpt_provider.upgrade.results import ArchiveResult, RestoreResult

#: With the fault point ``<task id>:copying`` armed, the process is killed after this many files.
FAULT_AFTER_FILES = 3


def _copy_fault(task_id: str) -> Any:
    """An ``on_file_copied`` callback that fires the ``<task id>:copying`` fault point mid-copy."""
    name = f"{task_id}:copying"
    if not armed(name):
        return None
    copied = [0]

    def on_file(_rel: str) -> None:
        copied[0] += 1
        if copied[0] >= FAULT_AFTER_FILES:
            fault_point(name)

    return on_file


def _who(context: Context) -> str:
    dag_run = context.get("dag_run")
    user = getattr(dag_run, "triggering_user_name", None) if dag_run is not None else None
    return f"{user} (Airflow)" if user else f"{default_actor()} (Airflow)"


def _run_label(context: Context) -> str:
    dag = context.get("dag")
    run_id = context.get("run_id") or ""
    return f"{dag.dag_id}/{run_id}" if dag is not None else str(run_id)


def _seconds(value: timedelta | float | None, name: str) -> timedelta | None:
    if value is None or isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a timedelta or a number of seconds >= 0, not {value!r}")
    return timedelta(seconds=value)


class _ArchiveStorage:
    """The two locations an archive operator touches: checkpoints and archives."""

    storage_conn_id: str | None
    archive_conn_id: str | None

    @cached_property
    def storage_hook(self) -> CheckpointStorageHook:
        return CheckpointStorageHook(storage_conn_id=self.storage_conn_id)

    @cached_property
    def archive_hook(self) -> CheckpointStorageHook:
        return CheckpointStorageHook(storage_conn_id=self.archive_conn_id)


class CheckpointArchiveOperator(JournaledStep, _ArchiveStorage, BaseOperator):
    """Copy the checkpoint of a STOPPED query to ``<archive_root>/<stream_name>/<time>-<upgrade_id>/``.

    Writes a manifest (handover, query id, per-file SHA-256, Spark conf, who / why / which DAG
    run) only after re-reading and verifying every copied byte. ``upgrade_id`` defaults to the
    sanitised DAG run id, so a retried task resumes the same archive instead of making another.
    ``remove_source`` deletes the original after verification. ``keep_last`` /
    ``keep_newer_than`` (timedelta or seconds) prune older archives of the stream afterwards
    (the newest verified one is always kept).

    Returns (XCom) the manifest summary: ``location``, ``file_count``, ``total_bytes``,
    ``handover``, ``query_id`` ... Raises QueryStillRunning, ArchiveCorrupt, UnsafeStreamName,
    ArchiveInsideCheckpoint, HandoverMismatch, CheckpointChanged (all CheckpointError).

    With ``journal`` a verified archive already made for this upgrade is returned as recorded
    (no second archive); an interrupted copy resumes in the same archive directory.
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("archive", "in_place_archive")

    template_fields: Sequence[str] = (
        "checkpoint_uri", "archive_root", "stream_name", "handover", "upgrade_id", "reason",
        "storage_conn_id", "archive_conn_id", *JOURNAL_FIELDS,
    )
    ui_color = "#fdf2e8"

    def __init__(
        self,
        *,
        checkpoint_uri: str,
        archive_root: str,
        stream_name: str,
        handover: HandoverResult | Handover | str | Mapping[str, Any] | FromRecord | None = None,
        upgrade_id: str | FromRecord | None = None,
        reason: str = "",
        remove_source: bool = False,
        storage_conn_id: str | None = None,
        archive_conn_id: str | None = None,
        keep_last: int | None = None,
        keep_newer_than: timedelta | float | None = None,
        workers: int | None = None,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        journal_phase: str = UPGRADE_PHASE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.init_journal(journal, journal_conn_id, journal_phase)
        if keep_last is not None and (isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0):
            raise ValueError(f"keep_last must be a non-negative integer or None, not {keep_last!r}")
        if "{{" not in stream_name:
            check_name(stream_name)
        self.checkpoint_uri = checkpoint_uri
        self.archive_root = archive_root
        self.stream_name = stream_name
        self.handover = given(handover)
        self.upgrade_id = given(upgrade_id)
        self.reason = reason
        self.remove_source = bool(remove_source)
        self.storage_conn_id = storage_conn_id
        self.archive_conn_id = archive_conn_id
        self.keep_last = keep_last
        self.keep_newer_than = _seconds(keep_newer_than, "keep_newer_than")
        self.workers = workers

    def _handover(self) -> Handover | None:
        value: Any = self.handover
        if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
            return None
        return HandoverResult.from_json(value).handover  # a handover, or the handover step's result

    def execute(self, context: Context) -> dict[str, Any]:
        return self.run_step(context, lambda start, journal: self.archive(context))

    def archive(self, context: Context) -> dict[str, Any]:
        """Archive, verify, prune; the manifest summary (see the class docstring)."""
        stream = check_name(self.stream_name)
        upgrade_id = sanitize_upgrade_id(self.upgrade_id or str(context.get("run_id") or "run"))
        src_fs, src = self.storage_hook.filesystem(self.checkpoint_uri)
        dst_fs, root = self.archive_hook.filesystem(self.archive_root)
        archive = CheckpointArchive(dst_fs, root, archive_uri=self.archive_root, workers=self.workers,
                                    on_file_copied=_copy_fault(self.task_id))
        manifest = archive.archive(
            src_fs, src, stream_name=stream, upgrade_id=upgrade_id, source_uri=self.checkpoint_uri,
            handover=self._handover(), created_by=_who(context), reason=self.reason,
            dag_run_id=_run_label(context), remove_source=self.remove_source,
        )
        result = ArchiveResult.from_json(manifest.summary())
        if self.keep_last is not None or self.keep_newer_than is not None:
            plan = archive.prune(stream, keep_last=self.keep_last, keep_newer_than=self.keep_newer_than)
            result = replace(result, removed_archives=tuple(info.uri for info in plan.remove),
                             stale_incomplete_archives=tuple(info.uri for info in plan.stale_incomplete))
        self.log.info("archive %s holds %d files, %s; handover batch %s", manifest.archive_uri,
                      manifest.file_count, human_bytes(manifest.total_bytes),
                      manifest.handover.batch_id if manifest.handover else None)
        return result.to_dict()


class CheckpointRestoreOperator(JournaledStep, _ArchiveStorage, BaseOperator):
    """Restore an archive's checkpoint to ``target_uri`` (empty or missing) and verify every file.

    Used by a rollback: with ``skip_if_target_exists`` a target that still holds files is left
    alone (the checkpoint was never removed). Returns (XCom) the archive's manifest summary plus
    ``restored_to``.
    Raises TargetNotEmpty (nothing written), ArchiveIncomplete, ArchiveCorrupt naming the file.

    With ``journal`` (phase ``rollback`` by default) a restore is noted before its first file:
    if it is interrupted, the re-run knows the target holds its own partial copy, clears it and
    restores again from the verified archive, instead of taking it for the original checkpoint.
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("rollback_restore",)

    template_fields: Sequence[str] = ("archive_uri", "target_uri", "archive_conn_id", "storage_conn_id",
                                      *JOURNAL_FIELDS)
    ui_color = "#fdf2e8"

    def __init__(
        self,
        *,
        archive_uri: str | FromRecord,
        target_uri: str,
        archive_conn_id: str | None = None,
        storage_conn_id: str | None = None,
        workers: int | None = None,
        skip_if_target_exists: bool = False,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        journal_phase: str = ROLLBACK_PHASE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.init_journal(journal, journal_conn_id, journal_phase)
        self.archive_uri = given(archive_uri)
        self.target_uri = target_uri
        self.archive_conn_id = archive_conn_id
        self.storage_conn_id = storage_conn_id
        self.workers = workers
        self.skip_if_target_exists = bool(skip_if_target_exists)

    def execute(self, context: Context) -> dict[str, Any]:
        return self.run_step(context, self.restore)

    def restore(self, start: StepStart | None = None, journal: UpgradeJournal | None = None) -> dict[str, Any]:
        """Restore (or find the target in place); see the class docstring."""
        target_fs, target = self.storage_hook.filesystem(self.target_uri)
        # an object store's target holds the marker until its restore verified (a local one is renamed in whole)
        partial = target_fs.exists(posixpath.join(target, RESTORE_MARKER))
        if partial or (start is not None and start.previous is not None and start.previous.notes.get("restoring")):
            if target_fs.exists(target):
                self.log.warning("an earlier restore into %s did not finish: removing its partial copy and "
                                 "restoring again", self.target_uri)
                target_fs.rm(target, recursive=True)
        elif self.skip_if_target_exists and holds_anything(target_fs, target):
            self.log.info("%s is still in place: nothing to restore", self.target_uri)
            return RestoreResult(None, target_in_place=True).to_dict()
        if not self.archive_uri:
            raise ArchiveNotFound(found="no archive location", expected=f"an archive to restore {self.target_uri} from",
                                  action="The checkpoint is gone and was never archived: restore it from a backup.")
        archive_fs, archive_path = self.archive_hook.filesystem(self.archive_uri)
        if journal is not None:
            journal.note(self.task_id, restoring=True, archive=self.archive_uri)
        manifest = restore_archive(archive_fs, archive_path, target_fs, target, workers=self.workers)
        self.log.info("restored %d files (%s) of query %s to %s", manifest.file_count,
                      human_bytes(manifest.total_bytes), manifest.query_id, self.target_uri)
        return RestoreResult(self.target_uri, ArchiveResult.from_json(manifest.summary())).to_dict()
