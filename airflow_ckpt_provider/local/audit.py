"""Count every Kafka (topic, partition, offset) in a Parquet sink: the zero-loss, no-duplicate proof
(``ckpt audit``, the own-job guide, the demo and the tests).

The sink is any folder of Parquet files with ``topic``, ``partition`` and ``offset`` columns
(folders and files starting with ``_`` or ``.`` — uncommitted ``_temporary`` output, Spark
metadata — are not data and are skipped). The expectation is every offset from each
partition's first offset to its log end, as the broker reports them once producers stopped
(:func:`airflow_ckpt_provider.hooks.kafka_admin.broker_ranges`), less the records the job drops on
purpose (a filter), which :func:`topic_records` and :func:`json_fields_match` help find. Reading the
sink needs ``pyarrow`` (the ``spark`` extra).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from airflow_ckpt_provider.local.errors import ToolMissing

#: One Kafka record: (topic, partition, offset).
Record = tuple[str, int, int]


@dataclass(frozen=True)
class SinkAudit:
    """What a sink holds against what Kafka holds. ``ok`` means lost == duplicated == 0.
    ``produced`` counts the records the sink must hold: those in Kafka less the ``dropped`` ones."""

    produced: int
    in_sink: int
    distinct: int
    lost: int
    duplicated: int
    unexpected: int
    lost_examples: tuple[Record, ...] = ()
    duplicated_examples: tuple[Record, ...] = ()
    dropped: int = 0

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.unexpected == 0

    def describe(self) -> str:
        """The audit in one line: ``audit: N records in Kafka, D dropped, E expected, S in the sink:
        L lost, X duplicated, U unexpected``."""
        return (f"audit: {self.produced + self.dropped} records in Kafka, {self.dropped} dropped, "
                f"{self.produced} expected, {self.in_sink} in the sink: {self.lost} lost, "
                f"{self.duplicated} duplicated, {self.unexpected} unexpected")

    def to_dict(self) -> dict[str, object]:
        return {
            "produced": self.produced,
            "in_sink": self.in_sink,
            "distinct": self.distinct,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "unexpected": self.unexpected,
            "dropped": self.dropped,
            "lost_examples": [list(r) for r in self.lost_examples],
            "duplicated_examples": [list(r) for r in self.duplicated_examples],
        }


def read_sink_records(*sinks: Path | str) -> Counter[Record]:
    """How often each (topic, partition, offset) appears in the Parquet files of ``sinks`` (local
    folders; one that does not exist holds nothing). :class:`ToolMissing` without ``pyarrow``."""
    try:
        import pyarrow.dataset as ds
    except ImportError as exc:
        raise ToolMissing(found=f"no pyarrow ({exc})", expected="pyarrow, to read the Parquet sink",
                          action="Install the `spark` extra: pip install 'airflow-ckpt-provider[spark]'.") from None

    counts: Counter[Record] = Counter()
    for sink in sinks:
        if not Path(sink).exists():
            continue
        table = ds.dataset(str(sink), format="parquet").to_table(columns=["topic", "partition", "offset"])
        columns = table.to_pydict()
        counts.update(zip(columns["topic"], columns["partition"], columns["offset"], strict=False))
    return counts


def audit(
    seen: Counter[Record],
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    *,
    dropped: Collection[Record] = (),
    examples: int = 5,
) -> SinkAudit:
    """Compare ``seen`` with every offset in ``ranges`` ((topic, partition) -> [first, end)).

    ``dropped`` are records the job filters out on purpose: not expected, and unexpected when in
    the sink. ``duplicated`` counts extra copies (a record seen 3 times adds 2); ``unexpected``
    counts records outside the ranges (another topic, or offsets past the log end) or dropped.
    """
    skip = {record for record in dropped if _in(ranges, record)}
    expected_total = sum(end - first for first, end in ranges.values()) - len(skip)

    def expected(record: Record) -> bool:
        return _in(ranges, record) and record not in skip

    lost_records: list[Record] = []
    lost = 0
    for (topic, partition), (first, end) in sorted(ranges.items()):
        for offset in range(first, end):
            if (topic, partition, offset) not in seen and (topic, partition, offset) not in skip:
                lost += 1
                if len(lost_records) < examples:
                    lost_records.append((topic, partition, offset))
    dups = sorted(r for r, n in seen.items() if n > 1)
    return SinkAudit(
        produced=expected_total,
        in_sink=sum(seen.values()),
        distinct=len(seen),
        lost=lost,
        duplicated=sum(n - 1 for n in seen.values() if n > 1),
        unexpected=sum(n for r, n in seen.items() if not expected(r)),
        lost_examples=tuple(lost_records),
        duplicated_examples=tuple(dups[:examples]),
        dropped=len(skip),
    )


def _in(ranges: Mapping[tuple[str, int], tuple[int, int]], record: Record) -> bool:
    span = ranges.get((record[0], record[1]))
    return span is not None and span[0] <= record[2] < span[1]


def topic_records(bootstrap_servers: str, topics: Iterable[str], *,
                  timeout: float = 600.0) -> Iterator[tuple[Record, bytes | None]]:
    """Every record now in ``topics`` as ((topic, partition, offset), value), read from the start
    of each partition up to its log end at the call (for :func:`audit`'s ``dropped``).
    ``TimeoutError`` naming the partitions not read to their end after ``timeout`` seconds."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False, group_id=None)
    try:
        partitions = [TopicPartition(topic, p) for topic in topics
                      for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = consumer.end_offsets(partitions)
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        pending = {tp for tp in partitions if consumer.position(tp) < ends[tp]}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{', '.join(sorted(f'{tp.topic}-{tp.partition}' for tp in pending))} not read "
                                   f"to their end within {timeout:g} s from {bootstrap_servers}")
            for tp, messages in consumer.poll(timeout_ms=1000).items():
                for message in messages:
                    if message.offset < ends[tp]:
                        yield (tp.topic, tp.partition, message.offset), message.value
                if consumer.position(tp) >= ends[tp]:
                    pending.discard(tp)
    finally:
        consumer.close()


def json_fields_match(value: bytes | None, fields: Mapping[str, str]) -> bool:
    """Whether the JSON object ``value`` (a Kafka record's value) has every field of ``fields`` with
    that value (compared as text: a JSON string as it is, anything else as JSON, ``true``, ``3``).
    ``ValueError`` naming the value when it is not a JSON object."""
    try:
        document = json.loads(value or b"")
    except ValueError:
        document = None
    if not isinstance(document, dict):
        shown = (value or b"")[:80].decode("utf-8", "replace")
        raise ValueError(f"record value {shown!r} is not a JSON object: a JSON field filter cannot tell whether "
                         "the job keeps it")
    return all(field in document and (document[field] if isinstance(document[field], str)
                                      else json.dumps(document[field])) == wanted
               for field, wanted in fields.items())
