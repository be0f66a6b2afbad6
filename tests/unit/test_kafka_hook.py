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
