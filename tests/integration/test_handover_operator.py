"""CheckpointHandoverOperator in a real Airflow run (dag.test on SQLite), real Kafka and Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint import Handover, KafkaOffsets
from tests.harness.records import produce_records
from tests.integration.streams import drain, kafka_reader

pytestmark = pytest.mark.integration


@pytest.fixture
def kafka_connection(kafka, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: ANN001
    conn = {"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": kafka.bootstrap_servers}}
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_TEST_KAFKA", json.dumps(conn))
    return "ckpt_test_kafka"


def test_operator_returns_reconciled_handover(airflow_home, kafka, kafka_connection, spark, new_topic,
                                              tmp_path: Path) -> None:  # noqa: ANN001
    from tests.dags.handover_extract import dag

    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 80)
    cp = tmp_path / "cp"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic]), cp, tmp_path / "sink")
    kafka.add_partitions(topic, 3)

    result_file = tmp_path / "result.json"
    run = dag.test(run_conf={"checkpoint_uri": str(cp), "result_file": str(result_file),
                             "kafka_conn_id": kafka_connection})
    assert run.state == "success"
    result = json.loads(result_file.read_text())
    handover = Handover.from_json(result["handover"])
    assert handover.kafka_offsets().total() == 80
    starting = KafkaOffsets.from_json(result["starting_offsets"])
    assert starting.get(topic, 2) == -2
    assert starting.get(topic, 0) == handover.kafka_offsets().get(topic, 0)
    assert result["reconciliation"]["addedPartitions"] == [{"topic": topic, "partition": 2}]


def test_operator_fails_on_missing_checkpoint(airflow_home, kafka_connection, tmp_path: Path) -> None:  # noqa: ANN001
    from tests.dags.handover_extract import dag

    result_file = tmp_path / "result.json"
    run = dag.test(run_conf={"checkpoint_uri": str(tmp_path / "missing"), "result_file": str(result_file),
                             "kafka_conn_id": kafka_connection})
    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states == {"extract_handover": "failed", "save": "upstream_failed"}
    assert not result_file.exists()
    assert not (tmp_path / "missing").exists(), "a failed extraction must not create anything"
