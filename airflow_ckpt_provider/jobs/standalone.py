"""Spark standalone cluster job kind: the driver runs on a worker; the master knows its state.

State, log and kill go through the master's web UI (``/json/``, the worker's ``/log/``, and
``/driver/kill/``, which needs ``spark.ui.killEnabled``, on by default), reachable from any host
that can reach the master: no process id is involved. When the UI kill does not take, Spark's
own ``org.apache.spark.deploy.Client kill`` is used (``spark-submit --kill`` needs the master's
REST server, off by default).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, ClassVar

from airflow_ckpt_provider.checkpoint.errors import EscalationFailed, LaunchFailed
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.old_job import STANDALONE_DRIVER_ID
from airflow_ckpt_provider.jobs.base import (
    DriverState,
    JobOfKind,
    JobOptions,
    SubmitRequest,
    resolve_binary,
    run_command,
    tail_file,
    tail_text,
)
from airflow_ckpt_provider.storage.files import open_private

log = logging.getLogger(__name__)

#: The master's driver states in DriverState words.
_STATES = {
    "SUBMITTED": DriverState.SUBMITTED, "RUNNING": DriverState.RUNNING, "RELAUNCHING": DriverState.SUBMITTED,
    "FINISHED": DriverState.FINISHED, "FAILED": DriverState.FAILED, "ERROR": DriverState.FAILED,
    "KILLED": DriverState.KILLED, "UNKNOWN": DriverState.UNKNOWN,
}


def default_master_ui_url(master: str) -> str:
    """``spark://host:7077`` -> ``http://host:8080`` (the standalone master's default UI port)."""
    host = master.removeprefix("spark://").rsplit(":", 1)[0]
    return f"http://{host}:8080"


def _http_json(url: str, timeout: float = 10.0) -> Any:  # noqa: ANN401 - parsed JSON
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read().decode("utf-8"))


def submit(request: SubmitRequest, options: JobOptions, *, what: str) -> str:
    """Run a cluster-mode spark-submit that returns after the submission; its output (also
    written to the request's log file). :class:`LaunchFailed` on a start failure, a timeout or a
    non-zero exit, with the output tail."""
    env = {**request.env, **options.env}
    try:
        done = run_command(request.command, JobOptions(env=env, command_timeout=request.submit_timeout,
                                                       runner=options.runner), what=what)
    except OSError as exc:
        raise LaunchFailed(found=str(exc), expected="spark-submit to return after the submission",
                           path=str(request.log_path)) from None
    output = "\n".join(part for part in (done.stdout, done.stderr) if part)
    with open_private(request.log_path, "w") as out:
        out.write(output)
    if done.returncode != 0:
        raise LaunchFailed(found=f"spark-submit exit code {done.returncode}", expected="exit code 0",
                           log_tail=tail_text(output, 40), path=str(request.log_path))
    return output


class StandaloneJob(JobOfKind):
    """A driver in a Spark standalone cluster (see the module doc)."""

    kind: ClassVar[str] = LaunchMode.STANDALONE_CLUSTER.value

    @classmethod
    def launch(cls, request: SubmitRequest, options: JobOptions | None = None) -> StandaloneJob:
        options = options or JobOptions()
        output = submit(request, options, what="standalone submission")
        match = STANDALONE_DRIVER_ID.search(output)
        if not match:
            raise LaunchFailed(found="no driver id in the spark-submit output",
                               expected="'Driver successfully submitted as driver-...'",
                               log_tail=tail_text(output, 40), path=str(request.log_path))
        ui = (request.master_ui_url or default_master_ui_url(request.master)).rstrip("/")
        log.info("driver %s submitted to %s", match.group(0), request.master)
        handle = LaunchHandle(mode=LaunchMode.STANDALONE_CLUSTER, checkpoint_uri=request.checkpoint_uri,
                              app_name=request.app_name, started_at=request.started_at, driver_id=match.group(0),
                              master=request.master, log_path=str(request.log_path), extra={"master_ui_url": ui})
        return cls(handle, options)

    @property
    def master_ui_url(self) -> str:
        return self.handle.extra.get("master_ui_url") or default_master_ui_url(str(self.handle.master))

    def _driver(self) -> dict[str, Any] | None:
        state = _http_json(self.master_ui_url + "/json/")
        for driver in list(state.get("activedrivers", [])) + list(state.get("completeddrivers", [])):
            if driver.get("id") == self.handle.driver_id:
                driver["_workers"] = state.get("workers", [])
                return dict(driver)
        return None

    def state(self) -> DriverState:
        """The master's view; UNKNOWN when the master cannot be reached, EXITED when it no longer
        lists the driver."""
        try:
            driver = self._driver()
        except (OSError, ValueError) as exc:
            log.warning("cannot read driver %s from %s: %s", self.handle.driver_id, self.master_ui_url, exc)
            return DriverState.UNKNOWN
        if driver is None:
            return DriverState.EXITED
        return _STATES.get(str(driver.get("state", "UNKNOWN")), DriverState.UNKNOWN)

    def log_tail(self, lines: int = 50) -> str:
        """stderr and stdout (a Python driver's own output) through its worker's web UI, else the
        spark-submit output."""
        try:
            parts = [f"==> {kind} <==\n{text}" for kind in ("stderr", "stdout")
                     if (text := self._worker_log(kind, lines))]
            if parts:
                return "\n".join(parts)
        except (OSError, ValueError) as exc:
            log.warning("could not read the driver log of %s: %s", self.handle.driver_id, exc)
        return tail_file(self.handle.log_path, lines)

    def _worker_log(self, kind: str, lines: int) -> str:
        driver = self._driver()
        if not driver:
            return ""
        worker = next((w for w in driver.get("_workers", []) if w.get("id") == driver.get("worker")), None)
        if not worker or not worker.get("webuiaddress"):
            return ""
        query = urllib.parse.urlencode({"driverId": self.handle.driver_id, "logType": kind, "byteLength": 200_000})
        with urllib.request.urlopen(f"{worker['webuiaddress']}/log/?{query}", timeout=10) as response:
            text = response.read().decode("utf-8", errors="replace")
        if text.startswith("==== "):  # "==== Bytes a-b of n of <path> ====" header
            text = text.split("\n", 1)[1] if "\n" in text else ""
        return tail_text(text.strip("\n"), lines)

    def kill(self, *, timeout: float = 60.0) -> str:
        if self.state().alive is False:
            return f"driver {self.handle.driver_id} had ended already"
        data = urllib.parse.urlencode({"id": self.handle.driver_id, "terminate": "true"}).encode()
        try:
            urllib.request.urlopen(urllib.request.Request(f"{self.master_ui_url}/driver/kill/", data=data,
                                                          method="POST"), timeout=10).close()
        except (OSError, urllib.error.URLError) as exc:
            log.warning("kill through the master UI failed (%s); using Spark's Client", exc)
        if self._wait_ended(min(timeout, 20.0)):
            return f"killed driver {self.handle.driver_id} through {self.master_ui_url}"
        command = [resolve_binary("spark-class", dict(self.options.env)), "org.apache.spark.deploy.Client", "kill",
                   str(self.handle.master), str(self.handle.driver_id)]
        try:
            done = run_command(command, self.options, what="standalone kill")
            code = str(done.returncode)
        except OSError as exc:
            code = f"none ({exc})"
        if self._wait_ended(timeout):
            return " ".join(command)
        raise EscalationFailed(found=f"driver {self.handle.driver_id} still {self.state().value} "
                               f"(Client exit code {code})", expected="the driver killed")

    def _wait_ended(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.state().alive is False:
                return True
            time.sleep(0.5)
        return False
