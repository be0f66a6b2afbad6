"""Connection fields -> kafka-python client settings."""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.checkpoint import BrokerError
from airflow_ckpt_provider.hooks.kafka import client_config_from_connection


@pytest.mark.parametrize(
    ("host", "port", "extra", "servers"),
    [
        (None, None, {"bootstrap.servers": "a:9092,b:9093"}, ["a:9092", "b:9093"]),
        ("a,b", 9092, {}, ["a:9092", "b:9092"]),
        ("a:1234", 9092, {}, ["a:1234"]),
        ("ignored", 1, {"bootstrap.servers": "x:1"}, ["x:1"]),
    ],
)
def test_bootstrap_servers(host, port, extra, servers) -> None:  # noqa: ANN001
    assert client_config_from_connection(host, port, None, None, extra)["bootstrap_servers"] == servers


def test_security_settings_and_credentials_are_mapped() -> None:
    config = client_config_from_connection(
        "b", 9092, "user", "s3cret",
        {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "group.id": "ignored"},
    )
    assert config == {
        "bootstrap_servers": ["b:9092"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "user",
        "sasl_plain_password": "s3cret",
    }


def test_no_servers_is_a_typed_error() -> None:
    with pytest.raises(BrokerError, match="no bootstrap servers"):
        client_config_from_connection(None, None, None, None, {})


def test_unknown_setting_is_refused_without_echoing_values() -> None:
    with pytest.raises(BrokerError) as refused:
        client_config_from_connection("b", 1, None, None, {"sasl.jaas.config": "password=TOPSECRET"})
    assert "sasl.jaas.config" in str(refused.value)
    assert "TOPSECRET" not in str(refused.value)


def test_form_fields_are_the_dotted_kafka_settings() -> None:
    """The connection form stores its fields under underscore names (conn-fields)."""
    form = {"bootstrap_servers": "a:1,b:2", "security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
            "sasl.username": "u", "sasl_password_unused": None}
    config = client_config_from_connection(None, None, None, None, form)
    assert config == {"bootstrap_servers": ["a:1", "b:2"], "security_protocol": "SASL_SSL",
                      "sasl_mechanism": "PLAIN", "sasl_plain_username": "u"}


def test_provider_info_declares_the_form_fields() -> None:
    from airflow_ckpt_provider import get_provider_info
    from airflow_ckpt_provider.hooks.kafka import FORM_FIELDS

    (kafka,) = [c for c in get_provider_info()["connection-types"] if c["connection-type"] == "ckpt_kafka"]
    assert set(kafka["conn-fields"]) == set(FORM_FIELDS)
    assert kafka["ui-field-behaviour"]["hidden-fields"] == ["schema"]


def test_test_connection_reports_instead_of_raising() -> None:
    from airflow_ckpt_provider.checkpoint.errors import BrokerUnreachable
    from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook

    class Broker:
        bootstrap_servers = ["k:9092"]

        def __init__(self, fail: bool) -> None:
            self.fail = fail

        def topics(self) -> set[str]:
            if self.fail:
                raise BrokerUnreachable(found="KafkaTimeoutError", expected="a Kafka cluster answering at k:9092")
            return {"a", "b"}

    for fail, ok, words in [(False, True, "2 topic(s)"), (True, False, "KafkaTimeoutError")]:
        hook = KafkaBrokerHook("x")
        hook.__dict__["broker"] = Broker(fail)  # the cached_property's slot: a fake at the hook boundary
        assert hook.test_connection()[0] is ok and words in hook.test_connection()[1]


def test_missing_connection_names_the_type_and_extra_to_create(monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import shlex

    from airflow_ckpt_provider.checkpoint.errors import KafkaConnectionMissing
    from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook

    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_NOWHERE", raising=False)
    with pytest.raises(KafkaConnectionMissing) as missing:
        KafkaBrokerHook("kafka_nowhere").client_config()
    text = str(missing.value)
    assert "'kafka_nowhere'" in text and "ckpt_kafka" in text and '"bootstrap.servers"' in text
    # the example works as written: the exported value is a connection the hook can use
    export = text[text.index("export "):].split(" (")[0]
    name, _, value = shlex.split(export)[1].partition("=")
    assert name == "AIRFLOW_CONN_KAFKA_NOWHERE"
    monkeypatch.setenv(name, value)
    assert json.loads(value)["conn_type"] == "ckpt_kafka"
    assert KafkaBrokerHook("kafka_nowhere").client_config() == {"bootstrap_servers": ["127.0.0.1:9092"]}
