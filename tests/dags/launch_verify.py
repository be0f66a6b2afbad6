"""Relaunch + verify: StreamLaunchOperator then HandoverVerifyOperator; saves both XComs to a file.

Everything run-specific comes in through params (templated fields); the Spark conf (connector
jars, small-machine settings) is fixed here at parse time from the local stack.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_ckpt_provider.local.spark import local_spark_conf
from airflow_ckpt_provider.operators.launch import HandoverVerifyOperator, StreamLaunchOperator

JOB = str(Path(__file__).resolve().parents[1] / "integration" / "jobs" / "kafka_to_parquet.py")
CONF = {k: v for k, v in local_spark_conf("ckpt-launch-test").items() if k not in ("spark.master", "spark.app.name")}
CONF.update({"spark.driver.memory": "512m", "spark.executor.memory": "512m", "spark.cores.max": "1",
             "spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable})

with DAG(
    dag_id="ckpt_launch_verify",
    schedule=None,
    params={
        "bootstrap": Param("", type="string"),
        "topic": Param("", type="string"),
        "sink": Param("", type="string"),
        "checkpoint_uri": Param("", type="string"),
        "old_checkpoint_uri": Param("", type="string"),
        "handover": Param("", type="string"),
        "starting_offsets": Param("", type="string"),
        "master": Param("local[1]", type="string"),
        "deploy_mode": Param("", type="string"),
        "master_ui_url": Param("", type="string"),
        "log_dir": Param("", type="string"),
        "kafka_conn_id": Param("kafka_default", type="string"),
        "result_file": Param("", type="string"),
    },
) as dag:
    launch = StreamLaunchOperator(
        task_id="launch",
        application=JOB,
        application_args=["{{ params.bootstrap }}", "{{ params.topic }}", "{{ params.sink }}"],
        checkpoint_uri="{{ params.checkpoint_uri }}",
        old_checkpoint_uri="{{ params.old_checkpoint_uri }}",
        starting_offsets="{{ params.starting_offsets }}",
        handover_json="{{ params.handover }}",
        sink_path="{{ params.sink }}",
        master="{{ params.master }}",
        deploy_mode="{{ params.deploy_mode }}",
        master_ui_url="{{ params.master_ui_url }}",
        log_dir="{{ params.log_dir }}",
        conf=CONF,
        first_commit_timeout=150,
        poll_interval=1,
    )
    verify = HandoverVerifyOperator(
        task_id="verify",
        handover="{{ params.handover }}",
        checkpoint_uri="{{ params.checkpoint_uri }}",
        starting_offsets="{{ params.starting_offsets }}",
        kafka_conn_id="{{ params.kafka_conn_id }}",
        progress_window_s=90,
        poll_interval=1,
    )

    @task
    def save(handle: dict, verified: dict, params: dict | None = None) -> None:  # noqa: FA100
        assert params is not None
        Path(params["result_file"]).write_text(json.dumps({"handle": handle, "verify": verified}))

    launch >> verify
    save(launch.output, verify.output)
