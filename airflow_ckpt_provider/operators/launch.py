"""Start the new job version detached on a new checkpoint, and verify it started at the handover."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.sdk import BaseOperator, BaseOperatorLink, Context

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    FirstCommitTimeout,
    HandoverMissing,
    InvalidOffsets,
    LaunchFailed,
    NoProgress,
    QueryStillRunning,
    StandbyNotHonoured,
)
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.state import StateExport
from airflow_ckpt_provider.checkpoint.verify import VerifyResult, verify_resume, verify_start
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.faults import fault_point
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.jobs import observe
from airflow_ckpt_provider.operators.journaled import JOURNAL_FIELDS, JournaledStep, given
from airflow_ckpt_provider.records.control import (
    CONF_INITIAL_STATE_PATH,
    CONF_STANDBY,
    CONF_STANDBY_TIMEOUT_S,
    DEFAULT_STANDBY_TIMEOUT_S,
    STANDBY_RELEASE,
    DriverRecord,
    Heartbeat,
    ProcessScope,
    StandbyRelease,
)
from airflow_ckpt_provider.sinks import SinkDelivery, SinkSpec, verify_sink
from airflow_ckpt_provider.storage.archive import check_query_stopped
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.storage.locations import check_launch_target
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.stop import ControlFiles
from airflow_ckpt_provider.triggers.launch import (
    LaunchEvent,
    LaunchTrigger,
    LaunchTriggerEvent,
    LaunchWait,
    committed_batches,
)
from airflow_ckpt_provider.upgrade.inputs import FromRecord
from airflow_ckpt_provider.upgrade.record import UPGRADE_PHASE, JournalStep, StepStart

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

#: XCom key of the LaunchHandle, pushed BEFORE deferring so a failed launch can still be killed.
HANDLE_XCOM_KEY = "launch_handle"
#: Airflow's own deferral timeout is a backstop past the trigger's deadline.
DEFER_GRACE_S = 120.0


class SparkUILink(BaseOperatorLink):
    """The launched driver's Spark UI, when the driver logged its address."""

    name = "Spark UI"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow.providers.common.compat.sdk import XCom

        return XCom.get_value(ti_key=ti_key, key=self.xcom_key) or ""


def _handover_input(value: HandoverResult | str | Mapping[str, Any] | None) -> HandoverResult | None:
    """The handover step's result from an XComArg, a dict or JSON; None when not given."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
        return None
    return HandoverResult.from_json(value)


def _offsets_text(value: str | None) -> str | None:
    """Validated startingOffsets text: None/'' -> None, 'earliest'/'latest' as they are, else JSON."""
    if value is None or not str(value).strip():
        return None
    text = str(value).strip()
    if text in ("earliest", "latest"):
        return text
    return KafkaOffsets.from_json(text).to_json()


class StreamLaunchOperator(JournaledStep, BaseOperator):
    """Launch ``application`` detached on the NEW checkpoint and wait (deferred) for its first commit.

    Refuses, before starting anything or creating anything: a checkpoint equal to
    ``old_checkpoint_uri`` (:class:`SharedCheckpoint`) or not empty (:class:`CheckpointNotEmpty`)
    unless ``allow_existing_checkpoint`` (to restart a version on its own checkpoint during a
    rollback; a live heartbeat on it is still refused: :class:`QueryStillRunning`); a file sink
    whose ``sink_path`` already holds ``_spark_metadata`` (:class:`FileSinkHazard`: batch ids
    restart at 0 and would be skipped silently); invalid ``starting_offsets``
    (:class:`InvalidOffsets`); a launch onto a new checkpoint with neither ``handover`` nor
    ``starting_offsets`` (:class:`HandoverMissing`: Spark's default, latest, would skip every record
    in between). Only a restart on the query's own checkpoint (``allow_existing_checkpoint``: the
    in-place restart, the rollback's restart of the old version) and a standby (its offsets come
    with its release) start without one; a brand-new stream passes ``starting_offsets="earliest"``
    or ``"latest"`` explicitly.

    ``handover`` is the handover step's result (``CheckpointHandoverOperator.output``, a dict or
    JSON): the job then starts at its ``starting_offsets`` with its handover, unless
    ``starting_offsets`` / ``handover_json`` are given explicitly. ``initial_state`` is the state
    export step's result (``StateExportOperator.output``, or an export location): when it holds an
    export, the job also gets ``spark.ckpt.initialStatePath`` (a standby: with its release), which
    :mod:`airflow_ckpt_provider.spark.state` reads.
    The job gets ``spark.ckpt.checkpointLocation``, ``spark.ckpt.startingOffsets`` (and
    ``spark.ckpt.handoverJson`` when a handover is known) as Spark conf; see
    :mod:`airflow_ckpt_provider.spark.kafka`. The spark-submit comes from ``spark_conn_id`` or
    ``master``/``deploy_mode``, the Spark from ``spark_home`` / ``spark_binary`` (templated, empty
    means unset; see :class:`SparkLauncherHook`). The handle is pushed to XCom
    (key ``launch_handle``) before deferring. Fails with :class:`LaunchFailed` (driver log
    tail included) when the job dies before its first commit, with :class:`FirstCommitTimeout`
    after ``first_commit_timeout`` seconds (the job is killed unless ``kill_on_timeout=False``).
    Returns the LaunchHandle dict (with the Spark UI address when the driver logged it).

    With ``journal`` the launch is exactly-once across retries and re-triggered runs: a launch
    already done returns its handle; before starting the job the step notes that it is
    launching, and its handle right after. A re-run of an interrupted launch adopts the job
    if it is alive (by its handle, or by a live heartbeat on the checkpoint, waiting up to
    ``adopt_grace_s`` for a job that was started but has not beaten yet) and waits for its
    commit instead of starting a second one; if that job died, it is restarted on the
    checkpoint it may have begun (Spark resumes from it; ``startingOffsets`` only apply to a
    checkpoint without offsets).

    With ``standby=True`` the job is launched as a standby, BEFORE the old version stops: without
    offsets, with ``spark.ckpt.standby=true``; its driver builds its session and waits in
    :func:`airflow_ckpt_provider.spark.standby.await_handover` (at most ``standby_timeout``
    seconds). The step succeeds on the launch's standby heartbeat (within
    ``first_commit_timeout``) and returns the handle; :class:`StandbyReleaseOperator` starts its
    query later. A job that starts its query instead of waiting is killed:
    :class:`StandbyNotHonoured`.

    With ``kafka_conn_id`` the wait also succeeds on an IDLE topic, where no batch can commit: once
    the job's query runs and its position (the last committed batch, else the start Spark recorded
    in ``sources/``) is the broker's log end on every partition (``caught_up`` in the log and the
    trigger event). Without it an idle topic ends in :class:`FirstCommitTimeout`.
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("relaunch", "start_standby", "in_place_restart", "rollback_restart_old",
                                        "rollback_restart_forward", "in_place_rollback_restart")

    # like SparkSubmitOperator, conf and application_args are templated too (XComArgs work there)
    template_fields: Sequence[str] = ("application", "application_args", "conf", "checkpoint_uri",
                                      "old_checkpoint_uri", "handover", "starting_offsets", "handover_json",
                                      "sink_path", "initial_state",
                                      "master", "deploy_mode", "master_ui_url", "log_dir",
                                      "spark_conn_id", "spark_binary", "spark_home", "storage_conn_id",
                                      "kafka_conn_id", *JOURNAL_FIELDS)
    operator_extra_links = (SparkUILink(),)
    ui_color = "#fdf2e8"

    def __init__(
        self,
        *,
        application: str,
        checkpoint_uri: str | FromRecord,
        application_args: Sequence[str] = (),
        old_checkpoint_uri: str | None = None,
        handover: HandoverResult | str | Mapping[str, Any] | FromRecord | None = None,
        starting_offsets: str | FromRecord | None = None,
        handover_json: str | None = None,
        conf: Mapping[str, str] | None = None,
        spark_conn_id: str | None = None,
        master: str | None = None,
        deploy_mode: str | None = None,
        sink_path: str | None = None,
        initial_state: str | Mapping[str, Any] | FromRecord | None = None,
        allow_existing_checkpoint: bool = False,
        first_commit_timeout: float = 600.0,
        poll_interval: float = 5.0,
        kill_on_timeout: bool = True,
        storage_conn_id: str | None = None,
        app_name: str | None = None,
        env: Mapping[str, str] | None = None,
        log_dir: str | None = None,
        master_ui_url: str | None = None,
        spark_binary: str | None = None,
        spark_home: str | None = None,
        python_launcher_jar: str | None = None,
        submit_options: Mapping[str, Any] | None = None,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        journal_phase: str = UPGRADE_PHASE,
        adopt_grace_s: float = 120.0,
        standby: bool = False,
        standby_timeout: float = DEFAULT_STANDBY_TIMEOUT_S,
        kafka_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.init_journal(journal, journal_conn_id, journal_phase)
        self.kafka_conn_id = kafka_conn_id
        self.adopt_grace_s = float(adopt_grace_s)
        self.standby = bool(standby)
        if standby_timeout <= 0:
            raise ValueError("standby_timeout must be positive")
        self.standby_timeout = float(standby_timeout)
        if first_commit_timeout <= 0 or poll_interval <= 0:
            raise ValueError("first_commit_timeout and poll_interval must be positive")
        if isinstance(application_args, str):
            raise TypeError("application_args must be a list of strings, not one string")
        self.application = application
        self.checkpoint_uri = given(checkpoint_uri)
        self.application_args = application_args  # template fields are stored as given (rendered later)
        self.old_checkpoint_uri = old_checkpoint_uri
        self.handover = given(handover)
        self.starting_offsets = given(starting_offsets)
        self.handover_json = handover_json
        self.conf = conf
        self.spark_conn_id = spark_conn_id
        self.master = master
        self.deploy_mode = deploy_mode
        self.sink_path = sink_path
        self.initial_state = given(initial_state)
        self.allow_existing_checkpoint = bool(allow_existing_checkpoint)
        self._resume_after: int | None = None  # last batch of an existing checkpoint (preflight)
        self.first_commit_timeout = float(first_commit_timeout)
        self.poll_interval = float(poll_interval)
        self.kill_on_timeout = bool(kill_on_timeout)
        self.storage_conn_id = storage_conn_id
        self.app_name = app_name
        self.env = dict(env or {})
        self.log_dir = log_dir
        self.master_ui_url = master_ui_url
        self.spark_binary = spark_binary
        self.spark_home = spark_home
        self.python_launcher_jar = python_launcher_jar
        self.submit_options = dict(submit_options or {})

    @cached_property
    def launcher_hook(self) -> SparkLauncherHook:
        return SparkLauncherHook(  # templated fields rendered empty mean "not set"
            self.spark_conn_id or None, master=self.master or None, deploy_mode=self.deploy_mode or None,
            spark_binary=self.spark_binary or None, spark_home=self.spark_home or None,
            master_ui_url=self.master_ui_url or None, env=self.env,
            log_dir=self.log_dir or None,
            python_launcher_jar=self.python_launcher_jar, submit_options=self.submit_options,
        )

    @cached_property
    def storage_hook(self) -> CheckpointStorageHook:
        return CheckpointStorageHook(storage_conn_id=self.storage_conn_id)

    def preflight(self) -> str | None:
        """Run every refusal check (nothing is created); returns the validated startingOffsets.

        On an existing checkpoint (``allow_existing_checkpoint``) it also records the last
        committed batch, so the wait is for a batch committed by THIS launch."""
        starting = self._starting_offsets()
        existing = self._check_target(self.allow_existing_checkpoint)
        storage = self.storage_hook
        self._resume_after = None
        fs, path = storage.filesystem(self.checkpoint_uri)
        if not existing and fs.exists(path):  # only _ckpt/ from an earlier failed launch: nothing may live there
            check_query_stopped(fs, path, uri=self.checkpoint_uri)
        if existing:
            self.log.warning("%s is not empty (allow_existing_checkpoint): the query resumes from it and "
                             "Spark ignores startingOffsets", self.checkpoint_uri)
            fs, path = storage.filesystem(self.checkpoint_uri)
            check_query_stopped(fs, path, uri=self.checkpoint_uri)  # never two queries on one checkpoint
            try:
                self._resume_after = CheckpointReader(self.checkpoint_uri, fs=fs).snapshot().last_committed_batch
            except CheckpointError as exc:
                self.log.warning("cannot read the last committed batch of %s (%s)", self.checkpoint_uri, exc)
        return starting

    def _starting_offsets(self) -> str | None:
        """``starting_offsets`` validated, else the handover's startingOffsets JSON, else None."""
        starting = _offsets_text(self.starting_offsets)
        if starting is None and (result := _handover_input(self.handover)) is not None:
            starting = result.offsets().to_json()
        return starting

    def _initial_state_conf(self) -> dict[str, str]:
        """``spark.ckpt.initialStatePath`` when ``initial_state`` holds an export, else nothing."""
        export = StateExport.from_json(self.initial_state)
        if export is None or not export.location:
            return {}
        return {CONF_INITIAL_STATE_PATH: export.location}

    def _check_target(self, allow_existing_checkpoint: bool) -> bool:
        """:func:`check_launch_target` on this launch's checkpoint, old checkpoint and sink."""
        storage = self.storage_hook
        return check_launch_target(
            storage.filesystem(self.checkpoint_uri), self.checkpoint_uri,
            old=storage.filesystem(self.old_checkpoint_uri) if self.old_checkpoint_uri else None,
            sink=storage.filesystem(self.sink_path) if self.sink_path else None,
            allow_existing_checkpoint=allow_existing_checkpoint,
        )

    def execute(self, context: Context) -> dict[str, Any]:
        def reuse(result: Any) -> None:
            if isinstance(result, Mapping):
                context["ti"].xcom_push(key=HANDLE_XCOM_KEY, value=dict(result))

        return self.run_step(context, lambda start, journal: self.launch(context, start, journal), on_reuse=reuse)

    def launch(self, context: Context, start: StepStart | None = None,
               journal: UpgradeJournal | None = None) -> dict[str, Any]:
        """Check, start the job (or adopt the one an interrupted attempt started) and defer."""
        if not isinstance(self.conf or {}, Mapping) or isinstance(self.application_args, (str, bytes)) \
                or not isinstance(self.application_args, Sequence):
            raise TypeError("conf must render to a dict and application_args to a list of strings")
        conf = {str(k): str(v) for k, v in (self.conf or {}).items()}
        args = [str(a) for a in self.application_args]
        previous = start.previous if start is not None else None
        if previous is not None and previous.notes.get("launching"):
            alive, adopted = self._earlier_launch(previous)
            if alive:
                min_batch = int(previous.notes.get("min_batch", 0))
                self.log.warning("resuming: %s was launched by an earlier attempt (run %s) and is running; "
                                 "waiting for its commit instead of launching a second one",
                                 adopted.app_name if adopted else self.checkpoint_uri, previous.run_id)
                if adopted is not None:
                    if journal is not None:
                        journal.note(self.task_id, handle=adopted.to_dict())
                    context["ti"].xcom_push(key=HANDLE_XCOM_KEY, value=adopted.to_dict())
                return self._defer_for_commit(context, adopted, min_batch)
            self.log.warning("resuming: the job launched by an earlier attempt (run %s) is not running; "
                             "launching it again on %s (it resumes from whatever it wrote there)",
                             previous.run_id, self.checkpoint_uri)
            self.allow_existing_checkpoint = True
        starting = self.preflight()
        name = self.app_name or f"{self.dag_id}.{self.task_id}"
        handover_json = None
        if self.standby:  # the offsets come with the release, once the old version stopped
            starting = None
            conf.update({CONF_STANDBY: "true", CONF_STANDBY_TIMEOUT_S: f"{self.standby_timeout:g}"})
        else:
            if starting is None and not self.allow_existing_checkpoint:
                raise HandoverMissing(
                    found=f"a launch of {self.application} onto the new checkpoint {self.checkpoint_uri} with no "
                          "handover and no starting_offsets",
                    expected="the handover (its startingOffsets), explicit starting_offsets, or a restart on the "
                             "query's own checkpoint (allow_existing_checkpoint), which resumes from it",
                    path=self.checkpoint_uri)
            handover_json = self._handover_text()
            conf.update(self._initial_state_conf())
        min_batch = 0 if self._resume_after is None else self._resume_after + 1
        launch_id = uuid.uuid4().hex
        if journal is not None:  # the intent first: a re-run finds this launch by its id
            journal.note(self.task_id, launching=True, min_batch=min_batch, launch_id=launch_id)
        fs, _ = self.storage_hook.filesystem(self.checkpoint_uri)
        handle = self.launcher_hook.launch(
            self.application, checkpoint_uri=self.checkpoint_uri, application_args=args, conf=conf, name=name,
            starting_offsets=starting, handover_json=handover_json,
            storage_options=getattr(fs, "storage_options", None), launch_id=launch_id,
        )
        if journal is not None:
            journal.note(self.task_id, handle=handle.to_dict())
        context["ti"].xcom_push(key=HANDLE_XCOM_KEY, value=handle.to_dict())
        fault_point(f"{self.task_id}:launched")
        self.log.info("started %s; waiting up to %.0f s for its %s in %s", name, self.first_commit_timeout,
                      "standby heartbeat" if self.standby else "first committed batch", self.checkpoint_uri)
        return self._defer_for_commit(context, handle, min_batch)

    def _handover_text(self) -> str | None:
        """The Handover JSON for ``spark.ckpt.handoverJson``: ``handover_json``, else ``handover``'s."""
        if self.handover_json and str(self.handover_json).strip() not in ("None", "null"):
            return HandoverResult.from_json(self.handover_json).handover.to_json()
        if (result := _handover_input(self.handover)) is not None:
            return result.handover.to_json()
        return None

    def _defer_for_commit(self, context: Context, handle: LaunchHandle | None, min_batch: int) -> dict[str, Any]:
        """Wait (deferred, :meth:`defer_unless_over`) for the job's first commit (>= ``min_batch``),
        or its standby heartbeat; an earlier attempt's job may be past that point already."""
        trigger = LaunchTrigger(
            checkpoint_uri=self.checkpoint_uri, deadline=time.time() + self.first_commit_timeout,
            handle=handle.to_dict() if handle is not None else None, poll_interval=self.poll_interval,
            storage_conn_id=self.storage_conn_id,
            min_batch=min_batch, wait_for=LaunchWait.STANDBY if self.standby else LaunchWait.COMMIT,
            kafka_conn_id=(self.kafka_conn_id or None) if not self.standby else None,
        )
        return self.defer_unless_over(trigger, finish=lambda event: self.first_commit(context, event),
                                      poll_interval=min(self.poll_interval, 1.0),
                                      timeout=timedelta(seconds=self.first_commit_timeout + DEFER_GRACE_S))

    def _earlier_launch(self, previous: JournalStep) -> tuple[bool, LaunchHandle | None]:
        """(alive, handle) of the job an interrupted attempt launched: by its recorded handle, by
        the driver record its supervisor wrote under the noted launch id, or by a live heartbeat
        on the checkpoint (waiting up to ``adopt_grace_s`` for a first sign when the attempt died
        before recording the handle). The handle is None when the job is alive but cannot be
        named from here (only its checkpoint is then watched)."""
        recorded = previous.notes.get("handle")
        handle = LaunchHandle.from_json(recorded) if isinstance(recorded, Mapping) else None
        launch_id = str(previous.notes.get("launch_id") or "")
        fs, path = self.storage_hook.filesystem(self.checkpoint_uri)
        control = ControlFiles(fs, path, uri=self.checkpoint_uri)
        deadline = time.monotonic() + (self.adopt_grace_s if handle is None else 0.0)
        while True:
            if handle is None and launch_id and (driver := control.driver()) is not None \
                    and driver.launch_id == launch_id:
                handle = _handle_from_driver(self.checkpoint_uri, driver, self.master or "")
            if handle is not None:
                verdict = observe(handle, control)
                self.log.info("the earlier launch %s: %s", handle.app_name, verdict.evidence)
                if verdict.alive is not None:
                    return verdict.alive, handle
            beat = control.heartbeat()
            if beat is not None and beat.is_alive():
                self.log.info("found query %s alive on %s (pid %s, %s) without a usable handle",
                              beat.query_id, self.checkpoint_uri, beat.pid, beat.scope.describe())
                return True, handle or _handle_from_heartbeat(self.checkpoint_uri, beat, self.master or "")
            if time.monotonic() >= deadline:
                return False, None
            time.sleep(min(self.poll_interval, 2.0))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.complete_step(lambda: self.first_commit(context, event))

    def first_commit(self, context: Context, event: dict[str, Any] | None) -> dict[str, Any]:
        """The handle once the job committed; :class:`LaunchFailed` / :class:`FirstCommitTimeout`."""
        fired = LaunchTriggerEvent.from_json(event)
        if fired.handle is None:  # an adopted job that cannot be named from here: its checkpoint only
            if fired.reason is not LaunchEvent.COMMITTED:
                raise FirstCommitTimeout(found=f"no commits/N after {fired.waited_s:.0f} s ({fired.evidence})",
                                         expected=f"a committed batch within {self.first_commit_timeout:.0f} s",
                                         path=self.checkpoint_uri)
            raise LaunchFailed(found="a running job adopted from its heartbeat, without a launch handle",
                               expected="a launch handle to return", path=self.checkpoint_uri,
                               action="The job runs and commits; find it by its heartbeat's host and pid "
                                      "(ckpt inspect) and pass its handle by hand if it must be stopped later.")
        handle = LaunchHandle.from_json(fired.handle)
        reason = fired.reason
        if reason is LaunchEvent.STANDBY:
            self.log.info("%s waits as a standby after %.1f s (%s)", handle.app_name, fired.waited_s, fired.evidence)
            return handle.to_dict()
        if reason is LaunchEvent.NOT_STANDBY:
            self.log.warning("%s did not wait for its handover (%s): killing it", handle.app_name, fired.evidence)
            self.log.info("killed: %s", self.launcher_hook.kill(handle))
            raise StandbyNotHonoured(found=fired.evidence, path=self.checkpoint_uri,
                                     expected="a standby heartbeat and no batch before the release")
        if reason in (LaunchEvent.COMMITTED, LaunchEvent.CAUGHT_UP):
            ui_url = self.launcher_hook.discover_ui_url(handle)
            handle = dataclasses.replace(handle, ui_url=ui_url)
            if ui_url:
                context["ti"].xcom_push(key=SparkUILink().xcom_key, value=ui_url)
            if reason is LaunchEvent.CAUGHT_UP:
                self.log.info("%s runs and is caught up after %.1f s: nothing to read on an idle topic (%s); it "
                              "commits its first batch when records arrive%s", handle.app_name, fired.waited_s,
                              fired.evidence, f" (Spark UI {ui_url})" if ui_url else "")
            else:
                self.log.info("%s committed batch %s after %.1f s; it keeps running%s", handle.app_name,
                              fired.batch, fired.waited_s, f" (Spark UI {ui_url})" if ui_url else "")
            return handle.to_dict()
        awaited = ("a standby heartbeat in _ckpt/heartbeat.json" if self.standby
                   else f"a first committed batch in {self.checkpoint_uri}/commits")
        if reason is LaunchEvent.DIED:
            raise LaunchFailed(
                found=f"the job ended ({fired.state.value}: {fired.evidence}) before "
                      f"{'waiting as a standby' if self.standby else 'committing a batch'}",
                expected=awaited, log_tail=fired.log_tail or self.launcher_hook.log_tail(handle, 60),
                path=handle.log_path,
            )
        action = None
        if self.kill_on_timeout:
            awaited_word = "standby heartbeat" if self.standby else "committed batch"
            self.log.warning("no %s after %.0f s: killing %s", awaited_word, fired.waited_s, handle.app_name)
            done = self.launcher_hook.kill(handle)
            self.log.info("killed: %s", done)
        else:
            action = ("The job was left running (kill_on_timeout=False); stop it with the launch_handle "
                      "XCom, or wait and verify.")
        raise FirstCommitTimeout(found=f"{'no standby heartbeat' if self.standby else 'no commits/N'} after "
                                       f"{fired.waited_s:.0f} s (job {fired.state.value}: {fired.evidence})",
                                 expected=f"{awaited} within {self.first_commit_timeout:.0f} s",
                                 action=action, path=self.checkpoint_uri)


class StandbyReleaseOperator(StreamLaunchOperator):
    """Start the query of a waiting standby at the handover, and wait (deferred) for its first commit.

    ``standby_handle`` is the standby launch's result (``StreamLaunchOperator(standby=True)
    .output``: its LaunchHandle as a dict or JSON, templated). The step checks that this launch
    waits as a standby on ``checkpoint_uri`` (its standby heartbeat is fresh and it has written
    no batch), then writes ``_ckpt/standby-release.json`` with the ``handover``'s offsets (and
    the handover itself) for that standby run only, and defers like a cold launch until batch 0
    is committed. When the standby is not waiting (it died, timed out, was never started), it
    launches ``application`` cold instead, with the same arguments and checks as
    :class:`StreamLaunchOperator` (a warning says why). Raises what the cold launch raises:
    :class:`LaunchFailed` when the released job dies before its first commit,
    :class:`FirstCommitTimeout` after ``first_commit_timeout``. Returns the LaunchHandle dict and
    pushes it (key ``launch_handle``) before deferring. With ``journal``, a re-run after the
    release waits for that job's commit and never releases (or launches) a second time.
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("relaunch",)

    template_fields: Sequence[str] = (*StreamLaunchOperator.template_fields, "standby_handle")

    def __init__(self, *, standby_handle: str | Mapping[str, Any] | FromRecord | None, **kwargs: Any) -> None:
        if kwargs.get("standby"):
            raise ValueError("StandbyReleaseOperator releases a standby; it does not launch one (standby=False)")
        super().__init__(**kwargs)
        self.standby_handle = given(standby_handle)

    def _standby(self) -> LaunchHandle | None:
        value = self.standby_handle
        if value is None or (isinstance(value, str) and value.strip() in ("", "None", "null")):
            return None
        return LaunchHandle.from_json(value)

    def launch(self, context: Context, start: StepStart | None = None,
               journal: UpgradeJournal | None = None) -> dict[str, Any]:
        """Release the standby (or launch cold when it is not waiting) and defer for the first commit."""
        previous = start.previous if start is not None else None
        recorded = previous.notes.get("handle") if previous is not None else None
        if previous is not None and previous.notes.get("released") and isinstance(recorded, Mapping):
            handle = LaunchHandle.from_json(recorded)
            self.log.warning("resuming: an earlier attempt (run %s) released the standby %s (release %s); waiting "
                             "for its first commit", previous.run_id, handle.app_name, previous.notes["released"])
            context["ti"].xcom_push(key=HANDLE_XCOM_KEY, value=handle.to_dict())
            return self._defer_for_commit(context, handle, 0)
        standby = self._standby() if previous is None or not previous.notes.get("launching") else None
        fs, path = self.storage_hook.filesystem(self.checkpoint_uri)
        control = ControlFiles(fs, path, uri=self.checkpoint_uri)
        waiting, why = self._waiting(standby, control)
        if standby is None or not waiting:
            self.log.warning("the standby is not waiting (%s): launching %s cold on %s", why, self.application,
                             self.checkpoint_uri)
            if journal is not None:
                journal.note(self.task_id, standby_lost=why)
            return super().launch(context, start, journal)
        starting = self._release_offsets()
        beat = control.heartbeat()
        assert beat is not None  # _waiting saw it
        release = StandbyRelease(release_id=uuid.uuid4().hex, released_at=utc_iso(timespec="milliseconds"),
                                 starting_offsets=starting, handover_json=self._handover_text() or "",
                                 conf=self._initial_state_conf(), requested_by=f"{self.dag_id}.{self.task_id}",
                                 standby_run_id=beat.run_id)
        if journal is not None:  # before the write: a re-run never releases twice
            journal.note(self.task_id, released=release.release_id, handle=standby.to_dict())
        control.write_record(STANDBY_RELEASE, release.to_json().encode())
        context["ti"].xcom_push(key=HANDLE_XCOM_KEY, value=standby.to_dict())
        fault_point(f"{self.task_id}:released")
        self.log.info("released standby %s (run %s) at %s; waiting up to %.0f s for its first committed batch in %s",
                      standby.app_name, beat.run_id, starting, self.first_commit_timeout, self.checkpoint_uri)
        return self._defer_for_commit(context, standby, 0)

    def _waiting(self, standby: LaunchHandle | None, control: ControlFiles) -> tuple[bool, str]:
        """Whether ``standby`` waits for its release on the checkpoint, and why not in words.

        The launch's liveness (:func:`~airflow_ckpt_provider.jobs.observe`: its driver record,
        its job kind, then its heartbeat) decides, not the heartbeat's age alone: a standby whose
        beat is late on a loaded machine is still released. A standby that ended its wait (a
        stop request, its timeout) but whose driver still runs is given ``adopt_grace_s`` to exit
        first, so the cold launch that follows never meets it on the checkpoint."""
        if standby is None:
            return False, "no standby handle was given"
        deadline = time.monotonic() + self.adopt_grace_s
        while True:
            verdict = observe(standby, control)
            if verdict.alive is False:
                return False, f"the standby launch ended: {verdict.evidence}"
            beat = control.heartbeat()
            if beat is not None and beat.is_standby:
                break
            what = "no heartbeat" if beat is None else f"heartbeat {beat.state}, updated {beat.updated_at}"
            if verdict.alive is None:  # nothing says it still runs: the cold launch's own checks guard the rest
                return False, f"{what} on {self.checkpoint_uri} ({verdict.evidence})"
            if time.monotonic() >= deadline:
                raise QueryStillRunning(found=f"the standby launch {standby.app_name} still running "
                                              f"({verdict.evidence}) with {what}, {self.adopt_grace_s:.0f} s after it "
                                              "ended its wait",
                                        expected="a waiting standby, or one that has exited",
                                        action="Stop it by its handle (the start_standby XCom) and run the step again.",
                                        path=self.checkpoint_uri)
            self.log.info("the standby is not waiting any more (%s) but its driver still runs (%s): waiting for it "
                          "to exit", what, verdict.evidence)
            time.sleep(min(self.poll_interval, 2.0))
        state = control.batch_state()
        if state.last_planned_batch is not None or state.last_committed_batch is not None:
            raise StandbyNotHonoured(found=f"batches on {self.checkpoint_uri} before the release "
                                           f"(last planned {state.last_planned_batch})",
                                     expected="an empty checkpoint under a waiting standby", path=self.checkpoint_uri)
        return True, ""

    def _release_offsets(self) -> str:
        """The handover's startingOffsets JSON, checked like a launch (sink, shared checkpoint)."""
        starting = self._starting_offsets()
        if starting is None or starting in ("earliest", "latest"):
            raise InvalidOffsets(found=f"startingOffsets {starting!r}",
                                 expected="the handover's per-partition offsets for the standby")
        self._check_target(allow_existing_checkpoint=False)
        return starting


class HandoverVerifyOperator(JournaledStep, BaseOperator):
    """Prove the new query started exactly at the handover and keeps committing batches.

    ``handover``: a Handover JSON or the handover operator's XCom (dict or JSON, templated);
    ``starting_offsets``: the JSON given to the job (default: the XCom's ``starting_offsets``,
    else the handover's offsets). Reads the new checkpoint's ``sources/<i>/0`` and compares
    (see :mod:`airflow_ckpt_provider.checkpoint.verify`); with ``kafka_conn_id`` partitions
    started at earliest are checked against the broker. Then, unless ``progress_window_s`` is
    0, defers until a batch newer than the current last commit is committed (new records must
    arrive in that window) — or, with ``kafka_conn_id``, until the query is seen caught up with the
    broker's log end on an idle topic (the result's ``caught_up`` says so; no batch needed).
    Raises :class:`StartMismatch` naming partitions and offsets, :class:`NotStartedYet`, or
    :class:`NoProgress`. Returns :meth:`VerifyResult.to_dict`.
    With ``journal`` a verification already done for this upgrade returns its result.

    With ``in_place=True`` the new version was restarted ON the old checkpoint (``checkpoint_uri``,
    an in-place upgrade): instead of ``sources/<i>/0`` the check is that it committed the batch
    after the handover's, that this batch started where the handover's ended and that the query
    id is the old one (:func:`~airflow_ckpt_provider.checkpoint.verify.verify_resume`).

    ``sink`` (a :class:`~airflow_ckpt_provider.sinks.SinkSpec`, mapping or JSON, as the
    preflight's): the sink is verified too, before the progress window — for a Delta sink every
    batch the new query committed must be in the table's log under the new version's appId,
    else :class:`SinkNotDelivered` (a sink that skips or loses the new version's writes fails the
    upgrade, which rolls back before the archive). The result's ``sink`` says what was checked.
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("verify", "in_place_verify")

    template_fields: Sequence[str] = ("handover", "checkpoint_uri", "starting_offsets", "kafka_conn_id",
                                      "storage_conn_id", "sink", *JOURNAL_FIELDS)
    ui_color = "#e8fde9"

    def __init__(
        self,
        *,
        handover: HandoverResult | str | Mapping[str, Any] | FromRecord,
        checkpoint_uri: str,
        starting_offsets: str | None = None,
        kafka_conn_id: str | None = None,
        progress_window_s: float = 60.0,
        poll_interval: float = 2.0,
        source: int | str | None = None,
        storage_conn_id: str | None = None,
        in_place: bool = False,
        sink: SinkSpec | Mapping[str, Any] | str | None = None,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        journal_phase: str = UPGRADE_PHASE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.init_journal(journal, journal_conn_id, journal_phase)
        self.in_place = bool(in_place)
        self.sink = sink.to_json() if isinstance(sink, SinkSpec) else sink
        if progress_window_s < 0:
            raise ValueError("progress_window_s must be >= 0")
        # a FromRecord is read when the step runs (given() cannot name a union of several types)
        self.handover = cast("HandoverResult | str | Mapping[str, Any]", handover)
        self.checkpoint_uri = checkpoint_uri
        self.starting_offsets = starting_offsets
        self.kafka_conn_id = kafka_conn_id
        self.progress_window_s = float(progress_window_s)
        self.poll_interval = float(poll_interval)
        self.source = source
        self.storage_conn_id = storage_conn_id

    def verify(self) -> VerifyResult:
        """The start check alone (no waiting)."""
        given = HandoverResult.from_json(self.handover)
        fs, _ = CheckpointStorageHook(storage_conn_id=self.storage_conn_id).filesystem(self.checkpoint_uri)
        if self.in_place:
            resumed = verify_resume(CheckpointReader(self.checkpoint_uri, fs=fs), given.handover, source=self.source)
            for part in resumed.partitions:
                self.log.info("%s", part.describe())
            self.log.info("the restarted version resumed on %s: batch %s started where the handover's batch %s "
                          "ended", self.checkpoint_uri, (given.handover.batch_id or 0) + 1, given.handover.batch_id)
            return resumed
        accepted = given.accepted_loss
        text = _offsets_text(self.starting_offsets) if self.starting_offsets else None
        if text in ("earliest", "latest"):
            raise InvalidOffsets(found=f"startingOffsets {text!r}", expected="per-partition offsets JSON to verify")
        starting = KafkaOffsets.from_json(text) if text else given.offsets(self.source)
        snapshot = CheckpointReader(self.checkpoint_uri, fs=fs).snapshot(include_initial=True)
        broker = None
        if self.kafka_conn_id:
            from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook

            broker = KafkaBrokerHook(kafka_conn_id=self.kafka_conn_id).broker_view(starting.topics)
        result = verify_start(snapshot, starting, handover=given.expected_start(self.source), broker=broker,
                              accepted_loss=accepted, source=self.source)
        for part in result.partitions:
            self.log.info("%s", part.describe())
        return result

    def execute(self, context: Context) -> dict[str, Any] | None:
        return self.run_step(context, lambda start, journal: self.check_start(context))

    def verify_sink(self, result: VerifyResult) -> SinkDelivery:
        """The sink check alone: the sink holds the batches the new query committed (see the class
        docstring); not checked for an in-place restart (same query, same sink record)."""
        spec = SinkSpec.from_value(self.sink)
        if self.in_place or not spec.declared:
            return SinkDelivery(spec, app_id=None, note="in place: same query" if self.in_place else "no sink declared")
        given = HandoverResult.from_json(self.handover).handover
        storage = CheckpointStorageHook(storage_conn_id=self.storage_conn_id)
        fs, root = storage.filesystem(self.checkpoint_uri)
        sink_fs, sink_path = storage.filesystem(spec.location) if spec.kind.is_delta else (None, spec.location)
        delivery = verify_sink(sink_fs, sink_path, spec, new_query_id=result.query_id,
                               committed=committed_batches(fs, root), old_query_id=given.query_id,
                               handover_batch=given.batch_id, uri=spec.location)
        if delivery.checked:
            self.log.info("the sink %s holds the new query's batch(es) %s (appId %s; table versions %s)",
                          spec.location, ", ".join(map(str, delivery.batches)), delivery.app_id,
                          ", ".join(map(str, delivery.batches.values())))
        else:
            self.log.warning("sink %s: %s", spec.describe(), delivery.note)
        return delivery

    def check_start(self, context: Context) -> dict[str, Any]:
        """Verify the start and the sink, then defer for the progress window (or return at once
        without one)."""
        result = self.verify()
        if not self.in_place:
            self.log.info("the new query started exactly at the handover (%d partitions)", len(result.partitions))
        value = {**result.to_dict(), "sink": self.verify_sink(result).to_dict()}
        if self.progress_window_s == 0:
            return value
        after = result.last_committed_batch if result.last_committed_batch is not None else -1
        context["ti"].xcom_push(key="start_verified", value=value)
        return self.defer_unless_over(
            LaunchTrigger(checkpoint_uri=self.checkpoint_uri, deadline=time.time() + self.progress_window_s,
                          min_batch=after + 1, poll_interval=self.poll_interval,
                          storage_conn_id=self.storage_conn_id, kafka_conn_id=self.kafka_conn_id or None),
            finish=lambda event: self.progress(context, event, value, after),
            poll_interval=min(self.poll_interval, 1.0), kwargs={"result": value, "after": after},
            timeout=timedelta(seconds=self.progress_window_s + DEFER_GRACE_S),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None,
                         result: dict[str, Any] | None = None, after: int | None = None) -> dict[str, Any]:
        return self.complete_step(lambda: self.progress(context, event, result, after))

    def progress(self, context: Context, event: dict[str, Any] | None, result: dict[str, Any] | None,
                 after: int | None) -> dict[str, Any]:
        """The verified start plus the batches committed during the progress window."""
        fired = LaunchTriggerEvent.from_json(event)
        if result is None:  # the kwargs do not always come back (dag.test passes only the event)
            result = context["ti"].xcom_pull(task_ids=self.task_id, key="start_verified")
        if not isinstance(result, Mapping):
            raise ValueError("the verified start is missing (XCom start_verified); run the task again")
        if after is None:
            last = result.get("last_committed_batch")
            after = last if isinstance(last, int) else -1
        if fired.reason is LaunchEvent.CAUGHT_UP:
            self.log.info("no batch after %s, and none to run: the new query has read everything the broker has "
                          "(idle topic): %s", after, fired.evidence)
            return {**result, "progress_batches": [], "caught_up": fired.evidence}
        if fired.reason is not LaunchEvent.COMMITTED:
            raise NoProgress(found=f"no batch after {after} committed in {self.progress_window_s:.0f} s "
                             f"(job state {fired.state.value})",
                             expected="the new query to keep committing batches", path=self.checkpoint_uri)
        fs, root = CheckpointStorageHook(storage_conn_id=self.storage_conn_id).filesystem(self.checkpoint_uri)
        batches = [b for b in committed_batches(fs, root) if b > after]
        self.log.info("the new query committed batch(es) %s during the progress window", batches)
        return {**result, "last_committed_batch": fired.batch, "progress_batches": batches}


def _handle_from_driver(checkpoint_uri: str, driver: DriverRecord, master: str) -> LaunchHandle:
    """The handle of a local launch known by its supervisor's record (its launch id, process
    group and scope): the launching attempt died before it recorded the handle."""
    return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=checkpoint_uri, app_name=f"launch {driver.launch_id[:8]}",
                        started_at=driver.started_at, pid=driver.pid, master=master or None,
                        launch_id=driver.launch_id, host=driver.host, boot_id=driver.boot_id,
                        pid_namespace=driver.pid_namespace, extra={"adopted_from": "driver record"})


def _handle_from_heartbeat(checkpoint_uri: str, beat: Heartbeat, master: str) -> LaunchHandle | None:
    """A local handle for a job known only by its heartbeat: its process group, when the driver
    runs in this process's scope; None otherwise (a pid seen from elsewhere names nothing here)."""
    if not beat.scope.same_as(ProcessScope.current()) or beat.pid < 2:
        return None
    try:
        pgid = os.getpgid(beat.pid)
    except ProcessLookupError:
        return None
    if pgid < 2:
        return None
    return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=checkpoint_uri, app_name=f"query {beat.query_id}",
                        started_at=beat.started_at, pid=pgid, master=master or None, host=beat.host,
                        boot_id=beat.boot_id, pid_namespace=beat.pid_namespace,
                        extra={"adopted_from": "heartbeat"})
