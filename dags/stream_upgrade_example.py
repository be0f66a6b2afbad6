"""Example DAG: move one Kafka-reading stream to a new checkpoint with the provider's operators.

A cold upgrade, one operator per step, each with explicit arguments; a step's typed result (its
XCom) is the later steps' input: read-only preflight (it refuses before anything stops) ->
graceful stop of the old version -> handover from its last committed batch -> verified archive of
the old checkpoint (left in place) -> the new version launched on the new, empty checkpoint at the
handed-over startingOffsets -> verify it started exactly there and keeps committing. Copy it and
set the params' defaults for your stream.

Not here: the approval, the compatibility check, a standby, state carry-over, the upgrade journal,
the rollback and the report; the reference DAG (dags/stream_upgrade.py) has them. Nothing rolls
back here: a step failing after the stop leaves the old checkpoint in place (docs "The example DAG").
"""

from __future__ import annotations

from typing import Any, cast

from airflow.sdk import DAG, BaseOperator, Param, chain

from airflow_ckpt_provider.operators.archive import CheckpointArchiveOperator
from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator
from airflow_ckpt_provider.operators.launch import HandoverVerifyOperator, StreamLaunchOperator
from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator
from airflow_ckpt_provider.operators.stop import GracefulStopOperator

OLD, NEW, KAFKA = "{{ params.old_checkpoint }}", "{{ params.new_checkpoint }}", "{{ params.kafka_conn_id }}"


def result_of(step: BaseOperator) -> dict[str, Any]:
    """``step``'s result as a later step's argument: the XComArg, which Airflow renders into the JSON
    dict ``step`` returned (the type the later step sees) and which makes the later step wait for it."""
    return cast("dict[str, Any]", step.output)


with DAG(
    dag_id="stream_upgrade_example",
    schedule=None,
    max_active_runs=1,
    doc_md=__doc__,
    tags=["checkpoint", "upgrade", "example"],
    params={
        "stream_name": Param("orders", type="string", description="the archives go to <archive_root>/<stream_name>/"),
        "old_checkpoint": Param("", type="string", minLength=1, description="checkpoint of the running version"),
        "new_checkpoint": Param("", type="string", minLength=1, description="new, empty checkpoint location"),
        "archive_root": Param("", type="string", minLength=1, description="where the old checkpoint is archived"),
        "old_launch_handle": Param("", type="string", description="the old job's LaunchHandle JSON (a kill "
                                                                  "if it does not stop in time); '' none"),
        "new_application": Param("", type="string", minLength=1, description="the new version's application"),
        "new_application_args": Param([], type="array", items={"type": "string"}),
        "spark_master": Param("local[2]", type="string"),
        "spark_conf": Param({}, type="object", description="the new version's Spark conf"),
        "kafka_conn_id": Param("kafka_default", type="string"),
    },
) as dag:
    preflight = UpgradePreflightOperator(  # the checks only: no journal, and the new version gets no state
        task_id="preflight", stream_name="{{ params.stream_name }}", old_checkpoint_uri=OLD, new_checkpoint_uri=NEW,
        archive_root="{{ params.archive_root }}", kafka_conn_id=KAFKA, journal=False, carry_state=False,
        accept_undeclared_sink=True)  # no sink declared here: it may skip or duplicate a cut batch (docs "Sinks")
    stop = GracefulStopOperator(task_id="graceful_stop", checkpoint_uri=OLD, fail_if_no_heartbeat=True,
                                launch_handle="{{ params.old_launch_handle }}")
    handover = CheckpointHandoverOperator(task_id="extract_handover", checkpoint_uri=OLD, kafka_conn_id=KAFKA)
    archive = CheckpointArchiveOperator(
        task_id="archive", checkpoint_uri=OLD, archive_root="{{ params.archive_root }}",
        stream_name="{{ params.stream_name }}", handover=result_of(handover),
        reason="upgrade to {{ params.new_application }}")
    relaunch = StreamLaunchOperator(
        task_id="relaunch", application="{{ params.new_application }}", checkpoint_uri=NEW, old_checkpoint_uri=OLD,
        handover=result_of(handover),  # its starting_offsets become the new query's startingOffsets
        # a list and a dict: dag.param gives the param's value itself, a template would render text
        application_args=cast("list[str]", dag.param("new_application_args")),
        conf=cast("dict[str, str]", dag.param("spark_conf")), master="{{ params.spark_master }}", kafka_conn_id=KAFKA)
    verify = HandoverVerifyOperator(task_id="verify", handover=result_of(handover), checkpoint_uri=NEW,
                                    kafka_conn_id=KAFKA)

    chain(preflight, stop, handover, archive, relaunch, verify)
