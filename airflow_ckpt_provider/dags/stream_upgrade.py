"""The reference upgrade DAG, generated from the step table
(:data:`~airflow_ckpt_provider.upgrade.table.TABLE`): one operator per row of the DAG's path
(:func:`~airflow_ckpt_provider.upgrade.table.rows`), built by the row's factory
(:mod:`airflow_ckpt_provider.dags.steps`), wired in the table's order. The repository's
``dags/stream_upgrade.py`` is this DAG's documentation and the calls of
:func:`build_stream_upgrade_dag` (with the params of :data:`PARAMS`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, NamedTuple

from airflow.sdk import DAG, Asset, BaseOperator, Param, chain, task

from airflow_ckpt_provider.checkpoint.launch import RelaunchMode
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.checkpoint.path import UpgradeMode
from airflow_ckpt_provider.checkpoint.spark_settings import SparkSettings
from airflow_ckpt_provider.dags.steps import PARAM_NAMES, Build, operator_of
from airflow_ckpt_provider.upgrade.steps import IN_PLACE_ROLLBACK, PATHS, PLANNING, ROLLBACK, Path
from airflow_ckpt_provider.upgrade.table import REPORT, rows

#: How long ``plan`` (the params' check) may take.
PLAN_TIMEOUT = timedelta(minutes=10)

#: The reference DAG's params: the trigger form, and every param the steps read
#: (:data:`~airflow_ckpt_provider.dags.steps.PARAM_NAMES`). A DAG of your own passes them (or a copy
#: with its own defaults: ``defaults=`` of :func:`build_stream_upgrade_dag`).
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
                              "\"txn_app_id\": a constant Delta txnAppId}; {}: not declared (refused unless "
                              "accept_undeclared_sink)"),
    "accept_undeclared_sink": Param(False, type="boolean",
                                    description="go ahead with the sink not declared: it may skip or duplicate a "
                                                "batch the stop cuts, and exactness is not proven"),
    "old_launch_handle": Param("", type="string", description="LaunchHandle JSON of the old job (for a kill)"),
    "old_job": Param({}, type="object",
                     description="the old job by what runs it, when the provider did not launch it (docs \"Bring your "
                                 "running stream\"): {\"kind\": yarn | standalone | kubernetes | process | external, "
                                 "...}, e.g. {\"kind\": \"yarn\", \"application_id\": \"application_...\", "
                                 "\"resource_manager\": \"http://rm:8088\"}; {}: the launch handle, or GracefulStop"),
    "accept_cut_batch": Param(False, type="boolean",
                              description="an old job without GracefulStop is killed, which may cut one batch: go "
                                          "ahead with an at-least-once sink (foreach_batch) whose cut batch may be "
                                          "processed twice (the approval and the report show its range)"),
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


def build_stream_upgrade_dag(
    dag_id: str,
    *,
    params: Mapping[str, Param] = PARAMS,
    schedule: Any = None,  # noqa: ANN401 - Airflow's schedule (None, a cron text, assets)
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
    """The upgrade DAG. ``params`` are the trigger form's (default :data:`PARAMS`; they must hold every
    param the steps read: :data:`~airflow_ckpt_provider.dags.steps.PARAM_NAMES`, else ``ValueError``); ``defaults``
    override their defaults (scheduled and asset-triggered runs use them); the keyword arguments fix
    what a trigger form should not change: how long a stop may take before it escalates to a kill,
    how long the stopped checkpoint must stay quiet (after a clean acknowledgement:
    ``acknowledged_quiet_period``), how often the triggers look at the checkpoints, how long the new
    version may take to commit its first batch (or, as a standby, to be ready), whether the old
    checkpoint is deleted after its verified archive, how long the new query must keep committing
    during verification, how the new version starts (``relaunch_mode``: standby, cold or switchover)
    and how long a standby waits for its release before it exits by itself. Each task's retries and
    ``execution_timeout`` come from its row (a wait set here is added to the timeouts that cover it)."""
    mode = RelaunchMode(relaunch_mode)
    missing = sorted(PARAM_NAMES - set(params))
    if missing:
        raise ValueError(f"the upgrade DAG {dag_id} needs the params {', '.join(missing)}: the steps read them")
    known = dict(params)
    chosen = {name: Param(defaults[name], **{k: v for k, v in p.schema.items() if k != "default"})
              if defaults and name in defaults else p for name, p in known.items()}
    with DAG(dag_id=dag_id, schedule=schedule, params=chosen, catchup=False, max_active_runs=1,
             default_args={"retries": 0}, tags=["checkpoint", "upgrade"], **dag_kwargs) as dag:

        @task(multiple_outputs=True, execution_timeout=PLAN_TIMEOUT)
        def plan(params: dict[str, Any] | None = None) -> dict[str, Any]:
            """Validate the params and fix what both versions are launched with."""
            assert params is not None
            unknown = sorted(set(params) - set(known))
            if unknown:  # a misspelt key of a trigger's conf would be ignored silently
                raise ValueError(f"unknown param(s) {', '.join(unknown)}: this DAG's params are "
                                 f"{', '.join(known)}; fix the trigger's conf")
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

        build = Build(mode=mode, planned=plan(), stop_timeout=stop_timeout, quiet_period=quiet_period,
                      acknowledged_quiet_period=acknowledged_quiet_period, poll_interval=poll_interval,
                      first_commit_timeout=first_commit_timeout, remove_old_checkpoint=remove_old_checkpoint,
                      progress_window_s=progress_window_s, standby_timeout=standby_timeout)
        steps: dict[str, BaseOperator] = {row.kind: operator_of(row, build) for row in rows(Path(mode.value))}
        # the decisions in order; after the approval the path's steps in order, the in-place steps beside
        # them, each rollback after its path, the report last. Every step decides for itself from the
        # journal (upgrade.planner.next_action): one not called for skips itself with the reason; an
        # upgrade step keeps all_success (a failure or a Reject ends its path at once), a rollback step
        # runs once its path ended (all_done).
        chain(build.planned, *[steps[name] for name in PLANNING])
        ends = []
        for path, rollback in ((PATHS[Path(mode.value)], ROLLBACK), (PATHS[Path.IN_PLACE], IN_PLACE_ROLLBACK)):
            chain(steps[PLANNING[-1]], *[steps[name] for name in (*path.steps, *rollback)])
            ends.append(steps[rollback[-1]])
        chain(ends, steps[REPORT])
    return dag


class ReferenceDags(NamedTuple):
    """The reference upgrade's four DAGs (:func:`build_reference_dags`), one per way of starting the
    new version or of triggering the upgrade."""

    manual: DAG
    cold: DAG
    switchover: DAG
    on_artifact: DAG


def build_reference_dags(*, doc_md: str | None, artifact: Asset, params: Mapping[str, Param] = PARAMS,
                         defaults: Mapping[str, Any] | None = None, prefix: str = "stream_upgrade",
                         **kwargs: Any) -> ReferenceDags:
    """The reference DAGs, each documented by ``doc_md`` and triggered with ``params`` (default
    :data:`PARAMS`) whose defaults ``defaults`` overrides: ``<prefix>`` (the standby path, manual
    trigger), ``<prefix>_cold`` (no standby: the new version starts after the stop and the archive,
    one driver at a time), ``<prefix>_switchover`` (the standby takes over inside the drivers: the
    downtime does not depend on the scheduler) and ``<prefix>_on_artifact`` (the standby path
    scheduled on ``artifact``: publishing the new version starts the upgrade with the defaults and
    no approval). ``kwargs`` go to every :func:`build_stream_upgrade_dag` call; ``ValueError`` as
    it raises."""
    chosen = dict(defaults or {})

    def build(suffix: str, **extra: Any) -> DAG:
        return build_stream_upgrade_dag(f"{prefix}{suffix}", params=params, doc_md=doc_md, **kwargs, **extra)

    return ReferenceDags(
        manual=build("", defaults=chosen),
        cold=build("_cold", defaults=chosen, relaunch_mode=RelaunchMode.COLD),
        switchover=build("_switchover", defaults=chosen, relaunch_mode=RelaunchMode.SWITCHOVER),
        on_artifact=build("_on_artifact", schedule=[artifact], defaults={**chosen, "require_approval": False}),
    )


__all__ = ["PARAMS", "PLAN_TIMEOUT", "ReferenceDags", "build_reference_dags", "build_stream_upgrade_dag"]
