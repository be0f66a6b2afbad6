"""Airflow provider that moves Spark Structured Streaming jobs reading Kafka to a new checkpoint.

The pure core lives in :mod:`airflow_ckpt_provider.checkpoint`; the Airflow ring in ``hooks``,
``operators`` and ``triggers``; the code that runs inside the Spark driver in ``spark``; the
embedded local stack used by the demo and the tests in ``local``.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

PACKAGE_NAME = "airflow-ckpt-provider"
INTEGRATION = "Spark Structured Streaming checkpoints"


def get_provider_info() -> dict[str, Any]:
    """Describe the provider to Airflow's ``apache_airflow_provider`` entry point."""
    return {
        "package-name": PACKAGE_NAME,
        "name": "Spark Structured Streaming checkpoint upgrades",
        "description": (
            "Operators that move a Spark Structured Streaming job reading Kafka to a new "
            "checkpoint: graceful stop, handover of the last committed offsets, verified "
            "archive, relaunch from explicit startingOffsets, verification and rollback."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://spark.apache.org/docs/latest/streaming/",
                "tags": ["apache"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_ckpt_provider.hooks.kafka",
                    "airflow_ckpt_provider.hooks.kafka_admin",
                    "airflow_ckpt_provider.hooks.storage",
                    "airflow_ckpt_provider.hooks.launcher",
                    "airflow_ckpt_provider.hooks.state_export",
                    "airflow_ckpt_provider.hooks.compat",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_ckpt_provider.operators.preflight",
                    "airflow_ckpt_provider.operators.compat",
                    "airflow_ckpt_provider.operators.approval",
                    "airflow_ckpt_provider.operators.journaled",
                    "airflow_ckpt_provider.operators.stop",
                    "airflow_ckpt_provider.operators.handover",
                    "airflow_ckpt_provider.operators.state",
                    "airflow_ckpt_provider.operators.archive",
                    "airflow_ckpt_provider.operators.launch",
                    "airflow_ckpt_provider.operators.switchover",
                    "airflow_ckpt_provider.operators.report",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_ckpt_provider.triggers.stop",
                    "airflow_ckpt_provider.triggers.launch",
                ],
            }
        ],
        "extra-links": ["airflow_ckpt_provider.operators.launch.SparkUILink"],
        "connection-types": [
            {
                "connection-type": "ckpt_kafka",
                "hook-class-name": "airflow_ckpt_provider.hooks.kafka.KafkaBrokerHook",
                "hook-name": "Kafka (checkpoint upgrades)",
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],
                    "relabeling": {"host": "Bootstrap hosts", "login": "SASL username", "password": "SASL password"},
                    "placeholders": {"host": "broker1,broker2", "port": "9092"},
                },
                "conn-fields": {
                    "bootstrap_servers": {
                        "label": "Bootstrap servers",
                        "description": "host:port[,host:port...]; or use the host and port fields",
                        "schema": {"type": ["string", "null"]},
                    },
                    "security_protocol": {
                        "label": "Security protocol",
                        "schema": {"type": ["string", "null"],
                                   "enum": ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", None]},
                    },
                    "sasl_mechanism": {
                        "label": "SASL mechanism",
                        "description": "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, ...",
                        "schema": {"type": ["string", "null"]},
                    },
                },
            }
        ],
    }
