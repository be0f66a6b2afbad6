"""The handover: where a new query must start so that nothing is lost and nothing is repeated.
Pure: no I/O (the reader reads the checkpoint).

A :class:`Handover` records the offsets of every source at the LAST COMMITTED batch of the old
checkpoint (offsets/N where commits/N exists), or the initial offsets recorded in ``sources/``
when the old query never committed a batch. It is a JSON-able value object for XCom and archive
manifests: ``Handover.from_json(h.to_json()) == h`` and the JSON text round-trips byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_ckpt_provider.checkpoint.errors import (
    AmbiguousSource,
    CheckpointError,
    InvalidHandover,
    JsonTooLarge,
    NoOffsets,
    SourceNotKafka,
)
from airflow_ckpt_provider.checkpoint.logs import check_committed_sources
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind, SourceOffsets
from airflow_ckpt_provider.checkpoint.reconcile import Reconciliation
from airflow_ckpt_provider.checkpoint.rewind import StartMode, StartPlan
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, array_of

if TYPE_CHECKING:
    from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot


def _bad(found: str, expected: str) -> InvalidHandover:
    return InvalidHandover(found=found, expected=expected)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _describe(sources: tuple[SourceOffsets, ...]) -> str:
    return ", ".join(f"{s.label}={s.kind.value}" for s in sources) or "no sources"


def find_source(sources: tuple[SourceOffsets, ...], source: int | str) -> SourceOffsets:
    """The source with this index (int or digit string) or name; SourceNotKafka if absent."""
    if isinstance(source, str) and source.isdigit():
        source = int(source)
    for entry in sources:
        if (entry.index if isinstance(source, int) else entry.name) == source:
            return entry
    raise SourceNotKafka(found=f"no source {source!r} (sources: {_describe(sources)})",
                         expected="an existing source index or name")


def kafka_offsets_of(sources: tuple[SourceOffsets, ...], source: int | str | None = None) -> KafkaOffsets:
    """Kafka offsets of ``source`` (index or name) among ``sources``; default: the only Kafka source.

    Raises :class:`SourceNotKafka` if there is no Kafka source or the chosen one is not
    Kafka, :class:`AmbiguousSource` if several are and none was chosen.
    """
    if source is not None:
        entry = find_source(sources, source)
        if entry.kafka is None:
            raise SourceNotKafka(found=f"source {entry.label} of kind {entry.kind.value}",
                                 expected="a Kafka source")
        return entry.kafka
    kafka = [s for s in sources if s.kafka is not None]
    if not kafka:
        raise SourceNotKafka(found=_describe(sources), expected="one Kafka source")
    if len(kafka) > 1:
        raise AmbiguousSource(found=f"Kafka sources {', '.join(s.label for s in kafka)}",
                              expected="a source index")
    return kafka[0].kafka  # type: ignore[return-value]


@dataclass(frozen=True)
class Handover:
    """Offsets of every source where the new query must start.

    ``batch_id`` is the last committed batch, or None when ``from_initial`` (nothing committed,
    the initial offsets from ``sources/`` were used). ``in_flight_batch`` is a planned but
    uncommitted batch whose offsets were deliberately NOT used. ``held_by_sink`` is set when
    ``batch_id`` is a batch the stop cut after the SINK recorded it whole (Spark did not commit
    it; the sink's own record, named here, did — :meth:`after_held_batch`): the new version
    starts after it. Construction raises :class:`InvalidHandover` on inconsistent fields.
    """

    FORMAT: ClassVar[int] = 1

    query_id: str | None
    checkpoint_uri: str
    batch_id: int | None
    from_initial: bool
    sources: tuple[SourceOffsets, ...]
    in_flight_batch: int | None
    taken_at: str
    held_by_sink: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        if self.from_initial != (self.batch_id is None):
            raise _bad(f"batch_id={self.batch_id} with from_initial={self.from_initial}",
                       "from_initial exactly when batch_id is null")
        for name in ("batch_id", "in_flight_batch"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 0):
                raise _bad(f"{name}={value!r}", f"{name} as a non-negative integer or null")
        if self.batch_id is not None and self.in_flight_batch is not None and (
            self.in_flight_batch <= self.batch_id
        ):
            raise _bad(f"in_flight_batch={self.in_flight_batch} <= batch_id={self.batch_id}",
                       "an in-flight batch after the committed one")
        if not self.sources or not all(isinstance(s, SourceOffsets) for s in self.sources):
            raise _bad("no sources", "at least one SourceOffsets")
        if len({s.index for s in self.sources}) != len(self.sources):
            raise _bad("duplicate source indexes", "unique source indexes")
        if self.held_by_sink is not None and (self.batch_id is None or self.in_flight_batch is not None):
            raise _bad(f"held_by_sink with batch_id={self.batch_id}, in_flight_batch={self.in_flight_batch}",
                       "a held batch as batch_id, and no in-flight batch after it")
        if self.batch_id is not None:  # from a committed batch: Spark recorded resolved offsets only
            check_committed_sources(self.sources, self.batch_id,
                                    f"{self.checkpoint_uri.rstrip('/')}/offsets/{self.batch_id}")
        try:
            stamp = datetime.fromisoformat(self.taken_at)
        except (TypeError, ValueError):
            raise _bad(f"taken_at={self.taken_at!r}", "an ISO 8601 timestamp") from None
        offset = stamp.utcoffset()
        if offset is None or offset.total_seconds() != 0:
            raise _bad(f"taken_at={self.taken_at!r}", "a UTC timestamp (+00:00)")

    def after_held_batch(self, batch: int, sources: tuple[SourceOffsets, ...], record: str) -> Handover:
        """This handover moved past ``batch``, the in-flight batch the sink holds whole (``record``
        is the sink's proof): ``sources`` are that batch's planned end (``offsets/<batch>``)."""
        if batch != self.in_flight_batch:
            raise _bad(f"held batch {batch} with in-flight batch {self.in_flight_batch}",
                       "the in-flight batch the stop cut")
        return Handover(query_id=self.query_id, checkpoint_uri=self.checkpoint_uri, batch_id=batch,
                        from_initial=False, sources=sources, in_flight_batch=None, taken_at=self.taken_at,
                        held_by_sink=record)

    def source(self, source: int | str) -> SourceOffsets:
        """The source with this index (int or digit string) or name; SourceNotKafka if absent."""
        return find_source(self.sources, source)

    def kafka_offsets(self, source: int | str | None = None) -> KafkaOffsets:
        """Kafka offsets of ``source`` (index or name); default: the only Kafka source
        (:func:`kafka_offsets_of`)."""
        return kafka_offsets_of(self.sources, source)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.FORMAT,
            "query_id": self.query_id,
            "checkpoint_uri": self.checkpoint_uri,
            "batch_id": self.batch_id,
            "from_initial": self.from_initial,
            "in_flight_batch": self.in_flight_batch,
            "taken_at": self.taken_at,
            **({"held_by_sink": self.held_by_sink} if self.held_by_sink is not None else {}),
            "sources": [
                {"index": s.index, "name": s.name, "kind": s.kind.value, "raw": s.raw,
                 "offsets": s.offsets_json()}
                for s in self.sources
            ],
        }

    def to_json(self) -> str:
        """Deterministic compact JSON (sorted keys)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> Handover:
        """Rebuild from :meth:`to_json` output or its dict through its strict codec (format 1, as
        archives, state exports and journals hold it); raises :class:`InvalidHandover` on anything
        else (:class:`JsonTooLarge` beyond the JSON limits)."""
        return cls(**_HANDOVER.decode(data))


def _source_from_dict(data: Mapping[str, Any]) -> SourceOffsets:
    """One ``sources`` entry, decoded by its codec; its ``kind`` and ``offsets`` must be what its
    ``raw`` text gives (a multi-line raw text Spark wrote for a file source is kept as unknown)."""
    values = _SOURCE.decode(data)
    index, name, raw = values["index"], values["name"], values["raw"]
    if index < 0:
        raise _bad(f"source index {index}", "a source index >= 0")
    try:
        entry = SourceOffsets.parse(index, raw, name=name)
    except CheckpointError as exc:
        if "\n" not in (raw or ""):
            raise _bad(f"source {index} raw offsets: {exc.found}", "valid offsets") from None
        entry = SourceOffsets(index=index, kind=SourceKind.UNKNOWN, raw=raw, name=name)
    if entry.kind.value != values["kind"] or entry.offsets_json() != values["offsets"]:
        raise _bad(f"source {index} kind/offsets that do not match its raw text",
                   "kind and offsets derived from raw")
    return entry


#: One entry of :attr:`Handover.sources`: ``kind`` and ``offsets`` are derived from ``raw``
#: (checked against it by :func:`_source_from_dict`), ``offsets`` any JSON value.
_SOURCE = Codec("handover source", InvalidHandover, {
    "index": Field((int,)),
    "name": Field((str,), nullable=True),
    "kind": Field((str,)),
    "raw": Field((str,), nullable=True),
    "offsets": Field(),
}, version=None)
_NULL_OR_BATCH = Field((int,), nullable=True)
#: :class:`Handover`'s codec: format 1, exactly the keys :meth:`Handover.to_dict` writes
#: (``held_by_sink`` only when set); text parsed strictly (duplicate keys, NaN refused); beyond the
#: JSON limits :class:`JsonTooLarge` goes up as itself. Construction checks the rest.
_HANDOVER = Codec("Handover", InvalidHandover, {
    "query_id": Field((str,), nullable=True),
    "checkpoint_uri": Field((str,)),
    "batch_id": _NULL_OR_BATCH,
    "from_initial": Field((bool,)),
    "in_flight_batch": _NULL_OR_BATCH,
    "taken_at": Field((str,)),
    "held_by_sink": Field((str,), required=False, nullable=True),
    "sources": Field((list,), decode=array_of(dict, decode=_source_from_dict)),
}, version=Handover.FORMAT, too_large=JsonTooLarge, strict_json=True)


def handover_from_snapshot(snapshot: CheckpointSnapshot, *, taken_at: str | None = None) -> Handover:
    """Build the handover from a snapshot: last committed batch, else the initial offsets.

    Never uses the offsets of an uncommitted batch. Raises :class:`NoOffsets` when nothing was
    committed and no initial offsets were recorded.
    """
    if snapshot.last_committed_batch is not None:
        batch_id, sources, from_initial = snapshot.last_committed_batch, snapshot.sources, False
    elif snapshot.initial_sources:
        batch_id, sources, from_initial = None, snapshot.initial_sources, True
    else:
        planned = snapshot.last_planned_batch
        raise NoOffsets(
            found="no committed batch and no initial offsets under sources/"
            + (f" (batch {planned} planned, not committed)" if planned is not None else ""),
            expected="commits/N with offsets/N, or sources/<i>/0",
        )
    return Handover(
        query_id=snapshot.query_id,
        checkpoint_uri=snapshot.uri,
        batch_id=batch_id,
        from_initial=from_initial,
        sources=sources,
        in_flight_batch=snapshot.in_flight_batch,
        taken_at=taken_at if taken_at is not None else utc_iso(timespec="microseconds"),
    )


@dataclass(frozen=True)
class HandoverResult:
    """The handover step's result, the contract between the handover and the later steps.

    ``handover`` is where the old query stopped (its last committed batch); ``starting_offsets``
    what the new query must be given (the handover reconciled with the live partitions, or the
    start chosen by ``start_plan``), None when only a bare handover is known; ``reconciliation``
    what changed on the way; ``start_plan`` (:class:`~airflow_ckpt_provider.checkpoint.rewind.StartPlan`)
    a start other than the handover — a rewind, a time, explicit offsets — with the records it
    processes again or skips. As XCom (:meth:`to_dict`): ``{"handover": Handover dict,
    "starting_offsets": JSON string for Spark's startingOffsets option, "reconciliation": {...}}``
    plus ``"start_plan": {...}`` when there is one.
    """

    handover: Handover
    starting_offsets: KafkaOffsets | None = None
    reconciliation: Reconciliation | None = None
    start_plan: StartPlan | None = None
    #: the sink ledger's account of the switch (a SinkAccount dict: what the sink holds of a batch
    #: the stop cut, what it may receive twice); None when the step did not ask the sink
    sink: Mapping[str, Any] | None = None

    def expected_start(self, source: int | str | None = None) -> KafkaOffsets:
        """Where each partition of the new query must start: the chosen start of ``start_plan``,
        else where the old query stopped (the handover's own offsets)."""
        if self.start_plan is not None and self.start_plan.choice.mode is not StartMode.RESUME:
            return self.start_plan.starting_offsets
        return self.handover.kafka_offsets(source)

    @property
    def accepted_loss(self) -> frozenset[tuple[str, int]]:
        """Partitions whose data loss was accepted explicitly."""
        return self.reconciliation.accepted_loss if self.reconciliation is not None else frozenset()

    def offsets(self, source: int | str | None = None) -> KafkaOffsets:
        """The offsets to give the new query: the reconciled ones, else the handover's own."""
        return self.starting_offsets if self.starting_offsets is not None else self.handover.kafka_offsets(source)

    def to_dict(self) -> dict[str, Any]:
        value = {
            "handover": self.handover.to_dict(),
            "starting_offsets": self.starting_offsets.to_json() if self.starting_offsets is not None else "",
            "reconciliation": self.reconciliation.to_dict() if self.reconciliation is not None else {},
        }
        if self.start_plan is not None:
            value["start_plan"] = self.start_plan.to_dict()
        if self.sink is not None:
            value["sink"] = dict(self.sink)
        return _RESULT.encode(value)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: HandoverResult | Handover | str | bytes | Mapping[str, Any]) -> HandoverResult:
        """The one parser of a handover step's result: this object, its dict or JSON (the handover
        operator's XCom) through its strict codec, or a bare :class:`Handover` (object, dict or
        JSON: an object without ``handover``). Raises :class:`InvalidHandover` (:class:`JsonTooLarge`
        beyond the JSON limits)."""
        if isinstance(data, HandoverResult):
            return data
        if isinstance(data, Handover):
            return cls(data)
        try:
            raw = _RESULT.parse(data)
        except InvalidHandover as exc:
            if not isinstance(data, (str, bytes)):
                raise
            raise InvalidHandover(
                found=exc.found, expected=exc.expected,
                action="Pass the handover step's result itself (its .output XComArg), or render it with "
                       "'| tojson' in a template: a plain '{{ ti.xcom_pull(...) }}' renders a Python repr.",
            ) from None
        if "handover" not in raw:
            return cls(Handover.from_json(raw))
        _RESULT.check_format(raw)
        values = _RESULT.fields_of(raw)
        handover, recorded = values["handover"], values["reconciliation"]
        if recorded and "startingOffsets" not in recorded:  # written by hand: the offsets given
            starting = values["starting_offsets"] or handover.kafka_offsets()
            recorded = {**recorded, "startingOffsets": starting.to_dict()}
        return cls(handover, values["starting_offsets"], _reconciliation(recorded) if recorded else None,
                   values["start_plan"], values["sink"])


def _offsets_text(value: str) -> KafkaOffsets | None:
    """``starting_offsets``: the startingOffsets JSON text ("" when only a bare handover is known)."""
    return KafkaOffsets.from_json(value) if value else None


def _reconciliation(value: Mapping[str, Any]) -> Reconciliation:
    try:
        return Reconciliation.from_dict(value)
    except (AttributeError, KeyError, TypeError, ValueError, CheckpointError):
        raise _bad(f"reconciliation {value!r:.80}", "the handover operator's reconciliation") from None


def _start_plan(value: Mapping[str, Any]) -> StartPlan | None:
    try:
        return StartPlan.from_dict(value) if value else None
    except (AttributeError, KeyError, TypeError, ValueError, CheckpointError):
        raise _bad(f"start_plan {value!r:.80}", "the handover operator's start plan") from None


#: :class:`HandoverResult`'s codec (no format number, as today's release writes it): the handover
#: by its own codec, ``starting_offsets`` the startingOffsets JSON text, ``reconciliation`` and
#: ``start_plan`` by their own decoders, ``sink`` the sink ledger's account (an object).
_RESULT = Codec("HandoverResult", InvalidHandover, {
    "handover": Field((dict,), decode=Handover.from_json),
    "starting_offsets": Field((str,), required=False, decode=_offsets_text),
    "reconciliation": Field((dict,), required=False, default=MappingProxyType({})),
    "start_plan": Field((dict,), required=False, nullable=True, decode=_start_plan),
    "sink": Field((dict,), required=False, nullable=True),
}, versions=(UNVERSIONED,), too_large=JsonTooLarge, strict_json=True)
