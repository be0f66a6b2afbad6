"""Adopting an old job the provider did not launch (jobs/adopt.py): found through its manager's
recorded answers, replayed over HTTP on 127.0.0.1, and given a handle the job kinds follow."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    ClusterManagerUnreachable,
    InvalidOldJob,
    OldJobAmbiguous,
    OldJobNotFound,
    OldJobRestartsItself,
)
from airflow_ckpt_provider.checkpoint.launch import DriverState, LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.old_job import OldJobSpec
from airflow_ckpt_provider.jobs import ExternalJob, JobOptions, KubernetesJob, LocalJob, job_for
from airflow_ckpt_provider.jobs.adopt import UNKNOWN_START, adopt
from airflow_ckpt_provider.records.control import ProcessScope
from tests.unit.cluster_replay import Replay, Reply, replay_server

CP = "hdfs://nn:8020/streams/orders/v1"
APP = "application_1735689600000_0007"


@pytest.fixture
def server() -> Iterator[Replay]:
    with replay_server() as replay:
        yield replay


@pytest.fixture
def no_site(tmp_path: Path) -> JobOptions:
    """Options whose Hadoop configuration folder holds no yarn-site.xml."""
    empty = tmp_path / "conf"
    empty.mkdir()
    return JobOptions(env={"HADOOP_CONF_DIR": str(empty), "YARN_CONF_DIR": str(empty)})


def spec(**fields: object) -> OldJobSpec:
    declared = OldJobSpec.from_value(dict(fields))
    assert declared is not None
    return declared


def test_a_yarn_application_by_id(server: Replay, no_site: JobOptions) -> None:
    server.on("GET", f"/ws/v1/cluster/apps/{APP}", Reply(body="yarn/app_running.json"))
    server.on("GET", f"/ws/v1/cluster/apps/{APP}/appattempts", Reply(body="yarn/appattempts.json"))
    adopted = adopt(spec(kind="yarn", application_id=APP, resource_manager=server.url), no_site, checkpoint_uri=CP)
    app, handle = adopted.application, adopted.handle
    assert app is not None and app.state is DriverState.RUNNING and app.found_by == "application id"
    assert app.am_container_id == "container_1735689600000_0007_01_000001"
    assert (handle.mode, handle.application_id, handle.app_name, handle.started_at, handle.checkpoint_uri) == (
        LaunchMode.YARN_CLUSTER, APP, "orders-v1", "2025-01-01T01:00:00+00:00", CP)
    assert handle.extra == {"adopted": "true", "found_by": "application id", "rm_url": server.url, "user": "etl",
                            "queue": "default"}
    assert LaunchHandle.from_json(handle.to_json()) == handle
    assert job_for(handle, no_site).state() is DriverState.RUNNING, "the handle alone finds the ResourceManager"


def test_the_declared_user_is_the_kills(server: Replay, no_site: JobOptions) -> None:
    server.on("GET", f"/ws/v1/cluster/apps/{APP}", Reply(body="yarn/app_running.json"))
    adopted = adopt(spec(kind="yarn", application_id=APP, resource_manager=server.url, user="ops"), no_site,
                    checkpoint_uri=CP)
    assert adopted.handle.extra["user"] == "ops"
    assert adopted.application is not None and adopted.application.am_container_id == "", "attempts unknown: no AM"


def test_a_yarn_application_by_tags(server: Replay, no_site: JobOptions) -> None:
    server.on("GET", "/ws/v1/cluster/apps", Reply(body="yarn/apps_running.json"))
    options = JobOptions(env=no_site.env, cluster={"rm_url": server.url})
    adopted = adopt(spec(kind="yarn", application_tags=["ORDERS"]), options, checkpoint_uri=CP)
    assert adopted.handle.application_id == APP and adopted.handle.extra["found_by"] == "tags ORDERS"
    assert server.asked[0].query["applicationTags"] == ["orders"]


def test_a_yarn_application_through_yarn_site(server: Replay, tmp_path: Path) -> None:
    server.on("GET", "/ws/v1/cluster/apps", Reply(body="yarn/apps_running.json"))
    (tmp_path / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.webapp.address</name>"
        f"<value>{server.url.removeprefix('http://')}</value></property></configuration>")
    adopted = adopt(spec(kind="yarn", application_name="payments-v3"),
                    JobOptions(env={"HADOOP_CONF_DIR": str(tmp_path)}), checkpoint_uri=CP)
    assert adopted.handle.application_id == "application_1735689600000_0009"
    assert adopted.handle.extra["rm_url"] == server.url


def test_yarn_refusals(server: Replay, no_site: JobOptions) -> None:
    server.on("GET", "/ws/v1/cluster/apps", Reply(body={"apps": {"app": [
        {"id": "application_1_0001", "name": "orders", "state": "RUNNING"},
        {"id": "application_1_0002", "name": "orders", "state": "RUNNING"}]}}))
    with pytest.raises(OldJobAmbiguous, match="application_1_0001.*application_1_0002"):
        adopt(spec(kind="yarn", application_name="orders", resource_manager=server.url), no_site, checkpoint_uri=CP)
    with pytest.raises(OldJobNotFound, match="does not know application_1_0099"):
        adopt(spec(kind="yarn", application_id="application_1_0099", resource_manager=server.url), no_site,
              checkpoint_uri=CP)
    with pytest.raises(InvalidOldJob, match="no ResourceManager"):
        adopt(spec(kind="yarn", application_id=APP), no_site, checkpoint_uri=CP)


def test_a_driver_pod_by_name(server: Replay, tmp_path: Path) -> None:
    pod = "orders-v1-7f3c2a9b1d-driver"
    server.on("GET", f"/api/v1/namespaces/streams/pods/{pod}", Reply(body="kubernetes/pod_running.json"))
    token = tmp_path / "token"
    token.write_text("t0ken")
    options = JobOptions(cluster={"api_server": server.url, "token_file": str(token)})
    adopted = adopt(spec(kind="kubernetes", namespace="streams", pod=pod, context="prod"), options, checkpoint_uri=CP)
    assert adopted.handle.mode == "k8s-cluster" and adopted.handle.driver_id == pod
    assert adopted.handle.extra == {"adopted": "true", "found_by": "pod name", "namespace": "streams",
                                    "app_selector": "spark-4b1f0c7a2e8d4f51a1e0b3c9d2f6a7e8", "context": "prod",
                                    "api_server": server.url, "token_file": str(token)}
    assert "t0ken" not in adopted.handle.to_json()
    job = job_for(adopted.handle)
    assert isinstance(job, KubernetesJob) and job.state() is DriverState.RUNNING
    with pytest.raises(OldJobNotFound):
        adopt(spec(kind="kubernetes", namespace="streams", pod="gone-driver"), options, checkpoint_uri=CP)


def test_a_driver_pod_by_labels_takes_the_live_one(server: Replay) -> None:
    server.on("GET", "/api/v1/namespaces/streams/pods", Reply(body="kubernetes/pods_by_label.json"))
    options = JobOptions(cluster={"api_server": server.url})
    adopted = adopt(spec(kind="kubernetes", namespace="streams", label_selector="spark-app-name=orders-v1"), options,
                    checkpoint_uri=CP)
    assert adopted.handle.driver_id == "orders-v1-7f3c2a9b1d-driver"
    assert server.asked[0].query == {"labelSelector": ["spark-app-name=orders-v1"]}


def test_a_driver_pod_an_operator_restarts_is_refused(server: Replay) -> None:
    server.on("GET", "/api/v1/namespaces/streams/pods/orders-driver",
              Reply(body="kubernetes/pod_owned_by_sparkapplication.json"))
    with pytest.raises(OldJobRestartsItself, match="SparkApplication orders"):
        adopt(spec(kind="kubernetes", namespace="streams", pod="orders-driver"),
              JobOptions(cluster={"api_server": server.url}), checkpoint_uri=CP)


DRIVER = "driver-20250101010101-0007"


def test_a_standalone_driver(server: Replay) -> None:
    server.on("GET", "/json/", Reply(body={"activedrivers": [{"id": DRIVER, "state": "RUNNING"}],
                                           "completeddrivers": [], "workers": []}))
    declared = spec(kind="standalone", master="spark://m1:7077", driver_id=DRIVER, master_ui_url=server.url)
    adopted = adopt(declared, checkpoint_uri=CP)
    assert adopted.application is not None and adopted.application.state is DriverState.RUNNING
    assert (adopted.handle.driver_id, adopted.handle.master, adopted.handle.extra["master_ui_url"]) == (
        DRIVER, "spark://m1:7077", server.url)
    server.on("GET", "/json/", Reply(body={"activedrivers": [], "completeddrivers": [], "workers": []}))
    with pytest.raises(OldJobNotFound, match="not listed by the master"):
        adopt(declared, checkpoint_uri=CP)


def test_a_standalone_master_that_does_not_answer() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(ClusterManagerUnreachable):
        adopt(spec(kind="standalone", master="spark://m1:7077", driver_id=DRIVER, master_ui_url=dead),
              checkpoint_uri=CP)


def test_a_process_here_and_elsewhere() -> None:
    here = adopt(spec(kind="process", pid=4242), checkpoint_uri=CP).handle
    assert here.scope == ProcessScope.current() and here.started_at == UNKNOWN_START
    elsewhere = adopt(spec(kind="process", pid=4242, host="other-host"), checkpoint_uri=CP).handle
    job = job_for(elsewhere)
    assert isinstance(job, LocalJob) and job.state() is DriverState.UNKNOWN, "a pid on another host is not seen"


def test_external_and_launched() -> None:
    adopted = adopt(spec(kind="external", description="ops stop it in Control-M"), checkpoint_uri=CP)
    assert adopted.application is None and isinstance(job_for(adopted.handle), ExternalJob)
    assert adopted.handle.extra["description"] == "ops stop it in Control-M"
    handle = LaunchHandle(mode=LaunchMode.YARN_CLUSTER, checkpoint_uri=CP, app_name="orders", started_at="t",
                          application_id=APP)
    assert adopt(spec(kind="launched", launch_handle=handle.to_dict()), checkpoint_uri=CP).handle == handle
