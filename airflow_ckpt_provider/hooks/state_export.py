"""Export (or list) a stopped checkpoint's state: the checks of :mod:`~airflow_ckpt_provider.checkpoint.state`,
then the Spark job :mod:`~airflow_ckpt_provider.spark.state_export` submitted through
:class:`~airflow_ckpt_provider.hooks.launcher.SparkLauncherHook` (any master it supports) and
waited for, then the read-back and the manifest. Used by ``StateExportOperator`` and by
``ckpt export-state`` / ``ckpt state``: one path for both.

The job runs with the Spark settings it is given (the reference DAG gives it the NEW version's:
Spark 4.0+ has ``state-metadata``, and it reads checkpoints of earlier versions). The driver's
record goes to ``<export>/_job/`` (never into the checkpoint, which is only read).
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import StateExportCorrupt, StateExportFailed
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.state import (
    JOB_DIR,
    JOB_RESULT,
    StateExportPlan,
    StateJobResult,
    StateManifest,
    check_reusable,
)
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.jobs import DriverState
from airflow_ckpt_provider.spark import state_export as job_module
from airflow_ckpt_provider.storage.files import read_file
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.state import (
    finish_export,
    plan_state_export,
    prepare_export_location,
    verify_state_export,
)
from airflow_ckpt_provider.storage.stop import ControlFiles

log = logging.getLogger(__name__)

#: the job's script, submitted as the application
JOB_SCRIPT = str(Path(job_module.__file__).resolve())


def run_state_job(
    launcher: SparkLauncherHook,
    *,
    checkpoint_uri: str,
    batch: int,
    target_uri: str,
    conf: Mapping[str, str] | None = None,
    list_only: bool = False,
    stores: Sequence[tuple[int, str]] = (),
    timeout: float = 3600.0,
    poll_interval: float = 1.0,
    storage: CheckpointStorageHook | None = None,
    on_launched: Callable[[LaunchHandle], None] | None = None,
    checkpoint_format: int = 1,
) -> StateJobResult:
    """Submit the state job, wait until it ends, return its result (``_job/result.json``).
    ``on_launched(handle)`` runs right after the submission (a caller records the job, to stop it after a crash);
    ``checkpoint_format`` 2: the job reads RocksDB state checkpoint format v2 (it refuses to
    on a Spark older than 4.1, before reading). Raises
    :class:`StateExportFailed` (with the driver log tail) when it fails or outlives ``timeout``
    (it is killed then), or leaves no result or one that is not its record (what the codec found)."""
    storage = storage or CheckpointStorageHook()
    target = target_uri.rstrip("/")
    args = ["--checkpoint", checkpoint_uri, "--batch", str(batch), "--target", target]
    if list_only:
        args.append("--list")
    if checkpoint_format >= 2:
        args += ["--checkpoint-format", str(checkpoint_format)]
    for operator, store in stores:
        args += ["--store", f"{operator}:{store}"]
    fs, _ = storage.filesystem(target)
    handle = launcher.launch(JOB_SCRIPT, checkpoint_uri=f"{target}/{JOB_DIR}", application_args=args,
                             conf=dict(conf or {}), name="ckpt-state-export",
                             storage_options=getattr(fs, "storage_options", None))
    if on_launched is not None:
        on_launched(handle)
    started = time.monotonic()
    said = started
    state = launcher.driver_state(handle)
    while state.alive is not False:
        now = time.monotonic()
        if now - started > timeout:
            outcome = launcher.kill(handle)
            raise StateExportFailed(found=f"the state job still running after {timeout:.0f} s ({outcome})",
                                    expected="it to finish", log_tail=launcher.log_tail(handle, 40),
                                    action="Give the export more time (export_timeout / --timeout) or more "
                                           "executors; it starts over on the next run.", path=checkpoint_uri)
        if now - said >= 30:
            log.info("state job %s for %s still running (%.0f s)", "counting" if list_only else "exporting",
                     checkpoint_uri, now - started)
            said = now
        time.sleep(poll_interval)
        state = launcher.driver_state(handle)
    # a job this process did not start as its own child ends "exited": its supervisor's record
    # (local drivers) has the exit code; the result file exists only after a complete run
    record = ControlFiles(fs, posixpath.join(storage.filesystem(target)[1], JOB_DIR)).driver()
    code = record.exit_code if record is not None and record.launch_id == handle.launch_id else None
    if state in (DriverState.FAILED, DriverState.KILLED) or (code is not None and code != 0):
        raise StateExportFailed(found=f"the state job ended {state.value}"
                                      + (f" with exit code {code}" if code is not None else ""),
                                expected="it to finish with exit code 0", log_tail=launcher.log_tail(handle, 60),
                                path=checkpoint_uri)
    path = posixpath.join(storage.filesystem(target)[1], JOB_RESULT)
    fs.invalidate_cache(posixpath.dirname(path))
    try:
        result = StateJobResult.from_json(read_file(fs, path))
    except FileNotFoundError:
        raise StateExportFailed(found=f"no result at {target}/{JOB_RESULT}", expected="the job's result JSON",
                                log_tail=launcher.log_tail(handle, 60), path=checkpoint_uri) from None
    except StateExportCorrupt as exc:
        raise StateExportFailed(found=f"{target}/{JOB_RESULT}: {exc.found}", expected=exc.expected,
                                log_tail=launcher.log_tail(handle, 60), path=checkpoint_uri) from None
    log.info("state job %s %s stores in %.1f s", "counted" if list_only else "exported", len(result.stores),
             time.monotonic() - started)
    return result


def export_checkpoint_state(
    *,
    checkpoint_uri: str,
    export_uri: str,
    launcher: SparkLauncherHook,
    batch: int | None = None,
    conf: Mapping[str, str] | None = None,
    upgrade_id: str = "",
    handover: Mapping[str, Any] | None = None,
    storage: CheckpointStorageHook | None = None,
    timeout: float = 3600.0,
    poll_interval: float = 1.0,
    on_launched: Callable[[LaunchHandle], None] | None = None,
) -> tuple[StateExportPlan, StateManifest | None]:
    """Check, export and verify the state after ``batch`` (default: the last committed one) of
    ``checkpoint_uri`` into ``export_uri``; returns the plan and the manifest (None when there is
    nothing to export: see :attr:`StateExportPlan.exportable`). A complete export of the same
    batch already there is verified and returned; an unfinished one is replaced. Raises the
    refusals of :func:`plan_state_export` and :func:`prepare_export_location` before anything is
    written, :class:`StateExportFailed` / :class:`StateExportCorrupt` after."""
    storage = storage or CheckpointStorageHook()
    fs, root = storage.filesystem(checkpoint_uri)
    plan = plan_state_export(CheckpointReader(checkpoint_uri, fs=fs), batch, reader_spark=launcher.spark_version)
    if not plan.exportable:
        return plan, None
    export_fs, export_root = storage.filesystem(export_uri)
    existing = prepare_export_location(export_fs, export_root, uri=export_uri, checkpoint_fs=fs, checkpoint_root=root)
    if existing is not None:
        check_reusable(existing, plan, uri=export_uri)
        verify_state_export(export_fs, export_root, existing, uri=export_uri)
        log.info("the state after batch %s is already exported and verified at %s (%s rows): reusing it",
                 plan.batch_id, export_uri, f"{existing.rows:,}")
        return plan, existing
    assert plan.batch_id is not None
    log.info("exporting the state after batch %s of %s (operators %s, %s) to %s", plan.batch_id, checkpoint_uri,
             ", ".join(map(str, plan.operators)), plan.state_store_provider.rsplit(".", 1)[-1], export_uri)
    result = run_state_job(launcher, checkpoint_uri=checkpoint_uri, batch=plan.batch_id, target_uri=export_uri,
                           conf=conf, stores=plan.inferred_stores, timeout=timeout, poll_interval=poll_interval,
                           storage=storage, on_launched=on_launched, checkpoint_format=plan.checkpoint_format_version)
    manifest = finish_export(export_fs, export_root, plan, result, uri=export_uri, upgrade_id=upgrade_id,
                             handover=handover)
    log.info("state export verified: %s stores, %s rows, %s bytes at %s", len(manifest.stores),
             f"{manifest.rows:,}", f"{manifest.total_bytes:,}", export_uri)
    return plan, manifest


__all__ = ["JOB_SCRIPT", "export_checkpoint_state", "run_state_job"]
