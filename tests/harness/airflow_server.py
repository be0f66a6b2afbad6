"""Airflow on SQLite for the system tests and the demo, driven through the REST API.

:class:`LocalAirflow` starts the API server, scheduler, DAG processor and triggerer on a free
127.0.0.1 port (``airflow standalone``, or each as its own process with the triggerer in its own
PID namespace), waits until the health endpoint reports them all, and talks to the public
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
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.local.airflow_home import airflow_env, prepare_airflow_home
from airflow_ckpt_provider.local.errors import AirflowHomeError
from airflow_ckpt_provider.local.processes import LocalServer, ensure_port_free, free_port
from tests.harness.errors import AirflowApiError, AirflowApiUnavailable, PidNamespaceUnavailable

if TYPE_CHECKING:
    import requests

log = logging.getLogger(__name__)

USER = "admin"
TERMINAL_RUN_STATES = {"success", "failed"}
PASSWORD_FILE = "simple_auth_manager_passwords.json.generated"
SIMPLE_AUTH_MANAGER = "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
#: The processes of ``airflow standalone``, started one by one with ``isolate_triggerer``.
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
#: A new PID namespace with its own /proc; the forked child is SIGKILLed if unshare dies.
UNSHARE_ARGS = ("--pid", "--fork", "--mount-proc", "--kill-child")
#: Methods asked again after a timeout, a connection error or a 5xx: they change nothing.
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Longest wait for one HTTP answer; an overloaded API server took over 60 s for one GET.
REQUEST_TIMEOUT_S = 120.0
#: Overall deadline of an :meth:`LocalAirflow.api` call made without one.
API_DEADLINE_S = 300.0
_FIRST_PAUSE_S, _MAX_PAUSE_S = 1.0, 10.0
#: The unshare probe starts one Python process; minutes only when something is badly wrong.
PROBE_TIMEOUT_S = 120.0


class LocalAirflow(LocalServer):
    """A running Airflow on SQLite; use as a context manager or call start()/stop().

    By default one ``airflow standalone`` runs every component. With ``isolate_triggerer`` the
    components run as separate processes (``airflow api-server``, ``scheduler``,
    ``dag-processor``) and the triggerer in its own PID and mount namespace with its own
    ``/proc`` (``unshare --pid --fork --mount-proc``), as when Airflow's parts run in different
    containers or on different hosts: from there it cannot see processes the tasks started.
    """

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
        isolate_triggerer: bool = False,
        preload: Sequence[str] = (),
    ) -> None:
        """``request_timeout`` bounds one HTTP request; ``api_deadline`` is the overall deadline
        of an :meth:`api` call made without one (retries included). ``preload`` names modules
        every component imports when Airflow initialises (the home's ``config/airflow_local_settings.py``,
        Airflow's own hook): the LocalExecutor's task processes, forked from the scheduler, then
        find a DAG's operator modules imported instead of importing them for every task (2-6 s
        each on 2 busy cores)."""
        self.home = Path(home).resolve()
        self.dags_folder = Path(dags_folder).resolve()
        self._requested_port = port
        self.port = port or 0
        self.extra_env = dict(env or {})
        self.startup_timeout = startup_timeout
        self.request_timeout = request_timeout
        self.api_deadline = api_deadline
        self.isolate_triggerer = isolate_triggerer
        self.preload = tuple(preload)
        self._log_ports: tuple[int, int] = (0, 0)
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        self._token: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_files(self) -> dict[str, Path]:
        """Output of each process this class starts, in the home."""
        names = COMPONENTS if self.isolate_triggerer else ("standalone",)
        return {name: self.home / f"{name}.log" for name in names}

    @property
    def scheduler_log(self) -> Path:
        """The scheduler's output (``airflow standalone``'s, whose scheduler lines it prefixes)."""
        return self.log_files["scheduler" if self.isolate_triggerer else "standalone"]

    def wait_for_scheduler_log(self, *parts: str, timeout: float) -> str:
        """Wait until a line of the scheduler's output holds every one of ``parts`` and return it;
        ``TimeoutError`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        offset, pending = 0, b""
        while True:
            with open(self.scheduler_log, "rb") as out:
                out.seek(offset)
                chunk = out.read()
            offset += len(chunk)
            *lines, pending = (pending + chunk).split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                if all(part in line for part in parts):
                    return line
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no line with {list(parts)} in {self.scheduler_log} within {timeout:.0f} s")
            time.sleep(0.5)

    @property
    def log_file(self) -> Path:
        """The log to read first when the REST API misbehaves (the API server's output)."""
        return self.log_files["api-server" if self.isolate_triggerer else "standalone"]

    def environment(self) -> dict[str, str]:
        env = {**os.environ, **airflow_env(self.home, self.dags_folder), **self.extra_env}
        env.update(
            {
                "AIRFLOW__API__PORT": str(self.port),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
                "AIRFLOW__CORE__AUTH_MANAGER": SIMPLE_AUTH_MANAGER,  # standalone forces it too
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
                "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "PYTHONUNBUFFERED": "1",  # the logs are read while the processes run
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            }
        )
        if all(self._log_ports):  # not the fixed 8793/8794: other Airflows may run beside this one
            env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(self._log_ports[0])
            env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] = str(self._log_ports[1])
        return env

    def start(self) -> LocalAirflow:
        """Start and wait until every component is healthy.

        Raises :class:`PidNamespaceUnavailable` (before starting anything) when
        ``isolate_triggerer`` is set but ``unshare`` is missing or not permitted,
        :class:`AirflowHomeError` when a component exits or is not healthy in time; whatever
        was started is stopped again.
        """
        unshare = check_pid_namespaces() if self.isolate_triggerer else None
        if self._requested_port:
            ensure_port_free(self._requested_port, "Airflow API server")
        self.port = self._requested_port or free_port()
        ports = {self.port}
        while len(ports) < 3:  # the task and trigger log servers: two more, all different
            ports.add(free_port())
        worker_logs, trigger_logs = sorted(ports - {self.port})
        self._log_ports = (worker_logs, trigger_logs)
        prepare_airflow_home(self.home, self.dags_folder)
        self._write_local_settings()
        env = self.environment()
        try:
            if unshare is None:
                log.info("starting airflow standalone on %s (home %s)", self.url, self.home)
                self._spawn("standalone", [sys.executable, "-m", "airflow", "standalone"], env)
            else:
                log.info("starting Airflow on %s with the triggerer in its own PID namespace (home %s)",
                         self.url, self.home)
                for name in COMPONENTS:
                    command = [sys.executable, "-m", "airflow", name]
                    if name == "triggerer":
                        command = [unshare, *UNSHARE_ARGS, *command]
                    self._spawn(name, command, env)
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def _write_local_settings(self) -> None:
        """``config/airflow_local_settings.py`` importing :attr:`preload` (none: no such file)."""
        path = self.home / "config" / "airflow_local_settings.py"
        if not self.preload:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"import {name}  # noqa: F401" for name in self.preload]
        path.write_text('"""Written by LocalAirflow: modules every component imports once."""\n\n'
                        + "\n".join(lines) + "\n")

    def _spawn(self, name: str, command: list[str], env: Mapping[str, str]) -> None:
        """Start one process in its own session (its group is what stop() signals)."""
        with open(self.log_files[name], "ab") as out:
            self._processes[name] = subprocess.Popen(
                command, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )

    def _tails(self, lines: int = 30) -> str:
        parts = []
        for path in self.log_files.values():
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else []
            parts.append(f"--- {path} (last {len(text)} lines)\n" + "\n".join(text))
        return "\n".join(parts)

    def _wait_healthy(self) -> None:
        import requests

        deadline = time.monotonic() + self.startup_timeout
        last, exited = "no answer", ""
        while time.monotonic() < deadline:
            exited = ", ".join(f"{name} (exit code {proc.returncode})"
                               for name, proc in self._processes.items() if proc.poll() is not None)
            if exited:
                break
            try:
                left = max(0.1, deadline - time.monotonic())
                health = requests.get(f"{self.url}/api/v2/monitor/health",
                                      timeout=min(self.request_timeout, left)).json()
                states = {k: (v or {}).get("status") for k, v in health.items()}
                last = json.dumps(states)
                if all(states.get(k) == "healthy" for k in ("metadatabase", "scheduler", "triggerer",
                                                             "dag_processor")):
                    self._check_password_file()
                    log.info("Airflow healthy on %s (%s)", self.url, ", ".join(self._processes))
                    return
            except (requests.RequestException, ValueError) as exc:
                last = type(exc).__name__
            time.sleep(max(0.0, min(2.0, deadline - time.monotonic())))
        raise AirflowHomeError(
            found=f"{exited} exited" if exited
            else f"Airflow not healthy after {self.startup_timeout:.0f} s (last: {last})",
            expected="api-server, scheduler, dag-processor and triggerer reporting healthy",
            action=f"Read the logs in {self.home}.",
            detail=self._tails(),
        )

    def _check_password_file(self) -> None:
        """The API server writes the Simple auth manager's generated passwords when it starts
        (``airflow standalone`` asks it the same way); token() reads them from there."""
        path = self.home / PASSWORD_FILE
        try:
            known = USER in json.loads(path.read_text())
        except (OSError, ValueError):
            known = False
        if not known:
            raise AirflowHomeError(
                found=f"no password for {USER!r} in {path}",
                expected="the Simple auth manager's generated password file, written by the API server",
                action=f"Read {self.log_file}; is [core] simple_auth_manager_passwords_file set elsewhere?",
            )

    def triggerer_pid(self) -> int:
        """PID (in this PID namespace) of the ``airflow triggerer`` process.

        With ``isolate_triggerer`` that is the child ``unshare`` forked, PID 1 in its own
        namespace. ``LookupError`` when it is not running (or runs inside ``airflow standalone``).
        """
        proc = self._processes.get("triggerer")
        if proc is None or proc.poll() is not None:
            raise LookupError("no triggerer started by this LocalAirflow is running (isolate_triggerer=True)")
        children = _children(proc.pid)
        if len(children) != 1:
            raise LookupError(f"unshare (pid {proc.pid}) has children {children}, expected the triggerer")
        return children[0]

    def stop(self, timeout: float = 60.0) -> None:
        """Stop every process started (SIGTERM to each process group: ``airflow standalone``
        ignores Ctrl-C for a minute, its components stop on SIGTERM at once), SIGKILL what still
        runs after ``timeout`` seconds, give the groups' other members up to 15 s to exit, then
        SIGKILL the leftovers. The isolated triggerer's namespace ends with its PID 1."""
        from airflow_ckpt_provider.jobs.local import group_members

        procs, self._processes = self._processes, {}
        if not procs:
            return
        log.info("stopping Airflow on %s (%s)", self.url, ", ".join(procs))
        for proc in procs.values():
            if proc.poll() is None:  # every component of the group, standalone's included, gets SIGTERM
                _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for name, proc in procs.items():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("Airflow %s (pid %d) still runs %.0f s after it was asked to stop: killing it",
                            name, proc.pid, timeout)
                _signal_group(proc.pid, signal.SIGKILL)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    log.error("Airflow %s (pid %d) survived SIGKILL for %.0f s", name, proc.pid, timeout)
        grace = time.monotonic() + min(15.0, timeout)  # the components exit on their SIGTERM
        while any(group_members(proc.pid) for proc in procs.values()) and time.monotonic() < grace:
            time.sleep(0.2)
        for name, proc in procs.items():  # children its group leader left behind
            if group_members(proc.pid):
                log.warning("processes of Airflow %s's group %d outlived it: killing them", name, proc.pid)
                _signal_group(proc.pid, signal.SIGKILL)

    def processes(self) -> list[subprocess.Popen[bytes] | None]:
        return list(self._processes.values())

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
            passwords = json.loads((self.home / PASSWORD_FILE).read_text())
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


def check_pid_namespaces() -> str:
    """Path of ``unshare`` once it has run a process as PID 1 of a new PID namespace with its
    own ``/proc``; :class:`PidNamespaceUnavailable` when it is missing or not permitted."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise PidNamespaceUnavailable(
            found="no `unshare` command on PATH",
            expected="util-linux's unshare (usually /usr/bin/unshare)",
            action="Install util-linux (`apt-get install util-linux`), or start LocalAirflow without "
            "isolate_triggerer.",
        )
    probe = [unshare, *UNSHARE_ARGS, sys.executable, "-c", "import os; print(os.getpid())"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, check=False, timeout=PROBE_TIMEOUT_S)
        answer, code, output = done.stdout.strip(), done.returncode, (done.stderr or done.stdout).strip()
    except subprocess.TimeoutExpired:
        answer, code, output = "", None, f"no answer within {PROBE_TIMEOUT_S:.0f} s"
    if code != 0 or answer != "1":
        raise PidNamespaceUnavailable(
            found=f"`{' '.join(probe[:len(UNSHARE_ARGS) + 1])} python` exit code {code}, pid {answer or 'none'}",
            expected="a process running as PID 1 of a new PID namespace",
            action="Creating PID and mount namespaces needs root or CAP_SYS_ADMIN (in a container: "
            "--privileged or --cap-add SYS_ADMIN), or unprivileged user namespaces; else start "
            "LocalAirflow without isolate_triggerer.",
            detail=output[-2000:],
        )
    return unshare


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # kernels without CONFIG_PROC_CHILDREN: scan for the parent pid
        found = []
        for entry in Path("/proc").iterdir():
            try:
                stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
            except OSError:
                continue
            if stat and stat[stat.rfind(")") + 2:].split()[1] == str(pid):
                found.append(int(entry.name))
        return found


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
