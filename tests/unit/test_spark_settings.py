"""SparkSettings: one version's Spark (home, spark-submit, connection, conf, jars), validated."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.errors import InvalidSparkSettings
from airflow_ckpt_provider.checkpoint.spark_settings import KEYS, SparkSettings

SPARK35 = {"spark_home": "/opt/spark-3.5.7", "conn_id": "spark_35", "conf": {"spark.jars": "/j/kafka-3.5.jar",
                                                                               "spark.executor.cores": 2},
           "jars": ["/j/extra.jar"]}


@pytest.mark.parametrize("empty", [None, "", "  ", {}, SparkSettings()])
def test_empty_settings_are_the_shared_ones(empty: Any) -> None:
    settings = SparkSettings.from_json(empty)
    assert settings == SparkSettings()
    assert settings.merged_conf({"spark.a": 1}) == {"spark.a": "1"}
    assert settings.master("local[2]") == "local[2]"


def test_a_version_conf_wins_and_its_jars_are_appended() -> None:
    settings = SparkSettings.from_json(SPARK35)
    merged = settings.merged_conf({"spark.jars": "/j/kafka-4.0.jar", "spark.sql.shuffle.partitions": "2"})
    assert merged == {"spark.jars": "/j/kafka-3.5.jar,/j/extra.jar", "spark.sql.shuffle.partitions": "2",
                      "spark.executor.cores": "2"}
    assert SparkSettings(jars=("/j/extra.jar",)).merged_conf({"spark.jars": "/a.jar"})["spark.jars"] == \
        "/a.jar,/j/extra.jar"
    assert settings.master("local[2]") == "", "a version with its own connection takes the connection's master"


def test_round_trip_through_json() -> None:
    import json

    settings = SparkSettings.from_json(json.dumps(SPARK35))
    assert SparkSettings.from_json(settings.to_dict()) == settings
    assert list(settings.to_dict()) == list(KEYS)


@pytest.mark.parametrize(("value", "found"), [
    ("[1, 2]", "param old_spark of type list"),
    ("{not json", "param old_spark that is not JSON"),
    ({"spark_hoem": "/opt/spark"}, "unknown key(s) spark_hoem"),
    ({"spark_home": 3}, "param old_spark.spark_home = 3"),
    ({"conf": ["spark.a=1"]}, "param old_spark.conf"),
    ({"conf": {"spark.a": {"nested": 1}}}, "param old_spark.conf"),
    ({"jars": "/a.jar,/b.jar"}, "param old_spark.jars = '/a.jar,/b.jar'"),
    ({"jars": ["/a.jar,/b.jar"]}, "param old_spark.jars"),
    ({"jars": [""]}, "param old_spark.jars"),
])
def test_bad_settings_are_refused_with_what_was_found(value: Any, found: str) -> None:
    with pytest.raises(InvalidSparkSettings) as refused:
        SparkSettings.from_json(value, name="param old_spark")
    assert found in refused.value.found
    assert isinstance(refused.value, ValueError)
    assert "nothing was started" in str(refused.value)
