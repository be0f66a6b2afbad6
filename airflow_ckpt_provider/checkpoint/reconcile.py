"""Reconcile handed-over Kafka offsets with what the broker holds now (pure; no Kafka client).

The result names EVERY live partition of the handed-over topics, as Spark's ``startingOffsets``
requires: partitions added since the handover start at -2 (earliest, so none of their records is
skipped). Anything that would silently lose or repeat data is refused with a typed error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from airflow_ckpt_provider.checkpoint.errors import (
    ExpiredOffsets,
    InvalidHandover,
    OffsetsAheadOfBroker,
    UnknownTopic,
    VanishedPartitions,
)
from airflow_ckpt_provider.checkpoint.offsets import EARLIEST, KafkaOffsets
from airflow_ckpt_provider.records.codec import Codec, Field, array_of


def _fmt(items: list[tuple[str, int]] | list[tuple[str, int, int, int]], limit: int = 5) -> str:
    shown = ", ".join(
        f"{i[0]}-{i[1]}" if len(i) == 2 else f"{i[0]}-{i[1]} at {i[2]} (broker {i[3]})"
        for i in items[:limit]
    )
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


@dataclass(frozen=True)
class BrokerView:
    """Live partitions of some topics: topic -> partition -> (earliest, latest) offsets.

    ``latest`` is the log end offset (the next offset to be written). Raises ``ValueError`` when
    a range is negative or ``earliest > latest``.
    """

    topics: Mapping[str, Mapping[int, tuple[int, int]]]

    def __post_init__(self) -> None:
        normalised = {}
        for topic in sorted(self.topics):
            parts = self.topics[topic]
            for partition, (earliest, latest) in parts.items():
                if partition < 0 or earliest < 0 or latest < earliest:
                    raise ValueError(f"bad range for {topic}-{partition}: ({earliest}, {latest})")
            normalised[topic] = MappingProxyType(
                {p: (int(e), int(la)) for p, (e, la) in sorted(parts.items())}
            )
        object.__setattr__(self, "topics", MappingProxyType(normalised))

    def __hash__(self) -> int:
        return hash(tuple((t, tuple(p.items())) for t, p in self.topics.items()))

    def partitions(self, topic: str) -> Mapping[int, tuple[int, int]]:
        """Live partitions of ``topic``; empty if the broker does not know it."""
        return self.topics.get(topic, MappingProxyType({}))


@dataclass(frozen=True)
class Reconciliation:
    """Offsets for ``startingOffsets`` plus what changed on the way."""

    starting_offsets: KafkaOffsets
    added_partitions: frozenset[tuple[str, int]] = frozenset()
    expired: tuple[tuple[str, int, int, int], ...] = ()  # (topic, partition, handed over, earliest)
    accept_data_loss: bool = field(default=False)

    def to_dict(self) -> dict[str, object]:
        return {
            "startingOffsets": self.starting_offsets.to_dict(),
            "addedPartitions": [{"topic": t, "partition": p} for t, p in sorted(self.added_partitions)],
            "expired": [
                {"topic": t, "partition": p, "offset": o, "earliest": e} for t, p, o, e in self.expired
            ],
            "acceptDataLoss": self.accept_data_loss,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Reconciliation:
        """Rebuild from :meth:`to_dict` through its codec (a part of the handover step's result,
        whose format number covers it); :class:`InvalidHandover` when malformed."""
        values = _RECONCILIATION.decode(data)
        return cls(starting_offsets=values["startingOffsets"],
                   added_partitions=frozenset((e["topic"], e["partition"]) for e in values["addedPartitions"] or ()),
                   expired=tuple((e["topic"], e["partition"], e["offset"], e["earliest"])
                                 for e in values["expired"] or ()),
                   accept_data_loss=values["acceptDataLoss"])

    @property
    def accepted_loss(self) -> frozenset[tuple[str, int]]:
        """Partitions whose data loss was accepted (they start at the then earliest offset)."""
        return frozenset((t, p) for t, p, _, _ in self.expired) if self.accept_data_loss else frozenset()


def reconcile(
    offsets: KafkaOffsets, broker: BrokerView, *, accept_data_loss: bool = False
) -> Reconciliation:
    """Check ``offsets`` against ``broker`` and complete them with new partitions.

    Sentinels -2/-1 pass through. Raises, checking in this order:
    :class:`UnknownTopic` (a handed-over topic has no live partitions),
    :class:`VanishedPartitions` (a handed-over partition no longer exists),
    :class:`OffsetsAheadOfBroker` (offset above the log end: topic probably recreated),
    :class:`ExpiredOffsets` (offset below the earliest retained offset) unless
    ``accept_data_loss``, in which case those partitions start at the earliest retained offset
    and are listed in ``Reconciliation.expired``.
    """
    unknown = tuple(t for t in offsets.topics if not broker.partitions(t))
    if unknown:
        raise UnknownTopic(
            topics=unknown, found=f"topic(s) {', '.join(unknown)} missing on the broker",
            expected="every handed-over topic to exist",
        )
    vanished = sorted(
        (t, p) for t, p, _ in offsets.items() if p not in broker.partitions(t)
    )
    if vanished:
        raise VanishedPartitions(
            partitions=tuple(vanished), found=f"partitions {_fmt(vanished)} gone",
            expected="every handed-over partition to exist",
        )
    ahead: list[tuple[str, int, int, int]] = []
    expired: list[tuple[str, int, int, int]] = []
    result: dict[str, dict[int, int]] = {}
    added: set[tuple[str, int]] = set()
    for topic in offsets.topics:
        result[topic] = {}
        for partition, (earliest, latest) in broker.partitions(topic).items():
            offset = offsets.get(topic, partition)
            if offset is None:
                added.add((topic, partition))
                offset = EARLIEST
            elif offset >= 0 and offset > latest:
                ahead.append((topic, partition, offset, latest))
            elif offset >= 0 and offset < earliest:
                expired.append((topic, partition, offset, earliest))
                offset = earliest
            result[topic][partition] = offset
    if ahead:
        raise OffsetsAheadOfBroker(
            details=tuple(ahead), found=f"offsets above the log end: {_fmt(ahead)}",
            expected="offsets <= the latest offset of each partition",
        )
    if expired and not accept_data_loss:
        raise ExpiredOffsets(
            details=tuple(expired), found=f"offsets below the earliest retained: {_fmt(expired)}",
            expected="offsets >= the earliest retained offset of each partition",
        )
    return Reconciliation(
        starting_offsets=KafkaOffsets(result),
        added_partitions=frozenset(added),
        expired=tuple(expired),
        accept_data_loss=accept_data_loss,
    )


# -- the codec (airflow_ckpt_provider.records.codec) -------------------------------------------------

_ADDED = Codec("added partition", InvalidHandover, {"topic": Field((str,)), "partition": Field((int,))}, version=None)
_EXPIRED = Codec("expired partition", InvalidHandover, {
    "topic": Field((str,)), "partition": Field((int,)), "offset": Field((int,)), "earliest": Field((int,)),
}, version=None)
_RECONCILIATION = Codec("reconciliation", InvalidHandover, {
    "startingOffsets": Field((dict,), decode=lambda offsets: KafkaOffsets.from_json(json.dumps(offsets))),
    "addedPartitions": Field((list,), required=False, nullable=True, decode=array_of(dict, decode=_ADDED.decode)),
    "expired": Field((list,), required=False, nullable=True, decode=array_of(dict, decode=_EXPIRED.decode)),
    "acceptDataLoss": Field((bool,), required=False, default=False),
}, version=None)
