"""Runs GracefulStopOperator on a checkpoint given by params and saves its XCom to a file."""

from __future__ import annotations

import json
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_ckpt_provider.operators.stop import GracefulStopOperator

with DAG(
    dag_id="ckpt_graceful_stop",
    schedule=None,
    params={
        "checkpoint_uri": Param("", type="string"),
        "launch_handle": Param("", type="string"),
        "result_file": Param("", type="string"),
    },
) as dag:
    stop = GracefulStopOperator(
        task_id="graceful_stop",
        checkpoint_uri="{{ params.checkpoint_uri }}",
        launch_handle="{{ params.launch_handle }}",
        stop_timeout=90,
        quiet_period=3,
        poll_interval=0.5,
    )

    @task
    def save(result: dict, params: dict | None = None) -> None:  # noqa: FA100
        assert params is not None
        Path(params["result_file"]).write_text(json.dumps(result))

    save(stop.output)
