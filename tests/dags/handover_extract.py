"""Runs CheckpointHandoverOperator on a checkpoint given by params and saves its XCom to a file."""

from __future__ import annotations

import json
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator

with DAG(
    dag_id="ckpt_handover_extract",
    schedule=None,
    params={
        "checkpoint_uri": Param("", type="string"),
        "result_file": Param("", type="string"),
        "kafka_conn_id": Param("kafka_default", type="string"),
    },
) as dag:
    extract = CheckpointHandoverOperator(
        task_id="extract_handover",
        checkpoint_uri="{{ params.checkpoint_uri }}",
        kafka_conn_id="{{ params.kafka_conn_id }}",
    )

    @task
    def save(result: dict, params: dict | None = None) -> None:  # noqa: FA100
        assert params is not None
        Path(params["result_file"]).write_text(json.dumps(result))

    save(extract.output)
