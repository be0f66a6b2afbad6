"""A local Airflow 3 home with SQLite, for ``dag.test()`` runs (the own-job guide, the demo, the
tests) and ``airflow standalone``.

:func:`airflow_env` gives the environment that points Airflow at the home;
:func:`prepare_airflow_home` runs ``airflow db migrate`` there once (a stamp with the Airflow
version makes later calls a no-op). Set the environment before ``airflow`` is first imported:
Airflow reads its settings then. :func:`load_dag` imports a DAG file as Airflow's DAG processor
does and returns one of its DAGs; ``dag.test()`` runs a DAG only when its file is in a DAG bundle
of the home (its DAGs folder), so load it from there.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.local.errors import AirflowHomeError, DagNotFound

log = logging.getLogger(__name__)

_STAMP = ".migrated"


def airflow_env(
    home: Path | str,
    dags_folder: Path | str | None = None,
    extra_bundles: dict[str, Path] | None = None,
) -> dict[str, str]:
    """Environment variables for an Airflow home with SQLite and no example DAGs.

    ``extra_bundles`` adds local DAG bundles (name -> folder) beside the DAGs folder, for
    example the tests' own DAGs; ``dag.test()`` only runs DAGs that live in a bundle.
    """
    home = Path(home).resolve()
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }
    if dags_folder is not None:
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(Path(dags_folder).resolve())
    if extra_bundles:
        bundles = {"dags-folder": Path(dags_folder or home / "dags"), **extra_bundles}
        env["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(
            [
                {
                    "name": name,
                    "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                    "kwargs": {"path": str(Path(folder).resolve()), "refresh_interval": 0},
                }
                for name, folder in bundles.items()
            ]
        )
    return env


def prepare_airflow_home(home: Path | str, dags_folder: Path | str | None = None) -> dict[str, str]:
    """Create the home and migrate its SQLite database unless already done; return its env
    (:func:`airflow_env`), for ``os.environ.update`` before Airflow is imported.

    Raises :class:`AirflowHomeError` with the command's output tail if the migration fails.
    """
    home = Path(home).resolve()
    home.mkdir(parents=True, exist_ok=True)
    env = airflow_env(home, dags_folder)
    version = metadata.version("apache-airflow-core")
    stamp = home / _STAMP
    if stamp.is_file() and stamp.read_text().strip() == version and (home / "airflow.db").is_file():
        return env
    log.info("migrating the Airflow %s database in %s", version, home)
    cmd = [sys.executable, "-m", "airflow", "db", "migrate"]
    proc = subprocess.run(
        cmd, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise AirflowHomeError(
            found=f"`airflow db migrate` exit code {proc.returncode}",
            expected=f"a migrated SQLite database in {home}",
            action="Read the output below; delete the folder to start from a fresh database.",
            detail="\n".join((proc.stdout + proc.stderr).splitlines()[-30:]),
        )
    stamp.write_text(version)
    return env


def load_dag(dag_file: Path | str, dag_id: str) -> Any:  # noqa: ANN401 - an airflow.sdk DAG (no import here)
    """Import ``dag_file`` (as Airflow's DAG processor would: a module named after the file) and
    return its DAG ``dag_id``. Raises :class:`DagNotFound` when the file is missing or defines no
    DAG ``dag_id`` (naming the DAGs it defines); an error the file raises on import propagates."""
    dag_file = Path(dag_file).resolve()
    spec = importlib.util.spec_from_file_location(dag_file.stem, dag_file)
    if not dag_file.is_file() or spec is None or spec.loader is None:
        raise DagNotFound(found=f"no Python file {dag_file}", expected=f"a DAG file defining the DAG {dag_id}",
                          action="Check the path (relative paths start at the current folder).")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(dag_file.stem, module)
    spec.loader.exec_module(module)
    dags = {value.dag_id: value for value in vars(module).values()
            if isinstance(getattr(value, "dag_id", None), str) and hasattr(value, "task_dict")}  # DAGs, not tasks
    if dag_id in dags:
        return dags[dag_id]
    raise DagNotFound(found=f"{dag_file} defines the DAGs: {', '.join(sorted(dags)) or 'none'}",
                      expected=f"the DAG {dag_id}",
                      action="Give the dag_id the file passes to its DAG (or to build_stream_upgrade_dag).")
