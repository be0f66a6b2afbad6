"""The local Airflow home's pieces that need no migration: its environment and the DAG loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_ckpt_provider.local.airflow_home import airflow_env, load_dag
from airflow_ckpt_provider.local.errors import DagNotFound

DAG_FILE = '''
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG(dag_id="first", schedule=None) as first:
    task = EmptyOperator(task_id="t")  # a task at module level has a dag_id too: not a DAG
second = DAG(dag_id="second", schedule=None)
'''


def test_the_env_points_airflow_at_the_home_and_its_dags(tmp_path: Path) -> None:
    env = airflow_env(tmp_path / "home", tmp_path / "dags", {"more": tmp_path / "more"})
    assert env["AIRFLOW_HOME"] == str((tmp_path / "home").resolve())
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == f"sqlite:///{(tmp_path / 'home').resolve() / 'airflow.db'}"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str((tmp_path / "dags").resolve())
    bundles = json.loads(env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"])
    assert [b["name"] for b in bundles] == ["dags-folder", "more"]
    assert "AIRFLOW__CORE__DAGS_FOLDER" not in airflow_env(tmp_path / "home")


def test_load_dag_returns_the_dag_named(tmp_path: Path) -> None:
    (tmp_path / "two_dags.py").write_text(DAG_FILE)
    assert load_dag(tmp_path / "two_dags.py", "second").dag_id == "second"
    first = load_dag(tmp_path / "two_dags.py", "first")
    assert first.dag_id == "first" and first.task_ids == ["t"]


def test_load_dag_names_what_the_file_defines(tmp_path: Path) -> None:
    (tmp_path / "two_dags.py").write_text(DAG_FILE)
    with pytest.raises(DagNotFound, match="defines the DAGs: first, second; expected the DAG third"):
        load_dag(tmp_path / "two_dags.py", "third")
    with pytest.raises(DagNotFound, match="no Python file"):
        load_dag(tmp_path / "missing.py", "first")
