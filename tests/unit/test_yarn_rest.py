"""The YARN ResourceManager's REST client and the yarn job kind over it (jobs/yarn.py, jobs/http.py),
against recorded answers replayed by a real HTTP server on 127.0.0.1 (tests/unit/cluster_replay.py)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.errors import ClusterManagerRefused, ClusterManagerUnreachable, EscalationFailed
from airflow_ckpt_provider.checkpoint.launch import DriverState, LaunchHandle, LaunchMode
from airflow_ckpt_provider.jobs import JobOptions, job_for
from airflow_ckpt_provider.jobs.http import request_json
from airflow_ckpt_provider.jobs.yarn import YarnJob, YarnRest, site_rm_urls
from tests.unit.cluster_replay import Replay, Reply, replay_server

APP = "application_1735689600000_0007"
APP_PATH = f"/ws/v1/cluster/apps/{APP}"


@pytest.fixture
def rm() -> Iterator[Replay]:
    with replay_server() as replay:
        yield replay


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def handle(**extra: str) -> LaunchHandle:
    return LaunchHandle(mode=LaunchMode.YARN_CLUSTER, checkpoint_uri="hdfs://nn/cp", app_name="orders-v1",
                        started_at="2025-01-01T01:00:00+00:00", application_id=APP, extra=extra)


class Runner:
    def __init__(self, returncode: int = 0, output: str = "") -> None:
        self.commands: list[list[str]] = []
        self.returncode = returncode
        self.output = output

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:  # noqa: ANN401
        self.commands.append(command)
        return subprocess.CompletedProcess(command, self.returncode, self.output, "")


# -- the client ----------------------------------------------------------------------------------------


def test_app_and_its_attempts(rm: Replay) -> None:
    rm.on("GET", APP_PATH, Reply(body="yarn/app_running.json"))
    rm.on("GET", f"{APP_PATH}/appattempts", Reply(body="yarn/appattempts.json"))
    rest = YarnRest([rm.url])
    app = rest.app(APP)
    assert app is not None and (app.state, app.user, app.queue, app.running_containers) == (
        DriverState.RUNNING, "etl", "default", 2)
    assert rest.attempts(APP) == ("container_1735689600000_0007_01_000001", "nm1.example.com:8042")
    assert rest.app("application_1735689600000_0099") is None  # 404: the RM does not know it
    assert rest.answered_by == rm.url


def test_apps_asks_for_live_states_and_lowercased_tags(rm: Replay) -> None:
    rm.on("GET", "/ws/v1/cluster/apps", Reply(body="yarn/apps_running.json"))
    apps = YarnRest([rm.url]).apps(tags=["Orders", "ckpt-stream-orders"])
    assert [a.app_id for a in apps] == [APP, "application_1735689600000_0009"]
    assert rm.asked[-1].query == {"states": ["NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING"],
                                  "applicationTags": ["orders,ckpt-stream-orders"]}
    rm.on("GET", "/ws/v1/cluster/apps", Reply(body="yarn/apps_none.json"))
    assert YarnRest([rm.url]).apps() == []


def test_kill_repeats_while_the_rm_is_killing(rm: Replay) -> None:
    rm.on("PUT", f"{APP_PATH}/state", Reply(202, "yarn/state_accepted.json", {"Location": f"{rm.url}{APP_PATH}"}),
          Reply(202, "yarn/state_accepted.json"), Reply(200, "yarn/state_killed.json"))
    sleeps: list[float] = []
    assert YarnRest([rm.url], sleep=sleeps.append).kill(APP, "etl", poll_interval=0.25) == "KILLED"
    puts = [a for a in rm.asked if a.method == "PUT"]
    assert len(puts) == 3 and sleeps == [0.25, 0.25]
    assert all(a.body == {"state": "KILLED"} and a.query == {"user.name": ["etl"]} for a in puts)
    assert puts[0].headers["content-type"] == "application/json"


def test_kill_of_an_ended_or_unknown_application(rm: Replay) -> None:
    rm.on("PUT", f"{APP_PATH}/state", Reply(200, {"state": "FINISHED"}))
    assert YarnRest([rm.url]).kill(APP) == "FINISHED"
    assert rm.asked[-1].query == {}, "no user.name when none is known"
    assert YarnRest([rm.url]).kill("application_1735689600000_0099") == "gone"


def test_kill_refused_says_its_status(rm: Replay) -> None:
    rm.on("PUT", f"{APP_PATH}/state", Reply(403, "yarn/unauthorized.json"))
    with pytest.raises(ClusterManagerRefused) as error:
        YarnRest([rm.url]).kill(APP, "etl")
    assert error.value.status == 403 and "user not authenticated" in str(error.value)


def test_kill_that_does_not_end_times_out(rm: Replay) -> None:
    rm.on("PUT", f"{APP_PATH}/state", Reply(202, "yarn/state_accepted.json"))
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(EscalationFailed) as error:
        YarnRest([rm.url], sleep=sleep, clock=lambda: now[0]).kill(APP, timeout=3, poll_interval=1)
    assert "still RUNNING 3 s after the kill request" in str(error.value)


def test_ha_skips_a_standby_and_a_dead_rm(rm: Replay) -> None:
    with replay_server() as standby:
        standby.on("GET", APP_PATH, Reply(307, b"This is standby RM.", {"Location": f"{rm.url}{APP_PATH}"}))
        rm.on("GET", APP_PATH, Reply(body="yarn/app_running.json"))
        rest = YarnRest([closed_port_url(), standby.url, rm.url])
        app = rest.app(APP)
        assert app is not None and app.state is DriverState.RUNNING and rest.answered_by == rm.url
        assert standby.paths() == [APP_PATH], "the standby was asked once, its redirect not followed"


def test_no_rm_answers(rm: Replay) -> None:
    rm.on("GET", APP_PATH, Reply(307, b"standby"))
    dead = closed_port_url()
    with pytest.raises(ClusterManagerUnreachable) as error:
        YarnRest([dead, rm.url]).app(APP)
    assert dead in error.value.found and "307 redirect" in error.value.found


def test_an_answer_beyond_the_limit_is_no_answer(rm: Replay) -> None:
    rm.on("GET", APP_PATH, Reply(body="yarn/app_running.json"))
    with pytest.raises(OSError, match="beyond 100 bytes"):
        request_json("GET", f"{rm.url}{APP_PATH}", max_bytes=100)
    answer = request_json("GET", f"{rm.url}{APP_PATH}", max_bytes=100_000)
    assert answer.ok and answer.body["app"]["id"] == APP


def test_the_node_managers_container_view(rm: Replay) -> None:
    cid = "container_1735689600000_0007_01_000001"
    rm.on("GET", f"/ws/v1/node/containers/{cid}", Reply(body="yarn/container_done.json"))
    rest = YarnRest([rm.url])
    node = rm.url.removeprefix("http://")
    assert rest.container(node, cid) == {"container": {**rest.container(node, cid)["container"]}}
    assert rest.container(node, "container_1_01_000009") is None
    with pytest.raises(ClusterManagerUnreachable):
        rest.container(closed_port_url().removeprefix("http://"), cid)


# -- the yarn job kind -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("recording", "state"), [
    ("yarn/app_running.json", DriverState.RUNNING),
    ("yarn/app_killed.json", DriverState.KILLED),
])
def test_state_through_the_rm_url_of_the_handle(rm: Replay, recording: str, state: DriverState) -> None:
    rm.on("GET", APP_PATH, Reply(body=recording))
    runner = Runner(output="State : FAILED")
    assert job_for(handle(rm_url=rm.url), JobOptions(runner=runner)).state() is state
    assert runner.commands == [], "REST answered: no command ran"


def test_state_through_the_connection_and_yarn_site(rm: Replay, tmp_path: Path) -> None:
    rm.on("GET", APP_PATH, Reply(body="yarn/app_running.json"))
    by_connection = JobOptions(cluster={"rm_url": f"{closed_port_url()},{rm.url}"})
    assert job_for(handle(rm_url="http://elsewhere:1"), by_connection).state() is DriverState.RUNNING
    host_port = rm.url.removeprefix("http://")
    (tmp_path / "yarn-site.xml").write_text(
        f"<configuration><property><name>yarn.resourcemanager.webapp.address</name><value>{host_port}</value>"
        "</property></configuration>")
    assert site_rm_urls({"HADOOP_CONF_DIR": str(tmp_path)}) == (rm.url,)
    assert job_for(handle(), JobOptions(env={"HADOOP_CONF_DIR": str(tmp_path)})).state() is DriverState.RUNNING


def test_state_of_an_application_the_rm_forgot_is_exited(rm: Replay) -> None:
    assert job_for(handle(rm_url=rm.url)).state() is DriverState.EXITED


def test_state_falls_back_to_the_command_then_unknown(tmp_path: Path) -> None:
    dead = closed_port_url()
    runner = Runner(output="State : RUNNING\nFinal-State : UNDEFINED")
    assert job_for(handle(rm_url=dead), JobOptions(runner=runner)).state() is DriverState.RUNNING
    assert runner.commands[0][1:] == ["application", "-status", APP]

    def missing(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:  # noqa: ANN401
        raise FileNotFoundError(command[0])

    assert job_for(handle(rm_url=dead), JobOptions(runner=missing)).state() is DriverState.UNKNOWN


def _killable(rm: Replay, node_state: str = "yarn/container_done.json") -> None:
    node = rm.url.removeprefix("http://")
    cid = "container_1735689600000_0007_01_000001"
    rm.on("PUT", f"{APP_PATH}/state", Reply(202, "yarn/state_accepted.json"), Reply(200, "yarn/state_killed.json"))
    rm.on("GET", APP_PATH, Reply(body="yarn/app_killed.json"))
    rm.on("GET", f"{APP_PATH}/appattempts", Reply(body={"appAttempts": {"appAttempt": [
        {"id": 1, "containerId": cid, "nodeHttpAddress": node}]}}))
    rm.on("GET", f"/ws/v1/node/containers/{cid}", Reply(body=node_state))


def test_kill_through_the_rm_waits_for_the_am_container(rm: Replay) -> None:
    _killable(rm)
    runner = Runner()
    said = job_for(handle(rm_url=rm.url, user="etl"), JobOptions(runner=runner)).kill(timeout=10)
    assert said == f"killed YARN application {APP} through {rm.url} as user.name=etl (KILLED)"
    assert runner.commands == []
    assert rm.paths("GET")[-1].startswith("/ws/v1/node/containers/")


def test_kill_says_when_the_am_container_has_not_ended(rm: Replay) -> None:
    _killable(rm, "yarn/container_running.json")
    job = job_for(handle(rm_url=rm.url), JobOptions(cluster={"user": "etl"}))
    assert isinstance(job, YarnJob)
    assert job.kill(timeout=1.5).endswith("its AM container was not yet seen ended")
    assert [a.query for a in rm.asked if a.method == "PUT"][0] == {"user.name": ["etl"]}


def test_a_kill_refused_as_unauthorised_uses_the_command(rm: Replay) -> None:
    rm.on("PUT", f"{APP_PATH}/state", Reply(401, "yarn/unauthorized.json"))
    runner = Runner()
    assert job_for(handle(rm_url=rm.url), JobOptions(runner=runner)).kill() == f"yarn application -kill {APP}"
    assert runner.commands[0][1:] == ["application", "-kill", APP]
    with pytest.raises(EscalationFailed) as error:
        job_for(handle(rm_url=rm.url), JobOptions(runner=Runner(returncode=255, output="no Kerberos ticket"))).kill()
    assert "refused the kill (HTTP 401)" in str(error.value) and "no Kerberos ticket" in str(error.value)


@pytest.mark.parametrize(("reply", "said"), [
    (Reply(500, {"RemoteException": {"message": "boom"}}), "refused the kill"),
    (Reply(307, b"standby"), "reached no ResourceManager"),
])
def test_a_kill_that_fails_otherwise_says_which_way(rm: Replay, reply: Reply, said: str) -> None:
    rm.on("PUT", f"{APP_PATH}/state", reply)
    runner = Runner()
    with pytest.raises(EscalationFailed) as error:
        job_for(handle(rm_url=rm.url), JobOptions(runner=runner)).kill()
    assert said in str(error.value) and runner.commands == []
