"""``airflow standalone`` on SQLite for the system tests and the demo, driven through the REST API.

:class:`LocalAirflow` starts the API server, scheduler, DAG processor and triggerer on a free
127.0.0.1 port, waits until the health endpoint reports them all, and talks to the public
REST API (``/api/v2``) with a token from the Simple auth manager: unpause and trigger DAGs,
wait for task and run states, answer human-in-the-loop (HITL) tasks.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import AirflowHomeError
from airflow_ckpt_provider.local.airflow_home import airflow_env, prepare_airflow_home
from airflow_ckpt_provider.local.kafka import ensure_port_free, free_port

log = logging.getLogger(__name__)

USER = "admin"
TERMINAL_RUN_STATES = {"success", "failed"}


class LocalAirflow:
    """A running ``airflow standalone``; use as a context manager or call start()/stop()."""

    def __init__(
        self,
        home: Path | str,
        dags_folder: Path | str,
        *,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        startup_timeout: float = 240.0,
    ) -> None:
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self._requested_port = port
        self.port = port or 0
        self.extra_env = dict(env or {})
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.home / "standalone.log"

    def environment(self) -> dict[str, str]:
        env = {**os.environ, **airflow_env(self.home, self.dags_folder), **self.extra_env}
        env.update(
            {
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
                "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            }
        )
        return env

    def start(self) -> LocalAirflow:
        """Start and wait until every component is healthy; :class:`AirflowHomeError` if not."""
        if self._requested_port:
            ensure_port_free(self._requested_port, "Airflow API server")
        self.port = self._requested_port or free_port()
        prepare_airflow_home(self.home, self.dags_folder)
        log.info("starting airflow standalone on %s (home %s)", self.url, self.home)
        with open(self.log_file, "ab") as out:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "airflow", "standalone"],
                env=self.environment(), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:
        import requests

        deadline = time.monotonic() + self.startup_timeout
        last = "no answer"
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                break
            try:
                health = requests.get(f"{self.url}/api/v2/monitor/health", timeout=5).json()
                states = {k: (v or {}).get("status") for k, v in health.items()}
                last = json.dumps(states)
                if all(states.get(k) == "healthy" for k in ("metadatabase", "scheduler", "triggerer",
                                                             "dag_processor")):
                    log.info("airflow standalone healthy on %s", self.url)
                    return
            except (requests.RequestException, ValueError) as exc:
                last = type(exc).__name__
            time.sleep(2)
        tail = "\n".join(self.log_file.read_text(errors="replace").splitlines()[-30:])
        raise AirflowHomeError(
            found=f"airflow standalone not healthy after {self.startup_timeout:.0f} s (last: {last})",
            expected="api-server, scheduler, dag-processor and triggerer reporting healthy",
            action=f"Read {self.log_file}.",
            detail=tail,
        )

    def stop(self, timeout: float = 60.0) -> None:
        proc, self._process = self._process, None
        if proc is None or proc.poll() is not None:
            return
        log.info("stopping airflow standalone on %s", self.url)
        try:
            os.killpg(proc.pid, signal.SIGINT)  # standalone shuts its components down on Ctrl-C
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass

    def __enter__(self) -> LocalAirflow:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- REST API ------------------------------------------------------------------------------

    def token(self) -> str:
        import requests

        if self._token is None:
            passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
            response = requests.post(f"{self.url}/auth/token",
                                     json={"username": USER, "password": passwords[USER]}, timeout=30)
            response.raise_for_status()
            self._token = response.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, body: Any = None, *, ok: Iterable[int] = (200,)) -> Any:
        """Call ``/api/v2{path}``; raise ``RuntimeError`` with the body for any other status."""
        import requests

        response = requests.request(method, f"{self.url}/api/v2{path}", json=body, timeout=60,
                                    headers={"Authorization": f"Bearer {self.token()}"})
        if response.status_code not in set(ok):
            raise RuntimeError(f"{method} {path}: HTTP {response.status_code}: {response.text[:500]}")
        return response.json() if response.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.api("GET", f"/dags/{dag_id}")
                return
            except RuntimeError:
                time.sleep(2)
        raise TimeoutError(f"DAG {dag_id} was not parsed within {timeout:.0f} s; see {self.log_file}")

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None) -> str:
        """Unpause ``dag_id``, trigger a run with ``conf`` and return its run id."""
        self.wait_for_dag(dag_id)
        self.api("PATCH", f"/dags/{dag_id}", {"is_paused": False})
        run = self.api("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": dict(conf or {})})
        return str(run["dag_run_id"])

    def task_state(self, dag_id: str, run_id: str, task_id: str) -> str | None:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}").get("state")

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"])

    def wait_for_task_state(self, dag_id: str, run_id: str, task_id: str, states: Iterable[str],
                            timeout: float = 300.0) -> str:
        wanted = set(states)
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.task_state(dag_id, run_id, task_id)
            if state in wanted:
                return state
            time.sleep(1)
        raise TimeoutError(f"{dag_id}/{run_id}/{task_id} stayed {state}, not {sorted(wanted)}")

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 600.0) -> str:
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in TERMINAL_RUN_STATES:
                return state
            time.sleep(2)
        raise TimeoutError(f"run {dag_id}/{run_id} still {state} after {timeout:.0f} s")

    def answer_hitl(self, dag_id: str, run_id: str, task_id: str, option: str) -> Any:
        """Answer a waiting HITL task (``PATCH .../hitlDetails``) with one chosen option."""
        return self.api("PATCH", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails",
                        {"chosen_options": [option], "params_input": {}})
