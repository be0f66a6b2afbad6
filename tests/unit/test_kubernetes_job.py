"""The Kubernetes job kind (jobs/kubernetes.py) against recorded API server answers replayed over HTTP
on 127.0.0.1 (no cluster runs here), and the external kind (jobs/external.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint.errors import EscalationFailed, InvalidOldJob, LaunchFailed
from airflow_ckpt_provider.checkpoint.launch import DriverState, LaunchHandle
from airflow_ckpt_provider.jobs import ExternalJob, JobOptions, KubernetesJob, SubmitRequest, job_for
from airflow_ckpt_provider.jobs.kubernetes import KubernetesApi
from tests.unit.cluster_replay import Replay, Reply, replay_server

POD = "orders-v1-7f3c2a9b1d-driver"
POD_PATH = f"/api/v1/namespaces/streams/pods/{POD}"
PODS_PATH = "/api/v1/namespaces/streams/pods"
SELECTOR = "spark-4b1f0c7a2e8d4f51a1e0b3c9d2f6a7e8"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.c2VjcmV0LXRva2Vu.sig"


@pytest.fixture
def api() -> Iterator[Replay]:
    with replay_server() as replay:
        yield replay


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


def handle(server: str, token: Path | None = None, **extra: str) -> LaunchHandle:
    fields = {"namespace": "streams", "api_server": server, "app_selector": SELECTOR, **extra}
    if token is not None:
        fields["token_file"] = str(token)
    return LaunchHandle(mode="k8s-cluster", checkpoint_uri="s3a://b/cp", app_name="orders-v1",
                        started_at="2025-01-01T01:00:02Z", driver_id=POD, extra=fields)


@pytest.mark.parametrize(("reply", "state"), [
    (Reply(body="kubernetes/pod_running.json"), DriverState.RUNNING),
    (Reply(404, "kubernetes/not_found.json"), DriverState.EXITED),
    (Reply(403, "kubernetes/forbidden.json"), DriverState.UNKNOWN),
])
def test_state_is_the_pods_phase(api: Replay, token_file: Path, reply: Reply, state: DriverState) -> None:
    api.on("GET", POD_PATH, reply)
    job = job_for(handle(api.url, token_file))
    assert isinstance(job, KubernetesJob) and job.state() is state
    assert api.asked[-1].headers["authorization"] == f"Bearer {TOKEN}"


def test_state_of_an_unreachable_api_server_is_unknown(token_file: Path) -> None:
    with replay_server() as gone:
        url = gone.url
    assert job_for(handle(url, token_file)).state() is DriverState.UNKNOWN


def test_kill_deletes_the_pod_and_waits_for_it_and_its_executors(api: Replay, token_file: Path) -> None:
    api.on("DELETE", POD_PATH, Reply(body="kubernetes/pod_running.json"))
    api.on("GET", POD_PATH, Reply(body="kubernetes/pod_running.json"), Reply(404, "kubernetes/not_found.json"))
    api.on("GET", PODS_PATH, Reply(body="kubernetes/executors_running.json"), Reply(body="kubernetes/executors_none.json"))
    sleeps: list[float] = []
    job = KubernetesJob(handle(api.url, token_file), sleep=sleeps.append)
    assert job.kill(timeout=60) == f"driver pod streams/{POD} deleted through {api.url}"
    delete = next(a for a in api.asked if a.method == "DELETE")
    assert delete.query == {"gracePeriodSeconds": ["30"]}
    assert api.asked[-1].query == {"labelSelector": [f"spark-app-selector={SELECTOR},spark-role=executor"]}
    assert len(sleeps) == 2, "waited while the driver, then an executor, was still there"


def test_kill_of_a_pod_that_is_gone(api: Replay, token_file: Path) -> None:
    api.on("GET", PODS_PATH, Reply(body="kubernetes/executors_none.json"))
    said = KubernetesJob(handle(api.url, token_file)).kill()
    assert said == f"driver pod streams/{POD} was gone already through {api.url}"


def test_a_kill_that_is_forbidden_names_no_token(api: Replay, token_file: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    api.on("DELETE", POD_PATH, Reply(403, "kubernetes/forbidden.json"))
    api.on("GET", POD_PATH, Reply(403, "kubernetes/forbidden.json"))
    caplog.set_level(logging.DEBUG)
    job = KubernetesJob(handle(api.url, token_file))
    with pytest.raises(EscalationFailed) as error:
        job.kill()
    assert "HTTP 403" in str(error.value) and "cannot delete resource" in str(error.value)
    assert job.state() is DriverState.UNKNOWN
    assert TOKEN not in str(error.value) and TOKEN not in caplog.text and TOKEN not in job.handle.to_json()


def test_a_kill_that_does_not_take_times_out(api: Replay, token_file: Path) -> None:
    api.on("DELETE", POD_PATH, Reply(body="kubernetes/pod_running.json"))
    api.on("GET", POD_PATH, Reply(body="kubernetes/pod_running.json"))
    with pytest.raises(EscalationFailed, match="still there after 0 s: the driver pod"):
        KubernetesJob(handle(api.url, token_file), sleep=lambda _: None).kill(timeout=0)


def test_where_the_api_server_is(tmp_path: Path) -> None:
    bare = LaunchHandle(mode="k8s-cluster", checkpoint_uri="s3a://b/cp", app_name="a", started_at="t", driver_id=POD,
                        extra={"namespace": "streams"})
    in_cluster = KubernetesApi.for_handle(bare, JobOptions(env={"KUBERNETES_SERVICE_HOST": "10.96.0.1",
                                                                "KUBERNETES_SERVICE_PORT": "6443"}))
    assert in_cluster.server == "https://10.96.0.1:6443"
    by_connection = KubernetesApi.for_handle(bare, JobOptions(cluster={"api_server": "https://k8s.example.com/",
                                                                       "token_file": "/t", "ca_file": "/ca"}))
    assert (by_connection.server, by_connection.token_file, by_connection.ca_file) == (
        "https://k8s.example.com", "/t", "/ca")
    with pytest.raises(InvalidOldJob, match="user-info") as error:
        KubernetesApi.for_handle(bare, JobOptions(cluster={"api_server": "https://admin:pw@k8s"}))
    assert "pw" not in str(error.value)
    with pytest.raises(InvalidOldJob, match="no Kubernetes API server"):
        KubernetesApi.for_handle(bare, JobOptions(env={"KUBERNETES_SERVICE_HOST": ""}))


def test_the_provider_does_not_launch_on_kubernetes_or_external(tmp_path: Path) -> None:
    request = SubmitRequest(command=["spark-submit"], env={}, log_path=tmp_path / "log", checkpoint_uri="/cp",
                            app_name="a", master="k8s://https://k8s", started_at="t")
    for kind in (KubernetesJob, ExternalJob):
        with pytest.raises(LaunchFailed):
            kind.launch(request)


def test_an_external_job_is_stopped_by_a_person() -> None:
    external = LaunchHandle(mode="external", checkpoint_uri="/cp", app_name="orders", started_at="t",
                            extra={"description": "ops stop it in Control-M"})
    job = job_for(external)
    assert isinstance(job, ExternalJob) and job.state() is DriverState.UNKNOWN and job.log_tail() == ""
    with pytest.raises(EscalationFailed) as error:
        job.kill()
    assert "ops stop it in Control-M" in str(error.value) and "a person stops it" in str(error.value)
