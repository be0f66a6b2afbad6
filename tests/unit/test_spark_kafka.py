"""airflow_ckpt_provider.spark.kafka: which startingOffsets the job's Kafka reader gets.

The SparkSession is replaced by a recorder of reader options (the pyspark boundary); the real
path runs in tests/integration/test_launch_real.py through spark-submit.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.errors import InvalidHandover
from airflow_ckpt_provider.spark import kafka as spark_kafka
from airflow_ckpt_provider.spark.kafka import checkpoint_location, handover_json, read_kafka

HANDED = '{"orders":{"0":5,"1":-2}}'
#: a handover as Handover.to_json writes it
HANDOVER = ('{"batch_id":41,"checkpoint_uri":"/lake/ck/orders-v1","format":1,"from_initial":false,'
            '"in_flight_batch":null,"query_id":"q1","sources":[{"index":0,"kind":"kafka","name":null,'
            '"offsets":{"orders":{"0":23,"1":7}},"raw":"{\\"orders\\":{\\"0\\":23,\\"1\\":7}}"}],'
            '"taken_at":"2026-11-21T19:47:00+00:00"}')


class Reader:
    def __init__(self) -> None:
        self.options: dict[str, str] = {}

    def format(self, name: str) -> Reader:
        self.options["format"] = name
        return self

    def option(self, key: str, value: str) -> Reader:
        assert isinstance(value, str), f"{key}={value!r} must be passed as a string"
        self.options[key] = value
        return self

    def load(self) -> dict[str, str]:
        return self.options


class NamingReader(Reader):
    """A Spark 4.2 reader: it can name its source."""

    def name(self, source_name: str) -> NamingReader:
        self.options["name"] = source_name
        return self


class Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class Session:
    version = "4.0.0"

    def __init__(self) -> None:
        self.conf = Conf({})
        self.readStream = Reader()


def session(offsets: str | None = None, location: str | None = None) -> Session:
    spark = Session()
    if offsets is not None:
        spark.conf.values["spark.ckpt.startingOffsets"] = offsets
    if location is not None:
        spark.conf.values["spark.ckpt.checkpointLocation"] = location
    return spark


def test_conf_offsets_applied_with_fail_on_data_loss() -> None:
    options = read_kafka(session(HANDED), topics="orders", bootstrap_servers="b:9092", maxOffsetsPerTrigger=100)
    assert options == {"format": "kafka", "kafka.bootstrap.servers": "b:9092", "subscribe": "orders",
                       "startingOffsets": HANDED, "failOnDataLoss": "true", "maxOffsetsPerTrigger": "100"}


def test_explicit_argument_wins() -> None:
    options = read_kafka(session(HANDED), topics=["orders"], bootstrap_servers="b", starting_offsets="earliest")
    assert options["startingOffsets"] == "earliest" and "failOnDataLoss" not in options
    options = read_kafka(session(HANDED), topics="orders", bootstrap_servers="b", startingOffsets="latest")
    assert options["startingOffsets"] == "latest"


def test_no_handover_leaves_spark_default() -> None:
    options = read_kafka(session(), topics="a,b", bootstrap_servers="b", failOnDataLoss=False)
    assert "startingOffsets" not in options and options["subscribe"] == "a,b"
    assert options["failOnDataLoss"] == "false"


def test_source_name_names_the_source_on_a_spark_that_can() -> None:
    spark = session(HANDED)
    spark.readStream = NamingReader()
    options = read_kafka(spark, topics="orders", bootstrap_servers="b", source_name="orders_in")
    assert options["name"] == "orders_in" and options["startingOffsets"] == HANDED
    unnamed = session(HANDED)
    unnamed.readStream = NamingReader()
    assert "name" not in read_kafka(unnamed, topics="orders", bootstrap_servers="b")


def test_source_name_on_a_spark_without_the_api_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError, match=r"runs Spark 4\.0\.0, which cannot name a streaming source.*Spark 4\.2"):
        read_kafka(session(HANDED), topics="orders", bootstrap_servers="b", source_name="orders_in")


def test_handover_for_other_topics_is_refused() -> None:
    with pytest.raises(ValueError, match="subscribes to"):
        read_kafka(session(HANDED), topics=["orders", "refunds"], bootstrap_servers="b")
    with pytest.raises(ValueError, match="at least one topic"):
        read_kafka(session(), topics=[], bootstrap_servers="b")


def test_checkpoint_location_and_handover_json() -> None:
    assert checkpoint_location(session(location="s3://b/cp")) == "s3://b/cp"
    assert checkpoint_location(session(), default="/tmp/cp") == "/tmp/cp"
    with pytest.raises(ValueError, match="spark.ckpt.checkpointLocation"):
        checkpoint_location(session())
    spark = session()
    assert handover_json(spark) is None
    spark.conf.values["spark.ckpt.handoverJson"] = HANDOVER  # as the launcher passes it: Handover.to_json
    assert handover_json(spark) == json.loads(HANDOVER)


@pytest.mark.parametrize(("given", "found"), [
    ('{"format": 1}', "Handover without 'query_id'"),
    (HANDOVER.replace('"format":1', '"format":2'), "Handover format 2 (written by a newer release"),
    ('{"orders":{"0":5}}', "Handover without a format number"),  # startingOffsets in the wrong key
    ("not json", "not JSON"),
])
def test_a_conf_handover_that_is_not_one_is_refused_by_its_codec(given: str, found: str) -> None:
    spark = session()
    spark.conf.values["spark.ckpt.handoverJson"] = given
    with pytest.raises(InvalidHandover) as refused:
        handover_json(spark)
    assert found in refused.value.found and isinstance(refused.value, ValueError)


def _imports(module: str) -> set[str]:
    path = Path(spark_kafka.__file__).parents[2] / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


@pytest.mark.parametrize("module", sorted(f"airflow_ckpt_provider.spark.{p.stem}"
                                          for p in Path(spark_kafka.__file__).parent.glob("*.py")))
def test_spark_side_imports_only_pyspark_and_stdlib(module: str) -> None:
    """What runs in the user's driver imports pyspark (and its py4j), the standard library and this
    package's modules that do the same, transitively: the driver has no Airflow, no fsspec. Of the
    provider it reaches only its own layer, the pure core (the checkpoint reader), the codec below it
    and the helpers."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for imported in _imports(name):
            top = imported.split(".")[0]
            if top == "airflow_ckpt_provider":
                target = imported if (Path(spark_kafka.__file__).parents[2] / (imported.replace(".", "/") + ".py")
                                      ).exists() else f"{imported}.__init__"
                todo.append(target)
            else:
                assert top in sys.stdlib_module_names or top in ("pyspark", "py4j", "__future__"), (name, imported)
    layers = {n.split(".")[1] for n in seen if n.count(".") >= 2}
    assert layers <= {"spark", "checkpoint", "records"}, layers  # records: the codec below the core


