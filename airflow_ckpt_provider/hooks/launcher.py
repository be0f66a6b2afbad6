"""Launch a streaming job DETACHED with spark-submit and find, watch and kill it afterwards.

``SparkSubmitOperator`` blocks for as long as the job runs, which for a streaming job is
forever. :class:`SparkLauncherHook` builds the same spark-submit command (the Spark
provider's :class:`SparkSubmitHook` resolves the Spark connection and the options) and
returns as soon as the job is submitted, with a :class:`LaunchHandle`:

* local (client mode; any master): spark-submit runs in its own session
  (``start_new_session``) with its output in a log file; the handle records pid and log file;
* Spark standalone cluster (``spark://`` + ``--deploy-mode cluster``): spark-submit returns
  after submission; the handle records the driver id. Spark refuses Python applications in
  standalone cluster mode, so a ``.py`` application is submitted through Spark's own
  ``org.apache.spark.deploy.PythonRunner`` with a tiny empty launcher jar as the primary
  resource; the ``.py`` file and that jar must exist at the same path on the workers;
* YARN cluster: ``spark.yarn.submit.waitAppCompletion=false``; the handle records the
  application id (command building is unit-tested; not run against a real YARN here).

Commands are argument lists, never a shell. The handover reaches the job as Spark conf keys
(see :mod:`airflow_ckpt_provider.spark.kafka`). Secrets in the conf reach spark-submit unchanged,
but every record of the command (task log, the handle's ``extra["command"]`` in XCom) and every
log tail shown is redacted (:mod:`airflow_ckpt_provider.checkpoint.secrets`); driver log files
are created readable by their owner only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_ckpt_provider.checkpoint.errors import EscalationFailed, LaunchFailed
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.secrets import find_secrets, is_sensitive_key, redact_command, redact_text
from airflow_ckpt_provider.spark.kafka import (
    CONF_CHECKPOINT_LOCATION,
    CONF_HANDOVER_JSON,
    CONF_STARTING_OFFSETS,
)

PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
YARN_NO_WAIT = "spark.yarn.submit.waitAppCompletion"
ALIVE_DRIVER_STATES = frozenset({"SUBMITTED", "RUNNING", "RELAUNCHING", "UNKNOWN"})
ALIVE_YARN_STATES = frozenset({"NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING"})
_DRIVER_ID = re.compile(r"driver-\d{14}-\d{4,}")
_YARN_APP_ID = re.compile(r"application_\d+_\d+")
_UI_URL = re.compile(r"started at (https?://\S+)")
_CONN_KEYS = ("master", "queue", "deploy_mode", "spark_binary", "namespace", "principal", "keytab",
              "rest_scheme", "rest_port", "rest_endpoint")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def launch_mode(master: str, deploy_mode: str | None) -> LaunchMode:
    """Where the driver runs for this master and deploy mode; ``ValueError`` for unsupported ones."""
    if (deploy_mode or "client") == "client":
        return LaunchMode.LOCAL
    if deploy_mode != "cluster":
        raise ValueError(f"deploy mode {deploy_mode!r}: expected 'client' or 'cluster'")
    if master.startswith("spark://"):
        if "," in master:
            raise ValueError("standalone masters with failover (spark://a,b) are not supported for cluster launches")
        return LaunchMode.STANDALONE_CLUSTER
    if master.startswith("yarn"):
        return LaunchMode.YARN_CLUSTER
    raise ValueError(f"cluster deploy mode on master {master!r}: only spark:// (standalone) and yarn are supported")


def default_master_ui_url(master: str) -> str:
    """``spark://host:7077`` -> ``http://host:8080`` (the standalone master's default UI port)."""
    host = master.removeprefix("spark://").rsplit(":", 1)[0]
    return f"http://{host}:8080"


def launcher_jar(folder: Path | None = None) -> Path:
    """A small empty jar used as the primary resource of Python apps in standalone cluster mode."""
    folder = folder or Path.home() / ".cache" / "airflow-ckpt-provider"
    path = folder / "ckpt-python-launcher.jar"
    if not path.is_file():
        private_dir(folder, 0o755)  # workers of a standalone cluster may read it
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        with open_private(partial, "wb", 0o644) as out, zipfile.ZipFile(out, "w") as jar:  # on a classpath:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: airflow-ckpt-provider\n\n")
        os.replace(partial, path)  # never writable by others
    return path


def resolve_binary(name: str) -> str:
    """An absolute path for ``name``: as given if it is a path, else on PATH, beside this
    interpreter (a virtualenv's bin/), in ``$SPARK_HOME/bin`` or in pyspark's own bin/."""
    if os.sep in name:
        return name
    candidates = [shutil.which(name), str(Path(sys.executable).parent / name)]
    if os.environ.get("SPARK_HOME"):
        candidates.append(str(Path(os.environ["SPARK_HOME"]) / "bin" / name))
    try:
        import pyspark

        candidates.append(str(Path(pyspark.__file__).parent / "bin" / name))
    except ImportError:
        pass
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return name


def _spark_home_env() -> dict[str, str]:
    """``SPARK_HOME`` for pyspark's launcher scripts when it is not set (they need it or python3)."""
    if os.environ.get("SPARK_HOME"):
        return {}
    try:
        import pyspark
    except ImportError:
        return {}
    return {"SPARK_HOME": str(Path(pyspark.__file__).parent)}


def tail_text(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``, secrets redacted (a tail is shown in logs and errors)."""
    return redact_text("\n".join(text.splitlines()[-lines:])) if lines > 0 else ""


def register_secrets(conf: Mapping[str, str]) -> None:
    """Give secret conf values to Airflow's secrets masker, so that whatever else logs them (task
    logs, the supervisor) masks them too: values of sensitive keys, and secrets inside other values
    (or inside those: the password of a JAAS config)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - Airflow 3 has it
        return
    for key, value in conf.items():
        text = str(value)
        for secret in ([text] if text and is_sensitive_key(key) else []) + find_secrets(text):
            mask_secret(secret)


def private_dir(folder: Path, mode: int = 0o700) -> Path:
    """Create ``folder`` (and parents) as needed with at most ``mode`` (default owner-only); an
    existing folder is left as it is."""
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True, mode=mode)
    return folder


def open_private(path: Path, mode: str = "ab", perms: int = 0o600) -> Any:  # noqa: ANN401 - a file object
    """Open ``path`` for writing with ``perms`` whatever the umask (default owner-only: driver
    logs and spark-submit output can hold what a job prints about its configuration)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), perms)
    try:
        os.fchmod(fd, perms)  # the umask may have taken bits away; an existing file keeps its mode
    except OSError:
        pass
    return os.fdopen(fd, mode)


def _tail_file(path: str | None, lines: int, max_bytes: int = 256_000) -> str:
    if not path:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            return tail_text(handle.read().decode("utf-8", errors="replace"), lines)
    except OSError:
        return ""


def _http_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


def _local_alive(pid: int) -> bool:
    from airflow_ckpt_provider.hooks.escalation import local_job_alive

    try:  # reap our own exited child so it does not linger as a zombie
        os.waitpid(pid, os.WNOHANG)
    except (ChildProcessError, OSError):
        pass
    return local_job_alive(pid)


class SparkLauncherHook(BaseHook):
    """Detached spark-submit launches (see the module doc).

    The Spark connection (``spark_conn_id``, the Spark provider's ``spark`` type) gives master,
    deploy mode, queue, principal/keytab and the spark-submit binary; ``master`` and
    ``deploy_mode`` given here win (then no connection is needed). ``submit_options`` are the
    :class:`SparkSubmitHook` arguments (``jars``, ``py_files``, ``driver_memory``, ...).
    ``master_ui_url`` is the standalone master's web UI, used to follow drivers (``/json/``), read
    their logs (through the worker UI) and kill them; default ``http://<master host>:8080``.
    """

    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_default"
    conn_type = "spark"
    hook_name = "Spark (detached launcher)"

    def __init__(
        self,
        spark_conn_id: str | None = None,
        *,
        master: str | None = None,
        deploy_mode: str | None = None,
        spark_binary: str | None = None,
        master_ui_url: str | None = None,
        env: Mapping[str, str] | None = None,
        log_dir: str | None = None,
        python_launcher_jar: str | None = None,
        submit_timeout: float = 300.0,
        submit_options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if not spark_conn_id and not master:
            spark_conn_id = self.default_conn_name
        self.spark_conn_id = spark_conn_id
        self.master = master
        self.deploy_mode = deploy_mode
        self.spark_binary = spark_binary
        self.master_ui_url = master_ui_url
        self.env = dict(env or {})
        self.log_dir = log_dir
        self.python_launcher_jar = python_launcher_jar
        self.submit_timeout = submit_timeout
        self.submit_options = dict(submit_options or {})

    # -- command building ------------------------------------------------------------------------

    def _submit_hook(self, *, conf: Mapping[str, str], name: str, application_args: Sequence[str],
                     java_class: str | None = None) -> Any:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        explicit = None
        if self.master:
            explicit = {key: None for key in _CONN_KEYS}
            explicit.update({"master": self.master, "deploy_mode": self.deploy_mode,
                             "spark_binary": self.spark_binary or "spark-submit",
                             "rest_scheme": "http", "rest_port": 6066})

        class _Detached(SparkSubmitHook):  # the connection factory and the log masking differ
            def _mask_cmd(inner, connection_cmd: str | list[str]) -> str:  # noqa: N805
                if isinstance(connection_cmd, str):  # one line of spark-submit output
                    return redact_text(super()._mask_cmd(connection_cmd))
                return super()._mask_cmd(redact_command(connection_cmd))

            def _resolve_connection(inner) -> dict[str, Any]:  # noqa: N805
                if explicit is None:
                    data = super()._resolve_connection()
                    if self.deploy_mode:
                        data["deploy_mode"] = self.deploy_mode
                    return data
                return {**explicit, "principal": inner._principal, "keytab": inner._keytab}

        options = dict(self.submit_options)
        if java_class:
            options["java_class"] = java_class
        return _Detached(conf=dict(conf), conn_id=self.spark_conn_id or self.default_conn_name, name=name,
                         application_args=list(application_args), spark_binary=self.spark_binary,
                         deploy_mode=self.deploy_mode, **options)

    def build_command(
        self,
        application: str,
        *,
        application_args: Sequence[str] = (),
        conf: Mapping[str, str] | None = None,
        name: str = "ckpt-stream",
        checkpoint_uri: str | None = None,
        starting_offsets: str | None = None,
        handover_json: str | None = None,
    ) -> tuple[LaunchMode, list[str], dict[str, str]]:
        """(mode, argument list, resolved connection) of the spark-submit for this launch.

        The handover goes in as ``--conf spark.ckpt.*``; YARN cluster launches get
        ``spark.yarn.submit.waitAppCompletion=false``; a ``.py`` application in standalone
        cluster mode runs through ``PythonRunner`` (see the module doc).
        """
        if not self.master:  # the Spark provider would silently fall back to master "yarn"
            from airflow.sdk.exceptions import AirflowNotFoundException

            try:
                self.get_connection(self.spark_conn_id or self.default_conn_name)
            except AirflowNotFoundException:
                raise LaunchFailed(found=f"no Airflow connection {self.spark_conn_id!r}",
                                   expected="a Spark connection (type spark) or an explicit master",
                                   action="Create the connection or pass master= (and deploy_mode=); "
                                   "nothing was started.") from None
        full_conf = dict(conf or {})
        register_secrets(full_conf)
        if checkpoint_uri:
            full_conf[CONF_CHECKPOINT_LOCATION] = checkpoint_uri
        if starting_offsets:
            full_conf[CONF_STARTING_OFFSETS] = starting_offsets
        if handover_json:
            full_conf[CONF_HANDOVER_JSON] = handover_json
        probe = self._submit_hook(conf=full_conf, name=name, application_args=application_args)
        connection = dict(probe._connection)
        mode = launch_mode(connection["master"], connection["deploy_mode"])
        if mode is LaunchMode.YARN_CLUSTER:
            if str(full_conf.get(YARN_NO_WAIT, "false")).lower() != "false":
                raise ValueError(f"{YARN_NO_WAIT} must be false for a detached launch")
            full_conf[YARN_NO_WAIT] = "false"
        hook = probe
        if mode is LaunchMode.STANDALONE_CLUSTER and application.endswith(".py"):
            py_files = self.submit_options.get("py_files") or ""
            jar = self.python_launcher_jar or str(launcher_jar())
            hook = self._submit_hook(conf=full_conf, name=name, java_class=PYTHON_RUNNER,
                                     application_args=[application, py_files, *application_args])
            hook._py_files = None  # passed to PythonRunner instead
            application = jar
        elif mode is LaunchMode.YARN_CLUSTER:
            hook = self._submit_hook(conf=full_conf, name=name, application_args=application_args)
        command = hook._build_spark_submit_command(application)
        command[0] = resolve_binary(command[0])
        return mode, command, {k: str(v) for k, v in connection.items() if v is not None}

    # -- launch ----------------------------------------------------------------------------------

    def _log_path(self, name: str) -> Path:
        folder = Path(self.log_dir) if self.log_dir else Path(os.environ.get("TMPDIR", "/tmp")) / "airflow-ckpt-launch"
        private_dir(folder)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        return folder / f"{safe}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%S%f')}.log"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(_spark_home_env())
        env.update(self.env)
        return env

    def launch(
        self,
        application: str,
        *,
        checkpoint_uri: str,
        application_args: Sequence[str] = (),
        conf: Mapping[str, str] | None = None,
        name: str = "ckpt-stream",
        starting_offsets: str | None = None,
        handover_json: str | None = None,
    ) -> LaunchHandle:
        """Submit and return at once with the handle. Raises :class:`LaunchFailed` (with the
        output tail) when spark-submit cannot start, exits non-zero in cluster mode, or prints
        no driver/application id."""
        mode, command, connection = self.build_command(
            application, application_args=application_args, conf=conf, name=name,
            checkpoint_uri=checkpoint_uri, starting_offsets=starting_offsets, handover_json=handover_json,
        )
        log_path = self._log_path(name)
        self.log.info("launching %s (%s) on %s; log %s", name, mode.value, connection.get("master"), log_path)
        started_at = utc_now()
        env = self._env()
        if mode is LaunchMode.LOCAL:
            try:
                with open_private(log_path) as out:
                    process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, env=env, start_new_session=True)
            except OSError as exc:
                raise LaunchFailed(found=f"{command[0]} could not start ({exc})",
                                   expected="a spark-submit executable", path=str(log_path)) from None
            self.log.info("driver runs as process group %d", process.pid)
            return LaunchHandle(mode=mode, checkpoint_uri=checkpoint_uri, app_name=name, started_at=started_at,
                                pid=process.pid, master=connection.get("master"), log_path=str(log_path),
                                ui_url=self._conf_ui_url(conf), extra={"command": json.dumps(redact_command(command))})
        output = self._run_submit(command, env, log_path)
        if mode is LaunchMode.STANDALONE_CLUSTER:
            match = _DRIVER_ID.search(output)
            if not match:
                raise LaunchFailed(found="no driver id in the spark-submit output",
                                   expected="'Driver successfully submitted as driver-...'",
                                   log_tail=tail_text(output, 40), path=str(log_path))
            ui = self.master_ui_url or default_master_ui_url(connection["master"])
            self.log.info("driver %s submitted to %s", match.group(0), connection["master"])
            return LaunchHandle(mode=mode, checkpoint_uri=checkpoint_uri, app_name=name, started_at=started_at,
                                driver_id=match.group(0), master=connection["master"], log_path=str(log_path),
                                extra={"master_ui_url": ui.rstrip("/")})
        match = _YARN_APP_ID.search(output)
        if not match:
            raise LaunchFailed(found="no application id in the spark-submit output",
                               expected="application_<cluster>_<n>", log_tail=tail_text(output, 40),
                               path=str(log_path))
        return LaunchHandle(mode=mode, checkpoint_uri=checkpoint_uri, app_name=name, started_at=started_at,
                            application_id=match.group(0), master=connection["master"], log_path=str(log_path))

    def _run_submit(self, command: list[str], env: dict[str, str], log_path: Path) -> str:
        try:
            done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=env, timeout=self.submit_timeout, stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            output = exc.stdout if isinstance(exc.stdout, str) else (exc.stdout or b"").decode(errors="replace")
            with open_private(log_path, "w") as out:
                out.write(output)
            raise LaunchFailed(found=f"spark-submit still running after {self.submit_timeout:g} s",
                               expected="spark-submit to return after the submission",
                               log_tail=tail_text(output, 40), path=str(log_path)) from None
        except OSError as exc:
            raise LaunchFailed(found=f"{command[0]} could not start ({exc})",
                               expected="a spark-submit executable", path=str(log_path)) from None
        with open_private(log_path, "w") as out:
            out.write(done.stdout)
        if done.returncode != 0:
            raise LaunchFailed(found=f"spark-submit exit code {done.returncode}", expected="exit code 0",
                               log_tail=tail_text(done.stdout, 40), path=str(log_path))
        return done.stdout

    @staticmethod
    def _conf_ui_url(conf: Mapping[str, str] | None) -> str | None:
        conf = conf or {}
        if str(conf.get("spark.ui.enabled", "true")).lower() == "false" or "spark.ui.port" not in conf:
            return None
        host = conf.get("spark.driver.host") or "127.0.0.1"
        return f"http://{host}:{conf['spark.ui.port']}"

    # -- follow ----------------------------------------------------------------------------------

    def driver_state(self, handle: LaunchHandle) -> str:
        """RUNNING/EXITED (local), the master's driver state (standalone) or the YARN state."""
        if handle.mode is LaunchMode.LOCAL:
            return "RUNNING" if _local_alive(int(handle.pid or 0)) else "EXITED"
        if handle.mode is LaunchMode.STANDALONE_CLUSTER:
            driver = self._standalone_driver(handle)
            return str(driver.get("state", "UNKNOWN")) if driver else "NOT_FOUND"
        done = subprocess.run([resolve_binary("yarn"), "application", "-status", str(handle.application_id)],
                              capture_output=True, text=True, timeout=120, check=False)
        match = re.search(r"\bState\s*:\s*(\w+)", done.stdout)
        return match.group(1) if match else "UNKNOWN"

    def is_alive(self, handle: LaunchHandle) -> bool:
        """Whether the job still runs (a standalone driver the master no longer lists is dead)."""
        state = self.driver_state(handle)
        if handle.mode is LaunchMode.LOCAL:
            return state == "RUNNING"
        if handle.mode is LaunchMode.STANDALONE_CLUSTER:
            return state in ALIVE_DRIVER_STATES
        return state in ALIVE_YARN_STATES

    def _master_state(self, handle: LaunchHandle) -> dict[str, Any]:
        ui = handle.extra.get("master_ui_url") or default_master_ui_url(str(handle.master))
        return _http_json(ui + "/json/")

    def _standalone_driver(self, handle: LaunchHandle) -> dict[str, Any] | None:
        state = self._master_state(handle)
        for driver in list(state.get("activedrivers", [])) + list(state.get("completeddrivers", [])):
            if driver.get("id") == handle.driver_id:
                driver["_workers"] = state.get("workers", [])
                return driver
        return None

    def log_tail(self, handle: LaunchHandle, lines: int = 50) -> str:
        """The last ``lines`` of the driver log: the local log file; for a standalone driver its
        stderr and stdout (a Python driver's own output) through its worker's web UI, else the
        spark-submit output; for YARN the spark-submit output. Secrets are redacted."""
        if handle.mode is LaunchMode.STANDALONE_CLUSTER:
            try:
                parts = [f"==> {kind} <==\n{text}" for kind in ("stderr", "stdout")
                         if (text := self._worker_log(handle, kind, lines))]
                if parts:
                    return "\n".join(parts)
            except (OSError, ValueError, urllib.error.URLError) as exc:
                self.log.warning("could not read the driver log of %s: %s", handle.driver_id, exc)
        return _tail_file(handle.log_path, lines)

    def _worker_log(self, handle: LaunchHandle, kind: str, lines: int) -> str:
        driver = self._standalone_driver(handle)
        if not driver:
            return ""
        worker = next((w for w in driver.get("_workers", []) if w.get("id") == driver.get("worker")), None)
        if not worker or not worker.get("webuiaddress"):
            return ""
        query = urllib.parse.urlencode({"driverId": handle.driver_id, "logType": kind, "byteLength": 200_000})
        with urllib.request.urlopen(f"{worker['webuiaddress']}/log/?{query}", timeout=10) as response:
            text = response.read().decode("utf-8", errors="replace")
        if text.startswith("==== "):  # "==== Bytes a-b of n of <path> ====" header
            text = text.split("\n", 1)[1] if "\n" in text else ""
        return tail_text(text.strip("\n"), lines)

    def discover_ui_url(self, handle: LaunchHandle) -> str | None:
        """The Spark UI address the driver logged ("... started at http://..."), else the handle's."""
        found = _UI_URL.findall(self.log_tail(handle, 5000))
        return found[-1] if found else handle.ui_url

    # -- kill ------------------------------------------------------------------------------------

    def kill(self, handle: LaunchHandle, *, timeout: float = 60.0) -> str:
        """Kill the job; returns what was done. Local and YARN go through
        :func:`airflow_ckpt_provider.hooks.escalation.kill_launched_job`; a standalone driver is
        killed through the master's web UI (``spark.ui.killEnabled``), else with Spark's legacy
        ``org.apache.spark.deploy.Client kill`` (``spark-submit --kill`` needs the master's REST
        server, which is off by default). Raises :class:`EscalationFailed`."""
        if handle.mode is not LaunchMode.STANDALONE_CLUSTER:
            from airflow_ckpt_provider.hooks.escalation import kill_launched_job

            return kill_launched_job(handle).action
        try:
            if not self.is_alive(handle):
                return f"driver {handle.driver_id} had ended already"
        except (OSError, ValueError) as exc:  # master UI unreachable: try Spark's Client below
            self.log.warning("cannot read the driver state from the master UI: %s", exc)
        ui = handle.extra.get("master_ui_url") or default_master_ui_url(str(handle.master))
        data = urllib.parse.urlencode({"id": handle.driver_id, "terminate": "true"}).encode()
        try:
            urllib.request.urlopen(urllib.request.Request(f"{ui}/driver/kill/", data=data, method="POST"),
                                   timeout=10).close()
        except (OSError, urllib.error.URLError) as exc:
            self.log.warning("kill through the master UI failed (%s); using Spark's Client", exc)
        if self._wait_dead(handle, min(timeout, 20.0)):
            return f"killed driver {handle.driver_id} through {ui}"
        command = [resolve_binary("spark-class"), "org.apache.spark.deploy.Client", "kill", str(handle.master),
                   str(handle.driver_id)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False,
                              env=self._env())
        if self._wait_dead(handle, timeout):
            return " ".join(command)
        raise EscalationFailed(found=f"driver {handle.driver_id} still {self.driver_state(handle)} "
                               f"(Client exit code {done.returncode})", expected="the driver KILLED")

    def _wait_dead(self, handle: LaunchHandle, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if not self.is_alive(handle):
                    return True
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        return False
