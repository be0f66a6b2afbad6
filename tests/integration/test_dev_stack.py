"""`ckpt dev-stack` on a real broker: detached, idempotent, its connection usable, stopped with its group."""

from __future__ import annotations

import io
import json
import shlex
from pathlib import Path

import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.cli.dev_stack import read_state
from airflow_ckpt_provider.hooks.kafka_admin import broker_ranges
from airflow_ckpt_provider.jobs.local import group_members, kill_group
from airflow_ckpt_provider.local.audit import topic_records
from tests.harness.records import produce_records

pytestmark = pytest.mark.integration


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_dev_stack_start_is_idempotent_and_stop_ends_its_group(tmp_path: Path) -> None:
    work = str(tmp_path / "dev")
    code, first, err = run("dev-stack", "start", "--work", work, "--topic", "orders:3", "--timeout", "600")
    assert code == 0, err
    state = read_state(Path(work))
    assert state is not None
    try:
        assert group_members(state.pid)  # it outlives the command: its own session, not a child we wait for
        assert "topic orders created with 3 partition(s)" in first
        code, again, _ = run("dev-stack", "start", "--work", work, "--topic", "orders:3")
        assert code == 0 and read_state(Path(work)) == state
        assert "topic orders exists already" in again
        assert again.split("\n", 1)[1].replace("already running", "started") == first.split("\n", 1)[1]

        code, env, _ = run("dev-stack", "env", "--work", work)
        exports = dict(shlex.split(line)[1].split("=", 1) for line in env.splitlines())
        assert code == 0 and exports["KAFKA_BOOTSTRAP"] == state.bootstrap_servers
        conn = json.loads(exports["AIRFLOW_CONN_KAFKA_DEFAULT"])
        assert conn == {"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": state.bootstrap_servers}}
        assert run("dev-stack", "status", "--work", work)[0] == 0

        produce_records(state.bootstrap_servers, "orders", 30)
        ranges = broker_ranges(state.bootstrap_servers, ["orders"])
        assert sorted(ranges) == [("orders", 0), ("orders", 1), ("orders", 2)]
        records = [record for record, _ in topic_records(state.bootstrap_servers, ["orders"])]
        assert sorted(records) == sorted((t, p, o) for (t, p), (first_, end) in ranges.items()
                                         for o in range(first_, end))
        assert len(records) == 30
    finally:
        code, stopped, _ = run("dev-stack", "stop", "--work", work)
        if group_members(state.pid):
            kill_group(state.pid)
    assert code == 0 and "stopped the Kafka broker" in stopped
    assert not group_members(state.pid)
    assert run("dev-stack", "status", "--work", work)[0] == 4


def test_dev_stack_restarts_on_its_work_folder_with_its_data(tmp_path: Path) -> None:
    """The next day's `start` on the same work folder: the formatted data folder keeps its cluster
    id, the broker comes back on it with the topic and every record produced before the stop."""
    work = str(tmp_path / "dev")
    code, _, err = run("dev-stack", "start", "--work", work, "--topic", "orders:2", "--timeout", "600")
    assert code == 0, err
    first = read_state(Path(work))
    assert first is not None
    pids = [first.pid]
    try:
        produce_records(first.bootstrap_servers, "orders", 20)
        before = sorted(record for record, _ in topic_records(first.bootstrap_servers, ["orders"]))
        code, _, _ = run("dev-stack", "stop", "--work", work)
        assert code == 0 and not group_members(first.pid)

        code, again, err = run("dev-stack", "start", "--work", work, "--topic", "orders:2", "--timeout", "600")
        assert code == 0, err
        second = read_state(Path(work))
        assert second is not None
        pids.append(second.pid)
        assert second.pid != first.pid and "topic orders exists already" in again
        assert (second.port, second.controller_port) == (first.port, first.controller_port)
        after = sorted(record for record, _ in topic_records(second.bootstrap_servers, ["orders"]))
        assert after == before and len(after) == 20
        produce_records(second.bootstrap_servers, "orders", 5)
        assert len(list(topic_records(second.bootstrap_servers, ["orders"]))) == 25
    finally:
        run("dev-stack", "stop", "--work", work)
        for pid in pids:
            if group_members(pid):
                kill_group(pid)
