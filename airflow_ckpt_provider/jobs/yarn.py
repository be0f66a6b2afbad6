"""YARN cluster job kind: the driver runs in the application master; the ResourceManager knows.

Submitted with ``spark.yarn.submit.waitAppCompletion=false`` (spark-submit returns once the
application is accepted). State and kill go through the ResourceManager's REST API
(:class:`YarnRest`) when an RM web URL is known — the connection's or the handle's ``rm_url``,
else ``yarn-site.xml`` under ``$HADOOP_CONF_DIR`` (or ``$YARN_CONF_DIR``) —, else through
``yarn application -status`` / ``-kill``, which work from any host with the cluster's client
configuration and a ``yarn`` command. A REST kill the ResourceManager refuses as unauthorised
(401/403: an RM that wants an authenticated user, Kerberos) falls back to the command. Always
through the ResourceManager: KILLED is final, while a dead AM process would be re-attempted.
The log tail is the spark-submit output (``yarn logs`` needs log aggregation and a finished
application).
"""

from __future__ import annotations

import logging
import os
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from airflow_ckpt_provider.checkpoint.errors import (
    ClusterManagerRefused,
    ClusterManagerUnreachable,
    EscalationFailed,
    InvalidOldJob,
    LaunchFailed,
)
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.old_job import (
    MAX_SITE_XML_BYTES,
    YARN_APPLICATION_ID,
    ClusterApplication,
    kill_settled,
    rm_web_urls,
    yarn_am_container,
    yarn_application,
    yarn_apps,
    yarn_state,
)
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
from airflow_ckpt_provider.jobs.http import HttpAnswer, request_json
from airflow_ckpt_provider.jobs.standalone import submit

log = logging.getLogger(__name__)

_STATE = re.compile(r"\bState\s*:\s*(\w+)")
_FINAL = re.compile(r"\bFinal-State\s*:\s*(\w+)")
#: The application states of a job that may still run (``apps`` lists these by default).
LIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
#: Statuses of a ResourceManager that wants an authenticated user: the kill falls back to the command.
UNAUTHORISED = frozenset({401, 403})


class YarnRest:
    """The ResourceManager's REST API (``/ws/v1/cluster``) and a NodeManager's container view.

    ``urls`` are the RM web URLs in order (an HA pair: both); each call tries them in turn and
    takes the first answer that is not a redirect (a standby RM redirects to the active one) and
    not a connection failure. Raises :class:`ClusterManagerUnreachable` when none answers (saying
    what each did) and :class:`ClusterManagerRefused` (with its ``status``) for an error status
    the call does not expect. ``user`` is the ``user.name`` of a kill (an RM with simple
    authentication); none is sent when it is "". Nothing a call logs or raises holds a header.
    """

    def __init__(self, urls: Sequence[str], *, timeout: float = 10.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        self.urls = tuple(url.rstrip("/") for url in urls if url.strip())
        if not self.urls:
            raise ValueError("YarnRest needs at least one ResourceManager URL")
        self.timeout = timeout
        self.sleep = sleep
        self.clock = clock
        self.answered_by = ""

    def call(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
             body: Mapping[str, Any] | None = None) -> HttpAnswer:
        """``method`` ``path`` (under the RM's root) on the first RM that answers (see the class doc)."""
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        tried: list[str] = []
        for url in self.urls:
            try:
                answer = request_json(method, f"{url}{path}{suffix}", body=body, timeout=self.timeout)
            except OSError as exc:
                tried.append(f"{url}: {exc}")
                continue
            if answer.redirect:
                tried.append(f"{url}: {answer.status} redirect (a standby ResourceManager)")
                continue
            self.answered_by = url
            return answer
        raise ClusterManagerUnreachable(found=f"no ResourceManager answered {method} {path}: {'; '.join(tried)}",
                                        expected="an active ResourceManager at one of " + ", ".join(self.urls))

    def _refused(self, answer: HttpAnswer, what: str) -> ClusterManagerRefused:
        return ClusterManagerRefused(found=f"HTTP {answer.status} from {self.answered_by} for {what}: {answer.text}",
                                     expected=f"{what} answered", status=answer.status)

    def _json(self, answer: HttpAnswer, what: str) -> Mapping[str, Any]:
        if not answer.ok or not isinstance(answer.body, Mapping):
            raise self._refused(answer, what)
        return answer.body

    def app(self, app_id: str) -> ClusterApplication | None:
        """``GET /ws/v1/cluster/apps/{id}``; None when the RM does not know it (404: long gone)."""
        answer = self.call("GET", f"/ws/v1/cluster/apps/{urllib.parse.quote(app_id)}")
        if answer.status == 404:
            return None
        try:
            return yarn_application(self._json(answer, f"application {app_id}"))
        except InvalidOldJob:
            raise self._refused(answer, f"application {app_id}") from None

    def apps(self, states: Sequence[str] = LIVE_STATES, tags: Sequence[str] = ()) -> list[ClusterApplication]:
        """``GET /ws/v1/cluster/apps?states=..&applicationTags=..`` (tags lowercased, as YARN stores
        them; the RM lists an application carrying any of them)."""
        query = {"states": ",".join(states)} if states else {}
        if tags:
            query["applicationTags"] = ",".join(tag.lower() for tag in tags)
        answer = self.call("GET", "/ws/v1/cluster/apps", query=query)
        try:
            return yarn_apps(self._json(answer, "the application list"))
        except InvalidOldJob:
            raise self._refused(answer, "the application list") from None

    def attempts(self, app_id: str) -> tuple[str, str]:
        """(AM container id, its NodeManager's web address) of the newest attempt, ("", "") if none."""
        answer = self.call("GET", f"/ws/v1/cluster/apps/{urllib.parse.quote(app_id)}/appattempts")
        return yarn_am_container(self._json(answer, f"the attempts of {app_id}"))

    def container(self, node_http: str, container_id: str) -> Mapping[str, Any] | None:
        """The NodeManager's ``/ws/v1/node/containers/{id}`` answer; None when it answers 404 (gone).
        :class:`ClusterManagerUnreachable` when the NodeManager does not answer."""
        base = node_http if "://" in node_http else f"{self.urls[0].split('://', 1)[0]}://{node_http}"
        url = f"{base.rstrip('/')}/ws/v1/node/containers/{urllib.parse.quote(container_id)}"
        try:
            answer = request_json("GET", url, timeout=self.timeout)
        except OSError as exc:
            raise ClusterManagerUnreachable(found=f"NodeManager {node_http}: {exc}",
                                            expected="the NodeManager of the application master to answer") from None
        if answer.status == 404:
            return None
        if not answer.ok or not isinstance(answer.body, Mapping):
            raise ClusterManagerRefused(found=f"HTTP {answer.status} from NodeManager {node_http}: {answer.text}",
                                        expected=f"container {container_id} answered", status=answer.status)
        return answer.body

    def kill(self, app_id: str, user: str = "", *, timeout: float = 60.0, poll_interval: float = 1.0) -> str:
        """``PUT /ws/v1/cluster/apps/{id}/state?user.name=U`` with ``{"state": "KILLED"}``, repeated
        while the RM answers 202 (killing) or a state that is not final, until it answers a final
        state (or 404: gone); returns that state. :class:`ClusterManagerRefused` for an error
        status (401/403: the RM wants an authenticated user), :class:`EscalationFailed` when the
        application is not final by ``timeout``."""
        path = f"/ws/v1/cluster/apps/{urllib.parse.quote(app_id)}/state"
        query = {"user.name": user} if user else None
        deadline = self.clock() + timeout
        last = ""
        while True:
            answer = self.call("PUT", path, query=query, body={"state": "KILLED"})
            if answer.status == 404:
                return "gone"
            if answer.status not in (200, 202):
                raise self._refused(answer, f"the kill of {app_id}")
            body = answer.body if isinstance(answer.body, Mapping) else {}
            last = str(body.get("state", ""))
            if answer.status == 200 and yarn_state(last).alive is False:
                return last
            if self.clock() >= deadline:
                raise EscalationFailed(found=f"YARN application {app_id} still {last or 'not final'} {timeout:g} s "
                                             f"after the kill request to {self.answered_by}",
                                       expected="the application KILLED")
            self.sleep(poll_interval)


def site_rm_urls(env: Mapping[str, str]) -> tuple[str, ...]:
    """The RM web URLs of ``yarn-site.xml`` in ``$HADOOP_CONF_DIR`` or ``$YARN_CONF_DIR`` (``env``
    over the process environment); () when there is none, or it cannot be read (logged)."""
    environ = {**os.environ, **env}
    for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR"):
        if not environ.get(name):
            continue
        path = Path(environ[name]) / "yarn-site.xml"
        try:
            with open(path, "rb") as handle:
                urls = rm_web_urls(handle.read(MAX_SITE_XML_BYTES + 1))
        except FileNotFoundError:
            continue
        except (OSError, InvalidOldJob) as exc:
            log.warning("cannot read the ResourceManager's address from %s: %s", path, exc)
            continue
        if urls:
            return urls
    return ()


class YarnJob(JobOfKind):
    """A YARN application (see the module doc)."""

    kind: ClassVar[str] = LaunchMode.YARN_CLUSTER.value

    @classmethod
    def launch(cls, request: SubmitRequest, options: JobOptions | None = None) -> YarnJob:
        output = submit(request, options or JobOptions(), what="YARN submission")
        match = YARN_APPLICATION_ID.search(output)
        if not match:
            raise LaunchFailed(found="no application id in the spark-submit output",
                               expected="application_<cluster>_<n>", log_tail=tail_text(output, 40),
                               path=str(request.log_path))
        handle = LaunchHandle(mode=LaunchMode.YARN_CLUSTER, checkpoint_uri=request.checkpoint_uri,
                              app_name=request.app_name, started_at=request.started_at,
                              application_id=match.group(0), master=request.master, log_path=str(request.log_path))
        return cls(handle, options)

    @property
    def app_id(self) -> str:
        return str(self.handle.application_id)

    def rest(self) -> YarnRest | None:
        """The ResourceManager's REST client, when an RM URL is known (see the module doc)."""
        declared = [url for url in self.options.endpoint(self.handle, "rm_url").split(",") if url.strip()]
        urls = declared or site_rm_urls(self.options.env)
        return YarnRest(urls, timeout=min(self.options.command_timeout, 30.0)) if urls else None

    def _yarn(self, *args: str, what: str) -> tuple[int, str]:
        yarn = resolve_binary("yarn", self.options.env, homes=("HADOOP_HOME",))
        done = run_command([yarn, "application", *args], self.options, what=what)
        return done.returncode, "\n".join(part for part in (done.stdout, done.stderr) if part)

    def state(self) -> DriverState:
        """The ResourceManager's state over REST (EXITED when it no longer knows the application),
        else the ``yarn`` command's, else UNKNOWN."""
        rest = self.rest()
        if rest is not None:
            try:
                app = rest.app(self.app_id)
                return DriverState.EXITED if app is None else app.state
            except (ClusterManagerUnreachable, ClusterManagerRefused) as exc:
                log.warning("cannot ask the ResourceManager for %s: %s", self.app_id, exc)
        return self._cli_state()

    def _cli_state(self) -> DriverState:
        try:
            code, output = self._yarn("-status", self.app_id, what="YARN status")
        except OSError as exc:
            log.warning("cannot ask YARN for %s: %s", self.app_id, exc)
            return DriverState.UNKNOWN
        match = _STATE.search(output)
        if code != 0 or not match:
            return DriverState.UNKNOWN
        final = _FINAL.search(output)
        return yarn_state(match.group(1), final.group(1) if final else "")

    def log_tail(self, lines: int = 50) -> str:
        return tail_file(self.handle.log_path, lines)

    def kill(self, *, timeout: float = 60.0) -> str:
        """Kill through the ResourceManager's REST API (then wait, within ``timeout``, for the AM
        container to end: :meth:`wait_settled`); on 401/403, or with no RM URL, through
        ``yarn application -kill``. :class:`EscalationFailed` says which way failed and why."""
        rest = self.rest()
        if rest is None:
            return self._cli_kill(why="")
        user = self.options.endpoint(self.handle, "user") or os.environ.get("HADOOP_USER_NAME", "")
        start = time.monotonic()
        try:
            final = rest.kill(self.app_id, user, timeout=timeout)
        except ClusterManagerRefused as exc:
            if exc.status not in UNAUTHORISED:
                raise EscalationFailed(found=f"the ResourceManager refused the kill of {self.app_id}: {exc.found}",
                                       expected="the application KILLED") from None
            return self._cli_kill(why=f"the ResourceManager's REST API refused the kill (HTTP {exc.status}); ")
        except ClusterManagerUnreachable as exc:
            raise EscalationFailed(found=f"the kill of {self.app_id} reached no ResourceManager: {exc.found}",
                                   expected="the application KILLED") from None
        who = f" as user.name={user}" if user else ""
        done = f"killed YARN application {self.app_id} through {rest.answered_by}{who} ({final})"
        settled = self.wait_settled(rest, timeout=max(0.0, timeout - (time.monotonic() - start)))
        return done if settled else f"{done}; its AM container was not yet seen ended"

    def wait_settled(self, rest: YarnRest, *, timeout: float, poll_interval: float = 1.0) -> bool:
        """Whether the application is final, runs no container and its AM container has ended on
        its NodeManager (:func:`~airflow_ckpt_provider.checkpoint.old_job.kill_settled`), polled
        until ``timeout``; False when it is not by then or cannot be told (an unreachable
        NodeManager)."""
        deadline = time.monotonic() + timeout
        container, node = "", ""
        while True:
            try:
                app = rest.app(self.app_id)
                if app is None:
                    return True
                if not container:
                    container, node = rest.attempts(self.app_id)
                answer = rest.container(node, container) if container and node else None
                if kill_settled(app, answer):
                    return True
            except (ClusterManagerUnreachable, ClusterManagerRefused) as exc:
                log.info("cannot tell yet whether %s has ended: %s", self.app_id, exc)
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_interval)

    def _cli_kill(self, *, why: str) -> str:
        command = f"yarn application -kill {self.app_id}"
        try:
            code, output = self._yarn("-kill", self.app_id, what="YARN kill")
        except OSError as exc:
            raise EscalationFailed(found=f"{why}{command} could not run ({exc})",
                                   expected=f"{command} to succeed") from None
        if code != 0:
            tail = output.strip().splitlines()[-3:]
            raise EscalationFailed(found=f"{why}exit code {code} from {command}: {' / '.join(tail)}",
                                   expected="exit code 0")
        return command
