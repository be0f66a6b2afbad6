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
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind, SourceOffsets, parse_json
from airflow_ckpt_provider.checkpoint.reconcile import Reconciliation
from airflow_ckpt_provider.checkpoint.rewind import StartMode, StartPlan
from airflow_ckpt_provider.clock import utc_iso

if TYPE_CHECKING:
    from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot

_KEYS = frozenset(
    {"format", "query_id", "checkpoint_uri", "batch_id", "from_initial", "in_flight_batch",
     "taken_at", "sources"}
)
_SOURCE_KEYS = frozenset({"index", "name", "kind", "raw", "offsets"})


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
        """Rebuild from :meth:`to_json` output; raises :class:`InvalidHandover` on anything else."""
        if isinstance(data, (str, bytes)):
            try:
                data = parse_json(data.decode("utf-8") if isinstance(data, bytes) else data)
            except JsonTooLarge:
                raise
            except ValueError as exc:
                raise _bad(f"text that is not valid JSON ({exc})", "handover JSON") from None
        if not isinstance(data, Mapping) or set(data) - {"held_by_sink"} != _KEYS:
            keys = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise _bad(f"keys {keys}", f"exactly {sorted(_KEYS)} (and held_by_sink)")
        if data["format"] != cls.FORMAT:
            raise _bad(f"format {data['format']!r}", f"format {cls.FORMAT}")
        for key in ("query_id", "checkpoint_uri", "taken_at"):
            if not isinstance(data[key], str) and not (key == "query_id" and data[key] is None):
                raise _bad(f"{key}={data[key]!r}", f"{key} as a string")
        held = data.get("held_by_sink")
        if held is not None and not isinstance(held, str):
            raise _bad(f"held_by_sink={held!r}", "held_by_sink as a string")
        if not isinstance(data["from_initial"], bool) or not isinstance(data["sources"], list):
            raise _bad("malformed from_initial or sources", "a boolean and a list")
        return cls(
            query_id=data["query_id"],
            checkpoint_uri=data["checkpoint_uri"],
            batch_id=data["batch_id"],
            from_initial=data["from_initial"],
            sources=tuple(_source_from_dict(s) for s in data["sources"]),
            in_flight_batch=data["in_flight_batch"],
            taken_at=data["taken_at"],
            held_by_sink=held,
        )


def _source_from_dict(data: Any) -> SourceOffsets:
    if not isinstance(data, Mapping) or set(data) != _SOURCE_KEYS:
        raise _bad(f"source entry {data!r:.60}", f"keys {sorted(_SOURCE_KEYS)}")
    index, name, raw = data["index"], data["name"], data["raw"]
    if not _is_int(index) or index < 0 or not isinstance(name, (str, type(None))) or not isinstance(
        raw, (str, type(None))
    ):
        raise _bad(f"source entry {data!r:.60}", "index int >= 0, name and raw strings or null")
    try:
        entry = SourceOffsets.parse(index, raw, name=name)
    except CheckpointError as exc:
        if "\n" not in (raw or ""):
            raise _bad(f"source {index} raw offsets: {exc.found}", "valid offsets") from None
        entry = SourceOffsets(index=index, kind=SourceKind.UNKNOWN, raw=raw, name=name)
    if entry.kind.value != data["kind"] or entry.offsets_json() != data["offsets"]:
        raise _bad(f"source {index} kind/offsets that do not match its raw text",
                   "kind and offsets derived from raw")
    return entry


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
        return value

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: HandoverResult | Handover | str | bytes | Mapping[str, Any]) -> HandoverResult:
        """The one parser of a handover step's result: this object, its dict or JSON (the handover
        operator's XCom), or a bare :class:`Handover` (object, dict or JSON). Raises
        :class:`InvalidHandover` (or :class:`InvalidOffsets` for bad starting offsets)."""
        if isinstance(data, HandoverResult):
            return data
        if isinstance(data, Handover):
            return cls(data)
        if isinstance(data, (str, bytes)):
            try:
                data = parse_json(data.decode("utf-8") if isinstance(data, bytes) else data)
            except JsonTooLarge:
                raise
            except ValueError as exc:
                raise InvalidHandover(
                    found=f"text that is not valid JSON ({exc})", expected="a handover result or handover JSON",
                    action="Pass the handover step's result itself (its .output XComArg), or render it with "
                           "'| tojson' in a template: a plain '{{ ti.xcom_pull(...) }}' renders a Python repr.",
                ) from None
        if not isinstance(data, Mapping):
            raise _bad(f"a {type(data).__name__}", "a handover result or handover JSON object")
        if "handover" not in data:
            return cls(Handover.from_json(data))
        unknown = sorted(set(data) - {"handover", "starting_offsets", "reconciliation", "start_plan", "sink"})
        if unknown:
            raise _bad(f"unknown keys {unknown}", "handover, starting_offsets, reconciliation, start_plan and sink")
        sink = data.get("sink")
        if sink is not None and not isinstance(sink, Mapping):
            raise _bad(f"sink {sink!r:.80}", "the sink ledger's account (an object)")
        raw = data.get("starting_offsets")
        starting = KafkaOffsets.from_json(raw if isinstance(raw, str) else json.dumps(raw)) if raw else None
        recon_data = data.get("reconciliation") or {}
        handover = Handover.from_json(data["handover"])
        try:
            if recon_data and "startingOffsets" not in recon_data:  # written by hand: the offsets given
                recon_data = {**recon_data, "startingOffsets": (starting or handover.kafka_offsets()).to_dict()}
            recon = Reconciliation.from_dict(recon_data) if recon_data else None
        except (AttributeError, KeyError, TypeError, ValueError, CheckpointError):
            raise _bad(f"reconciliation {recon_data!r:.80}", "the handover operator's reconciliation") from None
        plan_data = data.get("start_plan")
        try:
            plan = StartPlan.from_dict(plan_data) if plan_data else None
        except (AttributeError, KeyError, TypeError, ValueError, CheckpointError):
            raise _bad(f"start_plan {plan_data!r:.80}", "the handover operator's start plan") from None
        return cls(handover, starting, recon, plan, sink)
