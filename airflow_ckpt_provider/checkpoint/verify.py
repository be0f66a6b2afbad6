"""Verify that a new query started exactly at the handover (no Spark, no Kafka client). Pure: the
comparisons over a snapshot, and over a checkpoint the caller hands in (:class:`CheckpointView`).

A Kafka source of a query started on a fresh checkpoint writes ``sources/<i>/0`` once: the
offsets it really starts from, with Spark's sentinels already RESOLVED (a partition given as
-2 is recorded at the earliest offset the broker had then). :func:`verify_start` compares that
record with the ``startingOffsets`` the job was given (and, when known, with the old checkpoint's
handover):

* a partition given an offset must start exactly there: recorded > given is a GAP (records
  skipped), recorded < given an OVERLAP (records processed twice);
* a partition given -2 (earliest: added since the handover) must start at the earliest offset;
  with a :class:`BrokerView` the record may not be above the broker's earliest now (retention
  only moves the earliest up, so a record above it skipped records);
* every given partition must be recorded (MISSING) and nothing else (UNEXPECTED);
* when the handover is known, a handed-over partition must start exactly at the handed-over
  offset, whatever was given, except partitions whose loss was accepted explicitly
  (``accepted_loss``: they start where they were given, the then earliest offset).

Any difference raises :class:`StartMismatch` naming every partition and offset.

:func:`airflow_ckpt_provider.storage.locations.check_launch_target` is the launch preflight (it lists
the launch locations through fsspec): queries never share a checkpoint, and a file sink must not
already hold a ``_spark_metadata`` log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import (
    InvalidVerifyResult,
    NotStartedYet,
    SourceNotKafka,
    StartMismatch,
)
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.offsets import EARLIEST, LATEST, KafkaOffsets
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView
from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot, CheckpointView
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, array_of, one_of

EXACT = "exact"
AT_EARLIEST = "earliest"
AT_LATEST = "latest"  # -1 given: where "latest" was cannot be checked afterwards
GAP = "gap"
OVERLAP = "overlap"
MISSING = "missing"
UNEXPECTED = "unexpected"
PROBLEMS = (GAP, OVERLAP, MISSING, UNEXPECTED)
STATUSES = (EXACT, AT_EARLIEST, AT_LATEST, *PROBLEMS)


@dataclass(frozen=True)
class PartitionStart:
    """One partition: the offset it was given, the one recorded (None if absent), the verdict."""

    topic: str
    partition: int
    given: int | None
    recorded: int | None
    status: str
    handed_over: int | None = None
    broker_earliest: int | None = None

    @property
    def ok(self) -> bool:
        return self.status not in PROBLEMS

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "given": self.given, "recorded": self.recorded,
                "status": self.status, "handed_over": self.handed_over, "broker_earliest": self.broker_earliest}

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> PartitionStart:
        """From :meth:`to_dict` or its JSON; :class:`InvalidVerifyResult` on anything else."""
        return cls(**_PARTITION.decode(data))

    def describe(self) -> str:
        text = f"{self.topic}-{self.partition}: {self.status}, given {_fmt(self.given)}, recorded {_fmt(self.recorded)}"
        if self.handed_over is not None and self.handed_over != self.given:
            text += f", handed over {self.handed_over}"
        if self.broker_earliest is not None and self.given == EARLIEST:
            text += f", broker earliest {self.broker_earliest}"
        return text


def _fmt(offset: int | None) -> str:
    if offset is None:
        return "nothing"
    return {EARLIEST: "-2 (earliest)", LATEST: "-1 (latest)"}.get(offset, str(offset))


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of a successful verification (a failed one raises); JSON-able for XCom.

    The verify step adds to :meth:`to_dict` what it checked of the sink (``sink``: a SinkDelivery
    dict) and, when an idle topic ended its progress window, the evidence that the query caught up
    (``caught_up``); both are written only when set."""

    checkpoint_uri: str
    query_id: str | None
    source: int
    starting_offsets: KafkaOffsets
    recorded: KafkaOffsets
    partitions: tuple[PartitionStart, ...]
    last_committed_batch: int | None = None
    progress_batches: tuple[int, ...] = ()
    sink: Mapping[str, Any] | None = field(default=None, hash=False)
    caught_up: str | None = None

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.partitions)

    def to_dict(self) -> dict[str, Any]:
        value = {
            "checkpoint_uri": self.checkpoint_uri,
            "query_id": self.query_id,
            "source": self.source,
            "ok": self.ok,
            "starting_offsets": self.starting_offsets.to_dict(),
            "recorded": self.recorded.to_dict(),
            "partitions": [p.to_dict() for p in self.partitions],
            "last_committed_batch": self.last_committed_batch,
            "progress_batches": list(self.progress_batches),
        }
        if self.sink is not None:
            value["sink"] = dict(self.sink)
        if self.caught_up is not None:
            value["caught_up"] = self.caught_up
        return _VERIFY_RESULT.encode(value)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> VerifyResult:
        """Rebuild from :meth:`to_json` output or its dict (the verify step's XCom, as the journal
        records it) through its strict codec; :class:`InvalidVerifyResult` on anything else."""
        return cls(**_VERIFY_RESULT.decode(data))

    def with_progress(self, last_committed_batch: int | None, batches: tuple[int, ...]) -> VerifyResult:
        return VerifyResult(self.checkpoint_uri, self.query_id, self.source, self.starting_offsets,
                            self.recorded, self.partitions, last_committed_batch, tuple(batches), self.sink,
                            self.caught_up)


_OFFSET = Field((int,), required=False, nullable=True)
#: :class:`PartitionStart`'s codec (no format number, as today's release writes it).
_PARTITION = Codec("PartitionStart", InvalidVerifyResult, {
    "topic": Field((str,)),
    "partition": Field((int,)),
    "given": Field((int,), nullable=True),
    "recorded": Field((int,), nullable=True),
    "status": Field((str,), decode=one_of(*STATUSES)),
    "handed_over": _OFFSET,
    "broker_earliest": _OFFSET,
}, version=None)
#: :class:`VerifyResult`'s codec (no format number, as today's release writes it): ``ok`` is
#: derived from the partitions, the offsets are Kafka offsets objects, each partition decoded by
#: its own codec.
_VERIFY_RESULT = Codec("VerifyResult", InvalidVerifyResult, {
    "checkpoint_uri": Field((str,)),
    "query_id": Field((str,), required=False, nullable=True),
    "source": Field((int,)),
    "ok": Field((bool,), required=False, derived=True),
    "starting_offsets": Field((dict,), decode=KafkaOffsets.from_json),
    "recorded": Field((dict,), decode=KafkaOffsets.from_json),
    "partitions": Field((list,), decode=array_of(dict, decode=PartitionStart.from_json)),
    "last_committed_batch": _OFFSET,
    "progress_batches": Field((list,), required=False, default=(), decode=array_of(int)),
    "sink": Field((dict,), required=False, nullable=True),
    "caught_up": Field((str,), required=False, nullable=True),
}, versions=(UNVERSIONED,))


def compare_starts(
    recorded: KafkaOffsets,
    starting_offsets: KafkaOffsets,
    *,
    handover: KafkaOffsets | None = None,
    broker: BrokerView | None = None,
    accepted_loss: frozenset[tuple[str, int]] | set[tuple[str, int]] = frozenset(),
) -> tuple[PartitionStart, ...]:
    """Classify every partition (see the module doc); never raises."""
    result: list[PartitionStart] = []
    for topic, partition, given in starting_offsets.items():
        got = recorded.get(topic, partition)
        before = handover.get(topic, partition) if handover is not None else None
        # the truth is the old checkpoint's end; the given offset only for new partitions and
        # for partitions whose loss was accepted (they start at the then earliest offset)
        target = before if before is not None and (topic, partition) not in accepted_loss else given
        earliest = None
        if broker is not None and partition in broker.partitions(topic):
            earliest = broker.partitions(topic)[partition][0]
        if got is None:
            status = MISSING
        elif target == EARLIEST:
            status = GAP if (got < 0 or (earliest is not None and got > earliest)) else AT_EARLIEST
        elif target == LATEST:
            status = AT_LATEST
        else:
            status = EXACT if got == target else GAP if got > target else OVERLAP
        result.append(PartitionStart(topic, partition, given, got, status, before, earliest))
    if handover is not None:
        for topic, partition, before in handover.items():
            if starting_offsets.get(topic, partition) is None:
                result.append(PartitionStart(topic, partition, None, recorded.get(topic, partition),
                                             MISSING, before))
    for topic, partition, got in recorded.items():
        if starting_offsets.get(topic, partition) is None and (
            handover is None or handover.get(topic, partition) is None
        ):
            result.append(PartitionStart(topic, partition, None, got, UNEXPECTED))
    return tuple(sorted(result, key=lambda p: (p.topic, p.partition)))


def recorded_start(snapshot: CheckpointSnapshot, source: int | str | None = None) -> tuple[int, KafkaOffsets]:
    """(source index, offsets) of the Kafka source's ``sources/<i>/0`` in a snapshot taken with
    ``include_initial=True``. Raises :class:`NotStartedYet` when nothing is recorded,
    :class:`SourceNotKafka` when the chosen source is absent or not Kafka or several qualify."""
    kafka = [s for s in snapshot.initial_sources if s.kafka is not None]
    if source is not None:
        key = int(source) if isinstance(source, str) and source.isdigit() else source
        kafka = [s for s in kafka if (s.index if isinstance(key, int) else s.name) == key]
    if not kafka:
        if not snapshot.initial_sources:
            raise NotStartedYet(found="no sources/<i>/0 in the new checkpoint",
                                expected="the start offsets Spark records when a query starts fresh",
                                path=snapshot.uri)
        raise SourceNotKafka(found=f"no Kafka source {'' if source is None else source!r} under sources/",
                             expected="a Kafka source's recorded start", )
    if len(kafka) > 1:
        raise SourceNotKafka(found=f"Kafka sources {', '.join(s.label for s in kafka)} under sources/",
                             expected="one Kafka source; choose it with source=N")
    assert kafka[0].kafka is not None
    return kafka[0].index, kafka[0].kafka


def verify_start(
    snapshot: CheckpointSnapshot,
    starting_offsets: KafkaOffsets,
    *,
    handover: Handover | KafkaOffsets | None = None,
    broker: BrokerView | None = None,
    accepted_loss: frozenset[tuple[str, int]] | set[tuple[str, int]] = frozenset(),
    source: int | str | None = None,
) -> VerifyResult:
    """Verify the new checkpoint's recorded start; returns :class:`VerifyResult` or raises
    :class:`StartMismatch` (every differing partition named), :class:`NotStartedYet` or
    :class:`SourceNotKafka`."""
    index, recorded = recorded_start(snapshot, source)
    before = handover.kafka_offsets() if isinstance(handover, Handover) else handover
    parts = compare_starts(recorded, starting_offsets, handover=before, broker=broker,
                           accepted_loss=frozenset(accepted_loss))
    _refuse_mismatches(parts, expected="every partition to start exactly at the handed-over offset (partitions "
                                        "added since: at earliest)", path=snapshot.uri)
    return VerifyResult(snapshot.uri, snapshot.query_id, index, starting_offsets, recorded, parts,
                        snapshot.last_committed_batch)


def _refuse_mismatches(parts: tuple[PartitionStart, ...], *, expected: str, path: str) -> None:
    """:class:`StartMismatch` naming every partition of ``parts`` that is not ok (the first ten in
    the message); nothing when all are."""
    bad = [p for p in parts if not p.ok]
    if bad:
        shown = "; ".join(p.describe() for p in bad[:10]) + (f"; and {len(bad) - 10} more" if len(bad) > 10 else "")
        raise StartMismatch(
            details=tuple((p.topic, p.partition, p.given if p.given is not None else p.handed_over,
                           p.recorded, p.status) for p in bad),
            found=shown, expected=expected, path=path)


def verify_resume(reader: CheckpointView, handover: Handover, *, source: int | str | None = None) -> VerifyResult:
    """Verify that a version restarted ON the old checkpoint (an in-place upgrade) resumed right
    after the handover's batch N: the checkpoint has committed batch N+1, batch N+1 started where
    the handover says N ended (``offsets/N`` unchanged: nothing re-planned or rewritten), and the
    query id is the old one (a checkpoint whose ``metadata`` was replaced is another query).
    Raises :class:`NotStartedYet` (nothing committed after N), :class:`StartMismatch` (every
    differing partition named) or :class:`SourceNotKafka`."""
    if handover.batch_id is None:
        raise NotStartedYet(found="a handover of a query that committed nothing",
                            expected="a handover at a committed batch to resume after", path=reader.uri)
    snapshot = reader.snapshot()
    last = snapshot.last_committed_batch
    if last is None or last <= handover.batch_id:
        raise NotStartedYet(found=f"last committed batch {last}, the handover's is {handover.batch_id}",
                            expected=f"batch {handover.batch_id + 1} committed by the restarted version",
                            path=reader.uri)
    handed = handover.kafka_offsets(source)
    start = reader.batch_start(handover.batch_id + 1)
    recorded = start.kafka_offsets(source)
    parts = compare_starts(recorded, handed, handover=handed)
    if handover.query_id and snapshot.query_id and handover.query_id != snapshot.query_id:
        raise StartMismatch(details=(), found=f"query id {snapshot.query_id} in {reader.uri}/metadata",
                            expected=f"the old query's id {handover.query_id}: an in-place restart resumes the "
                                     "same query", path=reader.uri)
    _refuse_mismatches(parts, expected=f"batch {handover.batch_id + 1} to start where the handover's batch "
                                        f"{handover.batch_id} ended", path=reader.uri)
    index = (handover.source(source).index if source is not None
             else next(s.index for s in handover.sources if s.kafka is not None))
    return VerifyResult(snapshot.uri, snapshot.query_id, index, handed, recorded, parts, last)


def unread_partitions(position: KafkaOffsets, broker: BrokerView) -> list[str]:
    """The partitions of ``position``'s topics whose log end is past it — records the query has
    not read yet — as ``"topic-p: at X, log end Y"``; empty when the query is caught up (an idle
    topic). A partition the broker has and ``position`` lacks is read from 0 (added since)."""
    unread = []
    for topic in position.topics:
        for partition, (_, log_end) in broker.partitions(topic).items():
            at = position.get(topic, partition)
            if log_end > (at if at is not None and at >= 0 else 0):
                unread.append(f"{topic}-{partition}: at {_fmt(at)}, log end {log_end}")
    return unread
