"""The factories the step table's rows name (:data:`~airflow_ckpt_provider.upgrade.table.TABLE`):
each returns its operator's own arguments for one DAG (:class:`Build`), as templates over the
DAG's params; :func:`operator_of` adds what every row gives (its task id and step kind, its inputs
from the record as ``FromRecord``, its retries and ``execution_timeout``, the journal, the rollback
phase) and builds the row's operator class. The in-place path and the rollbacks use the same
factories as the migration: what differs is in the row (its kind, its inputs), or follows from it
(a step of the restart in place works on the old checkpoint)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypedDict, cast

from airflow.sdk import BaseOperator, XComArg
from airflow.sdk.definitions.xcom_arg import PlainXComArg

from airflow_ckpt_provider.checkpoint.launch import RelaunchMode
from airflow_ckpt_provider.upgrade.inputs import FromRecord
from airflow_ckpt_provider.upgrade.steps import PATHS, PLANNING, Path
from airflow_ckpt_provider.upgrade.table import REPORT, StepRow


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
#: The Kafka connection: every launch and verification accepts an idle topic's caught-up query with it.
KAFKA_CONN = "{{ params.kafka_conn_id }}"
#: The job's sink declaration (a SinkSpec as JSON), for the preflight and the verification.
SINK = "{{ params.sink | tojson }}"
OLD_CP, NEW_CP = "{{ params.old_checkpoint }}", "{{ params.new_checkpoint }}"
NEW_SINK = "{{ params.new_sink_path or '' }}"
#: The params the factories' templates read: a DAG's params must hold every one.
PARAM_NAMES = frozenset({
    "stream_name", "old_checkpoint", "new_checkpoint", "archive_root", "kafka_conn_id", "storage_conn_id",
    "old_application", "new_application", "new_sink_path", "sink", "old_launch_handle", "require_approval",
    "check_compatibility", "handover_mode", "handover_value", "accept_reprocessing", "accept_data_loss", "mode",
    "carry_state", "rollback_mode", "rollback_checkpoint", "upgrade_id", "old_job", "accept_cut_batch"})
#: The old job declared by what runs it (an OldJobSpec as JSON; {} when it is the launch handle's).
OLD_JOB = "{{ params.old_job | tojson }}"


def output_key(result: XComArg, key: str) -> XComArg:
    """One key of a ``multiple_outputs`` task's result (a ``@task`` returns the base XComArg type)."""
    if not isinstance(result, PlainXComArg):
        raise TypeError(f"expected the result of one task, found {type(result).__name__}")
    return result[key]


@dataclass(frozen=True)
class Build:
    """One DAG's settings, as :func:`~airflow_ckpt_provider.dags.stream_upgrade.build_stream_upgrade_dag`
    takes them, and ``planned``: the ``plan`` task's result (each version's Spark and arguments)."""

    mode: RelaunchMode
    planned: XComArg
    stop_timeout: float
    quiet_period: float
    acknowledged_quiet_period: float
    poll_interval: float
    first_commit_timeout: float
    remove_old_checkpoint: bool
    progress_window_s: float
    standby_timeout: float

    @property
    def waits(self) -> dict[str, float]:
        """The DAG's waits a row's timeout may cover (:data:`~airflow_ckpt_provider.upgrade.table.WAITS`)."""
        return {"stop_timeout": self.stop_timeout, "first_commit_timeout": self.first_commit_timeout,
                "standby_timeout": self.standby_timeout, "progress_window_s": self.progress_window_s}

    def args_of(self, version: str) -> list[str]:
        """The ``version`` ("old", "new") application's arguments, fixed by ``plan`` (a list once rendered)."""
        return cast("list[str]", output_key(self.planned, f"{version}_application_args"))

    def spark_of(self, version: str) -> dict[str, Any]:
        """The launch arguments of the ``version`` ("old", "new") Spark, fixed by ``plan``."""
        keys = {"conf": "spark_conf", "master": "master", "deploy_mode": "deploy_mode", "spark_conn_id": "conn_id",
                "spark_home": "spark_home", "spark_binary": "spark_submit"}
        return {arg: output_key(self.planned, f"{version}_{key}") for arg, key in keys.items()}

    def launch_of(self, version: str) -> dict[str, Any]:
        """What every launch of ``version`` takes: its application, arguments and Spark, and the waits."""
        return {"application": f"{{{{ params.{version}_application }}}}", "application_args": self.args_of(version),
                **self.spark_of(version), "first_commit_timeout": self.first_commit_timeout,
                "poll_interval": self.poll_interval}


def _resolve(dotted: str) -> Any:  # noqa: ANN401 - a class or a factory
    module, _, name = dotted.partition(":")
    return getattr(importlib.import_module(module), name)


def operator_of(row: StepRow, build: Build) -> BaseOperator:
    """The operator of ``row`` in the DAG ``build`` describes (see the module docstring)."""
    factory = cast("Callable[[StepRow, Build], dict[str, Any]]", _resolve(row.factory))
    common: dict[str, Any] = {
        "task_id": row.kind, "retries": row.retries, "retry_delay": timedelta(seconds=row.retry_delay_s),
        "execution_timeout": timedelta(seconds=row.timeout.seconds(build.waits)),
        **{name: FromRecord(value) for name, value in row.inputs.items()}}
    if row.kind not in (*PLANNING, REPORT):  # a journaled step: planned as its kind
        common.update(step=row.kind, **JOURNALED)
        if row.phase == "rollback":  # recorded in the rollback phase, run (to decide) once its path ended
            common.update(journal_phase="rollback", trigger_rule="all_done")
    return cast("BaseOperator", _resolve(row.operator)(**common, **factory(row, build)))


# -- the factories: each operator's own arguments ------------------------------------------------------

def preflight(row: StepRow, b: Build) -> dict[str, Any]:
    return dict(
        stream_name="{{ params.stream_name }}", old_checkpoint_uri=OLD_CP, new_checkpoint_uri=NEW_CP,
        archive_root="{{ params.archive_root }}", new_sink_path=NEW_SINK, kafka_conn_id=KAFKA_CONN,
        upgrade_id="{{ params.upgrade_id or '' }}", old_application="{{ params.old_application }}",
        new_application="{{ params.new_application }}", old_launch_handle="{{ params.old_launch_handle }}",
        relaunch_mode=b.mode.value, rollback_mode="{{ params.rollback_mode }}",
        rollback_checkpoint_uri="{{ params.rollback_checkpoint }}", carry_state="{{ params.carry_state }}",
        storage_conn_id=STORAGE_CONN, archive_conn_id=STORAGE_CONN, sink=SINK,
        accept_undeclared_sink="{{ params.accept_undeclared_sink }}", old_job=OLD_JOB,
        accept_cut_batch="{{ params.accept_cut_batch }}",
        # the Spark that will export the old query's state (the new version's), for the preflight's check
        state_spark_home=output_key(b.planned, "new_spark_home"),
        state_spark_binary=output_key(b.planned, "new_spark_submit"), **START)


def compatibility_check(row: StepRow, b: Build) -> dict[str, Any]:
    """Before the approval: the new version tried on copies; "does not start" fails here, before any stop."""
    return dict(old_checkpoint_uri=OLD_CP, new_application="{{ params.new_application }}",
                application_args=b.args_of("new"),
                live_locations={"new checkpoint": NEW_CP, "new sink": "{{ params.new_sink_path }}",
                                "archive root": "{{ params.archive_root }}"},
                carry_state="{{ params.carry_state }}", enabled="{{ params.check_compatibility }}",
                storage_conn_id=STORAGE_CONN, journal=JOURNAL, journal_conn_id=STORAGE_CONN, **b.spark_of("new"))


def choose_path(row: StepRow, b: Build) -> dict[str, Any]:
    """In place or a new checkpoint, decided before the approval (which shows it); a resumed upgrade
    goes on along the path its journal records."""
    return dict(mode="{{ params.mode }}", start=START["start"], in_place_steps=list(PATHS[Path.IN_PLACE].steps),
                journal=JOURNAL, journal_conn_id=STORAGE_CONN)


def approve(row: StepRow, b: Build) -> dict[str, Any]:
    """No body: the approver reads what preflight, compatibility_check and choose_path recorded."""
    return dict(subject="Upgrade stream {{ params.stream_name }} to a new checkpoint?",
                response_timeout=timedelta(hours=12), defaults=["Reject"],  # no answer: no upgrade
                require_approval="{{ params.require_approval }}", journal=JOURNAL, journal_conn_id=STORAGE_CONN)


def start_standby(row: StepRow, b: Build) -> dict[str, Any]:
    return dict(**b.launch_of("new"), checkpoint_uri=NEW_CP, old_checkpoint_uri=OLD_CP, sink_path=NEW_SINK,
                standby=True, standby_timeout=b.standby_timeout)


def stop_old(row: StepRow, b: Build) -> dict[str, Any]:
    """The old version's stop (the migration's and the restart in place's): never start the new
    version beside an idle old one that cannot be seen."""
    return dict(checkpoint_uri=OLD_CP, launch_handle="{{ params.old_launch_handle }}", stop_timeout=b.stop_timeout,
                quiet_period=b.quiet_period, acknowledged_quiet_period=b.acknowledged_quiet_period,
                poll_interval=b.poll_interval, fail_if_no_heartbeat=True, old_job=OLD_JOB)


def stop_new(row: StepRow, b: Build) -> dict[str, Any]:
    """A rollback's stop of the new version (on the old checkpoint in place), by the handle its row reads."""
    return dict(checkpoint_uri=OLD_CP if row.in_place else NEW_CP, stop_timeout=60, quiet_period=b.quiet_period,
                poll_interval=b.poll_interval)


def handover(row: StepRow, b: Build) -> dict[str, Any]:
    """The handover from the old checkpoint's last committed batch; the migration's also where the new
    version starts and the sink ledger (in place, Spark resumes the query)."""
    migration: dict[str, Any] = {} if row.in_place else {"sink": SINK, **START}
    return dict(checkpoint_uri=OLD_CP, kafka_conn_id=KAFKA_CONN, **migration)


def export_state(row: StepRow, b: Build) -> dict[str, Any]:
    """The old query's state at the handover, exported by the new version's Spark (after a switchover,
    whose row also reads what the standby seeded: the verified copy of that seed and its check)."""
    seed: dict[str, Any] = {} if "seeded_state" in row.inputs else {"seeded_state": ""}
    return dict(checkpoint_uri=OLD_CP, carry_state="{{ params.carry_state }}", **seed, **b.spark_of("new"))


def archive(row: StepRow, b: Build) -> dict[str, Any]:
    """The verified archive of the old checkpoint; in place never removed (the new version goes on writing it)."""
    return dict(checkpoint_uri=OLD_CP, archive_root="{{ params.archive_root }}", stream_name="{{ params.stream_name }}",
                reason=("in-place restart as " if row.in_place else "upgrade to ") + "{{ params.new_application }}",
                remove_source=False if row.in_place else b.remove_old_checkpoint, archive_conn_id=STORAGE_CONN)


def relaunch(row: StepRow, b: Build) -> dict[str, Any]:
    """The new version at the handover: launched cold, or (standby) the waiting standby released."""
    return dict(**b.launch_of("new"), checkpoint_uri=NEW_CP, old_checkpoint_uri=OLD_CP, sink_path=NEW_SINK,
                kafka_conn_id=KAFKA_CONN)


def switchover(row: StepRow, b: Build) -> dict[str, Any]:
    """The standby takes over inside the drivers once the old query acknowledges its stop; the step
    then re-derives the handover and compares (stop, handover and release in one step)."""
    return dict(**relaunch(row, b), stop_timeout=b.stop_timeout, quiet_period=b.quiet_period,
                acknowledged_quiet_period=b.acknowledged_quiet_period,
                carry_state="{{ params.carry_state }}",  # the standby seeds the state in its own session
                accept_empty_state="{{ not params.carry_state }}",
                sink=SINK,  # the sink ledger, should the old query's stop cut a batch (the standby refuses then)
                **START)


def verify(row: StepRow, b: Build) -> dict[str, Any]:
    """The new version started at the handover and keeps committing (in place: as the same query after N)."""
    where: dict[str, Any] = {"checkpoint_uri": OLD_CP, "in_place": True} if row.in_place else \
        {"checkpoint_uri": NEW_CP, "sink": SINK}
    return dict(**where, kafka_conn_id=KAFKA_CONN, progress_window_s=b.progress_window_s,
                poll_interval=b.poll_interval)


def restart_in_place(row: StepRow, b: Build) -> dict[str, Any]:
    """The new version ON the old checkpoint: Spark resumes the query after its last batch."""
    return dict(**b.launch_of("new"), checkpoint_uri=OLD_CP, allow_existing_checkpoint=True, sink_path=NEW_SINK,
                kafka_conn_id=KAFKA_CONN)


def rollback_handover(row: StepRow, b: Build) -> dict[str, Any]:
    """What the stopped new version processed: where the old version restarts, what it reads twice."""
    return dict(checkpoint_uri=NEW_CP, old_checkpoint_uri=OLD_CP, rollback_mode="{{ params.rollback_mode }}")


def restore(row: StepRow, b: Build) -> dict[str, Any]:
    return dict(target_uri=OLD_CP, skip_if_target_exists=True, archive_conn_id=STORAGE_CONN)


def restart_old(row: StepRow, b: Build) -> dict[str, Any]:
    """The old version again on its own checkpoint (restored if it was removed)."""
    return dict(**b.launch_of("old"), checkpoint_uri=OLD_CP, allow_existing_checkpoint=True, kafka_conn_id=KAFKA_CONN)


def restart_forward(row: StepRow, b: Build) -> dict[str, Any]:
    """The old version on a fresh checkpoint from the new version's handover (the row reads both)."""
    return dict(**b.launch_of("old"), old_checkpoint_uri=OLD_CP, kafka_conn_id=KAFKA_CONN)


def report(row: StepRow, b: Build) -> dict[str, Any]:
    """Always, after both rollbacks: the upgrade report, which fails the run unless upgraded or rejected."""
    return dict(stream_name="{{ params.stream_name }}", old_checkpoint_uri=OLD_CP, new_checkpoint_uri=NEW_CP,
                path=PATHS[Path(b.mode.value)], in_place=PATHS[Path.IN_PLACE], trigger_rule="all_done",
                archive_conn_id=STORAGE_CONN, journal=JOURNAL, journal_conn_id=STORAGE_CONN,
                storage_conn_id=STORAGE_CONN)


__all__ = ["JOURNAL", "JOURNALED", "KAFKA_CONN", "PARAM_NAMES", "SINK", "START", "STORAGE_CONN", "Build", "StartArgs",
           "operator_of", "output_key"]
