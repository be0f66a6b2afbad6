"""The old job the provider did not launch (checkpoint/old_job.py): the declaration and its codec,
the cluster managers' answers (recorded in tests/unit/cluster_recordings), and the adoption's plan."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointOnDriverDisk,
    CutBatchNotAccepted,
    InvalidOldJob,
    KillNeedsSinkLedger,
    OldJobAmbiguous,
    OldJobNotFound,
    OldJobRestartsItself,
    SwitchoverUnsupported,
)
from airflow_ckpt_provider.checkpoint.launch import DriverState, LaunchHandle, LaunchMode, RelaunchMode
from airflow_ckpt_provider.checkpoint.old_job import (
    MAX_SITE_XML_BYTES,
    AdoptionPlan,
    ClusterApplication,
    CutExposure,
    OldJobKind,
    OldJobSpec,
    StopMethod,
    adoption_plan,
    choose_application,
    k8s_application,
    k8s_pod_state,
    k8s_pods,
    kill_settled,
    restarts_itself,
    rm_web_urls,
    yarn_am_container,
    yarn_application,
    yarn_apps,
)
from airflow_ckpt_provider.jobs import DriverState as JobsDriverState
from airflow_ckpt_provider.sinks.spec import SinkKind

RECORDINGS = Path(__file__).parent / "cluster_recordings"


def recorded(name: str) -> Any:  # noqa: ANN401 - a recorded JSON answer
    return json.loads((RECORDINGS / name).read_text())


def test_driver_state_is_one_vocabulary() -> None:
    assert JobsDriverState is DriverState


# -- the declaration -----------------------------------------------------------------------------------

HANDLE = LaunchHandle(mode=LaunchMode.YARN_CLUSTER, checkpoint_uri="hdfs://nn/cp", app_name="orders",
                      started_at="2025-01-01T00:00:00+00:00", application_id="application_1_0001")


@pytest.mark.parametrize("value", [
    {"kind": "process", "pid": 4242, "host": "worker-1"},
    {"kind": "standalone", "master": "spark://m1:7077,m2:7077", "driver_id": "driver-20250101010101-0007",
     "master_ui_url": "http://m1:8080/"},
    {"kind": "yarn", "application_id": "application_1735689600000_0007", "resource_manager":
     "http://rm1:8088, http://rm2:8088/", "user": "etl", "kill_grace_s": 10},
    {"kind": "yarn", "application_tags": ["orders", "ckpt-stream-orders"]},
    {"kind": "yarn", "application_tags": "orders, ckpt-stream-orders"},
    {"kind": "yarn", "application_name": "orders-v1", "confirmed": True},
    {"kind": "kubernetes", "namespace": "streams", "pod": "orders-v1-7f3c2a9b1d-driver", "context": "prod"},
    {"kind": "kubernetes", "namespace": "streams", "label_selector": "spark-app-name=orders-v1,spark-role=driver"},
    {"kind": "external", "description": "the ops team stops it in the scheduler", "shared_mount": True},
    {"kind": "launched", "launch_handle": HANDLE.to_dict()},
])
def test_a_declaration_round_trips(value: dict[str, Any]) -> None:
    spec = OldJobSpec.from_value(value)
    assert spec is not None and spec.kind == value["kind"]
    assert OldJobSpec.from_json(spec.to_json()) == spec
    assert OldJobSpec.from_value(json.dumps(value)) == spec
    assert spec.to_dict()["format"] == 1
    assert spec.describe()


def test_a_declaration_is_normalised() -> None:
    spec = OldJobSpec.from_value({"kind": "yarn", "application_tags": "orders, ckpt-stream-orders",
                                  "resource_manager": "http://rm1:8088, http://rm2:8088/"})
    assert spec is not None
    assert spec.application_tags == ("orders", "ckpt-stream-orders")
    assert spec.rm_urls == ("http://rm1:8088", "http://rm2:8088")
    assert spec.kill_grace_s == 10.0 and not spec.confirmed and not spec.shared_mount


@pytest.mark.parametrize("value", [None, "", " ", "None", "null", "{}", {}])
def test_nothing_declared_is_none(value: Any) -> None:  # noqa: ANN401
    assert OldJobSpec.from_value(value) is None


def test_a_launch_handle_is_the_launched_kind() -> None:
    by_object = OldJobSpec.from_value(HANDLE)
    by_json = OldJobSpec.from_value(HANDLE.to_json())
    assert by_object == by_json and by_object is not None
    assert by_object.kind is OldJobKind.LAUNCHED and by_object.launch_handle == HANDLE
    assert by_object.on_cluster  # a yarn-cluster handle: its driver runs on a cluster node
    with pytest.raises(InvalidOldJob, match="launch handle"):
        OldJobSpec.from_value({"mode": "yarn-cluster", "checkpoint_uri": "/c", "app_name": "a", "started_at": "t"})


@pytest.mark.parametrize(("value", "field"), [
    ({"kind": "mesos"}, "kind"),
    ({"kind": "process"}, "pid"),
    ({"kind": "process", "pid": 1}, "pid"),
    ({"kind": "process", "pid": True}, "pid"),
    ({"kind": "process", "pid": 42, "host": "bad host"}, "host"),
    ({"kind": "process", "pid": 42, "application_id": "application_1_1"}, "application_id"),
    ({"kind": "standalone", "master": "yarn", "driver_id": "driver-20250101010101-0007"}, "master"),
    ({"kind": "standalone", "master": "spark://m:7077", "driver_id": "app-1"}, "driver_id"),
    ({"kind": "standalone", "master": "spark://m:7077", "driver_id": "driver-20250101010101-0007",
      "master_ui_url": "ftp://m"}, "master_ui_url"),
    ({"kind": "yarn"}, "application_id, application_tags, application_name"),
    ({"kind": "yarn", "application_id": "application_1_1", "application_name": "x"}, "application_id and"),
    ({"kind": "yarn", "application_id": "app_1"}, "application_id"),
    ({"kind": "yarn", "application_tags": ["has space"]}, "application_tags"),
    ({"kind": "yarn", "application_tags": [3]}, "application_tags"),
    ({"kind": "yarn", "application_id": "application_1_1", "resource_manager": "rm1:8088"}, "resource_manager"),
    ({"kind": "yarn", "application_id": "application_1_1", "user": "a b"}, "user"),
    ({"kind": "yarn", "application_id": "application_1_1", "kill_grace_s": -1}, "kill_grace_s"),
    ({"kind": "yarn", "application_id": "application_1_1", "kill_grace_s": "10"}, "kill_grace_s"),
    ({"kind": "yarn", "application_id": "application_1_1", "confirmed": "yes"}, "confirmed"),
    ({"kind": "yarn", "application_id": "application_1_1", "queue": "default"}, "queue"),
    ({"kind": "kubernetes", "namespace": "Streams", "pod": "p"}, "namespace"),
    ({"kind": "kubernetes", "namespace": "streams"}, "pod and label_selector"),
    ({"kind": "kubernetes", "namespace": "streams", "pod": "p", "label_selector": "a=b"}, "pod and label_selector"),
    ({"kind": "kubernetes", "namespace": "streams", "label_selector": "a=b;rm -rf"}, "label_selector"),
    ({"kind": "external"}, "description"),
    ({"kind": "external", "description": "x\u0000y"}, "description"),
    ({"kind": "launched"}, "launch_handle"),
    ({"kind": "yarn", "application_id": "application_1_1", "format": 9}, "format"),
    ("[1]", "JSON array"),
    ("{not json", "not JSON"),
])
def test_a_bad_field_is_named(value: Any, field: str) -> None:  # noqa: ANN401
    with pytest.raises(InvalidOldJob) as error:
        OldJobSpec.from_value(value)
    assert field in error.value.found


@pytest.mark.parametrize(("field", "url"), [
    ("resource_manager", "http://etl:secret@rm1:8088"),
    ("resource_manager", "http://etl@rm1:8088"),
    ("master_ui_url", "https://admin:hunter2@m1:8080"),
])
def test_no_credential_in_a_declaration(field: str, url: str) -> None:
    value: dict[str, Any] = ({"kind": "yarn", "application_id": "application_1_1"} if field == "resource_manager"
                             else {"kind": "standalone", "master": "spark://m:7077",
                                   "driver_id": "driver-20250101010101-0007"})
    with pytest.raises(InvalidOldJob) as error:
        OldJobSpec.from_value({**value, field: url})
    assert field in error.value.found and "user-info" in error.value.found
    assert "secret" not in str(error.value) and "hunter2" not in str(error.value)


def test_a_master_with_credentials_is_refused_masked() -> None:
    with pytest.raises(InvalidOldJob) as error:
        OldJobSpec.from_value({"kind": "standalone", "master": "spark://u:pw@m:7077",
                               "driver_id": "driver-20250101010101-0007"})
    assert "master" in error.value.found and "pw@" not in str(error.value)


# -- YARN's answers ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "final", "expected"), [
    ("NEW", "UNDEFINED", DriverState.SUBMITTED),
    ("NEW_SAVING", "UNDEFINED", DriverState.SUBMITTED),
    ("SUBMITTED", "UNDEFINED", DriverState.SUBMITTED),
    ("ACCEPTED", "UNDEFINED", DriverState.SUBMITTED),
    ("RUNNING", "UNDEFINED", DriverState.RUNNING),
    ("FINISHED", "SUCCEEDED", DriverState.FINISHED),
    ("FINISHED", "FAILED", DriverState.FAILED),
    ("FINISHED", "KILLED", DriverState.KILLED),
    ("FAILED", "FAILED", DriverState.FAILED),
    ("KILLED", "KILLED", DriverState.KILLED),
    ("ELSEWHERE", "", DriverState.UNKNOWN),
])
def test_yarn_state_and_final_status(state: str, final: str, expected: DriverState) -> None:
    app = recorded("yarn/app_running.json")
    app["app"].update(state=state, finalStatus=final)
    assert yarn_application(app).state is expected


def test_a_recorded_yarn_application() -> None:
    app = yarn_application(recorded("yarn/app_running.json"), found_by="application id")
    assert app == ClusterApplication(
        manager="yarn", app_id="application_1735689600000_0007", name="orders-v1", user="etl", queue="default",
        state=DriverState.RUNNING, final_status="UNDEFINED", started_at="2025-01-01T01:00:00+00:00",
        tracking_url="http://rm1.example.com:8088/proxy/application_1735689600000_0007/",
        am_node_http="nm1.example.com:8042", running_containers=2, tags=("orders", "ckpt-stream-orders"),
        found_by="application id")
    assert app.describe() == ("YARN application_1735689600000_0007 `orders-v1` (user etl, queue default, running "
                              "since 2025-01-01T01:00:00+00:00, found by application id)")
    assert ClusterApplication.from_json(app.to_json()) == app
    killed = yarn_application(recorded("yarn/app_killed.json"))
    assert killed.state is DriverState.KILLED and killed.running_containers == -1
    assert "killed (KILLED)" in killed.describe()


@pytest.mark.parametrize("answer", [{}, {"app": {"id": "nope"}}, {"app": None}])
def test_a_yarn_answer_without_an_application_is_refused(answer: dict[str, Any]) -> None:
    with pytest.raises(InvalidOldJob, match="without an application id"):
        yarn_application(answer)


def test_yarn_application_lists_and_attempts() -> None:
    apps = yarn_apps(recorded("yarn/apps_running.json"))
    assert [(a.app_id, a.state) for a in apps] == [("application_1735689600000_0007", DriverState.RUNNING),
                                                   ("application_1735689600000_0009", DriverState.SUBMITTED)]
    assert yarn_apps(recorded("yarn/apps_none.json")) == []
    assert yarn_am_container(recorded("yarn/appattempts.json")) == ("container_1735689600000_0007_01_000001",
                                                                     "nm1.example.com:8042")
    second = {"id": 2, "startTime": 2, "containerId": "container_x_02_000001", "nodeHttpAddress": "nm2:8042"}
    attempts = recorded("yarn/appattempts.json")
    attempts["appAttempts"]["appAttempt"].append(second)
    assert yarn_am_container(attempts) == ("container_x_02_000001", "nm2:8042")
    assert yarn_am_container({"appAttempts": None}) == ("", "")


def _app(app_id: str, state: DriverState = DriverState.RUNNING, name: str = "orders-v1",
         tags: tuple[str, ...] = ()) -> ClusterApplication:
    return ClusterApplication(manager="yarn", app_id=app_id, name=name, state=state, tags=tags)


APPS = (
    _app("application_1_0001", DriverState.KILLED, tags=("orders",)),
    _app("application_1_0002", DriverState.RUNNING, tags=("ORDERS", "ckpt-stream-orders")),
    _app("application_1_0003", DriverState.RUNNING, name="payments", tags=("payments",)),
    _app("application_1_0004", DriverState.SUBMITTED, name="payments", tags=("payments", "b")),
)


@pytest.mark.parametrize(("declared", "chosen"), [
    ({"application_id": "application_1_0002"}, "application_1_0002"),
    ({"application_id": "application_1_0001"}, "application_1_0001"),  # by id, an ended one is it (stop: none)
    ({"application_tags": ["orders"]}, "application_1_0002"),  # YARN lowercases tags: compared case-insensitively
    ({"application_tags": ["Orders", "CKPT-stream-orders"]}, "application_1_0002"),
    ({"application_tags": ["payments", "b"]}, "application_1_0004"),
    ({"application_name": "orders-v1"}, "application_1_0002"),
])
def test_choose_application(declared: dict[str, Any], chosen: str) -> None:
    spec = OldJobSpec.from_value({"kind": "yarn", **declared})
    assert spec is not None
    app = choose_application(APPS, spec)
    assert app.app_id == chosen and app.found_by


@pytest.mark.parametrize(("declared", "error", "listed"), [
    ({"application_tags": ["payments"]}, OldJobAmbiguous, ["application_1_0003", "application_1_0004"]),
    ({"application_name": "payments"}, OldJobAmbiguous, ["application_1_0003", "application_1_0004"]),
    ({"application_id": "application_1_0099"}, OldJobNotFound, ["4 application(s) listed"]),
    ({"application_tags": ["orders", "nightly"]}, OldJobNotFound, ["none matching"]),
])
def test_choose_application_refuses(declared: dict[str, Any], error: type[Exception], listed: list[str]) -> None:
    spec = OldJobSpec.from_value({"kind": "yarn", **declared})
    assert spec is not None
    with pytest.raises(error) as raised:
        choose_application(APPS, spec)
    assert all(item in str(raised.value) for item in listed)


def test_an_ended_match_by_tag_is_not_taken() -> None:
    spec = OldJobSpec.from_value({"kind": "yarn", "application_tags": ["orders"]})
    assert spec is not None
    with pytest.raises(OldJobNotFound) as raised:
        choose_application(APPS[:1], spec)
    assert "ended matches: YARN application_1_0001" in str(raised.value)


@pytest.mark.parametrize(("app", "container", "settled"), [
    (_app("a", DriverState.KILLED), None, True),
    (_app("a", DriverState.KILLED), {"container": {"state": "CONTAINER_CLEANEDUP_AFTER_KILL"}}, True),
    (_app("a", DriverState.KILLED), {"container": {"state": "DONE"}}, True),
    (_app("a", DriverState.KILLED), {"container": {"state": "EXITED_WITH_FAILURE"}}, True),
    (_app("a", DriverState.KILLED), {"container": {"state": "KILLING"}}, False),
    (_app("a", DriverState.KILLED), {"container": {"state": "RUNNING"}}, False),
    (_app("a", DriverState.RUNNING), None, False),
    (_app("a", DriverState.UNKNOWN), None, False),
    (ClusterApplication(manager="yarn", app_id="a", state=DriverState.KILLED, running_containers=1), None, False),
])
def test_kill_settled(app: ClusterApplication, container: dict[str, Any] | None, settled: bool) -> None:
    assert kill_settled(app, container) is settled


def test_kill_settled_on_recorded_containers() -> None:
    killed = yarn_application(recorded("yarn/app_killed.json"))
    assert kill_settled(killed, recorded("yarn/container_done.json"))
    assert not kill_settled(killed, recorded("yarn/container_running.json"))


# -- yarn-site.xml -------------------------------------------------------------------------------------


def site(**props: str) -> str:
    body = "".join(f"<property><name>{k.replace('___', '-').replace('__', '.')}</name><value>{v}</value></property>"
                   for k, v in props.items())
    return f'<?xml version="1.0"?>\n<configuration>{body}</configuration>'


@pytest.mark.parametrize(("xml", "urls"), [
    (site(), ()),
    (site(yarn__resourcemanager__hostname="rm1"), ("http://rm1:8088",)),
    (site(yarn__resourcemanager__webapp__address="rm1.example.com:18088"), ("http://rm1.example.com:18088",)),
    (site(yarn__resourcemanager__hostname="rm1", yarn__resourcemanager__webapp__address="0.0.0.0:8088"),
     ("http://rm1:8088",)),
    (site(yarn__resourcemanager__hostname="rm1",
          yarn__resourcemanager__webapp__address="${yarn.resourcemanager.hostname}:8089"), ("http://rm1:8089",)),
    (site(yarn__http__policy="HTTPS_ONLY", yarn__resourcemanager__hostname="rm1"), ("https://rm1:8090",)),
    (site(yarn__resourcemanager__ha__enabled="true", yarn__resourcemanager__ha__rm___ids="rm1,rm2",
          yarn__resourcemanager__webapp__address__rm1="a.example.com:8088",
          yarn__resourcemanager__webapp__address__rm2="b.example.com:8088"),
     ("http://a.example.com:8088", "http://b.example.com:8088")),
    (site(yarn__resourcemanager__ha__enabled="true", yarn__resourcemanager__ha__rm___ids="x, y",
          yarn__resourcemanager__hostname__x="a", yarn__resourcemanager__hostname__y="b"),
     ("http://a:8088", "http://b:8088")),
    (site(yarn__resourcemanager__ha__enabled="false", yarn__resourcemanager__ha__rm___ids="rm1,rm2",
          yarn__resourcemanager__hostname="solo"), ("http://solo:8088",)),
])
def test_rm_web_urls(xml: str, urls: tuple[str, ...]) -> None:
    assert rm_web_urls(xml) == urls


@pytest.mark.parametrize(("xml", "found"), [
    ('<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><configuration/>', "DOCTYPE"),
    ("<configuration><property>", "not XML"),
    ("<configuration>" + " " * MAX_SITE_XML_BYTES + "</configuration>", "bytes"),
])
def test_rm_web_urls_refuses(xml: str, found: str) -> None:
    with pytest.raises(InvalidOldJob) as error:
        rm_web_urls(xml)
    assert found in error.value.found


# -- Kubernetes' answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("phase", "state"), [
    ("Pending", DriverState.SUBMITTED), ("Running", DriverState.RUNNING), ("Succeeded", DriverState.FINISHED),
    ("Failed", DriverState.FAILED), ("Unknown", DriverState.UNKNOWN), ("Evicted", DriverState.UNKNOWN),
])
def test_k8s_pod_state(phase: str, state: DriverState) -> None:
    pod = recorded("kubernetes/pod_running.json")
    pod["status"]["phase"] = phase
    assert k8s_pod_state(pod) is state


def test_a_pod_that_is_gone_has_exited() -> None:
    assert k8s_pod_state(None) is DriverState.EXITED
    assert k8s_pod_state({}) is DriverState.UNKNOWN


def test_a_recorded_driver_pod() -> None:
    app = k8s_application(recorded("kubernetes/pod_running.json"), found_by="pod name")
    assert (app.app_id, app.name, app.queue, app.user, app.state, app.started_at) == (
        "orders-v1-7f3c2a9b1d-driver", "orders-v1", "streams", "spark", DriverState.RUNNING, "2025-01-01T01:00:02Z")
    assert app.tags == ("spark-4b1f0c7a2e8d4f51a1e0b3c9d2f6a7e8",)
    assert [a.state for a in k8s_pods(recorded("kubernetes/pods_by_label.json"))] == [DriverState.RUNNING,
                                                                                       DriverState.FAILED]
    with pytest.raises(InvalidOldJob):
        k8s_application({"metadata": {}})


@pytest.mark.parametrize("owner", ["SparkApplication", "Job", "ReplicaSet", "StatefulSet"])
def test_an_owner_that_restarts_the_driver_is_named(owner: str) -> None:
    pod = recorded("kubernetes/pod_owned_by_sparkapplication.json")
    pod["metadata"]["ownerReferences"][0]["kind"] = owner
    refusal = restarts_itself(pod)
    assert isinstance(refusal, OldJobRestartsItself)
    assert f"{owner} orders" in refusal.found


def test_spark_submits_own_driver_pod_does_not_restart() -> None:
    assert restarts_itself(recorded("kubernetes/pod_running.json")) is None
    pod = recorded("kubernetes/pod_running.json")
    pod["metadata"]["ownerReferences"] = [{"kind": "ConfigMap", "name": "x"}]
    assert restarts_itself(pod) is None


# -- the plan ------------------------------------------------------------------------------------------

YARN = OldJobSpec(kind=OldJobKind.YARN, application_id="application_1_0002")
EXTERNAL = OldJobSpec(kind=OldJobKind.EXTERNAL, description="ops stop it in Control-M")


def plan(spec: OldJobSpec = YARN, **given: Any) -> AdoptionPlan:  # noqa: ANN401
    args: dict[str, Any] = {"state": DriverState.RUNNING, "heartbeat_alive": False, "exposure": CutExposure.EXACT,
                            "old_checkpoint": "hdfs://nn/cp/v1", "relaunch_mode": RelaunchMode.STANDBY}
    return adoption_plan(spec, **{**args, **given})


@pytest.mark.parametrize(("spec", "given", "method"), [
    (YARN, {}, StopMethod.KILL),
    (YARN, {"state": DriverState.SUBMITTED}, StopMethod.KILL),
    (YARN, {"state": DriverState.UNKNOWN}, StopMethod.KILL),
    (YARN, {"heartbeat_alive": True}, StopMethod.GRACEFUL),
    (YARN, {"heartbeat_alive": True, "relaunch_mode": RelaunchMode.SWITCHOVER}, StopMethod.GRACEFUL),
    (YARN, {"heartbeat_alive": True, "exposure": CutExposure.UNDECLARED}, StopMethod.GRACEFUL),
    (YARN, {"state": DriverState.KILLED, "exposure": CutExposure.UNDECLARED}, StopMethod.NONE),
    (YARN, {"state": DriverState.FINISHED, "relaunch_mode": RelaunchMode.SWITCHOVER}, StopMethod.NONE),
    (EXTERNAL, {"state": DriverState.UNKNOWN}, StopMethod.PERSON),
    (EXTERNAL, {"state": DriverState.UNKNOWN, "heartbeat_alive": True}, StopMethod.GRACEFUL),
    (YARN, {"exposure": CutExposure.COUNTED}, StopMethod.KILL),
    (YARN, {"exposure": CutExposure.AT_LEAST_ONCE, "accept_cut_batch": True}, StopMethod.KILL),
])
def test_adoption_plan_stop_method(spec: OldJobSpec, given: dict[str, Any], method: StopMethod) -> None:
    result = plan(spec, **given)
    assert result.stop_method is method
    assert result.lines[0].startswith("**Old job:**")
    assert result.may_cut_batch is (method in (StopMethod.KILL, StopMethod.PERSON))
    assert AdoptionPlan.from_json(result.to_json()) == result


@pytest.mark.parametrize(("spec", "given", "error"), [
    (YARN, {"exposure": CutExposure.UNDECLARED}, KillNeedsSinkLedger),
    (YARN, {"exposure": CutExposure.UNDECLARED, "accept_cut_batch": True}, KillNeedsSinkLedger),
    (EXTERNAL, {"state": DriverState.UNKNOWN, "exposure": CutExposure.UNDECLARED}, KillNeedsSinkLedger),
    (YARN, {"exposure": CutExposure.AT_LEAST_ONCE}, CutBatchNotAccepted),
    (EXTERNAL, {"state": DriverState.UNKNOWN, "exposure": CutExposure.AT_LEAST_ONCE}, CutBatchNotAccepted),
    (YARN, {"relaunch_mode": RelaunchMode.SWITCHOVER}, SwitchoverUnsupported),
    (YARN, {"relaunch_mode": "switchover", "exposure": CutExposure.UNDECLARED}, SwitchoverUnsupported),
    (EXTERNAL, {"state": DriverState.UNKNOWN, "relaunch_mode": RelaunchMode.SWITCHOVER}, SwitchoverUnsupported),
    (YARN, {"old_checkpoint": "file:///data/cp"}, CheckpointOnDriverDisk),
    (YARN, {"old_checkpoint": "/data/cp", "heartbeat_alive": True}, CheckpointOnDriverDisk),
    (OldJobSpec(kind=OldJobKind.KUBERNETES, namespace="s", pod="p"), {"old_checkpoint": "cp"},
     CheckpointOnDriverDisk),
    (OldJobSpec(kind=OldJobKind.LAUNCHED, launch_handle=HANDLE), {"old_checkpoint": "/cp"}, CheckpointOnDriverDisk),
    (YARN, {"new_locations": ["hdfs://nn/cp/v2", "file:/out"], "new_on_cluster": True}, CheckpointOnDriverDisk),
])
def test_adoption_plan_refuses(spec: OldJobSpec, given: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        plan(spec, **given)


@pytest.mark.parametrize(("spec", "given"), [
    (OldJobSpec(kind=OldJobKind.PROCESS, pid=42), {"old_checkpoint": "/data/cp"}),  # same host: local is fine
    (OldJobSpec(kind=OldJobKind.YARN, application_id="application_1_1", shared_mount=True),
     {"old_checkpoint": "file:///mnt/shared/cp"}),
    (YARN, {"new_locations": ["/local/cp"], "new_on_cluster": False}),
    (YARN, {"old_checkpoint": "s3a://bucket/cp"}),
])
def test_local_paths_that_are_allowed(spec: OldJobSpec, given: dict[str, Any]) -> None:
    assert plan(spec, **given).stop_method is StopMethod.KILL


def test_the_approval_shows_what_one_cut_batch_costs() -> None:
    app = yarn_application(recorded("yarn/app_running.json"), found_by="application id")
    with pytest.raises(CutBatchNotAccepted) as refused:
        plan(exposure=CutExposure.AT_LEAST_ONCE, in_flight=["orders-0 [100, 180) (80 records)"],
             recent_batch_sizes=[75, 81, 2000])
    assert "orders-0 [100, 180) (80 records)" in refused.value.found and "75, 81, 2,000" in refused.value.found
    accepted = plan(exposure=CutExposure.AT_LEAST_ONCE, accept_cut_batch=True, application=app,
                    in_flight=["orders-0 [100, 180) (80 records)"])
    assert accepted.accepted_cut_batch and accepted.application == app
    assert "application_1735689600000_0007 `orders-v1`" in accepted.lines[0]
    assert "killed through its ResourceManager" in accepted.lines[0]
    assert "accept_cut_batch" in accepted.lines[1] and "orders-0 [100, 180)" in accepted.lines[1]
    exact = plan(exposure=CutExposure.EXACT, accept_cut_batch=True)
    assert not exact.accepted_cut_batch and "exact" in exact.lines[1]


def test_the_approval_names_shared_mounts_and_confirmation() -> None:
    spec = OldJobSpec(kind=OldJobKind.YARN, application_id="application_1_1", shared_mount=True, confirmed=True)
    lines = plan(spec, old_checkpoint="/mnt/shared/cp").lines
    assert any(line.startswith("**Shared mount:**") for line in lines)
    assert any(line.startswith("**Identity:**") for line in lines)


@pytest.mark.parametrize(("kind", "headers", "exposure"), [
    (SinkKind.NONE, False, CutExposure.UNDECLARED),
    (SinkKind.DELTA, False, CutExposure.EXACT),
    (SinkKind.DELTA_FOREACH_BATCH, False, CutExposure.EXACT),
    (SinkKind.FILE, False, CutExposure.EXACT),
    (SinkKind.KAFKA, True, CutExposure.COUNTED),
    (SinkKind.KAFKA, False, CutExposure.AT_LEAST_ONCE),
    (SinkKind.FOREACH_BATCH, True, CutExposure.AT_LEAST_ONCE),
])
def test_every_sink_kind_has_an_exposure(kind: SinkKind, headers: bool, exposure: CutExposure) -> None:
    assert kind.cut_exposure(source_headers=headers) is exposure


def test_the_exposure_table_covers_every_sink_kind() -> None:
    assert {k.cut_exposure() for k in SinkKind} <= set(CutExposure)
    assert len(SinkKind) == 6, "a new sink kind needs its row in test_every_sink_kind_has_an_exposure"


# -- answers recorded from a real ResourceManager (Hadoop 3.4.1, the one tests/harness/yarn.py runs) --------------


def test_a_real_resource_managers_answers_read_as_the_job_the_adoption_kills() -> None:
    """``real-3.4.1/``: a Spark application in cluster mode (tag ``Orders-V1``, which YARN keeps
    lowercased) while it ran, after ``PUT .../state {"state": "KILLED"}``, and its attempts."""
    running = yarn_application(recorded("yarn/real-3.4.1/app-running.json"), found_by="application id")
    assert running.state is DriverState.RUNNING and running.alive is True
    assert running.app_id.startswith("application_") and running.name == "sleep-try"
    assert running.tags == ("orders-v1",) and running.user == "root" and running.queue == "root.default"
    assert running.running_containers == 2
    spec = OldJobSpec.from_value({"kind": "yarn", "application_tags": ["Orders-V1"],
                                  "resource_manager": "http://127.0.0.1:8088"})
    assert spec is not None and choose_application([running], spec).app_id == running.app_id
    killed = yarn_application(recorded("yarn/real-3.4.1/app-killed.json"))
    assert killed.state is DriverState.KILLED and killed.alive is False
    container, node = yarn_am_container(recorded("yarn/real-3.4.1/appattempts.json"))
    assert container.endswith("_01_000001") and node.startswith("localhost:")
    # the NodeManager forgets a container once it ended: 404, as a real one answered
    assert kill_settled(killed, None) is True
    assert kill_settled(running, None) is False
