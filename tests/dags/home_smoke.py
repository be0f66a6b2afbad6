"""A one-task DAG that proves the tests' SQLite Airflow home runs ``dag.test()``."""

from __future__ import annotations

from airflow.sdk import DAG, task

with DAG(dag_id="ckpt_home_smoke", schedule=None) as dag:

    @task
    def answer() -> int:
        return 40 + 2

    answer()
