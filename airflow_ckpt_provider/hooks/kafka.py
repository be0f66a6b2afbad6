"""Airflow hook that reads live partitions and offset ranges from Kafka (kafka-python).

The connection gives the bootstrap servers either as ``extra["bootstrap.servers"]`` (the
convention of Airflow's Apache Kafka provider, so its ``kafka`` connections work as they are)
or as host[,host...] and port. Other Kafka client settings in the extra use Kafka's dotted
names (``security.protocol``, ``sasl.mechanism``, ...) and are mapped to kafka-python's; the
connection's login and password become the SASL username and password. Secrets are never
logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

from airflow_ckpt_provider.checkpoint.errors import BrokerError, KafkaConnectionMissing
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker

log = logging.getLogger(__name__)

# Kafka's dotted client settings -> kafka-python keyword arguments.
_CLIENT_SETTINGS = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.endpoint.identification.algorithm": "ssl_check_hostname",
    "client.id": "client_id",
    "request.timeout.ms": "request_timeout_ms",
    "socket.connection.setup.timeout.ms": "socket_connection_setup_timeout_ms",
}
_IGNORED = {"bootstrap.servers", "group.id", "auto.offset.reset", "enable.auto.commit"}
#: The connection form's fields (provider info ``conn-fields``), stored in the extra under these
#: names, and the Kafka setting each one is.
FORM_FIELDS = {"bootstrap_servers": "bootstrap.servers", "security_protocol": "security.protocol",
               "sasl_mechanism": "sasl.mechanism"}


def client_config_from_connection(host: str | None, port: int | None, login: str | None,
                                  password: str | None, extra: dict[str, Any]) -> dict[str, Any]:
    """kafka-python client settings for a connection's fields (pure, for unit tests).

    Raises :class:`BrokerError` when no bootstrap servers can be found or a setting is unknown.
    """
    extra = {FORM_FIELDS.get(key, key): value for key, value in extra.items() if value not in (None, "")}
    servers = extra.get("bootstrap.servers")
    if not servers and host:
        hosts = [h.strip() for h in host.split(",") if h.strip()]
        servers = ",".join(h if ":" in h or not port else f"{h}:{port}" for h in hosts)
    if not servers:
        raise BrokerError(
            found="a Kafka connection with no bootstrap servers",
            expected='extra {"bootstrap.servers": "host:port,..."} or a host and port',
            action="Edit the connection in Airflow (Admin > Connections) and retry.",
        )
    config: dict[str, Any] = {"bootstrap_servers": [s.strip() for s in str(servers).split(",") if s.strip()]}
    unknown = []
    for key, value in extra.items():
        if key in _IGNORED:
            continue
        name = _CLIENT_SETTINGS.get(key)
        if name is None:
            unknown.append(key)
            continue
        if name == "ssl_check_hostname":
            value = str(value).lower() == "https"
        config[name] = value
    if unknown:
        raise BrokerError(
            found=f"unsupported Kafka settings in the connection extra: {', '.join(sorted(unknown))}",
            expected=f"only {', '.join(sorted(_CLIENT_SETTINGS))} besides bootstrap.servers",
            action="Remove them or open an issue for the setting you need.",
        )
    if login:
        config["sasl_plain_username"] = login
    if password:
        config["sasl_plain_password"] = password
    return config


def missing_connection(conn_id: str) -> KafkaConnectionMissing:
    """The error for a Kafka connection id Airflow does not know: which type and extra to create."""
    env = f"AIRFLOW_CONN_{conn_id.upper()}"
    example = '{"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": "127.0.0.1:9092"}}'
    return KafkaConnectionMissing(
        found=f"no Airflow connection {conn_id!r}",
        expected=f"a connection {conn_id!r} of type ckpt_kafka with the brokers in its extra "
        '{"bootstrap.servers": "host:port,..."}',
        action=f"Create it in Admin > Connections, or in the environment of every Airflow process, e.g. "
        f"export {env}='{example}' (`ckpt dev-stack start` prints the line for its local broker). "
        "Nothing was read from Kafka.",
    )


class KafkaBrokerHook(BaseHook):
    """Reads partitions and earliest/latest offsets of topics; never writes to Kafka."""

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "kafka_default"
    conn_type = "ckpt_kafka"
    hook_name = "Kafka (checkpoint upgrades)"

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema"],
            "relabeling": {"host": "Bootstrap hosts", "login": "SASL username", "password": "SASL password"},
            "placeholders": {
                "host": "broker1,broker2",
                "port": "9092",
                "extra": '{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}',
            },
        }

    def client_config(self) -> dict[str, Any]:
        """kafka-python settings from the connection; :class:`KafkaConnectionMissing` when there is
        none by that id (saying which type and extra to create), :class:`BrokerError` when it is unusable."""
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.kafka_conn_id)
        except AirflowNotFoundException:
            raise missing_connection(self.kafka_conn_id) from None
        return client_config_from_connection(
            conn.host, conn.port, conn.login, conn.password, conn.extra_dejson or {}
        )

    @cached_property
    def broker(self) -> KafkaBroker:
        """The kafka-python client wrapper; subclasses override this factory."""
        config = self.client_config()
        servers = config.pop("bootstrap_servers")
        log.info("Kafka connection %s: bootstrap servers %s", self.kafka_conn_id, ",".join(servers))
        return KafkaBroker(servers, **config)

    def broker_view(self, topics: Iterable[str]) -> BrokerView:
        """Live partitions and (earliest, latest) offsets of ``topics``."""
        return self.broker.view(topics)

    def test_connection(self) -> tuple[bool, str]:
        """The connection form's Test button: connect and list the topics. Returns (ok, what
        was found or what failed, secrets scrubbed); never raises."""
        try:
            topics = self.broker.topics()
        except BrokerError as exc:  # BrokerUnreachable too
            return False, str(exc)
        servers = ",".join(self.broker.bootstrap_servers) if not isinstance(self.broker.bootstrap_servers, str) \
            else self.broker.bootstrap_servers
        return True, f"Connected to {servers}: {len(topics)} topic(s) visible"
