"""The proof of a stateful upgrade: every customer's running total in the new version's sink,
compared with a recomputation from Kafka itself (the demo's purchases stream and its tests).

The demo's purchase jobs write, per batch, one row per updated customer: ``customer``,
``total`` (the running sum of ``amount``), ``n`` (the running count) and ``batch_id``. A
customer's final state is its row of the highest batch. The truth is every purchase record in
the topic, read to its log end with kafka-python.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Totals = dict[int, tuple[int, int]]  # customer -> (sum of amount, count)


@dataclass(frozen=True)
class StateAudit:
    """``customers`` known to Kafka; ``mismatched`` whose sink state differs (or is missing)."""

    customers: int
    mismatched: int
    examples: tuple[tuple[int, tuple[int, int], tuple[int, int] | None], ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.customers > 0 and self.mismatched == 0

    def to_dict(self) -> dict[str, Any]:
        return {"customers": self.customers, "mismatched": self.mismatched,
                "examples": [{"customer": c, "expected": list(e), "in_sink": list(s) if s else None}
                             for c, e, s in self.examples]}


def kafka_totals(bootstrap_servers: str, topic: str, *, timeout_s: float = 120.0) -> Totals:
    """Sum and count of ``amount`` per customer over every record of ``topic`` (to its log end)."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        ends = consumer.end_offsets(partitions)
        totals: dict[int, list[int]] = {}
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: not read to its log end within {timeout_s:.0f} s")
            for records in consumer.poll(timeout_ms=1000).values():
                for record in records:
                    purchase = json.loads(record.value)
                    entry = totals.setdefault(int(purchase["customer"]), [0, 0])
                    entry[0] += int(purchase["amount"])
                    entry[1] += 1
        return {c: (s, n) for c, (s, n) in totals.items()}
    finally:
        consumer.close()


def sink_totals(sink: Path | str, version: str) -> Totals:
    """Each customer's (total, n) from its row of the highest batch of ``version`` in the
    Parquet ``sink``."""
    import pyarrow.dataset as ds

    if not Path(sink).exists():
        return {}
    table = ds.dataset(str(sink), format="parquet").to_table(columns=["customer", "total", "n", "batch_id", "version"])
    rows = table.to_pydict()
    latest: dict[int, tuple[int, int, int]] = {}
    for customer, total, n, batch, wrote in zip(rows["customer"], rows["total"], rows["n"], rows["batch_id"],
                                                rows["version"], strict=True):
        if wrote != version:
            continue
        if customer not in latest or batch >= latest[customer][0]:
            latest[int(customer)] = (int(batch), int(total), int(n))
    return {c: (t, n) for c, (_, t, n) in latest.items()}


def compare_totals(expected: Mapping[int, tuple[int, int]], seen: Mapping[int, tuple[int, int]],
                   examples: int = 5) -> StateAudit:
    """Every customer of ``expected`` must have exactly its (total, count) in ``seen``."""
    wrong = [(c, e, seen.get(c)) for c, e in sorted(expected.items()) if seen.get(c) != e]
    return StateAudit(customers=len(expected), mismatched=len(wrong), examples=tuple(wrong[:examples]))
