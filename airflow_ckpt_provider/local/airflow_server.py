"""``airflow standalone`` on SQLite for the system tests and the demo, driven through the REST API.

:class:`LocalAirflow` starts the API server, scheduler, DAG processor and triggerer on a free
127.0.0.1 port, waits until the health endpoint reports them all, and talks to the public
REST API (``/api/v2``) with a token from the Simple auth manager: unpause and trigger DAGs,
wait for task and run states, answer human-in-the-loop (HITL) tasks.

A loaded machine makes the API server slow (one GET took over a minute on 2 busy cores), so
every call has a generous per-request timeout, never longer than what is left of the caller's
deadline. Reads (GET) are asked again after a timeout, a refused connection or a 5xx until that
deadline. Calls that change something are not repeated blindly: a trigger carries its own run id
and is sent again only after a read shows no such run; a HITL answer is sent again only after a
read shows no answer recorded, and an "already answered" (409) counts as done only when the
recorded answer is ours.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.local.airflow_home import airflow_env, prepare_airflow_home
from airflow_ckpt_provider.local.errors import AirflowApiError, AirflowApiUnavailable, AirflowHomeError
from airflow_ckpt_provider.local.kafka import ensure_port_free, free_port

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)

USER = "admin"
TERMINAL_RUN_STATES = {"success", "failed"}
#: Methods asked again after a timeout, a connection error or a 5xx: they change nothing.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Longest wait for one HTTP answer; an overloaded API server took over 60 s for one GET.
REQUEST_TIMEOUT_S = 120.0
#: Overall deadline of an :meth:`LocalAirflow.api` call made without one.
API_DEADLINE_S = 300.0
_FIRST_PAUSE_S, _MAX_PAUSE_S = 1.0, 10.0


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
        request_timeout: float = REQUEST_TIMEOUT_S,
        api_deadline: float = API_DEADLINE_S,
    ) -> None:
        """``request_timeout`` bounds one HTTP request; ``api_deadline`` is the overall deadline
        of an :meth:`api` call made without one (retries included)."""
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self._requested_port = port
        self.port = port or 0
        self.extra_env = dict(env or {})
        self.startup_timeout = startup_timeout
        self.request_timeout = request_timeout
        self.api_deadline = api_deadline
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
                left = max(0.1, deadline - time.monotonic())
                health = requests.get(f"{self.url}/api/v2/monitor/health",
                                      timeout=min(self.request_timeout, left)).json()
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

    def _deadline(self, deadline: float | None) -> float:
        return time.monotonic() + self.api_deadline if deadline is None else deadline

    def _send(self, method: str, path: str, body: Any = None, *, deadline: float, retry: bool,
              auth: bool = True) -> requests.Response:
        """Send one call to ``{url}{path}`` and return the response, whatever its status.

        With ``retry`` the call is sent again after a timeout, a connection error or a 5xx, with
        growing pauses, until ``deadline`` (``time.monotonic()``); each request waits at most
        ``request_timeout`` and never past the deadline. Raises :class:`AirflowApiUnavailable`
        when no usable answer came: at once without ``retry``, else at the deadline.
        """
        import requests

        attempt, pause, failure = 0, _FIRST_PAUSE_S, "the deadline had passed before the first attempt"
        while (left := deadline - time.monotonic()) > 0:
            attempt += 1
            wait = min(self.request_timeout, left)
            headers = {"Authorization": f"Bearer {self.token(deadline)}"} if auth else None
            try:
                response = requests.request(method, f"{self.url}{path}", json=body, headers=headers, timeout=wait)
            except (requests.Timeout, requests.ConnectionError, requests.exceptions.ChunkedEncodingError) as exc:
                failure = (f"no answer within {wait:.3g} s" if isinstance(exc, requests.Timeout)
                           else f"connection failed ({type(exc).__name__})")
            else:
                if response.status_code < 500:
                    return response
                failure = f"HTTP {response.status_code}: {response.text[:200]}"
                if not retry:
                    return response
            if not retry:
                raise AirflowApiUnavailable(
                    found=f"{method} {path}: {failure}",
                    expected="an answer from the Airflow API server",
                    action="Not sent again on its own: it may have been carried out. "
                    f"Check its effect, and read {self.log_file}.",
                )
            left = deadline - time.monotonic()
            if left <= 0:
                break
            log.warning("Airflow API: %s %s: %s; asking again in %.0f s (attempt %d, %.0f s left)",
                        method, path, failure, min(pause, left), attempt + 1, left)
            time.sleep(min(pause, left))
            pause = min(pause * 2, _MAX_PAUSE_S)
        raise AirflowApiUnavailable(
            found=f"{method} {path}: {failure} ({attempt} attempt(s))",
            expected="an answer from the Airflow API server before the deadline",
            action=f"The API server is down or overloaded: read {self.log_file}.",
        )

    def token(self, deadline: float | None = None) -> str:
        """A token for the Simple auth manager user (``POST /auth/token``, which changes nothing,
        so it is asked again like a read); cached."""
        if self._token is None:
            passwords = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())
            response = self._send("POST", "/auth/token", {"username": USER, "password": passwords[USER]},
                                  deadline=self._deadline(deadline), retry=True, auth=False)
            if response.status_code not in (200, 201):
                raise _unexpected("POST", "/auth/token", response, (200, 201), self.log_file)
            self._token = response.json()["access_token"]
        return self._token

    def api(self, method: str, path: str, body: Any = None, *, ok: Iterable[int] = (200,),
            deadline: float | None = None, idempotent: bool | None = None) -> Any:
        """Call ``/api/v2{path}`` and return the JSON answer (None when empty).

        ``idempotent`` (default: the method is GET/HEAD/OPTIONS) calls are asked again after a
        timeout, a connection error or a 5xx until ``deadline`` (``time.monotonic()``; default
        ``api_deadline`` from now); others are sent once. Raises :class:`AirflowApiError` (a
        ``RuntimeError``) for a status not in ``ok``, :class:`AirflowApiUnavailable` when no
        usable answer came.
        """
        method = method.upper()
        retry = method in IDEMPOTENT_METHODS if idempotent is None else idempotent
        response = self._send(method, f"/api/v2{path}", body, deadline=self._deadline(deadline), retry=retry)
        if response.status_code not in set(ok):
            raise _unexpected(method, path, response, ok, self.log_file)
        return response.json() if response.content else None

    def wait_for_dag(self, dag_id: str, timeout: float = 180.0) -> None:
        """Wait until the DAG processor has parsed ``dag_id``; ``TimeoutError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.api("GET", f"/dags/{dag_id}", deadline=deadline)
                return
            except AirflowApiError:  # 404 until parsed; or no answer until the deadline
                time.sleep(max(0.0, min(2.0, deadline - time.monotonic())))
        raise TimeoutError(f"DAG {dag_id} was not parsed within {timeout:.0f} s; see {self.log_file}")

    def trigger(self, dag_id: str, conf: Mapping[str, Any] | None = None, *, timeout: float = 300.0) -> str:
        """Unpause ``dag_id``, trigger a run with ``conf`` and return its run id.

        The run id is chosen here, so a trigger that got no answer (or a 5xx) is sent again
        only after a read shows no run with that id. Raises :class:`AirflowApiError` or
        ``TimeoutError`` when that is not done within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        self.wait_for_dag(dag_id, timeout)
        self.api("PATCH", f"/dags/{dag_id}", {"is_paused": False}, deadline=deadline, idempotent=True)
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
        run_id = f"manual__{stamp}_{uuid.uuid4().hex[:8]}"
        body = {"dag_run_id": run_id, "logical_date": None, "conf": dict(conf or {})}
        runs = f"/api/v2/dags/{dag_id}/dagRuns"
        while True:
            conflict = False
            try:
                response = self._send("POST", runs, body, deadline=deadline, retry=False)
                if response.status_code == 200:
                    return run_id
                if response.status_code < 500 and response.status_code != 409:
                    raise _unexpected("POST", runs, response, (200,), self.log_file)
                failure, conflict = f"HTTP {response.status_code}", response.status_code == 409
            except AirflowApiUnavailable as exc:
                failure = exc.found
            # no answer, a 5xx or a conflict: was the run created all the same?
            if self._run_exists(dag_id, run_id, deadline):
                log.info("run %s of %s exists although its trigger got %s", run_id, dag_id, failure)
                return run_id
            if conflict:
                raise _unexpected("POST", runs, response, (200,), self.log_file)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"could not trigger {dag_id} within {timeout:.0f} s (last: {failure})")
            log.warning("Airflow API: the trigger of %s got %s and no run %s exists; sending it again",
                        dag_id, failure, run_id)

    def _run_exists(self, dag_id: str, run_id: str, deadline: float) -> bool:
        response = self._send("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}", deadline=deadline, retry=True)
        if response.status_code not in (200, 404):
            raise _unexpected("GET", f"/dags/{dag_id}/dagRuns/{run_id}", response, (200, 404), self.log_file)
        return response.status_code == 200

    def task_state(self, dag_id: str, run_id: str, task_id: str, *, deadline: float | None = None) -> str | None:
        return self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}",
                        deadline=deadline).get("state")

    def run_state(self, dag_id: str, run_id: str, *, deadline: float | None = None) -> str:
        return str(self.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}", deadline=deadline)["state"])

    def wait_for_task_state(self, dag_id: str, run_id: str, task_id: str, states: Iterable[str],
                            timeout: float = 300.0) -> str:
        """Poll until the task is in one of ``states``; ``TimeoutError`` after ``timeout`` seconds
        (:class:`AirflowApiUnavailable` if the API never answered)."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.task_state(dag_id, run_id, task_id, deadline=deadline)
            if state in wanted:
                return state
            time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))
        raise TimeoutError(f"{dag_id}/{run_id}/{task_id} stayed {state}, not {sorted(wanted)}")

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float = 600.0) -> str:
        """Poll until the run succeeded or failed and return that state; ``TimeoutError`` after
        ``timeout`` seconds (:class:`AirflowApiUnavailable` if the API never answered)."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id, deadline=deadline)
            if state in TERMINAL_RUN_STATES:
                return state
            time.sleep(max(0.0, min(2.0, deadline - time.monotonic())))
        raise TimeoutError(f"run {dag_id}/{run_id} still {state} after {timeout:.0f} s")

    def answer_hitl(self, dag_id: str, run_id: str, task_id: str, option: str, *,
                    timeout: float = 300.0) -> dict[str, Any]:
        """Answer a waiting HITL task (``PATCH .../hitlDetails``) with one chosen option and return
        the recorded answer (``chosen_options``, ``responded_by``, ``responded_at``, ``params_input``).

        When the PATCH gets no answer, a 5xx or a 409 (already answered), the recorded answer is
        read back: if it is ``option`` from our user the answer counts as done; if another one
        is recorded :class:`AirflowApiError` is raised; if none is, the PATCH is sent again.
        ``TimeoutError`` when nothing is recorded within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails"
        body = {"chosen_options": [option], "params_input": {}}
        while True:
            conflict = False
            try:
                response = self._send("PATCH", f"/api/v2{path}", body, deadline=deadline, retry=False)
                if response.status_code == 200:
                    return dict(response.json())
                if response.status_code < 500 and response.status_code != 409:
                    raise _unexpected("PATCH", path, response, (200,), self.log_file)
                failure, conflict = f"HTTP {response.status_code}", response.status_code == 409
            except AirflowApiUnavailable as exc:
                failure = exc.found
            details = self.api("GET", path, deadline=deadline)
            if details.get("response_received"):
                chosen, user = details.get("chosen_options"), details.get("responded_by_user") or {}
                if chosen == [option] and USER in (user.get("id"), user.get("name")):
                    log.info("%s of %s already answered %r by %s (the answer got %s)",
                             task_id, run_id, option, USER, failure)
                    return {"chosen_options": chosen, "responded_by": user,
                            "responded_at": details.get("responded_at"),
                            "params_input": details.get("params_input", {})}
                raise AirflowApiError(
                    found=f"{task_id} of {dag_id}/{run_id} already answered {chosen} by {user.get('name')}",
                    expected=f"no answer yet, or [{option!r}] by {USER}",
                    action="Someone else answered this task; look at the run in the Airflow UI.",
                    status=409,
                )
            if conflict:  # refused, yet nothing recorded
                raise _unexpected("PATCH", path, response, (200,), self.log_file)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"answer {option!r} to {task_id} of {dag_id}/{run_id} not recorded "
                                   f"within {timeout:.0f} s (last: {failure})")
            log.warning("Airflow API: answer to %s of %s got %s and none is recorded; sending it again",
                        task_id, run_id, failure)


def _unexpected(method: str, path: str, response: requests.Response, ok: Iterable[int],
                log_file: Path) -> AirflowApiError:
    return AirflowApiError(
        found=f"{method} {path}: HTTP {response.status_code}: {response.text[:500]}",
        expected=f"HTTP {' or '.join(str(code) for code in sorted(set(ok)))}",
        action=f"Read the answer above and {log_file}.",
        status=response.status_code,
    )
