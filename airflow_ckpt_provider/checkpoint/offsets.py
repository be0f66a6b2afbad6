"""Offset value objects: Kafka offsets and the classified offset of one streaming source.
Pure: no I/O.

:class:`KafkaOffsets` maps topic -> partition -> NEXT offset to read (the exclusive end of a
batch), with -2 (earliest) and -1 (latest) allowed as sentinels, exactly what Spark's Kafka
source accepts as ``startingOffsets``; partitions are Java ints and offsets Java longs, as Spark's
``KafkaSourceOffset`` holds them. A committed batch's offsets never hold a sentinel (Spark records
resolved offsets in ``offsets/N``): :func:`sentinel_offsets` finds them so the reader can refuse.
:class:`SourceOffsets` is one source line of an offset log (or one initial-offsets file) together
with the kind of source it belongs to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidOffsets, JsonTooLarge
from airflow_ckpt_provider.checkpoint.jsonin import load_json
from airflow_ckpt_provider.enums import StrEnum

EARLIEST = -2
LATEST = -1
#: the largest partition and offset Spark's KafkaSourceOffset holds (Java Int and Long)
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1

_PARTITION_KEY = re.compile(r"(0|[1-9][0-9]*)\Z")


def parse_json(text: str) -> Any:
    """Parse JSON strictly and within the input limits: duplicate object keys and NaN/Infinity
    raise ``ValueError``, a document beyond the size or depth limit :class:`JsonTooLarge` (a
    ``ValueError`` too)."""
    return load_json(text, strict=True)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _short(value: object) -> str:
    """``repr(value)`` cut to 40 characters (a 10^6-digit offset must not fill a log line)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"


def sentinel_offsets(kafka: KafkaOffsets) -> list[tuple[str, int, int]]:
    """The (topic, partition, offset) entries of ``kafka`` that are sentinels (-1 latest, -2
    earliest) rather than positions: legitimate in ``startingOffsets`` and in the provider's own
    reconciliation (new partitions start at -2), never in a committed batch's ``offsets/N``."""
    return [(topic, partition, offset) for topic, partition, offset in kafka.items() if offset < 0]


def _invalid(found: str) -> InvalidOffsets:
    return InvalidOffsets(
        found=found, expected=f"topic -> partition -> offset (partition 0..{MAX_PARTITION}, offset -2..{MAX_OFFSET})")


@dataclass(frozen=True)
class KafkaOffsets:
    """Immutable topic -> partition -> next offset; normalised to sorted, read-only mappings.

    Raises :class:`InvalidOffsets` for empty topic names, non-int partitions or partitions outside
    0..:data:`MAX_PARTITION`, non-int offsets or offsets outside -2..:data:`MAX_OFFSET`.
    """

    offsets: Mapping[str, Mapping[int, int]]

    def __post_init__(self) -> None:
        if not isinstance(self.offsets, Mapping):
            raise _invalid(f"a {type(self.offsets).__name__}")
        for topic in self.offsets:
            if not isinstance(topic, str) or not topic:
                raise _invalid(f"topic name {_short(topic)}")
        normalised: dict[str, Mapping[int, int]] = {}
        for topic in sorted(self.offsets):
            partitions = self.offsets[topic]
            if not isinstance(partitions, Mapping):
                raise _invalid(f"{type(partitions).__name__} for topic {_short(topic)}")
            for partition, offset in partitions.items():
                if type(partition) is not int or not 0 <= partition <= MAX_PARTITION:  # noqa: E721 - excludes bool
                    raise _invalid(f"partition {_short(partition)} of topic {_short(topic)}")
                if type(offset) is not int or not EARLIEST <= offset <= MAX_OFFSET:  # noqa: E721
                    raise _invalid(f"offset {_short(offset)} for {_short(topic)}-{partition}")
            normalised[topic] = MappingProxyType(dict(sorted(partitions.items())))
        object.__setattr__(self, "offsets", MappingProxyType(normalised))

    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __repr__(self) -> str:
        return f"KafkaOffsets({self.to_json()})"

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> KafkaOffsets:
        """Parse Spark's offset JSON (``{"topic": {"0": 23}}``, any key order).

        Raises :class:`InvalidOffsets` on invalid JSON, duplicate keys, non-canonical partition
        keys (``"01"``), booleans or floats as offsets, or anything not shaped like the above.
        """
        if isinstance(data, (str, bytes)):
            try:
                text = data.decode("utf-8") if isinstance(data, bytes) else data
                data = parse_json(text)
            except JsonTooLarge:
                raise
            except ValueError as exc:
                raise _invalid(f"text that is not valid JSON ({exc})") from None
        if not isinstance(data, Mapping):
            raise _invalid(f"a JSON {type(data).__name__}, not an object")
        parsed: dict[str, dict[int, int]] = {}
        for topic, partitions in data.items():
            if not isinstance(partitions, Mapping):
                raise _invalid(f"{json.dumps(partitions)[:40]} for topic {_short(topic)}")
            parts: dict[int, int] = {}
            match = _PARTITION_KEY.match
            for key, offset in partitions.items():
                if not isinstance(key, str) or not match(key) or len(key) > len(str(MAX_PARTITION)):
                    raise _invalid(f"partition key {_short(key)} of topic {_short(topic)}")
                parts[int(key)] = offset
            parsed[topic] = parts
        return cls(parsed)

    def to_dict(self) -> dict[str, dict[str, int]]:
        """Plain JSON-able dict with string partition keys, sorted."""
        return {t: {str(p): o for p, o in parts.items()} for t, parts in self.offsets.items()}

    def to_json(self) -> str:
        """Compact deterministic JSON (topics sorted, partitions numerically), as Spark expects."""
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @property
    def topics(self) -> tuple[str, ...]:
        return tuple(self.offsets)

    def partitions(self) -> frozenset[tuple[str, int]]:
        return frozenset((t, p) for t, parts in self.offsets.items() for p in parts)

    def items(self) -> Iterator[tuple[str, int, int]]:
        """Yield (topic, partition, offset) in sorted order."""
        for topic, parts in self.offsets.items():
            for partition, offset in parts.items():
                yield topic, partition, offset

    def get(self, topic: str, partition: int, default: int | None = None) -> int | None:
        return self.offsets.get(topic, {}).get(partition, default)

    def total(self) -> int:
        """Sum of the non-negative offsets (sentinels count as 0)."""
        return sum(o for _, _, o in self.items() if o >= 0)

    def __len__(self) -> int:
        return sum(len(parts) for parts in self.offsets.values())


class SourceKind(StrEnum):
    """Kind of streaming source, recognised from the shape of its offset JSON."""

    KAFKA = "kafka"  # {"topic": {"0": 23}}
    FILE = "file"  # {"logOffset": 2}
    RATE = "rate"  # bare integer (LongOffset: rate, also memory and socket sources)
    RATE_MICRO_BATCH = "rate-micro-batch"  # {"offset": 90, "timestamp": 9000}
    DELTA = "delta"  # object with "reservoirId"
    NONE = "none"  # "-" in the offset log: no offset for this source at that batch
    UNKNOWN = "unknown"


def classify(raw: str | None) -> tuple[SourceKind, KafkaOffsets | None]:
    """Classify one source offset string.

    Raises :class:`InvalidOffsets` when the text is not JSON, or when it is Kafka-shaped (a
    non-empty object whose values are all objects) but not valid Kafka offsets, so a damaged
    Kafka line is never mistaken for an unknown source.
    """
    if raw is None:
        return SourceKind.NONE, None
    try:
        value = parse_json(raw)
    except JsonTooLarge:
        raise
    except ValueError as exc:
        raise _invalid(f"source offset that is not valid JSON ({exc})") from None
    if _is_int(value):
        return SourceKind.RATE, None
    if not isinstance(value, dict) or not value:
        return SourceKind.UNKNOWN, None
    if "logOffset" in value and _is_int(value["logOffset"]):
        return SourceKind.FILE, None
    if "reservoirId" in value:
        return SourceKind.DELTA, None
    if set(value) == {"offset", "timestamp"}:
        return SourceKind.RATE_MICRO_BATCH, None
    if all(isinstance(v, dict) for v in value.values()):
        return SourceKind.KAFKA, KafkaOffsets.from_json(value)
    return SourceKind.UNKNOWN, None


@dataclass(frozen=True)
class SourceOffsets:
    """Offset of one source: ``index`` in source order (a v2 source keyed by its id: that id; named
    v2 sources: after the numbered ones, in name order), ``name`` for named sources, the ``raw``
    text as Spark wrote it (None for ``-``), its ``kind`` and, for Kafka, the parsed ``kafka``
    offsets."""

    index: int
    kind: SourceKind
    raw: str | None
    name: str | None = None
    kafka: KafkaOffsets | None = None

    @classmethod
    def parse(cls, index: int, raw: str | None, name: str | None = None) -> SourceOffsets:
        """Classify ``raw``; raises :class:`InvalidOffsets` like :func:`classify`."""
        kind, kafka = classify(raw)
        return cls(index=index, kind=kind, raw=raw, name=name, kafka=kafka)

    @property
    def label(self) -> str:
        return self.name if self.name is not None else str(self.index)

    def offsets_json(self) -> Any:
        """The offset as a JSON value (normalised for Kafka), the raw text if it is not JSON, or None."""
        if self.kafka is not None:
            return self.kafka.to_dict()
        if self.raw is None:
            return None
        try:
            return parse_json(self.raw)
        except ValueError:
            return self.raw
