"""An approval gate in front of one task: proves HITL answers through the real REST API."""

from __future__ import annotations

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, task

with DAG(dag_id="ckpt_hitl_smoke", schedule=None) as dag:
    approve = ApprovalOperator(task_id="approve", subject="Go?", body="Approve to run `after`.")

    @task
    def after() -> str:
        return "ran"

    approve >> after()
