"""A Spark standalone master and one worker on 127.0.0.1, from pyspark's own distribution.

``LocalStandalone`` starts ``spark-class org.apache.spark.deploy.master.Master`` and
``...deploy.worker.Worker`` (pyspark ships ``bin/spark-class``), each in its own process group
with its log in ``work_dir``, waits until the master's JSON (``http://127.0.0.1:<ui>/json/``)
lists the worker as ALIVE, and stops both cleanly. Used by the cluster-mode tests.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.local import jvm
from airflow_ckpt_provider.local.processes import LOOPBACK, LocalServer, free_port, log_tail, stop_process_group
from tests.harness.errors import StandaloneStartFailed

log = logging.getLogger(__name__)


def spark_home() -> Path:
    """``$SPARK_HOME`` if set, else the folder of the installed ``pyspark`` package."""
    configured = os.environ.get("SPARK_HOME")
    if configured:
        return Path(configured)
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def master_json(ui_url: str, timeout: float = 5.0) -> dict[str, Any]:
    """The master's status JSON (workers, active and completed drivers and applications)."""
    with urllib.request.urlopen(ui_url.rstrip("/") + "/json/", timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


class LocalStandalone(LocalServer):
    """One master and one worker (``cores`` cores, ``memory`` for drivers and executors).

    The worker runs drivers and executors with this interpreter's environment (``SPARK_HOME``
    = pyspark's folder, ``PYSPARK_PYTHON`` = ``sys.executable``). ``start`` raises
    :class:`StandaloneStartFailed` (with the log tail) after stopping whatever it started.
    """

    def __init__(self, work_dir: Path | str, *, cores: int = 2, memory: str = "2g",
                 startup_timeout: float = 90.0) -> None:
        self.work_dir = Path(work_dir)
        self.cores = cores
        self.memory = memory
        self.startup_timeout = startup_timeout
        self.port = self.ui_port = self.worker_ui_port = 0
        self._master: subprocess.Popen[bytes] | None = None
        self._worker: subprocess.Popen[bytes] | None = None

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ui_port}"

    @property
    def worker_dir(self) -> Path:
        return self.work_dir / "worker"

    def processes(self) -> list[subprocess.Popen[bytes] | None]:
        return [self._master, self._worker]

    def env(self) -> dict[str, str]:
        """Environment for the daemons (and so for drivers and executors they launch)."""
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOCAL_HOSTNAME": LOOPBACK,
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_LOG_DIR": str(self.work_dir),
            "SPARK_NO_DAEMONIZE": "1",
        })
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        return env

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        spark_class = spark_home() / "bin" / "spark-class"
        with open(self.work_dir / f"{name}.log", "ab") as out:
            return subprocess.Popen(
                [str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=self.env(), start_new_session=True,
            )

    def start(self) -> LocalStandalone:
        """Start master and worker; return once the worker is registered and ALIVE."""
        if self.running:
            return self
        jvm.require_java()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.worker_dir.mkdir(exist_ok=True)
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        log.info("starting Spark standalone master %s (UI %s)", self.master_url, self.ui_url)
        self._master = self._spawn("master", [
            "org.apache.spark.deploy.master.Master", "--host", LOOPBACK,
            "--port", str(self.port), "--webui-port", str(self.ui_port),
        ])
        try:
            self._wait(lambda state: True, "the master's JSON status page", self._master, "master")
            self._worker = self._spawn("worker", [
                "org.apache.spark.deploy.worker.Worker", "--host", LOOPBACK,
                "--webui-port", str(self.worker_ui_port), "--cores", str(self.cores),
                "--memory", self.memory, "--work-dir", str(self.worker_dir), self.master_url,
            ])
            self._wait(lambda state: any(w.get("state") == "ALIVE" for w in state.get("workers", [])),
                       "a registered ALIVE worker", self._worker, "worker")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, ready: Any, what: str, process: subprocess.Popen[bytes], name: str) -> None:
        started = time.monotonic()
        last = "no answer yet"
        while time.monotonic() < started + self.startup_timeout:
            code = process.poll()
            if code is not None:
                raise StandaloneStartFailed(
                    found=f"the {name} process exited with code {code}", expected=f"a running {name}",
                    action=f"Read {self.work_dir / (name + '.log')} for the cause.",
                    detail=log_tail(self.work_dir / f"{name}.log"),
                )
            try:
                if ready(master_json(self.ui_url, timeout=2)):
                    log.info("Spark standalone %s ready after %.1f s", name, time.monotonic() - started)
                    return
                last = "not ready yet"
            except (OSError, ValueError, urllib.error.URLError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(0.5)
        raise StandaloneStartFailed(
            found=f"no {what} at {self.ui_url}/json/ after {self.startup_timeout:.0f} s (last: {last})",
            expected=what, action="Read the logs in " + str(self.work_dir) + "; on a slow machine "
            "raise startup_timeout.", detail=log_tail(self.work_dir / f"{name}.log"),
        )

    def drivers(self) -> list[dict[str, Any]]:
        """Active and completed drivers as the master reports them (id, state, worker, ...)."""
        state = master_json(self.ui_url)
        return list(state.get("activedrivers", [])) + list(state.get("completeddrivers", []))

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the worker (and the drivers it runs), then the master. Idempotent."""
        for attr in ("_worker", "_master"):
            proc = getattr(self, attr)
            setattr(self, attr, None)
            stop_process_group(proc, f"Spark standalone {attr[1:]}", timeout)

