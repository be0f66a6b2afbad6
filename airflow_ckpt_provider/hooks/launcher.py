"""Launch a streaming job DETACHED with spark-submit; follow and kill it through its job kind.

``SparkSubmitOperator`` blocks for as long as the job runs, which for a streaming job is
forever. :class:`SparkLauncherHook` builds the same spark-submit command (the Spark
provider's :class:`SparkSubmitHook` resolves the Spark connection and the options), submits it
through the job kind of the master and deploy mode (:mod:`airflow_ckpt_provider.jobs`) and
returns as soon as the job is submitted, with a :class:`LaunchHandle`:

* local (client mode; any master): spark-submit runs under a supervisor in its own session
  with its output in a log file; the handle records the process group, the launching process's
  scope (host, boot id, PID namespace) and the launch id the supervisor records the driver's
  state under in the checkpoint (``_ckpt/driver.json``); a ``.py`` application whose conf and
  environment name no Python (``spark.pyspark.python``, ``PYSPARK_PYTHON``, ...) runs on this
  interpreter, which can import the provider (the first ``python3`` on PATH usually cannot, and
  its driver would die with ``ModuleNotFoundError`` behind a normal-looking handle);
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

import os
import re
import sys
import uuid
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_ckpt_provider.checkpoint.errors import LaunchFailed
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.secrets import find_secrets, is_sensitive_key, redact_command, redact_text
from airflow_ckpt_provider.clock import utc_iso, utc_now
from airflow_ckpt_provider.jobs import DriverState, JobOptions, LaunchedJob, SubmitRequest, job_for
from airflow_ckpt_provider.jobs.base import resolve_binary
from airflow_ckpt_provider.jobs.builtin import BUILTIN_KINDS
from airflow_ckpt_provider.spark.kafka import (
    CONF_CHECKPOINT_LOCATION,
    CONF_HANDOVER_JSON,
    CONF_STARTING_OFFSETS,
)
from airflow_ckpt_provider.storage.files import open_private, private_dir

PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
YARN_NO_WAIT = "spark.yarn.submit.waitAppCompletion"
_UI_URL = re.compile(r"started at (https?://\S+)")
#: Where a Python driver's interpreter comes from (Spark conf keys, then environment variables).
PYSPARK_PYTHON_CONF = ("spark.pyspark.python", "spark.pyspark.driver.python")
PYSPARK_PYTHON_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
_CONN_KEYS = ("master", "queue", "deploy_mode", "spark_binary", "namespace", "principal", "keytab",
              "rest_scheme", "rest_port", "rest_endpoint")


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


def _spark_home_env() -> dict[str, str]:
    """``SPARK_HOME`` for pyspark's launcher scripts when it is not set (they need it or python3)."""
    if os.environ.get("SPARK_HOME"):
        return {}
    try:
        import pyspark
    except ImportError:
        return {}
    return {"SPARK_HOME": str(Path(pyspark.__file__).parent)}


def spark_home_of(binary: str | None) -> str | None:
    """The Spark a spark-submit given by path belongs to, when its layout says so: a Spark
    distribution's (or pyspark's) ``<home>/bin/spark-submit`` next to ``<home>/jars``, or the
    ``bin/spark-submit`` of a virtualenv with pip's pyspark (``find_spark_home.py`` beside it). None
    for a bare command name or another layout."""
    if not binary or os.sep not in binary:
        return None
    folder = Path(binary).parent
    if (folder.parent / "jars").is_dir():
        return str(folder.parent)
    if (folder / "find_spark_home.py").is_file():
        found = sorted(folder.parent.glob("lib/python*/site-packages/pyspark/jars"))
        if len(found) == 1:
            return str(found[0].parent)
    return None


_RELEASE = re.compile(r"^Spark (\d+\.\d+\.\d+)")
_PYSPARK_VERSION = re.compile(r"""^__version__(?:\s*:\s*str)?\s*=\s*["']([^"']+)["']""", re.M)


def spark_version_at(home: str | None) -> str | None:
    """The version of the Spark at ``home`` ("4.2.0"): a distribution's ``RELEASE`` file, else the
    ``pyspark/version.py`` of pip's pyspark (``home`` is that package) or of a distribution's
    ``python/``; None when none says."""
    if not home:
        return None
    root = Path(home)
    try:
        match = _RELEASE.match((root / "RELEASE").read_text(encoding="utf-8", errors="replace"))
        if match:
            return match.group(1)
    except OSError:
        pass
    for candidate in (root / "version.py", root / "python" / "pyspark" / "version.py"):
        try:
            found = _PYSPARK_VERSION.search(candidate.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        if found:
            return found.group(1)
    return None


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


class SparkLauncherHook(BaseHook):
    """Detached spark-submit launches (see the module doc).

    The Spark connection (``spark_conn_id``, the Spark provider's ``spark`` type) gives master,
    deploy mode, queue, principal/keytab and the spark-submit binary; ``master`` and
    ``deploy_mode`` given here win (then no connection is needed). ``spark_home`` picks the Spark
    (a major upgrade runs each version on its own): spark-submit runs with that ``SPARK_HOME``
    and is ``<spark_home>/bin/spark-submit`` unless ``spark_binary`` is a path. A
    ``spark_binary`` path alone implies its Spark when its layout shows it (:func:`spark_home_of`);
    otherwise ``SPARK_HOME`` is the environment's, else the installed pyspark's. ``submit_options`` are the
    :class:`SparkSubmitHook` arguments (``jars``, ``py_files``, ``driver_memory``, ...).
    ``master_ui_url`` is the standalone master's web UI, used to follow drivers (``/json/``), read
    their logs (through the worker UI) and kill them; default ``http://<master host>:8080``.
    Following, log tails and kills go through the handle's job kind (:func:`jobs.job_for`).
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
        spark_home: str | None = None,
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
        self.spark_home = spark_home or None
        self.spark_binary = self._binary(spark_binary or None, self.spark_home)
        self.master_ui_url = master_ui_url
        self.env = dict(env or {})
        self.log_dir = log_dir
        self.python_launcher_jar = python_launcher_jar
        self.submit_timeout = submit_timeout
        self.submit_options = dict(submit_options or {})

    @staticmethod
    def _binary(spark_binary: str | None, spark_home: str | None) -> str | None:
        """``spark_binary``, or the one in ``<spark_home>/bin`` when it is a bare name (or unset)."""
        if spark_home and (not spark_binary or os.sep not in spark_binary):
            return str(Path(spark_home) / "bin" / (spark_binary or "spark-submit"))
        return spark_binary

    @property
    def spark_version(self) -> str | None:
        """The version of the Spark this hook submits to, when its ``SPARK_HOME`` says
        (:func:`spark_version_at`); None for a cluster connection's or an unknown layout."""
        home = self._home_env().get("SPARK_HOME") or self.env.get("SPARK_HOME") or os.environ.get("SPARK_HOME")
        return spark_version_at(home)

    def _home_env(self) -> dict[str, str]:
        """``SPARK_HOME`` for this launch: ``spark_home``, else ``env``'s, else the one the binary's
        layout implies, else pyspark's when the environment has none."""
        if self.spark_home:
            return {"SPARK_HOME": self.spark_home}
        if self.env.get("SPARK_HOME"):
            return {}
        implied = spark_home_of(self.spark_binary)
        return {"SPARK_HOME": implied} if implied else _spark_home_env()

    # -- command building ------------------------------------------------------------------------

    def _submit_hook(self, *, conf: Mapping[str, str], name: str, application_args: Sequence[str],
                     java_class: str | None = None) -> Any:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        explicit: dict[str, Any] | None = None
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
        cluster mode runs through ``PythonRunner`` (see the module doc); a local ``.py`` launch
        without a driver Python gets ``spark.pyspark.python`` = this interpreter.
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
        if mode is LaunchMode.LOCAL and application.endswith(".py") and self._needs_python(full_conf):
            # without it the driver runs the first `python3` on PATH, which cannot import this package
            # (or the job's other dependencies): it would die while the launch looked fine
            self.log.info("spark.pyspark.python not set: the driver runs %s (this interpreter)", sys.executable)
            full_conf["spark.pyspark.python"] = sys.executable
            probe = self._submit_hook(conf=full_conf, name=name, application_args=application_args)
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
        command[0] = resolve_binary(command[0], {**self.env, **self._home_env()})
        return mode, command, {k: str(v) for k, v in connection.items() if v is not None}

    def _needs_python(self, conf: Mapping[str, str]) -> bool:
        """Whether neither the conf nor the launch environment names the driver's Python."""
        env = self._env()
        return not any(conf.get(key) for key in PYSPARK_PYTHON_CONF) and not any(
            env.get(key) for key in PYSPARK_PYTHON_ENV)

    # -- launch ----------------------------------------------------------------------------------

    def _log_path(self, name: str) -> Path:
        folder = Path(self.log_dir) if self.log_dir else Path(os.environ.get("TMPDIR", "/tmp")) / "airflow-ckpt-launch"
        private_dir(folder)
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name)
        return folder / f"{safe}-{utc_now().strftime('%Y%m%dT%H%M%S%f')}.log"

    def _env(self) -> dict[str, str]:
        return {**os.environ, **self.env, **self._home_env()}

    def _options(self) -> JobOptions:
        return JobOptions(env={**self.env, **self._home_env()})

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
        storage_options: Mapping[str, Any] | None = None,
        launch_id: str | None = None,
    ) -> LaunchHandle:
        """Submit through the job kind and return at once with the handle. Raises
        :class:`LaunchFailed` (with the output tail) when spark-submit cannot start, exits
        non-zero in cluster mode, or prints no driver/application id. ``storage_options`` are the
        fsspec options of the checkpoint's storage (a local driver's supervisor writes its
        record there); ``launch_id`` names the launch in that record (default: a new one)."""
        mode, command, connection = self.build_command(
            application, application_args=application_args, conf=conf, name=name,
            checkpoint_uri=checkpoint_uri, starting_offsets=starting_offsets, handover_json=handover_json,
        )
        log_path = self._log_path(name)
        self.log.info("launching %s (%s) on %s; log %s", name, mode.value, connection.get("master"), log_path)
        request = SubmitRequest(
            command=command, env=self._env(), log_path=log_path, checkpoint_uri=checkpoint_uri, app_name=name,
            master=connection.get("master", ""), started_at=utc_iso(timespec="seconds"),
            submit_timeout=self.submit_timeout,
            ui_url=self._conf_ui_url(conf), master_ui_url=self.master_ui_url,
            storage_options=dict(storage_options or {}), launch_id=launch_id or uuid.uuid4().hex,
        )
        return BUILTIN_KINDS[mode.value].launch(request, self._options()).handle

    @staticmethod
    def _conf_ui_url(conf: Mapping[str, str] | None) -> str | None:
        conf = conf or {}
        if str(conf.get("spark.ui.enabled", "true")).lower() == "false" or "spark.ui.port" not in conf:
            return None
        host = conf.get("spark.driver.host") or "127.0.0.1"
        return f"http://{host}:{conf['spark.ui.port']}"

    # -- follow and kill, through the handle's job kind ---------------------------------------------

    def job(self, handle: LaunchHandle) -> LaunchedJob:
        """The :class:`LaunchedJob` following ``handle``."""
        return job_for(handle, self._options())

    def driver_state(self, handle: LaunchHandle) -> DriverState:
        """The job kind's answer (UNKNOWN when it cannot tell from here)."""
        return self.job(handle).state()

    def is_alive(self, handle: LaunchHandle) -> bool | None:
        """Whether the job still runs; None when this process cannot tell (see :class:`DriverState`)."""
        return self.driver_state(handle).alive

    def log_tail(self, handle: LaunchHandle, lines: int = 50) -> str:
        """The last ``lines`` of the driver log, secrets redacted."""
        return self.job(handle).log_tail(lines)

    def discover_ui_url(self, handle: LaunchHandle) -> str | None:
        """The Spark UI address the driver logged ("... started at http://..."), else the handle's."""
        found = _UI_URL.findall(self.log_tail(handle, 5000))
        return found[-1] if found else handle.ui_url

    def kill(self, handle: LaunchHandle, *, timeout: float = 60.0) -> str:
        """Kill the job through its kind; returns what was done. Raises :class:`EscalationFailed`
        (for a local driver asked from another host or PID namespace: nothing is signalled)."""
        return self.job(handle).kill(timeout=timeout)
