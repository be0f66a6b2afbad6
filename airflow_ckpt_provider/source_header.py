"""The source header: an output record's name for the input record it came from.

Standard library only: the Spark driver side writes it (:func:`airflow_ckpt_provider.spark.with_source_header`)
and the provider reads it back from the output topic
(:meth:`airflow_ckpt_provider.hooks.kafka_admin.KafkaBroker.sources_written_since`) to count,
exactly, the records a Kafka sink received twice when a stop cut a batch.

The header is ``ckpt-source`` with the UTF-8 value ``<topic>:<partition>:<offset>`` (a Kafka topic
name holds no ``:``).
"""

from __future__ import annotations

from collections.abc import Iterable

SOURCE_HEADER = "ckpt-source"

Source = tuple[str, int, int]


def format_source(topic: str, partition: int, offset: int) -> bytes:
    return f"{topic}:{partition}:{offset}".encode()


def parse_source(value: bytes | None) -> Source | None:
    """(topic, partition, offset) of a header value, None for anything else."""
    if not value:
        return None
    try:
        topic, partition, offset = value.decode("utf-8").rsplit(":", 2)
        parsed = (topic, int(partition), int(offset))
    except (UnicodeDecodeError, ValueError):
        return None
    return parsed if topic and parsed[1] >= 0 and parsed[2] >= 0 else None


def source_of(headers: Iterable[tuple[str, bytes | None]], name: str = SOURCE_HEADER) -> Source | None:
    """The source named by the first ``name`` header among a record's ``headers``, else None."""
    for key, value in headers:
        if key == name:
            return parse_source(value)
    return None
