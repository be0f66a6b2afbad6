"""Reference DAG: move a Spark Structured Streaming job reading Kafka to a new checkpoint and a new
version, with nothing lost and nothing duplicated, and prove it.

Standby (``relaunch_mode="standby"``, the default: ``stream_upgrade``): preflight -> compatibility
check (the new version tried on copies of the old checkpoint, in place and migrated with the state
``carry_state`` carries; a new version that does not start is refused here, before anything stops:
the upgrade ends ``refused``, its journal closed and the stream's lock released;
``check_compatibility`` param) -> approval (HITL, can be switched off) -> start the new version as
a standby (its session is ready, its query waits) -> graceful stop of the old version -> handover
-> state export -> release the standby at the handover (relaunch) -> verify -> archive of the old
checkpoint. The stream is down only from the stop to the standby's first batch. Both drivers run
at once for the standby window.

Cold (``relaunch_mode="cold"``: ``stream_upgrade_cold``, for clusters without room for a second
driver): preflight -> compatibility check -> approval -> graceful stop -> handover -> state export
-> archive -> relaunch -> verify.

Switchover (``relaunch_mode="switchover"``: ``stream_upgrade_switchover``):
preflight -> compatibility check -> approval -> start the new version as a standby -> switchover
(one step: it releases the standby for a switchover and asks the old query to stop; the standby,
inside the new version's driver, reads the old checkpoint's last committed batch the moment the
old query acknowledges — and, for a stateful query with ``carry_state``, its state at that batch
with Spark's state reader in its own warm session, seeded to the job as
``spark.ckpt.initialStatePath`` — and starts its query, with no Airflow task in between; the step
then re-derives the handover and compares) -> export_state (after the switch: the verified export
for the archive, which must equal the seed store by store, rows and checksum) -> verify -> archive.
The downtime does not depend on the scheduler; the report splits it into the old query's stop, the
standby's notice, its handover read, the state wait, the query start and the first batch. The
preflight refuses it (nothing changed) for a start ``at_time`` and partitions added since the old
query's last commit: use ``stream_upgrade``. A failed switchover rolls back as a failed stop or release
does: the standby is stopped, and the old version is restarted only when it had acknowledged the
stop (the step notes which; an unacknowledged request is withdrawn, the old version goes on).

State (``carry_state``, default on): for a stateful old query, ``export_state`` writes its state
as of the handover batch (Spark's state reader, Parquet and a verified ``state-manifest.json``,
under ``<archive_root>/<stream>/_state/<upgrade id>``) and the new version gets that location as
``spark.ckpt.initialStatePath`` (see docs "Starting from the old query's state"). For a stateless
query the step exports nothing and says so. The old checkpoint is only read: a rollback is as
without it.

In place (``mode="auto"``): when the compatibility check proved the new version runs on a copy
of the old checkpoint (in place OK) and it resumes where the old one stops, ``choose_path`` picks
a plain restart instead of the migration: after the approval, graceful stop -> handover (the
last committed batch N, for the checks and the report) -> verified archive of the old checkpoint
(never removed: the new version goes on writing it) -> the new version restarted ON the old
checkpoint -> verify (it committed batch N+1, which started where N ended, as the same query).
No new checkpoint, no offsets handed over, no state export: Spark resumes the query. If a step
after the stop fails, the new version is stopped and the old version restarted on the same
checkpoint, where it resumes after the last batch either committed: nothing is processed twice.
``mode="new_checkpoint"`` (the default) always migrates; the path step says why it chose.

Rollback: when a step after a completed stop fails, stop the new version, work out from its
checkpoint what it processed (``rollback_handover``: the offsets the old version will process a
second time, per partition, in the report), then restart the old version: with
``rollback_mode="restore"`` (default) restore the old checkpoint if it was removed and restart
the old version on it; with ``"forward"`` (stateless queries, checked in the preflight) restart
it on the fresh checkpoint ``rollback_checkpoint`` (default ``<new_checkpoint>.rollback``) from
the new version's handover, so nothing is processed twice. Never after a failure before or
during the stop, when the old version may still run — then only a standby is stopped, and the
old version is left as it is. Always: the upgrade report, which fails the run unless the outcome
is "upgraded" or "rejected".

Every step records itself in the upgrade journal next to the archives (the preflight opens it
and takes the stream's lock): a retried task or a re-triggered run with the same params resumes
the upgrade instead of repeating a side effect — no second archive, no second launch, and no
stop of the new job — and approval is not asked again once the stop has begun. A run of an
upgrade that was rolled back is refused by the preflight (set the ``upgrade_id`` param to a new
value); one of an upgrade already finished skips every step and reports "already done", naming
the first run's report, which is never replaced. After the approval a step takes what it needs of
earlier steps (the handover, the state export, the archive, launch handles) from the journal's
record (``FromRecord``), never from their XComs: XCom carries only the journal's location. See
docs "Reliability" and "Inputs from the upgrade record".

Three DAGs come from :func:`build_stream_upgrade_dag`: ``stream_upgrade`` (standby) and
``stream_upgrade_cold`` for manual runs (trigger form), and ``stream_upgrade_on_artifact``
(standby, no approval), scheduled on the Asset of the new application artifact.
Copy this file and change the defaults to upgrade your own streams; the operators can also be
used one by one (see the docs' XCom contract).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypedDict, cast

from airflow.sdk import DAG, Asset, BaseOperator, Param, XComArg, chain, task
from airflow.sdk.definitions.xcom_arg import PlainXComArg

from airflow_ckpt_provider.checkpoint.launch import RelaunchMode
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.checkpoint.path import UpgradeMode
from airflow_ckpt_provider.checkpoint.spark_settings import SparkSettings
from airflow_ckpt_provider.operators.approval import UpgradeApprovalOperator
from airflow_ckpt_provider.operators.archive import CheckpointArchiveOperator, CheckpointRestoreOperator
from airflow_ckpt_provider.operators.compat import CompatibilityCheckOperator, UpgradePathOperator
from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator, RollbackHandoverOperator
from airflow_ckpt_provider.operators.launch import (
    HandoverVerifyOperator,
    StandbyReleaseOperator,
    StreamLaunchOperator,
)
from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator
from airflow_ckpt_provider.operators.report import UpgradeReportOperator
from airflow_ckpt_provider.operators.state import StateExportOperator
from airflow_ckpt_provider.operators.stop import GracefulStopOperator
from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator
from airflow_ckpt_provider.upgrade.inputs import FromRecord, RecordInput
from airflow_ckpt_provider.upgrade.steps import IN_PLACE_ROLLBACK, PATHS, ROLLBACK, SWITCHOVER, Path

PARAMS: dict[str, Param] = {
    "stream_name": Param("demo-events", type="string", description="folder name of the stream's archives"),
    "old_checkpoint": Param("", type="string", description="checkpoint of the running (old) version"),
    "new_checkpoint": Param("", type="string", description="new, empty checkpoint location"),
    "archive_root": Param("", type="string", description="archives go to <root>/<stream_name>/"),
    "kafka_conn_id": Param("kafka_default", type="string"),
    "storage_conn_id": Param("", type="string",
                             description="Airflow connection for the checkpoints, the archive and the journal "
                                         "(s3://: an aws connection; hdfs://: the NameNode's WebHDFS host and "
                                         "port); empty: the locations' own schemes with ambient credentials"),
    "spark_master": Param("local[2]", type="string", description="spark-submit --master"),
    "spark_deploy_mode": Param("client", enum=["client", "cluster"]),
    "spark_conf": Param({}, type="object", description="extra --conf for both versions"),
    # a major Spark upgrade: each version on its own Spark (keys: spark_home, spark_submit, conn_id,
    # conf, jars; see docs "Upgrading Spark"); {} runs it with the shared settings above
    "old_spark": Param({}, type="object", description="Spark of the old version (also its rollback restart)"),
    "new_spark": Param({}, type="object", description="Spark of the new version"),
    "old_application": Param("", type="string", description="the old version, for a rollback"),
    "old_application_args": Param([], type="array"),
    "new_application": Param("", type="string", description="the new version"),
    "new_application_args": Param([], type="array"),
    "new_sink_path": Param("", type="string", description="file sink output path of the new version, if any"),
    "sink": Param({}, type="object",
                  description="the job's sink, read to decide what it holds (docs \"Sinks\"): {\"kind\": delta | "
                              "delta_foreach_batch | file | kafka | foreach_batch, \"location\": table or path, "
                              "\"txn_app_id\": a constant Delta txnAppId}; {}: not declared (at-least-once)"),
    "old_launch_handle": Param("", type="string", description="LaunchHandle JSON of the old job (for a kill)"),
    "require_approval": Param(True, type="boolean", description="ask a person before stopping anything"),
    "check_compatibility": Param(True, type="boolean",
                                 description="before the approval, try the new version on copies of the old "
                                             "checkpoint (in place and migrated): the verdict goes in the approval "
                                             "and the report; a new version that does not start is refused"),
    "handover_mode": Param("resume", enum=["resume", "rewind_to_batch", "at_time", "offsets"],
                           description="where the new version starts: where the old one stops (resume), the start "
                                       "of a committed batch, the first record at a time, or explicit offsets"),
    "handover_value": Param("", type="string",
                            description="rewind_to_batch: the batch id; at_time: an ISO 8601 time with its zone; "
                                        "offsets: a startingOffsets JSON naming every partition"),
    "accept_reprocessing": Param(False, type="boolean",
                                 description="needed for any mode but resume: records are processed a second time"),
    "accept_data_loss": Param(False, type="boolean",
                              description="start where records are skipped (a later start, or offsets Kafka no "
                                          "longer retains start at the earliest retained)"),
    "mode": Param(UpgradeMode.NEW_CHECKPOINT.value, enum=[m.value for m in UpgradeMode],
                  description="new_checkpoint: always the migration to the new checkpoint; auto: a plain restart "
                              "on the old checkpoint when the compatibility check says in place OK"),
    "carry_state": Param(True, type="boolean",
                         description="export a stateful old query's state at the handover for the new version "
                                     "(spark.ckpt.initialStatePath); off: the new version starts with empty state"),
    "rollback_mode": Param(RollbackMode.RESTORE.value, enum=[m.value for m in RollbackMode],
                           description="restore: a rollback restarts the old version on its old checkpoint (it "
                                       "processes again what the new version processed); forward (stateless "
                                       "queries only): on a fresh checkpoint from the new version's handover"),
    "rollback_checkpoint": Param("", type="string",
                                 description="forward rollback: fresh checkpoint; empty: <new_checkpoint>.rollback"),
    "upgrade_id": Param("", type="string",
                        description="names the upgrade's journal and archive; empty: derived from the stream, "
                                    "both checkpoints and the new application, so a re-triggered run resumes it"),
}

#: The steps of an in-place upgrade (``mode="auto"`` and in place OK), in the order they run.
IN_PLACE = list(PATHS[Path.IN_PLACE].steps)
#: A deferral whose trigger fires within a second or two can race Airflow's LocalExecutor: the event
#: of the deferring attempt arrives while the resumed one runs, and the scheduler marks the task
#: failed ("state changed externally"). Each deferring step (stop, relaunch, verify) therefore waits
#: ``wait_in_task_s`` (10 s) in its worker first, and only a longer wait defers. One retry stays for
#: what is left of the race; the journal makes it safe: it returns the recorded result, finds the
#: query stopped, or finds the job it released (or launched), never a second one.
STOP_RETRY: dict[str, Any] = {"retries": 1, "retry_delay": timedelta(seconds=5)}


class StartArgs(TypedDict):
    """The arguments of preflight and handover that say where the new version starts."""

    start: str
    accept_reprocessing: str
    accept_data_loss: str


#: Where the new version starts (a StartChoice as JSON) and the consent it needs, for preflight and handover.
START = StartArgs(start="{{ {'mode': params.handover_mode, 'value': params.handover_value} | tojson }}",
                  accept_reprocessing="{{ params.accept_reprocessing }}",
                  accept_data_loss="{{ params.accept_data_loss }}")
#: The upgrade journal's URI (preflight opens it; every step records itself in it and reads its inputs from
#: it: ``FromRecord``). The one value a step takes from another step's XCom.
JOURNAL = "{{ (ti.xcom_pull(task_ids='preflight') or {}).get('journal', '') }}"
#: The storage connection of every step (checkpoints, archive, journal): '' for none.
STORAGE_CONN = "{{ params.storage_conn_id }}"
#: What every journaled step takes: the journal, and the connection of the storage it and the step use.
#: Every step of an upgrade skips itself without its journal (the preflight that opens it failed).
JOURNALED: dict[str, Any] = {"journal": JOURNAL, "journal_conn_id": STORAGE_CONN, "storage_conn_id": STORAGE_CONN,
                             "require_journal": True}
#: A rollback step: recorded in the journal's rollback phase, and run (to decide) once its path ended.
ROLLING_BACK: dict[str, Any] = {"journal_phase": "rollback", "trigger_rule": "all_done"}
#: The Kafka connection: every launch and verification accepts an idle topic's caught-up query with it.
KAFKA_CONN = "{{ params.kafka_conn_id }}"
#: The job's sink declaration (a SinkSpec as JSON), for the preflight and the verification.
SINK = "{{ params.sink | tojson }}"


def state_spark(planned: XComArg) -> dict[str, Any]:
    """The Spark that will export the old query's state (the new version's), for the preflight's check."""
    return {"state_spark_home": output_key(planned, "new_spark_home"),
            "state_spark_binary": output_key(planned, "new_spark_submit")}


def output_key(result: XComArg, key: str) -> XComArg:
    """One key of a ``multiple_outputs`` task's result (a ``@task`` returns the base XComArg type)."""
    if not isinstance(result, PlainXComArg):
        raise TypeError(f"expected the result of one task, found {type(result).__name__}")
    return result[key]


def build_stream_upgrade_dag(
    dag_id: str,
    *,
    schedule: Any = None,
    defaults: dict[str, Any] | None = None,
    stop_timeout: float = 300.0,
    quiet_period: float = 5.0,
    acknowledged_quiet_period: float = 1.0,
    poll_interval: float = 0.5,
    first_commit_timeout: float = 600.0,
    remove_old_checkpoint: bool = False,
    progress_window_s: float = 20.0,
    relaunch_mode: RelaunchMode | str = RelaunchMode.STANDBY,
    standby_timeout: float = 3600.0,
    **dag_kwargs: Any,
) -> DAG:
    """The upgrade DAG. ``defaults`` override the params' defaults (scheduled and asset-triggered
    runs use them); the keyword arguments fix what a trigger form should not change: how long a
    stop may take before it escalates to a kill, how long the stopped checkpoint must stay quiet
    (after a clean acknowledgement: ``acknowledged_quiet_period``),
    how often the triggers look at the checkpoints, how long the new version may take to commit
    its first batch (or, as a standby, to be ready), whether the old checkpoint is deleted after
    its verified archive, how long the new query must keep committing during verification, how
    the new version starts (``relaunch_mode``: standby, cold or switchover, see the module doc) and how long
    a standby waits for its release before it exits by itself."""
    mode = RelaunchMode(relaunch_mode)
    path_steps = PATHS[Path(mode.value)]
    params = {name: Param(defaults[name], **{k: v for k, v in p.schema.items() if k != "default"})
              if defaults and name in defaults else p for name, p in PARAMS.items()}
    with DAG(dag_id=dag_id, schedule=schedule, params=params, catchup=False, max_active_runs=1,
             default_args={"retries": 0}, tags=["checkpoint", "upgrade"],
             doc_md=__doc__, **dag_kwargs) as dag:

        @task(multiple_outputs=True)
        def plan(params: dict[str, Any] | None = None) -> dict[str, Any]:
            """Validate the params and fix what both versions are launched with."""
            assert params is not None
            unknown = sorted(set(params) - set(PARAMS))
            if unknown:  # a misspelt key of a trigger's conf would be ignored silently
                raise ValueError(f"unknown param(s) {', '.join(unknown)}: this DAG's params are "
                                 f"{', '.join(PARAMS)}; fix the trigger's conf")
            for name in ("old_checkpoint", "new_checkpoint", "archive_root", "old_application", "new_application"):
                if not params[name]:
                    raise ValueError(f"param {name} is empty: set it in the trigger form or the defaults")
            conf = {str(k): str(v) for k, v in (params["spark_conf"] or {}).items()}
            planned = {
                "spark_conf": conf,
                "old_application_args": [str(a) for a in params["old_application_args"]],
                "new_application_args": [str(a) for a in params["new_application_args"]],
            }
            for version in ("old", "new"):  # each version's Spark: its own home, connection, conf
                spark = SparkSettings.from_json(params[f"{version}_spark"], name=f"param {version}_spark")
                planned.update({
                    f"{version}_spark_conf": spark.merged_conf(conf),
                    f"{version}_master": spark.master(params["spark_master"]),
                    f"{version}_deploy_mode": "" if spark.conn_id else params["spark_deploy_mode"],
                    f"{version}_conn_id": spark.conn_id, f"{version}_spark_home": spark.spark_home,
                    f"{version}_spark_submit": spark.spark_submit,
                })
            return planned

        planned = plan()
        preflight = UpgradePreflightOperator(
            task_id="preflight", stream_name="{{ params.stream_name }}",
            old_checkpoint_uri="{{ params.old_checkpoint }}", new_checkpoint_uri="{{ params.new_checkpoint }}",
            archive_root="{{ params.archive_root }}", new_sink_path="{{ params.new_sink_path or '' }}",
            kafka_conn_id="{{ params.kafka_conn_id }}", upgrade_id="{{ params.upgrade_id or '' }}",
            old_application="{{ params.old_application }}", new_application="{{ params.new_application }}",
            old_launch_handle="{{ params.old_launch_handle }}", relaunch_mode=mode.value,
            rollback_mode="{{ params.rollback_mode }}", rollback_checkpoint_uri="{{ params.rollback_checkpoint }}",
            carry_state="{{ params.carry_state }}", storage_conn_id=STORAGE_CONN, archive_conn_id=STORAGE_CONN,
            sink=SINK, **state_spark(planned), **START,
        )

        approve = UpgradeApprovalOperator(
            task_id="approve",
            subject="Upgrade stream {{ params.stream_name }} to a new checkpoint?",
            # no body: the approver reads what preflight, compatibility_check and choose_path
            # recorded for the approver in the journal
            response_timeout=timedelta(hours=12), defaults=["Reject"],  # no answer: no upgrade
            require_approval="{{ params.require_approval }}", journal=JOURNAL, journal_conn_id=STORAGE_CONN,
        )

        def args_of(version: str) -> list[str]:
            """The ``version`` ("old", "new") application's arguments, fixed by ``plan`` (a list of strings
            once rendered)."""
            return cast("list[str]", output_key(planned, f"{version}_application_args"))

        def spark_of(version: str) -> dict[str, Any]:
            """The launch arguments of the ``version`` ("old", "new") Spark, fixed by ``plan``."""
            keys = {"conf": "spark_conf", "master": "master", "deploy_mode": "deploy_mode", "spark_conn_id": "conn_id",
                    "spark_home": "spark_home", "spark_binary": "spark_submit"}
            return {arg: output_key(planned, f"{version}_{key}") for arg, key in keys.items()}

        # before the approval: the new version tried on copies; "does not start" fails here, before any stop
        compatibility_check = CompatibilityCheckOperator(
            task_id="compatibility_check", old_checkpoint_uri="{{ params.old_checkpoint }}",
            new_application="{{ params.new_application }}", application_args=args_of("new"),
            live_locations={"new checkpoint": "{{ params.new_checkpoint }}", "new sink": "{{ params.new_sink_path }}",
                            "archive root": "{{ params.archive_root }}"},
            carry_state="{{ params.carry_state }}", enabled="{{ params.check_compatibility }}",
            storage_conn_id=STORAGE_CONN, journal=JOURNAL, journal_conn_id=STORAGE_CONN, **spark_of("new"),
        )
        # in place or a new checkpoint: decided before the approval (which shows it); a resumed upgrade
        # goes on along the path its journal records
        choose_path = UpgradePathOperator(
            task_id="choose_path", mode="{{ params.mode }}", verdict=FromRecord(RecordInput.COMPATIBILITY_VERDICT),
            start=START["start"], in_place_steps=IN_PLACE, journal=JOURNAL, journal_conn_id=STORAGE_CONN,
        )

        start_standby = StreamLaunchOperator(
            task_id="start_standby", step="start_standby", application="{{ params.new_application }}",
            application_args=args_of("new"), **spark_of("new"),
            checkpoint_uri="{{ params.new_checkpoint }}", old_checkpoint_uri="{{ params.old_checkpoint }}",
            sink_path="{{ params.new_sink_path or '' }}", standby=True, standby_timeout=standby_timeout,
            first_commit_timeout=first_commit_timeout, poll_interval=poll_interval, **JOURNALED,
        ) if mode in (RelaunchMode.STANDBY, RelaunchMode.SWITCHOVER) else None
        switchover = mode is RelaunchMode.SWITCHOVER
        graceful_stop = None if switchover else GracefulStopOperator(
            task_id="graceful_stop", checkpoint_uri="{{ params.old_checkpoint }}",
            launch_handle="{{ params.old_launch_handle }}", stop_timeout=stop_timeout,
            quiet_period=quiet_period, acknowledged_quiet_period=acknowledged_quiet_period, poll_interval=poll_interval,
            fail_if_no_heartbeat=True,  # never start v2 beside an idle v1 that cannot be seen
            **JOURNALED, **STOP_RETRY,
        )
        extract = None if switchover else CheckpointHandoverOperator(
            task_id="extract_handover", checkpoint_uri="{{ params.old_checkpoint }}",
            kafka_conn_id="{{ params.kafka_conn_id }}", sink=SINK, **JOURNALED, **START,
        )
        # from here on a step takes the other steps' results from the upgrade record (FromRecord): the
        # handover step's result (HandoverResult) goes whole to the steps that need it
        export_state = StateExportOperator(
            task_id="export_state", checkpoint_uri="{{ params.old_checkpoint }}",
            export_uri=FromRecord(RecordInput.STATE_EXPORT_LOCATION), handover=FromRecord(RecordInput.HANDOVER),
            carry_state="{{ params.carry_state }}", upgrade_id=FromRecord(RecordInput.UPGRADE_ID),
            # after a switchover: the verified copy of the state the standby seeded, and its check
            seeded_state=FromRecord(RecordInput.SEEDED_STATE) if switchover else "",
            **spark_of("new"), **JOURNALED,
        )
        archive = CheckpointArchiveOperator(
            task_id="archive", checkpoint_uri="{{ params.old_checkpoint }}",
            archive_root="{{ params.archive_root }}", stream_name="{{ params.stream_name }}",
            handover=FromRecord(RecordInput.HANDOVER),
            reason="upgrade to {{ params.new_application }}", remove_source=remove_old_checkpoint,
            upgrade_id=FromRecord(RecordInput.UPGRADE_ID), archive_conn_id=STORAGE_CONN, **JOURNALED,
        )
        launch_args: dict[str, Any] = dict(
            task_id="relaunch", application="{{ params.new_application }}",
            application_args=args_of("new"), **spark_of("new"),
            checkpoint_uri="{{ params.new_checkpoint }}", old_checkpoint_uri="{{ params.old_checkpoint }}",
            handover=FromRecord(RecordInput.HANDOVER), initial_state=FromRecord(RecordInput.STATE_EXPORT),
            sink_path="{{ params.new_sink_path or '' }}",
            first_commit_timeout=first_commit_timeout, poll_interval=poll_interval, kafka_conn_id=KAFKA_CONN,
            **JOURNALED, **STOP_RETRY,
        )
        # standby: release the waiting standby at the handover (a cold launch if it is gone)
        relaunch = (None if switchover else StreamLaunchOperator(**launch_args) if start_standby is None
                    else StandbyReleaseOperator(standby_handle=FromRecord(RecordInput.STANDBY_HANDLE), **launch_args))
        # switchover: the standby takes over inside the drivers once the old query acknowledges its stop;
        # the step then re-derives the handover and compares (stop, handover and release in one step)
        switch = StandbySwitchoverOperator(
            task_id=SWITCHOVER, standby_handle=FromRecord(RecordInput.STANDBY_HANDLE),
            **{k: v for k, v in launch_args.items() if k not in ("task_id", "handover", "initial_state")},
            stop_timeout=stop_timeout, quiet_period=quiet_period, acknowledged_quiet_period=acknowledged_quiet_period,
            carry_state="{{ params.carry_state }}",  # the standby seeds the state in its own session
            accept_empty_state="{{ not params.carry_state }}",
            sink=SINK,  # the sink ledger, should the old query's stop cut a batch (the standby refuses then)
            **START,
        ) if switchover else None
        verify = HandoverVerifyOperator(
            task_id="verify", handover=FromRecord(RecordInput.HANDOVER), checkpoint_uri="{{ params.new_checkpoint }}",
            kafka_conn_id="{{ params.kafka_conn_id }}", sink=SINK, progress_window_s=progress_window_s,
            poll_interval=poll_interval, **JOURNALED, **STOP_RETRY,
        )

        # the new version's launch handle: relaunch's, else the standby's, as each recorded it right after
        # launching (also when it then failed while waiting for the job); '' when neither launched
        rollback_stop_new = GracefulStopOperator(
            task_id="rollback_stop_new", step="rollback_stop_new", checkpoint_uri="{{ params.new_checkpoint }}",
            launch_handle=FromRecord(RecordInput.NEW_HANDLE),
            stop_timeout=60, quiet_period=quiet_period, poll_interval=poll_interval,
            **JOURNALED, **ROLLING_BACK, **STOP_RETRY,
        )
        # what the stopped new version processed: where the old version restarts, what it reads twice
        rollback_handover = RollbackHandoverOperator(
            task_id="rollback_handover", checkpoint_uri="{{ params.new_checkpoint }}",
            old_checkpoint_uri="{{ params.old_checkpoint }}", handover=FromRecord(RecordInput.HANDOVER),
            rollback_mode="{{ params.rollback_mode }}",
            rollback_checkpoint_uri=FromRecord(RecordInput.ROLLBACK_CHECKPOINT),
            **JOURNALED, **ROLLING_BACK,
        )
        rollback_restore = CheckpointRestoreOperator(
            task_id="rollback_restore", target_uri="{{ params.old_checkpoint }}", skip_if_target_exists=True,
            archive_uri=FromRecord(RecordInput.ARCHIVE_LOCATION),
            archive_conn_id=STORAGE_CONN, **JOURNALED, **ROLLING_BACK,
        )
        rollback_restart_old = StreamLaunchOperator(
            task_id="rollback_restart_old", step="rollback_restart_old", application="{{ params.old_application }}",
            application_args=args_of("old"), **spark_of("old"),
            checkpoint_uri="{{ params.old_checkpoint }}", allow_existing_checkpoint=True,
            first_commit_timeout=first_commit_timeout, poll_interval=poll_interval, kafka_conn_id=KAFKA_CONN,
            **JOURNALED, **ROLLING_BACK,
        )
        rollback_restart_forward = StreamLaunchOperator(
            task_id="rollback_restart_forward", step="rollback_restart_forward",
            application="{{ params.old_application }}",
            application_args=args_of("old"), **spark_of("old"),
            checkpoint_uri=FromRecord(RecordInput.ROLLBACK_CHECKPOINT),
            old_checkpoint_uri="{{ params.old_checkpoint }}",
            starting_offsets=FromRecord(RecordInput.ROLLBACK_STARTING_OFFSETS),
            first_commit_timeout=first_commit_timeout, poll_interval=poll_interval, kafka_conn_id=KAFKA_CONN,
            **JOURNALED, **ROLLING_BACK,
        )
        report = UpgradeReportOperator(
            task_id="report", stream_name="{{ params.stream_name }}",
            old_checkpoint_uri="{{ params.old_checkpoint }}", new_checkpoint_uri="{{ params.new_checkpoint }}",
            path=path_steps, in_place=PATHS[Path.IN_PLACE], trigger_rule="all_done", archive_conn_id=STORAGE_CONN,
            journal=JOURNAL, journal_conn_id=STORAGE_CONN, storage_conn_id=STORAGE_CONN,
        )

        # the in-place path: stop, handover (batch N), verified archive, the new version ON the old
        # checkpoint, verify it resumed after N; its rollback restarts the old version on the same checkpoint
        in_place_stop = GracefulStopOperator(
            task_id="in_place_stop", step="in_place_stop", checkpoint_uri="{{ params.old_checkpoint }}",
            launch_handle="{{ params.old_launch_handle }}", stop_timeout=stop_timeout,
            quiet_period=quiet_period, acknowledged_quiet_period=acknowledged_quiet_period, poll_interval=poll_interval,
            fail_if_no_heartbeat=True, **JOURNALED, **STOP_RETRY,
        )
        in_place_handover = CheckpointHandoverOperator(
            task_id="in_place_handover", step="in_place_handover", checkpoint_uri="{{ params.old_checkpoint }}",
            kafka_conn_id="{{ params.kafka_conn_id }}", **JOURNALED,
        )
        in_place_archive = CheckpointArchiveOperator(
            task_id="in_place_archive", step="in_place_archive", checkpoint_uri="{{ params.old_checkpoint }}",
            archive_root="{{ params.archive_root }}", stream_name="{{ params.stream_name }}",
            handover=FromRecord(RecordInput.IN_PLACE_HANDOVER),
            reason="in-place restart as {{ params.new_application }}", remove_source=False,
            upgrade_id=FromRecord(RecordInput.UPGRADE_ID), archive_conn_id=STORAGE_CONN, **JOURNALED,
        )
        in_place_restart = StreamLaunchOperator(
            task_id="in_place_restart", step="in_place_restart", application="{{ params.new_application }}",
            application_args=args_of("new"), **spark_of("new"),
            checkpoint_uri="{{ params.old_checkpoint }}", allow_existing_checkpoint=True,
            sink_path="{{ params.new_sink_path or '' }}", kafka_conn_id=KAFKA_CONN,
            first_commit_timeout=first_commit_timeout, poll_interval=poll_interval, **JOURNALED, **STOP_RETRY,
        )
        in_place_verify = HandoverVerifyOperator(
            task_id="in_place_verify", step="in_place_verify", handover=FromRecord(RecordInput.IN_PLACE_HANDOVER),
            checkpoint_uri="{{ params.old_checkpoint }}", in_place=True, kafka_conn_id=KAFKA_CONN,
            progress_window_s=progress_window_s, poll_interval=poll_interval,
            **JOURNALED, **STOP_RETRY,
        )

        in_place_rollback_stop = GracefulStopOperator(
            task_id="in_place_rollback_stop", step="in_place_rollback_stop",
            checkpoint_uri="{{ params.old_checkpoint }}",
            launch_handle=FromRecord(RecordInput.IN_PLACE_HANDLE),
            stop_timeout=60, quiet_period=quiet_period, poll_interval=poll_interval,
            **JOURNALED, **ROLLING_BACK, **STOP_RETRY,
        )

        in_place_rollback_restart = StreamLaunchOperator(
            task_id="in_place_rollback_restart", step="in_place_rollback_restart",
            application="{{ params.old_application }}",
            application_args=args_of("old"), **spark_of("old"),
            checkpoint_uri="{{ params.old_checkpoint }}", allow_existing_checkpoint=True,
            first_commit_timeout=first_commit_timeout, poll_interval=poll_interval, kafka_conn_id=KAFKA_CONN,
            **JOURNALED, **ROLLING_BACK,
        )

        # the wiring comes from the step table (upgrade/steps.py): the path's steps in order after the
        # approval, the in-place steps beside them, each rollback after its path, the report last.
        # Every step decides for itself from the journal (upgrade.planner.next_action): one not
        # called for skips itself with the reason; an upgrade step keeps all_success (a failure or
        # a Reject ends its path at once), a rollback step runs once its path ended (all_done).
        steps: dict[str, BaseOperator] = {
            task.task_id: task for task in (
                graceful_stop, extract, export_state, archive, relaunch, verify, start_standby, switch,
                in_place_stop, in_place_handover, in_place_archive, in_place_restart, in_place_verify,
                rollback_stop_new, rollback_handover, rollback_restore, rollback_restart_old,
                rollback_restart_forward, in_place_rollback_stop, in_place_rollback_restart) if task is not None}
        chain(planned, preflight, compatibility_check, choose_path, approve)
        ends = []
        for path, rollback in ((path_steps, ROLLBACK), (PATHS[Path.IN_PLACE], IN_PLACE_ROLLBACK)):
            chain(approve, *[steps[name] for name in path.steps], *[steps[name] for name in rollback])
            ends.append(steps[rollback[-1]])
        chain(ends, report)
    return dag


manual = build_stream_upgrade_dag("stream_upgrade")
# The same upgrade without a standby: the new version starts only after the stop and the archive
# (one driver at a time; downtime includes the new version's JVM and session start).
cold = build_stream_upgrade_dag("stream_upgrade_cold", relaunch_mode=RelaunchMode.COLD)
# The standby takes over inside the drivers (seeding a stateful query's state in its own session):
# one switchover step instead of stop -> handover -> export -> release, so the downtime does not
# depend on the scheduler.
switchover = build_stream_upgrade_dag("stream_upgrade_switchover", relaunch_mode=RelaunchMode.SWITCHOVER)
# Scheduled on the new version's artifact: publishing it (an Asset event) starts the upgrade with
# the defaults below and no approval. Set the defaults for your stream before enabling it.
on_artifact = build_stream_upgrade_dag(
    "stream_upgrade_on_artifact",
    schedule=[Asset(name="demo_stream_v2_artifact", uri="file:///opt/streams/demo/stream_v2.py")],
    defaults={"require_approval": False},
)
