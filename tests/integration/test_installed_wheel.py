"""The release as a user installs it: the wheel from dist/ in its own clean virtualenv (`make wheel-venv`:
.venv-wheel, the `spark` extra, the dev virtualenv's constraints), run from outside the checkout (a
temporary working folder, no PYTHONPATH, no AIRFLOW_* settings of the tests): Airflow finds the provider,
the DAG factory builds the reference DAG, `ckpt` runs. The own-job page's system test upgrades a job
from the same install (tests/system/test_own_job_page.py)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

import airflow_ckpt_provider

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WHEEL_VENV = REPO / ".venv-wheel"
PACKAGE = REPO / "airflow_ckpt_provider"


def wheel_bin() -> Path:
    """.venv-wheel/bin; fails (never skips) with what to do when `make wheel-venv` has not run."""
    if not (WHEEL_VENV / ".installed").is_file():
        pytest.fail(f"found no installed wheel ({WHEEL_VENV}/.installed missing); expected the virtualenv `make "
                    "wheel-venv` builds (`make test` does it first); run `make wheel-venv`", pytrace=False)
    return WHEEL_VENV / "bin"


def user_env(home: Path) -> dict[str, str]:
    """A user's shell with the wheel's virtualenv activated: nothing of the checkout or the tests' Airflow."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIRFLOW", "PYSPARK", "SPARK_HOME")) and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VIRTUAL_ENV=str(WHEEL_VENV), PATH=f"{wheel_bin()}{os.pathsep}{env.get('PATH', '')}",
               AIRFLOW_HOME=str(home / "airflow-home"))
    return env


def run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=user_env(cwd), capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


#: What the wheel's virtualenv says about its airflow_ckpt_provider, as JSON.
PROBE = """
import importlib.metadata, json, sys
import airflow_ckpt_provider
dist = importlib.metadata.distribution("airflow-ckpt-provider")
print(json.dumps({
    "file": airflow_ckpt_provider.__file__, "version": airflow_ckpt_provider.__version__, "path": sys.path,
    "direct_url": json.loads(dist.read_text("direct_url.json") or "{}"),
    "files": {str(f): str(f.locate()) for f in dist.files or () if str(f).startswith("airflow_ckpt_provider/")},
}))
"""


def test_the_installed_package_is_this_checkouts_wheel_not_the_checkout(tmp_path: Path) -> None:
    """Imported from the virtualenv's site-packages, installed from a wheel file (not editable), file for
    file the checkout's package (a stale .venv-wheel fails here: `make wheel-venv` reinstalls), no tests."""
    found = json.loads(run(["python", "-c", PROBE], tmp_path).stdout)
    installed = Path(found["file"]).parent
    assert installed.is_relative_to(WHEEL_VENV) and "site-packages" in installed.parts, installed
    assert not [p for p in found["path"] if p and Path(p).resolve().is_relative_to(REPO)
                and not Path(p).is_relative_to(WHEEL_VENV)], found["path"]
    assert found["version"] == airflow_ckpt_provider.__version__
    assert "archive_info" in found["direct_url"] and found["direct_url"]["url"].endswith(".whl"), found["direct_url"]
    shipped = {name for name in found["files"] if "__pycache__" not in name}
    source = {str(path.relative_to(REPO)) for path in PACKAGE.rglob("*")
              if path.is_file() and "__pycache__" not in path.parts}
    assert shipped == source, (f"installed but not in the checkout: {sorted(shipped - source)[:5]}; in the checkout "
                               f"but not installed: {sorted(source - shipped)[:5]}: run `make wheel-venv`")
    stale = [name for name in sorted(source) if hashlib.sha256((REPO / name).read_bytes()).digest()
             != hashlib.sha256(Path(found["files"][name]).read_bytes()).digest()]
    assert stale == [], f"the installed wheel differs from the checkout in {stale[:5]}: run `make wheel-venv`"
    tests = subprocess.run(["python", "-c", "import tests.harness"], cwd=tmp_path, env=user_env(tmp_path),
                           capture_output=True, text=True, timeout=120, check=False)
    assert tests.returncode != 0 and "No module named 'tests'" in tests.stderr, tests.stderr


def test_airflow_lists_the_provider(tmp_path: Path) -> None:
    listed = run(["airflow", "providers", "list", "--output", "json"], tmp_path)
    providers = json.loads(listed.stdout[listed.stdout.index("["):])
    ours = [p for p in providers if p["package_name"] == airflow_ckpt_provider.PACKAGE_NAME]
    assert [p["version"] for p in ours] == [airflow_ckpt_provider.__version__], providers


def test_the_dag_factory_builds_the_reference_dag(tmp_path: Path) -> None:
    built = run(["python", "-c", "from airflow_ckpt_provider.dags import PARAMS, build_stream_upgrade_dag; "
                 "dag = build_stream_upgrade_dag('orders_upgrade', defaults={'stream_name': 'orders'}); "
                 "print(dag.dag_id, len(dag.tasks), sorted(dag.params) == sorted(PARAMS), "
                 "dag.params['stream_name'], 'graceful_stop' in dag.task_ids)"], tmp_path)
    dag_id, tasks, same_params, stream, has_stop = built.stdout.split()[-5:]
    assert (dag_id, same_params, stream, has_stop) == ("orders_upgrade", "True", "orders", "True"), built.stdout
    assert int(tasks) > 10, built.stdout


def test_ckpt_runs_with_every_command(tmp_path: Path) -> None:
    from airflow_ckpt_provider.cli import build_parser

    helped = run(["ckpt", "--help"], tmp_path)
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert "{" + ",".join(commands) + "}" in helped.stdout, helped.stdout
    audit = run(["ckpt", "audit", "--help"], tmp_path)
    assert "--keep FIELD=VALUE" in audit.stdout
