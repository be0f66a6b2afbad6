"""`ckpt launch` and `ckpt dev-stack`: what a newcomer runs to try their own job.

spark-submit is a small executable script (the process boundary), launched for real through the
launcher hook and its supervisor; the wait is the launch trigger's. The broker itself runs in the
system test of the own-job page (tests/system/test_own_job_page.py).
"""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint import LaunchHandle
from airflow_ckpt_provider.cli.common import EXIT_ERROR
from airflow_ckpt_provider.cli.dev_stack import DevStack, topic_spec
from airflow_ckpt_provider.hooks.kafka import client_config_from_connection
from airflow_ckpt_provider.hooks.launcher import PYSPARK_PYTHON_ENV
from airflow_ckpt_provider.jobs.local import group_members, kill_group

REPO = Path(__file__).resolve().parents[2]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def fake_submit(tmp_path: Path, body: str) -> str:
    script = tmp_path / "spark-submit"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.fixture(autouse=True)
def _no_python_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PYSPARK_PYTHON_ENV:
        monkeypatch.delenv(name, raising=False)


def launch_argv(tmp_path: Path, body: str, *extra: str) -> list[str]:
    # a spark:// master in client mode: a local driver, without the connector jars of a local[*] master
    return ["launch", str(tmp_path / "orders_v1.py"), "--checkpoint", str(tmp_path / "cp"),
            "--master", "spark://127.0.0.1:7077", "--spark-binary", fake_submit(tmp_path, body),
            "--log-dir", str(tmp_path / "logs"), "--starting-offsets", "earliest", *extra,
            "--", "--bootstrap-servers", "127.0.0.1:9", "--sink", "/data/sink"]


def launch(tmp_path: Path, body: str, *extra: str) -> tuple[int, str, str]:
    return run(*launch_argv(tmp_path, body, *extra))


def test_launch_prints_the_handle_once_the_job_committed(tmp_path: Path) -> None:
    commit = tmp_path / "cp" / "commits"
    body = f'echo "args: $*"; mkdir -p {commit}; printf \'v1\\n{{}}\' > {commit}/0; exec sleep 120'
    argv = launch_argv(tmp_path, body, "--timeout", "600")
    # as a command: stdout must hold the handle alone (Airflow's logging prints to stdout)
    done = subprocess.run([sys.executable, "-m", "airflow_ckpt_provider.cli", *argv], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=900, check=False)
    code, out, err = done.returncode, done.stdout, done.stderr
    handle = LaunchHandle.from_json(out)
    try:
        assert code == 0, err
        assert handle.checkpoint_uri == str(tmp_path / "cp") and group_members(int(handle.pid or 0))
        assert "committed batch 0" in err and handle.log_path in err
        args = Path(handle.log_path).read_text()
        assert f"spark.pyspark.python={sys.executable}" in args  # the driver can import the provider
        assert "spark.ckpt.startingOffsets=earliest" in args
        assert args.rstrip().endswith("orders_v1.py --bootstrap-servers 127.0.0.1:9 --sink /data/sink")
    finally:
        kill_group(int(handle.pid or 0))


def test_launch_of_a_driver_that_dies_fails_with_its_log_tail(tmp_path: Path) -> None:
    code, out, err = launch(tmp_path, "echo \"ModuleNotFoundError: No module named 'orders_lib'\"; exit 1")
    assert (code, out) == (2, "")
    assert err.splitlines()[-1].startswith("ckpt: error: launch failed") or "ckpt: error: launch failed" in err
    assert "ModuleNotFoundError: No module named 'orders_lib'" in err and "before committing a batch" in err


def test_launch_without_a_commit_in_time_kills_the_job(tmp_path: Path) -> None:
    code, out, err = launch(tmp_path, "echo started; exec sleep 120", "--timeout", "2")
    assert (code, out) == (2, "")
    assert "no first commit in time" in err and "produce some, or raise --timeout" in err
    pgid = int(re.search(r"process group (\d+)", err)[1])  # type: ignore[index]
    assert not group_members(pgid)


def test_launch_conf_and_app_args_are_checked() -> None:
    with pytest.raises(SystemExit):
        cli.parse_args(["launch", "job.py", "--checkpoint", "cp", "--conf", "novalue"])
    args = cli.parse_args(["launch", "job.py", "--checkpoint", "cp", "--", "--sink", "x", "--", "-v"])
    assert args.app_args == ["--sink", "x", "--", "-v"] and args.master == "local[2]" and args.timeout >= 600
    assert cli.parse_args(["launch", "job.py", "--checkpoint", "cp"]).app_args == []
    with pytest.raises(SystemExit):  # another command does not swallow them silently
        cli.parse_args(["inspect", "cp", "--", "--sink", "x"])


@pytest.mark.parametrize(("text", "expected"), [("orders", ("orders", 1)), ("orders:3", ("orders", 3))])
def test_topic_spec(text: str, expected: tuple[str, int]) -> None:
    assert topic_spec(text) == expected


@pytest.mark.parametrize("text", ["", ":3", "orders:0", "orders:x"])
def test_bad_topic_spec(text: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="NAME:PARTITIONS"):
        topic_spec(text)


def test_status_and_env_of_a_stack_that_does_not_run(tmp_path: Path) -> None:
    assert run("dev-stack", "status", "--work", str(tmp_path))[:2] == (4, f"not running (work folder {tmp_path})\n")
    code, out, err = run("dev-stack", "env", "--work", str(tmp_path))
    assert (code, out) == (4, "") and "ckpt dev-stack start" in err
    # a stale record (its process group is gone) is not running either
    (tmp_path / "dev-stack.json").write_text(json.dumps(
        {"pid": 2 ** 22 + 17, "port": 1, "controller_port": 2, "data_dir": "d", "log_file": "l"}))
    assert run("dev-stack", "status", "--work", str(tmp_path))[0] == 4
    assert run("dev-stack", "stop", "--work", str(tmp_path))[:2] == (0, f"not running (work folder {tmp_path}): "
                                                                      "nothing to stop\n")


@pytest.mark.parametrize(("content", "found"), [
    ("{not json", "dev stack state text that is not JSON"),
    ('{"pid": 1, "port": "9092", "controller_port": 2, "data_dir": "d", "log_file": "l"}', "'port' of JSON string"),
    ('{"format": 2, "pid": 1}', "dev stack state format 2 (written by a newer release"),
])
def test_a_damaged_state_file_is_an_error_naming_it_not_a_stack_that_does_not_run(tmp_path: Path, content: str,
                                                                                   found: str) -> None:
    (tmp_path / "dev-stack.json").write_text(content)
    for action in ("status", "stop", "start"):
        code, out, err = run("dev-stack", action, "--work", str(tmp_path))
        assert (code, out) == (EXIT_ERROR, "") and found in err and str(tmp_path / "dev-stack.json") in err, err
        assert "delete the file" in err
    assert (tmp_path / "dev-stack.json").read_text() == content, "left as it was"


def test_the_state_file_round_trips_with_its_format_number() -> None:
    stack = DevStack(pid=4242, port=41234, controller_port=41235, data_dir="d", log_file="l")
    assert json.loads(stack.to_json())["format"] == 1 and DevStack.from_json(stack.to_json()) == stack


def test_start_without_the_jars_says_to_run_make_jvm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_JVM_DIR", str(tmp_path / "empty-jvm"))
    code, out, err = run("dev-stack", "start", "--work", str(tmp_path / "dev"))
    assert code == 2 and "make jvm" in err and not (tmp_path / "dev" / "dev-stack.json").exists()


def test_printed_connection_is_one_the_kafka_hook_reads() -> None:
    stack = DevStack(pid=os.getpgrp(), port=41234, controller_port=41235, data_dir="d", log_file="l")
    conn = json.loads(stack.connection_json())
    assert conn["conn_type"] == "ckpt_kafka"
    assert client_config_from_connection(None, None, None, None, conn["extra"]) == {
        "bootstrap_servers": ["127.0.0.1:41234"]}
    assert stack.running()  # a live process group (this test's own)


def test_launch_conf_adds_given_jars_to_the_connectors(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_ckpt_provider.cli.run import launch_conf
    from airflow_ckpt_provider.local import spark as local_spark

    monkeypatch.setattr(local_spark, "connector_jars", lambda version=local_spark.OWN: ["/j/kafka.jar"])
    conf = launch_conf("local[2]", [("spark.jars", "/j/delta.jar"), ("spark.sql.shuffle.partitions", "4")], "job")
    assert conf["spark.jars"] == "/j/kafka.jar,/j/delta.jar"
    assert conf["spark.sql.shuffle.partitions"] == "4" and "spark.master" not in conf
    # a cluster master gets exactly what was given
    assert launch_conf("spark://h:7077", [("spark.jars", "/j/delta.jar")], "job") == {"spark.jars": "/j/delta.jar"}
