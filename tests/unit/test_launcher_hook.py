"""SparkLauncherHook: command building for the three modes, launch parsing, follow and kill.

spark-submit is replaced by small executable scripts (the process boundary); nothing else is faked.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.errors import LaunchFailed
from airflow_ckpt_provider.hooks.launcher import PYSPARK_PYTHON_ENV, PYTHON_RUNNER, SparkLauncherHook, launch_mode
from airflow_ckpt_provider.jobs import DriverState
from airflow_ckpt_provider.jobs.standalone import default_master_ui_url
from airflow_ckpt_provider.records.control import DRIVER, DriverRecord, ProcessScope

HANDOVER = '{"events":{"0":100,"1":-2}}'


def build(master: str, deploy_mode: str | None, application: str = "job.py",
          **hook: object) -> tuple[LaunchMode, list[str]]:
    launcher = SparkLauncherHook(master=master, deploy_mode=deploy_mode, **hook)  # type: ignore[arg-type]
    mode, command, _ = launcher.build_command(
        application, application_args=["--flag", "a b"], conf={"spark.sql.shuffle.partitions": "2"},
        name="orders-v2", checkpoint_uri="s3://bucket/cp/v2", starting_offsets=HANDOVER,
        handover_json='{"format":1}',
    )
    return mode, command


def conf_values(command: list[str]) -> dict[str, str]:
    pairs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    return dict(p.split("=", 1) for p in pairs)


def test_local_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PYSPARK_PYTHON_ENV:
        monkeypatch.delenv(name, raising=False)
    mode, command = build("local[2]", None)
    assert mode is LaunchMode.LOCAL
    assert os.path.isabs(command[0]) and command[0].endswith("spark-submit")
    assert command[1:3] == ["--master", "local[2]"] and "--deploy-mode" not in command
    assert conf_values(command) == {
        "spark.sql.shuffle.partitions": "2",
        "spark.pyspark.python": sys.executable,  # the driver can import the provider
        "spark.ckpt.checkpointLocation": "s3://bucket/cp/v2",
        "spark.ckpt.startingOffsets": HANDOVER,  # one argument: no shell, no quoting
        "spark.ckpt.handoverJson": '{"format":1}',
    }
    assert command[-3:] == ["job.py", "--flag", "a b"]
    assert command[command.index("--name") + 1] == "orders-v2"


@pytest.mark.parametrize(
    ("conf", "env", "expected"),
    [
        ({"spark.pyspark.python": "/opt/py/bin/python"}, {}, "/opt/py/bin/python"),  # given: kept
        ({"spark.pyspark.driver.python": "/opt/py/bin/python"}, {}, None),
        ({}, {"PYSPARK_PYTHON": "/opt/py/bin/python"}, None),  # the launch environment names one
        ({"spark.pyspark.python": ""}, {}, sys.executable),  # empty is not set
    ],
)
def test_local_python_default_respects_what_the_user_set(
        monkeypatch: pytest.MonkeyPatch, conf: dict[str, str], env: dict[str, str], expected: str | None) -> None:
    for name in PYSPARK_PYTHON_ENV:
        monkeypatch.delenv(name, raising=False)
    _, command, _ = SparkLauncherHook(master="local[2]", env=env).build_command("job.py", conf=conf)
    assert conf_values(command).get("spark.pyspark.python") == expected


def test_python_default_only_for_local_python_drivers(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PYSPARK_PYTHON_ENV:
        monkeypatch.delenv(name, raising=False)
    _, jar, _ = SparkLauncherHook(master="local[2]").build_command("job.jar")
    _, yarn, _ = SparkLauncherHook(master="yarn", deploy_mode="cluster").build_command("job.py")
    assert "spark.pyspark.python" not in conf_values(jar)
    assert "spark.pyspark.python" not in conf_values(yarn)  # the cluster's interpreter, not this one


def test_standalone_cluster_python_goes_through_python_runner(tmp_path: Path) -> None:
    jar = tmp_path / "launcher.jar"
    mode, command = build("spark://m:7077", "cluster", python_launcher_jar=str(jar),
                          submit_options={"py_files": "deps.zip", "driver_memory": "1g"})
    assert mode is LaunchMode.STANDALONE_CLUSTER
    assert command[command.index("--deploy-mode") + 1] == "cluster"
    assert command[command.index("--class") + 1] == PYTHON_RUNNER
    assert "--py-files" not in command  # handed to PythonRunner instead
    assert command[command.index("--driver-memory") + 1] == "1g"
    assert command[-5:] == [str(jar), "job.py", "deps.zip", "--flag", "a b"]
    mode, command = build("spark://m:7077", "cluster", application="app.jar")
    assert "--class" not in command and command[-3:] == ["app.jar", "--flag", "a b"]


def test_yarn_cluster_does_not_wait_for_completion() -> None:
    mode, command = build("yarn", "cluster")
    assert mode is LaunchMode.YARN_CLUSTER
    assert conf_values(command)["spark.yarn.submit.waitAppCompletion"] == "false"
    assert command[-3:] == ["job.py", "--flag", "a b"]
    with pytest.raises(ValueError, match="waitAppCompletion"):
        SparkLauncherHook(master="yarn", deploy_mode="cluster").build_command(
            "job.py", conf={"spark.yarn.submit.waitAppCompletion": "true"})


def test_command_from_spark_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_LAUNCH_TEST", json.dumps(
        {"conn_type": "spark", "host": "spark://sm", "port": 7077, "extra": {"deploy-mode": "cluster", "queue": "q"}}))
    mode, command, connection = SparkLauncherHook("spark_launch_test").build_command("app.jar")
    assert mode is LaunchMode.STANDALONE_CLUSTER and connection["master"] == "spark://sm:7077"
    assert command[1:3] == ["--master", "spark://sm:7077"]
    client = SparkLauncherHook("spark_launch_test", deploy_mode="client").build_command("app.jar")
    assert client[0] is LaunchMode.LOCAL
    with pytest.raises(LaunchFailed, match="no Airflow connection 'no_such_spark_conn'"):
        SparkLauncherHook("no_such_spark_conn").build_command("app.jar")  # never a silent "yarn"


@pytest.mark.parametrize(("master", "deploy_mode", "expected"), [
    ("local[*]", None, LaunchMode.LOCAL), ("spark://h:7077", "client", LaunchMode.LOCAL),
    ("spark://h:7077", "cluster", LaunchMode.STANDALONE_CLUSTER), ("yarn", "cluster", LaunchMode.YARN_CLUSTER),
])
def test_launch_mode(master: str, deploy_mode: str | None, expected: LaunchMode) -> None:
    assert launch_mode(master, deploy_mode) is expected


@pytest.mark.parametrize(("master", "deploy_mode"), [("k8s://https://h", "cluster"), ("spark://a:1,b:1", "cluster"),
                                                     ("local", "weird")])
def test_unsupported_modes(master: str, deploy_mode: str) -> None:
    with pytest.raises(ValueError):
        launch_mode(master, deploy_mode)


def test_default_master_ui_url() -> None:
    assert default_master_ui_url("spark://10.0.0.5:7077") == "http://10.0.0.5:8080"


def fake_submit(tmp_path: Path, body: str) -> str:
    script = tmp_path / "spark-submit"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_standalone_launch_parses_driver_id(tmp_path: Path) -> None:
    binary = fake_submit(
        tmp_path, 'echo "INFO ClientEndpoint: Driver successfully submitted as driver-20261121200632-0007"')
    hook = SparkLauncherHook(master="spark://m:7077", deploy_mode="cluster", spark_binary=binary,
                             log_dir=str(tmp_path / "logs"))
    handle = hook.launch("app.jar", checkpoint_uri="/cp")
    assert (handle.mode, handle.driver_id, handle.master) == (LaunchMode.STANDALONE_CLUSTER,
                                                              "driver-20261121200632-0007", "spark://m:7077")
    assert handle.extra["master_ui_url"] == "http://m:8080"
    assert "submitted as driver-" in Path(handle.log_path).read_text()


def test_yarn_launch_parses_application_id(tmp_path: Path) -> None:
    binary = fake_submit(tmp_path, 'echo "INFO Client: Submitted application application_1700000000000_0042"')
    handle = SparkLauncherHook(master="yarn", deploy_mode="cluster", spark_binary=binary,
                               log_dir=str(tmp_path)).launch("job.py", checkpoint_uri="/cp")
    assert handle.application_id == "application_1700000000000_0042"


@pytest.mark.parametrize("body", ['echo "Exception: no such master" >&2; exit 1', 'echo "nothing useful"'])
def test_cluster_launch_failures_carry_the_output(tmp_path: Path, body: str) -> None:
    binary = fake_submit(tmp_path, body)
    hook = SparkLauncherHook(master="spark://m:7077", deploy_mode="cluster", spark_binary=binary, log_dir=str(tmp_path))
    with pytest.raises(LaunchFailed) as failed:
        hook.launch("app.jar", checkpoint_uri="/cp")
    assert failed.value.log_tail.strip() in ("Exception: no such master", "nothing useful")


def test_local_launch_is_detached_and_killable(tmp_path: Path) -> None:
    binary = fake_submit(tmp_path, 'echo "SparkUI: Bound SparkUI to 127.0.0.1, and started at http://127.0.0.1:4051"; '
                                   'echo "args: $*"; exec sleep 60')
    hook = SparkLauncherHook(master="local[1]", spark_binary=binary, log_dir=str(tmp_path / "logs"))
    handle = hook.launch("job.py", checkpoint_uri=str(tmp_path / "cp"), application_args=["x"])
    try:
        assert handle.mode is LaunchMode.LOCAL and os.getpgid(handle.pid) == handle.pid  # own session
        assert handle.scope == ProcessScope.current() and handle.launch_id
        deadline = time.monotonic() + 10
        while "args:" not in hook.log_tail(handle) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert hook.is_alive(handle)
        assert "job.py x" in hook.log_tail(handle, 1)
        assert hook.discover_ui_url(handle) == "http://127.0.0.1:4051"
    finally:
        hook.kill(handle)
    assert not hook.is_alive(handle)
    assert LaunchHandle.from_json(handle.to_json()) == handle


def test_exited_local_job_is_not_alive(tmp_path: Path) -> None:
    binary = fake_submit(tmp_path, 'echo "Traceback: boom"; exit 3')
    hook = SparkLauncherHook(master="local[1]", spark_binary=binary, log_dir=str(tmp_path))
    handle = hook.launch("job.py", checkpoint_uri=str(tmp_path / "cp"))
    deadline = time.monotonic() + 30
    while hook.is_alive(handle):
        assert time.monotonic() < deadline, "an exited job (even a zombie child) must count as dead"
        time.sleep(0.05)
    assert hook.log_tail(handle, 5) == "Traceback: boom"
    assert hook.driver_state(handle) is DriverState.EXITED
    # the supervisor recorded the exit in the checkpoint, readable from anywhere
    record = DriverRecord.from_json((tmp_path / "cp" / DRIVER).read_bytes())
    assert (record.launch_id, record.state, record.exit_code, record.pid) == (handle.launch_id, "exited", 3, handle.pid)
    assert record.log_tail == "Traceback: boom"


def fake_spark_home(root: Path, body: str = 'echo "SPARK_HOME=$SPARK_HOME"') -> Path:
    """A Spark distribution's layout: bin/spark-submit (a script) next to jars/."""
    (root / "jars").mkdir(parents=True)
    (root / "bin").mkdir()
    fake_submit(root / "bin", body)
    return root


def test_spark_home_picks_the_version_s_spark_submit_and_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", "/opt/spark-4")  # the worker's default Spark must not win
    home = fake_spark_home(tmp_path / "spark-3.5")
    _, command = build("local[2]", None, spark_home=str(home))
    assert command[0] == str(home / "bin" / "spark-submit")
    hook = SparkLauncherHook(master="local[1]", spark_home=str(home), log_dir=str(tmp_path / "logs"))
    handle = hook.launch("job.py", checkpoint_uri=str(tmp_path / "cp"))
    deadline = time.monotonic() + 30
    while hook.is_alive(handle):
        assert time.monotonic() < deadline, "the fake spark-submit exits at once"
        time.sleep(0.05)
    assert hook.log_tail(handle, 1) == f"SPARK_HOME={home}"
    assert hook._options().env["SPARK_HOME"] == str(home)  # the job kind's commands (kill, status) too


def test_a_spark_submit_path_implies_its_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_ckpt_provider.hooks.launcher import spark_home_of

    monkeypatch.setenv("SPARK_HOME", "/opt/spark-4")
    home = fake_spark_home(tmp_path / "dist")
    assert spark_home_of(str(home / "bin" / "spark-submit")) == str(home)
    # a virtualenv with pip's pyspark: bin/spark-submit and find_spark_home.py, pyspark in site-packages
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "find_spark_home.py").write_text("")
    pyspark = venv / "lib" / "python3.11" / "site-packages" / "pyspark"
    (pyspark / "jars").mkdir(parents=True)
    assert spark_home_of(str(venv / "bin" / "spark-submit")) == str(pyspark)
    assert spark_home_of("spark-submit") is None and spark_home_of(str(tmp_path / "x" / "spark-submit")) is None
    hook = SparkLauncherHook(master="local[1]", spark_binary=str(venv / "bin" / "spark-submit"))
    assert hook._env()["SPARK_HOME"] == str(pyspark)
    # an explicit env or spark_home says which Spark; a bare binary name keeps the environment's
    assert SparkLauncherHook(master="local[1]", spark_binary=str(venv / "bin" / "spark-submit"),
                             env={"SPARK_HOME": "/opt/mine"})._env()["SPARK_HOME"] == "/opt/mine"
    assert SparkLauncherHook(master="local[1]", spark_home=str(home), env={"SPARK_HOME": "/opt/mine"}
                             )._env()["SPARK_HOME"] == str(home)
    assert SparkLauncherHook(master="local[1]")._env()["SPARK_HOME"] == "/opt/spark-4"


def test_spark_home_with_a_named_binary(tmp_path: Path) -> None:
    home = fake_spark_home(tmp_path / "spark")
    assert SparkLauncherHook(master="local[1]", spark_home=str(home), spark_binary="spark3-submit").spark_binary \
        == str(home / "bin" / "spark3-submit")
    other = fake_submit(tmp_path, "exit 0")
    assert SparkLauncherHook(master="local[1]", spark_home=str(home), spark_binary=other).spark_binary == other
