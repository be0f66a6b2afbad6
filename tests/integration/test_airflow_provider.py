"""Airflow 3 (SQLite home) discovers the provider through its entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import airflow_ckpt_provider

pytestmark = pytest.mark.integration


def test_providers_list_shows_provider(airflow_home) -> None:  # noqa: ANN001
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", "providers", "list", "--output", "json"],
        env=dict(os.environ), capture_output=True, text=True, check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    providers = {p["package_name"]: p for p in json.loads(proc.stdout)}
    assert "airflow-ckpt-provider" in providers, sorted(providers)
    assert providers["airflow-ckpt-provider"]["version"] == airflow_ckpt_provider.__version__


def test_providers_manager_loads_provider_info(airflow_home) -> None:  # noqa: ANN001
    from airflow.providers_manager import ProvidersManager

    info = ProvidersManager().providers["airflow-ckpt-provider"]
    assert info.version == airflow_ckpt_provider.__version__
    assert info.data["package-name"] == "airflow-ckpt-provider"


def test_dag_test_runs_on_sqlite_home(airflow_home) -> None:  # noqa: ANN001
    from tests.dags.home_smoke import dag

    run = dag.test()
    assert run.state == "success"
