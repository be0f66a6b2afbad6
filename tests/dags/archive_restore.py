"""Archives a checkpoint with CheckpointArchiveOperator, restores it with CheckpointRestoreOperator,
and saves both XComs to a file (params give the locations)."""

from __future__ import annotations

import json
from pathlib import Path

from airflow.sdk import DAG, Param, task

from airflow_ckpt_provider.operators.archive import CheckpointArchiveOperator, CheckpointRestoreOperator

with DAG(
    dag_id="ckpt_archive_restore",
    schedule=None,
    params={
        "checkpoint_uri": Param("", type="string"),
        "archive_root": Param("", type="string"),
        "stream_name": Param("orders", type="string"),
        "restore_to": Param("", type="string"),
        "result_file": Param("", type="string"),
    },
) as dag:
    archive = CheckpointArchiveOperator(
        task_id="archive",
        checkpoint_uri="{{ params.checkpoint_uri }}",
        archive_root="{{ params.archive_root }}",
        stream_name="{{ params.stream_name }}",
        reason="integration test of the archive operator",
        keep_last=2,
    )
    restore = CheckpointRestoreOperator(
        task_id="restore",
        archive_uri="{{ ti.xcom_pull(task_ids='archive')['location'] }}",
        target_uri="{{ params.restore_to }}",
    )

    @task
    def save(archived: dict, restored: dict, params: dict | None = None) -> None:  # noqa: FA100
        assert params is not None
        Path(params["result_file"]).write_text(json.dumps({"archive": archived, "restore": restored}))

    archive >> restore
    save(archive.output, restore.output)
