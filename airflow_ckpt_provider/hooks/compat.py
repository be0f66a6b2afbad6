"""Trial runs of a new version on copies, and the verdict (:mod:`airflow_ckpt_provider.checkpoint.compat`).

:func:`check_upgrade` (used by ``ckpt check-upgrade`` and ``CompatibilityCheckOperator``):

1. refuses, before anything starts, a trial location that overlaps a live one and a Python job
   that does not follow the trial contract (:mod:`airflow_ckpt_provider.spark.trial`);
2. copies the old checkpoint (without its ``_ckpt/`` control files) into the trial location
   (:func:`~airflow_ckpt_provider.storage.transfer.copy_tree`: the old checkpoint is only read);
3. launches, detached through :class:`SparkLauncherHook`, the new version twice with
   ``spark.ckpt.trial=true``, its output under the trial location and a bounded number of
   batches: **in place** on the copy (resuming) and **migrated** on an empty checkpoint at the
   handover of the last committed batch (``startingOffsets``) — for a stateful old query with
   the state of that batch, exported from the copy as the upgrade's ``export_state`` step does
   (:func:`~airflow_ckpt_provider.hooks.state_export.export_checkpoint_state`) and given as
   ``spark.ckpt.initialStatePath``;
4. waits for both to end (killed after ``timeout``), reads each driver's trial record, exit
   code and log tail, and deletes the trial location — whatever happened;
5. classifies (:func:`~airflow_ckpt_provider.checkpoint.compat.classify`), comparing the stateful
   operators the old version recorded with the in-place trial's.

Before step 2 it reads the settings Spark fixes for a checkpoint's life from the old checkpoint
(:func:`checkpoint_settings`: the offsets' conf map and version, the commit log's state format,
``state/``) and judges them against ``conf``
(:func:`~airflow_ckpt_provider.checkpoint.fixed_settings.fixed_settings`). When one already needs
a new checkpoint, the in-place trial is not run: the verdict names the setting, and only the
migrated trial runs.

Nothing is written to the old checkpoint, the new checkpoint or a live sink; Spark's Kafka
source commits no consumer-group offsets and a trial drops ``kafka.group.id``. With
``carry_state=False`` (the upgrade will not carry the state) the migrated trial starts with
empty state, as the new version then will.
"""

from __future__ import annotations

import logging
import posixpath
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.checkpoint.compat import (
    CompatibilityVerdict,
    StatefulOperator,
    StatefulOperators,
    TrialKind,
    TrialRecord,
    TrialResult,
    check_trial_location,
    classify,
    declares_contract,
    local_imports,
    spark_error,
)
from airflow_ckpt_provider.checkpoint.errors import TrialRefused
from airflow_ckpt_provider.checkpoint.fixed_settings import CheckpointFacts, SettingVerdict, fixed_settings
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.hooks import state_export
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.jobs import DriverState
from airflow_ckpt_provider.records.control import CONF_INITIAL_STATE_PATH, CONTROL_DIR
from airflow_ckpt_provider.spark.trial import (
    CONF_TRIAL,
    CONF_TRIAL_BATCHES,
    CONF_TRIAL_SINK,
    OPERATORS_RECORD,
    TRIAL_RECORD,
)
from airflow_ckpt_provider.storage.files import read_file
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.stop import ControlFiles
from airflow_ckpt_provider.storage.transfer import copy_tree

log = logging.getLogger(__name__)


def _skip_in_copy(rel: str) -> bool:
    """Control files of the live job and temporary files are not part of a trial copy."""
    name = posixpath.basename(rel)
    return rel == CONTROL_DIR or rel.startswith(CONTROL_DIR + "/") or (name.startswith(".") and name.endswith(".tmp"))


def application_sources(application: str) -> dict[str, str]:
    """The text of a local Python ``application`` and of the modules next to it that it imports
    (transitively); {} for anything else (a jar, a remote file: not checked)."""
    path = Path(application)
    if path.suffix != ".py" or not path.is_file():
        return {}
    found: dict[str, str] = {}
    todo = [path]
    while todo:
        current = todo.pop()
        if str(current) in found:
            continue
        text = current.read_text(encoding="utf-8", errors="replace")
        found[str(current)] = text
        for module in local_imports(text):
            sibling = current.parent / f"{module}.py"
            if sibling.is_file():
                todo.append(sibling)
    return found


@dataclass
class _Trial:
    kind: TrialKind
    root: str
    checkpoint: str
    handle: LaunchHandle
    started_at: float
    ended_at: float | None = None
    killed: bool = False


def _read_driver_file(fs: Any, path: str) -> bytes | None:  # noqa: ANN401 - an fsspec filesystem
    """A file a driver writes (freshly listed), None when there is none."""
    try:
        fs.invalidate_cache(posixpath.dirname(path))
        return read_file(fs, path)
    except FileNotFoundError:
        return None


def _old_operators(fs: Any, path: str) -> tuple[StatefulOperator, ...] | None:  # noqa: ANN401
    """The stateful operators the old version recorded (None: it recorded none);
    :class:`InvalidTrialRecord` when the file is not their record."""
    where = posixpath.join(path, OPERATORS_RECORD)
    data = _read_driver_file(fs, where)
    return None if data is None else StatefulOperators.from_json(data, path=where).operators


def checkpoint_facts(reader: CheckpointReader) -> CheckpointFacts:
    """What ``reader``'s checkpoint records of the fixed settings (reads ``offsets/N`` and
    ``commits/N`` of the last committed batch, lists ``state/``; a stateful operator with
    ``state/<op>/_stateSchema`` is a transformWithState)."""
    snapshot = reader.snapshot()
    commit = None
    if snapshot.last_committed_batch is not None and snapshot.commit_version is not None:
        commit = reader.commit_entry(snapshot.last_committed_batch)
    tws = all(reader.fs.exists(posixpath.join(reader.root, "state", str(op), "_stateSchema"))
              for op in snapshot.state_operators)
    return CheckpointFacts.of(offsets_version=snapshot.offsets_version,
                              commit_has_state_ids=None if commit is None else commit.state_unique_ids is not None,
                              conf=snapshot.conf, state_operators=snapshot.state_operators, transform_with_state=tws)


def checkpoint_settings(old_checkpoint: str, conf: Mapping[str, str] | None = None, *,
                        storage: CheckpointStorageHook | None = None, real_time: bool = False,
                        spark_version: str | None = None) -> tuple[SettingVerdict, ...]:
    """The fixed settings the new version (its Spark ``conf``; ``real_time``: its trigger is
    real-time mode; ``spark_version``: its Spark) changes against ``old_checkpoint``, judged from
    the checkpoint alone (nothing runs)."""
    fs, _ = (storage or CheckpointStorageHook()).filesystem(old_checkpoint)
    facts = checkpoint_facts(CheckpointReader(old_checkpoint, fs=fs))
    return fixed_settings(facts, dict(conf or {}), real_time=real_time, spark_version=spark_version)


def check_upgrade(
    *,
    old_checkpoint: str,
    new_application: str,
    launcher: SparkLauncherHook,
    application_args: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
    storage: CheckpointStorageHook | None = None,
    trial_root: str | None = None,
    live_locations: Mapping[str, str] | None = None,
    batches: int = 2,
    timeout: float = 600.0,
    poll_interval: float = 1.0,
    migrated: bool = True,
    carry_state: bool = True,
    contract_check: bool = True,
    source: int | str | None = None,
    real_time: bool = False,
) -> CompatibilityVerdict:
    """Try ``new_application`` in place and migrated on copies of ``old_checkpoint`` (see the
    module doc) and return the verdict.

    ``trial_root``: where the trials run (default: a new local temporary folder; deleted
    afterwards); ``live_locations``: what -> URI of every location the live job or the upgrade
    uses besides the old checkpoint (new checkpoint, sinks): an overlap is refused;
    ``batches``: how many batches each trial runs; ``timeout``: how long a trial may take (then
    it is killed and counts as not proven); ``migrated``: also run the migrated trial;
    ``carry_state``: give the migrated trial the old query's state (exported from the copy into
    the trial location; nothing to export for a stateless query); ``contract_check``: refuse a
    ``.py`` job whose source does not follow the trial contract; ``real_time``: the new version
    runs with ``trigger(realTime=...)`` (a fixed setting too).
    Raises :class:`TrialRefused` before anything starts, or after a trial that ran without
    honouring the contract (its files are deleted); the state export's refusals and
    :class:`StateExportFailed` when the state cannot be carried (as the upgrade's export step
    would fail after the stop) — the trial files are deleted; :class:`InvalidTrialRecord` when the
    old checkpoint's stateful operators file (before anything starts) or a trial's record (its
    files are deleted) is not the record a driver writes."""
    storage = storage or CheckpointStorageHook()
    if contract_check:
        sources = application_sources(new_application)
        if sources:
            declares_contract(sources, new_application)
    made = None if trial_root else tempfile.mkdtemp(prefix="ckpt-trial-")
    root = (trial_root or made or "").rstrip("/") + f"/{uuid.uuid4().hex[:12]}"
    check_trial_location(root, {"old checkpoint": old_checkpoint, **dict(live_locations or {})})
    old_fs, old_path = storage.filesystem(old_checkpoint)
    handover = CheckpointReader(old_checkpoint, fs=old_fs).handover()
    # the handover's selection rule (AmbiguousSource, SourceNotKafka), before anything is copied or launched
    migrated_start = handover.kafka_offsets(source).to_json() if migrated else None
    old_ops = _old_operators(old_fs, old_path)
    settings = fixed_settings(checkpoint_facts(CheckpointReader(old_checkpoint, fs=old_fs)), dict(conf or {}),
                              real_time=real_time, spark_version=getattr(launcher, "spark_version", None))
    for setting in settings:
        log.info("fixed setting %s", setting.describe())
    in_place = not any(s.needs_new_checkpoint for s in settings)
    if not in_place:
        log.info("a fixed setting needs a new checkpoint: no in-place trial")
    trial_fs, trial_path = storage.filesystem(root)
    trials: list[_Trial] = []
    results: list[TrialResult] = []
    state = None
    try:
        if in_place or (migrated and carry_state):
            copy_dst = posixpath.join(trial_path, "in_place", "checkpoint")
            copied = copy_tree(old_fs, old_path, trial_fs, copy_dst, skip=_skip_in_copy)
            log.info("trial: copied the old checkpoint (%s files, %s bytes) to %s", len(copied),
                     f"{sum(size for size, _ in copied.values()):,}", copy_dst)
        if migrated and carry_state:  # before the in-place trial writes to the copy
            state = _export_state(launcher, storage, f"{root}/in_place/checkpoint", f"{root}/state", conf=conf,
                                  timeout=timeout, poll_interval=poll_interval)
        kinds = ([TrialKind.IN_PLACE] if in_place else []) + ([TrialKind.MIGRATED] if migrated else [])
        for kind in kinds:
            trial_uri = f"{root}/{kind.value}"
            checkpoint = f"{trial_uri}/checkpoint"
            trial_conf = {**dict(conf or {}), CONF_TRIAL: "true", CONF_TRIAL_SINK: f"{trial_uri}/sink",
                          CONF_TRIAL_BATCHES: str(batches)}
            starting = migrated_start if kind is TrialKind.MIGRATED else None
            if kind is TrialKind.MIGRATED and state is not None:
                trial_conf[CONF_INITIAL_STATE_PATH] = state.location
            log.info("trial %s: launching %s on %s%s", kind.value, new_application, checkpoint,
                     f" at {starting}" if starting else " (resuming the copy)")
            handle = launcher.launch(new_application, checkpoint_uri=checkpoint, application_args=application_args,
                                     conf=trial_conf, name=f"ckpt-trial-{kind.value}", starting_offsets=starting,
                                     storage_options=getattr(trial_fs, "storage_options", None))
            trials.append(_Trial(kind, trial_uri, checkpoint, handle, time.monotonic()))
        _wait(launcher, trials, timeout=timeout, poll_interval=poll_interval)
        results = [_result(launcher, storage, t) for t in trials]
    finally:
        for trial in trials:
            if trial.ended_at is None:
                try:
                    launcher.kill(trial.handle)
                except Exception as exc:  # noqa: BLE001 - the cleanup tries every trial
                    log.warning("could not kill trial %s: %s", trial.kind.value, exc)
        _remove(trial_fs, trial_path)
        if made:
            _remove(trial_fs, made)
    refused = [r for r in results if not r.contract_honoured]
    if refused:
        raise TrialRefused(found=f"the {refused[0].kind.value} trial of {new_application} ran without declaring "
                                 "the trial contract (no trial record, or no output through sink_location)",
                           expected="a job that takes its outputs from sink_location() and runs GracefulStop",
                           action="Its trial files were deleted; make the job follow the trial contract (docs "
                                  "'Spark side'). Nothing of the live job was touched.", path=new_application)
    by_kind = {r.kind: r for r in results}
    verdict = classify(by_kind.get(TrialKind.IN_PLACE), by_kind.get(TrialKind.MIGRATED), old_operators=old_ops,
                       settings=settings)
    if state is not None:
        verdict = replace(verdict, state_batch=state.batch, state_rows=state.rows)
    log.info("compatibility of %s with %s: %s", new_application, old_checkpoint, verdict.headline())
    return verdict


@dataclass(frozen=True)
class _TrialState:
    location: str
    batch: int
    rows: int


def _export_state(launcher: SparkLauncherHook, storage: CheckpointStorageHook, checkpoint: str, target: str, *,
                  conf: Mapping[str, str] | None, timeout: float, poll_interval: float) -> _TrialState | None:
    """The copy's state after its last committed batch, exported to ``target`` for the migrated
    trial; None when there is none to carry (a stateless query, no committed batch)."""
    plan, manifest = state_export.export_checkpoint_state(
        checkpoint_uri=checkpoint, export_uri=target, launcher=launcher, conf=conf, storage=storage,
        timeout=timeout, poll_interval=poll_interval)
    if manifest is None:
        log.info("trial: no state to carry (%s): the migrated trial starts with empty state",
                 "no committed batch" if plan.stateful else "a stateless query")
        return None
    log.info("trial: the migrated trial gets the old query's state after batch %s (%s rows)", manifest.batch_id,
             f"{manifest.rows:,}")
    return _TrialState(target, manifest.batch_id, manifest.rows)


def _wait(launcher: SparkLauncherHook, trials: list[_Trial], *, timeout: float, poll_interval: float) -> None:
    """Until every trial's driver ended; a trial still running after ``timeout`` is killed."""
    said = time.monotonic()
    while any(t.ended_at is None for t in trials):
        for trial in trials:
            if trial.ended_at is not None:
                continue
            if launcher.driver_state(trial.handle).alive is False:
                trial.ended_at = time.monotonic()
            elif time.monotonic() - trial.started_at > timeout:
                log.warning("trial %s still running after %.0f s: killing it", trial.kind.value, timeout)
                launcher.kill(trial.handle)
                trial.killed, trial.ended_at = True, time.monotonic()
        if time.monotonic() - said >= 30:
            log.info("trials still running: %s", ", ".join(t.kind.value for t in trials if t.ended_at is None))
            said = time.monotonic()
        time.sleep(poll_interval)


def _result(launcher: SparkLauncherHook, storage: CheckpointStorageHook, trial: _Trial) -> TrialResult:
    fs, path = storage.filesystem(trial.checkpoint)
    data = _read_driver_file(fs, posixpath.join(path, TRIAL_RECORD))
    record = None if data is None else TrialRecord.from_json(data, path=posixpath.join(path, TRIAL_RECORD))
    driver = ControlFiles(fs, path).driver()
    code = driver.exit_code if driver is not None and driver.launch_id == trial.handle.launch_id else None
    state = launcher.driver_state(trial.handle)
    tail = launcher.log_tail(trial.handle, 80)
    seconds = (trial.ended_at or time.monotonic()) - trial.started_at
    failed = (state in (DriverState.FAILED,) or (code is not None and code != 0)) and not trial.killed
    error = record.error if record is not None else ""
    batches = record.batches if record is not None else 0
    if error or failed:
        error_class, message = spark_error(error or launcher.log_tail(trial.handle, 400))
        return TrialResult(trial.kind, started=False, batches_committed=batches,
                           error_class=error_class, error_message=error or message, log_tail=tail, seconds=seconds)
    if record is None and not trial.killed:  # ended well without a record: GracefulStop not used
        return TrialResult(trial.kind, started=None, contract_honoured=False, log_tail=tail, seconds=seconds)
    if record is not None and not record.outputs:
        return TrialResult(trial.kind, started=None, contract_honoured=False, log_tail=tail, seconds=seconds)
    return TrialResult(trial.kind, started=True if batches > 0 else None, batches_committed=batches,
                       log_tail=tail, operators=record.operators if record is not None else None, seconds=seconds)


def _remove(fs: Any, path: str) -> None:
    try:
        if fs.exists(path):
            fs.rm(path, recursive=True)
    except OSError as exc:
        log.warning("could not delete the trial files at %s: %s", path, exc)


__all__ = ["application_sources", "check_upgrade", "checkpoint_facts", "checkpoint_settings"]
