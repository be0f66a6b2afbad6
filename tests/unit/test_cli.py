"""The read-only `ckpt` command line and the kafka-python broker helper."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.errors import BrokerError, BrokerUnreachable
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView
from airflow_ckpt_provider.cli import read as cli_read
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from tests.unit.conftest import QUERY_ID, kafka_and_rate, kafka_json, kafka_offsets_at, write_checkpoint


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def ckpt(tmp_path: Path) -> str:
    path = str(tmp_path / "ck")
    write_checkpoint(path, batches=range(4), committed=range(3), crc=True, sources=kafka_and_rate, state_operators=(0,))
    return path


def test_inspect_text(ckpt: str) -> None:
    code, out, err = run("inspect", ckpt)
    assert (code, err) == (0, "")
    assert f"query id         {QUERY_ID}" in out
    assert "last committed   2" in out and "last planned     3" in out
    assert "in flight        3 (its offsets are NOT used)" in out
    assert "[0] kafka: events (4 partitions); total offset 1206" in out
    assert "[1] rate: 10" in out


def test_inspect_json(ckpt: str) -> None:
    code, out, _ = run("inspect", ckpt, "--json")
    data = json.loads(out)
    assert code == 0
    assert {k: data[k] for k in ("query_id", "last_committed_batch", "last_planned_batch", "in_flight_batch")} == {
        "query_id": QUERY_ID, "last_committed_batch": 2, "last_planned_batch": 3, "in_flight_batch": 3,
    }
    assert data["sources"] == [
        {"index": 0, "name": None, "kind": "kafka", "offsets": {"events": {"0": 300, "1": 301, "2": 302, "3": 303}}},
        {"index": 1, "name": None, "kind": "rate", "offsets": 10},
    ]
    assert data["state_operators"] == [0]


def test_inspect_names_a_query_running_without_graceful_stop(ckpt: str) -> None:
    """Just committed, no heartbeat ever written: a query runs without GracefulStop."""
    code, out, _ = run("inspect", ckpt)
    assert code == 0
    assert "query            running without GracefulStop: last commit: batch 2, " in out
    assert "no heartbeat was ever written under _ckpt/" in out and "what to do" in out and "--pid" in out
    status = json.loads(run("inspect", ckpt, "--json")[1])["query_status"]
    assert status["status"] == "running without GracefulStop" and status["last_committed_batch"] == 2


def test_inspect_without_a_heartbeat_or_a_recent_commit_says_it_cannot_tell(ckpt: str) -> None:
    code, out, _ = run("inspect", ckpt, "--recent", "0")
    assert code == 0 and "no query runs" not in out and "not running" not in out
    assert "no heartbeat was ever written under _ckpt/, so whether a query runs without GracefulStop " \
           "cannot be seen" in out and "last commit: batch 2, " in out
    assert json.loads(run("inspect", ckpt, "--json", "--recent", "0")[1])["query_status"]["status"] == "no heartbeat"


def test_inspect_json_no_in_flight(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "ck"), batches=range(2))
    assert json.loads(run("inspect", str(tmp_path / "ck"), "--json")[1])["in_flight_batch"] is None


def test_offsets_prints_starting_offsets(ckpt: str) -> None:
    assert run("offsets", ckpt) == (0, '{"events":{"0":300,"1":301,"2":302,"3":303}}\n', "")
    assert run("offsets", ckpt, "--source", "0")[1] == '{"events":{"0":300,"1":301,"2":302,"3":303}}\n'


def test_offsets_initial_when_nothing_committed(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "ck"), batches=[0], committed=[])
    code, out, err = run("offsets", str(tmp_path / "ck"))
    assert (code, out) == (0, '{"events":{"0":0,"1":1,"2":2,"3":3}}\n')
    assert "initial offsets" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["offsets", "{ck}", "--source", "1"], "source is not Kafka"),
        (["offsets", "{ck}-missing"], "checkpoint not found"),
        (["inspect", "{ck}/commits/0"], "not a Spark checkpoint"),
    ],
)
def test_errors_are_one_line_exit_2(ckpt: str, argv: list[str], message: str) -> None:
    code, out, err = run(*[a.format(ck=ckpt) for a in argv])
    assert (code, out) == (2, "")
    assert err.startswith(f"ckpt: error: {message}") and err.count("\n") == 1


def test_ambiguous_kafka_sources(tmp_path: Path) -> None:
    def two(batch: int) -> list[str | None]:
        return [kafka_json(kafka_offsets_at(batch)), kafka_json(kafka_offsets_at(batch, 1, "other"))]

    write_checkpoint(str(tmp_path / "ck"), sources=two)
    code, _, err = run("offsets", str(tmp_path / "ck"))
    assert code == 2 and "several Kafka sources" in err
    assert run("offsets", str(tmp_path / "ck"), "--source", "1")[1] == '{"other":{"0":300}}\n'


def test_usage_error_exits_2() -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["frobnicate"], stderr=io.StringIO())
    assert info.value.code == 2


def test_reconcile_with_broker(ckpt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, tuple[str, ...]]] = []

    def fake(servers: str, topics: Any) -> BrokerView:
        seen.append((servers, tuple(topics)))
        return BrokerView({"events": {0: (0, 400), 1: (0, 400), 2: (302, 400), 3: (400, 400), 4: (0, 9)}})

    monkeypatch.setattr(cli_read, "broker_view", fake)
    code, out, err = run("offsets", ckpt, "--bootstrap-servers", "k:9092")
    assert code == 2 and "offsets fell out of retention" in err and "events-3 at 303 (broker 400)" in err
    code, out, err = run("offsets", ckpt, "--bootstrap-servers", "k:9092", "--accept-data-loss")
    assert code == 0
    assert out == '{"events":{"0":300,"1":301,"2":302,"3":400,"4":-2}}\n'
    assert "new partition events-4 starts at earliest (-2)" in err
    assert "events-3: offsets 303..399 are gone" in err
    assert seen[0] == ("k:9092", ("events",))


def test_broker_unreachable_exit_3(ckpt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def down(servers: str, topics: Any) -> BrokerView:
        raise BrokerUnreachable(found="KafkaTimeoutError", expected=f"a cluster at {servers}")

    monkeypatch.setattr(cli_read, "broker_view", down)
    code, out, err = run("offsets", ckpt, "--bootstrap-servers", "k:9092")
    assert (code, out) == (3, "") and err.startswith("ckpt: error: Kafka broker unreachable")


def test_cli_never_writes(ckpt: str, tmp_path: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    run("inspect", ckpt, "--json")
    run("offsets", ckpt)
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")} == before


def test_console_entry_point_has_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "airflow_ckpt_provider.cli", "inspect", str(tmp_path / "nope")],
                          capture_output=True, text=True, cwd=Path(__file__).parents[2], timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("ckpt: error: checkpoint not found") and "Traceback" not in proc.stderr


class FakeConsumer:
    def __init__(self, partitions: dict[str, set[int]], fail: Exception | None = None) -> None:
        self.partitions, self.fail, self.closed = partitions, fail, False

    def partitions_for_topic(self, topic: str) -> set[int]:
        if self.fail:
            raise self.fail
        return self.partitions.get(topic, set())

    def beginning_offsets(self, tps: list[Any]) -> dict[Any, int]:
        return {tp: 10 * tp.partition for tp in tps}

    def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        return {tp: 100 + tp.partition for tp in tps}

    def close(self) -> None:
        self.closed = True


class FakeBroker(KafkaBroker):
    def __init__(self, consumer: FakeConsumer) -> None:
        super().__init__("fake:9092")
        self.consumer = consumer

    def _make_consumer(self) -> FakeConsumer:
        return self.consumer


def test_kafka_broker_view_with_fake_client() -> None:
    consumer = FakeConsumer({"events": {1, 0}, "x": {0}})
    view = FakeBroker(consumer).view(["events", "missing"])
    assert view == BrokerView({"events": {0: (0, 100), 1: (10, 101)}})
    assert consumer.closed


def test_kafka_broker_error_mapping() -> None:
    from kafka.errors import KafkaTimeoutError, TopicAuthorizationFailedError

    with pytest.raises(BrokerUnreachable):
        FakeBroker(FakeConsumer({}, KafkaTimeoutError("boom"))).view(["t"])
    with pytest.raises(BrokerError, match="TopicAuthorizationFailedError"):
        FakeBroker(FakeConsumer({}, TopicAuthorizationFailedError())).view(["t"])


def test_kafka_broker_defaults_never_create_topics() -> None:
    broker = KafkaBroker("h:1", request_timeout_ms=5)
    assert broker.client_config["allow_auto_create_topics"] is False
    assert broker.client_config["request_timeout_ms"] == 5


def test_real_client_against_closed_port_is_unreachable() -> None:
    with pytest.raises(BrokerUnreachable, match="127.0.0.1:1"):
        KafkaBroker("127.0.0.1:1", bootstrap_timeout_ms=300).view(["t"])


def test_unreadable_input_file_is_one_line_error(tmp_path: Path) -> None:
    code, out, err = run("verify-handover", str(tmp_path / "missing.json"), str(tmp_path))
    assert code == 2 and out == ""
    assert err.startswith("ckpt: error: storage error: found nothing at this location at ") and err.count("\n") == 1
    assert f"{tmp_path}/missing.json (ENOENT)" in err and "Check the path" in err
