"""The rollback's handover: where the old version restarts and what it will process a second time.
Pure: no I/O (the rollback step reads the new checkpoint with the reader).

After the new version ran on the new checkpoint, a rollback restarts the old version, which
reads again what the new one already read and wrote:

- ``restore``: the old version resumes on its old checkpoint at the handover (its last committed
  end offsets). Everything the new version processed from there is processed a second time: up
  to the end of its last committed batch, and its last planned but uncommitted batch (its sink
  may hold part of that batch's rows).
- ``forward`` (stateless queries): the old version starts on a fresh checkpoint at the end of
  the new version's last committed batch, per partition (:func:`forward_offsets`), so nothing is
  processed twice except an uncommitted batch of the new version.

A new version that ignored the handover shows here too: it started after the handover (it
skipped records; the old version reads them now, then again what the new one read after them)
or before it (it read again what the old version had already written: duplicates that no
rollback undoes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.checkpoint.errors import InvalidRollbackHandover, SourceNotKafka
from airflow_ckpt_provider.checkpoint.handover import kafka_offsets_of
from airflow_ckpt_provider.checkpoint.offsets import EARLIEST, KafkaOffsets, SourceOffsets
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, array_of, one_of

if TYPE_CHECKING:
    from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot

Partition = tuple[str, int]


@dataclass(frozen=True)
class NewVersionProgress:
    """What the new version's checkpoint says it read, for its Kafka source.

    ``start``: where its query started (``sources/<i>/0``), None when it never started one;
    ``committed_end``: the end offsets of its last committed batch ``committed_batch`` (None when
    it committed nothing); ``planned_end``: those of its last planned batch ``planned_batch`` when
    that batch was not committed (``offsets/N`` without ``commits/N``), else None.
    """

    start: KafkaOffsets | None = None
    committed_batch: int | None = None
    committed_end: KafkaOffsets | None = None
    planned_batch: int | None = None
    planned_end: KafkaOffsets | None = None


#: the suffix of a forward rollback's fresh checkpoint beside the new one, when none is given
ROLLBACK_SUFFIX = ".rollback"


def forward_checkpoint(new_checkpoint: str, given: str = "") -> str:
    """The fresh checkpoint of a forward rollback: ``given``, else ``<new checkpoint>.rollback``."""
    return (given or "").strip() or f"{new_checkpoint.rstrip('/')}{ROLLBACK_SUFFIX}"


def kafka_source(sources: Sequence[SourceOffsets], source: int | str | None = None) -> KafkaOffsets | None:
    """The Kafka offsets of ``source`` among ``sources`` as :func:`kafka_offsets_of` selects them;
    None when there is none. :class:`AmbiguousSource` for several without a choice."""
    try:
        return kafka_offsets_of(tuple(sources), source)
    except SourceNotKafka:
        return None


def new_version_progress(
    snapshot: CheckpointSnapshot,
    planned: Sequence[SourceOffsets] = (),
    source: int | str | None = None,
) -> NewVersionProgress:
    """The new version's progress from its checkpoint's snapshot (read with the initial sources)
    and ``planned``, the sources of ``offsets/<in-flight batch>`` when there is one."""
    in_flight = snapshot.in_flight_batch
    return NewVersionProgress(
        start=kafka_source(snapshot.initial_sources, source),
        committed_batch=snapshot.last_committed_batch,
        committed_end=kafka_source(snapshot.sources, source),
        planned_batch=in_flight if planned else None,
        planned_end=kafka_source(planned, source) if in_flight is not None else None,
    )


@dataclass(frozen=True)
class PartitionReprocess:
    """One partition: the handover, where the old version resumes, and what the new version read.

    Offsets are Kafka's next-offset-to-read; ``handover`` and ``resume`` may be -2 (earliest: a
    partition the handover did not know). ``new_start`` / ``new_committed_end`` /
    ``new_planned_end`` are None when the new version did not read the partition, committed
    nothing, or has no uncommitted batch.
    """

    topic: str
    partition: int
    handover: int
    resume: int
    new_start: int | None = None
    new_committed_end: int | None = None
    new_planned_end: int | None = None

    def _from(self) -> int | None:
        """First offset the new version read that the old one reads again (None: it read nothing)."""
        if self.new_start is None:
            return None
        return max(self.new_start, max(self.resume, 0))

    @property
    def done_end(self) -> int | None:
        """End of what the new version committed (its start when it committed nothing)."""
        return self.new_committed_end if self.new_committed_end is not None else self.new_start

    @property
    def again_committed(self) -> tuple[int, int]:
        """[from, to) of the new version's committed records the old version processes again."""
        first, end = self._from(), self.done_end
        if first is None or end is None or end <= first:
            return (0, 0)
        return (first, end)

    @property
    def again_planned(self) -> tuple[int, int]:
        """[from, to) of the new version's uncommitted batch the old version processes again."""
        first, done = self._from(), self.done_end
        if first is None or done is None or self.new_planned_end is None:
            return (0, 0)
        first = max(first, done)
        return (first, self.new_planned_end) if self.new_planned_end > first else (0, 0)

    @property
    def skipped_by_new(self) -> int:
        """Records from the handover up to where the new version started (it ignored the handover)."""
        if self.new_start is None or self.handover < 0:
            return 0
        return max(0, self.new_start - self.handover)

    @property
    def reread_by_new(self) -> int:
        """Records below the handover the new version read again (it started before the handover):
        the old version had written them already."""
        if self.new_start is None or self.handover < 0 or self.done_end is None:
            return 0
        return max(0, min(self.handover, self.done_end) - self.new_start)

    def to_dict(self) -> dict[str, Any]:
        committed, planned = self.again_committed, self.again_planned
        return {
            "topic": self.topic, "partition": self.partition, "handover": self.handover, "resume": self.resume,
            "new_start": self.new_start, "new_committed_end": self.new_committed_end,
            "new_planned_end": self.new_planned_end,
            "again_committed": list(committed), "again_committed_count": committed[1] - committed[0],
            "again_planned": list(planned), "again_planned_count": planned[1] - planned[0],
            "skipped_by_new": self.skipped_by_new, "reread_by_new": self.reread_by_new,
        }

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> PartitionReprocess:
        """From :meth:`to_dict` (the ranges and counts it derives are type-checked, then computed
        again); :class:`InvalidRollbackHandover` on anything else."""
        return cls(**_PARTITION.decode(data))


@dataclass(frozen=True)
class RollbackHandover:
    """The rollback step's result: how the old version restarts and what it processes twice.

    ``checkpoint`` is where the old version restarts; ``resume`` where it starts reading (for
    ``forward``: the ``startingOffsets`` it is launched with). JSON round-trip with
    :meth:`to_dict` (:meth:`to_json`) / :meth:`from_json` (``from_dict`` is the same decoder).
    """

    mode: RollbackMode
    checkpoint: str
    resume: KafkaOffsets
    partitions: tuple[PartitionReprocess, ...]
    new_committed_batch: int | None = None
    new_planned_batch: int | None = None

    @property
    def again_committed(self) -> int:
        return sum(p.to_dict()["again_committed_count"] for p in self.partitions)

    @property
    def again_planned(self) -> int:
        return sum(p.to_dict()["again_planned_count"] for p in self.partitions)

    @property
    def new_started_at_handover(self) -> bool | None:
        """Whether the new version started exactly at the handover; None when it never started."""
        started = [p for p in self.partitions if p.new_start is not None]
        if not started:
            return None
        return all(p.new_start == p.handover for p in started)

    @property
    def starting_offsets(self) -> str:
        """The ``startingOffsets`` JSON of a forward restart ('' for restore: Spark resumes)."""
        return self.resume.to_json() if self.mode is RollbackMode.FORWARD else ""

    def describe(self) -> list[str]:
        """Sentences for the log and the report, in the user's words."""
        how = ("on its old checkpoint" if self.mode is RollbackMode.RESTORE
               else f"on the fresh checkpoint {self.checkpoint} with startingOffsets {self.resume.to_json()}")
        lines = [f"rollback ({self.mode}): the old version restarts {how}."]
        started = self.new_started_at_handover
        if started is None:
            lines.append("The new version never started its query: nothing is processed twice.")
            return lines
        committed = ("nothing" if self.new_committed_batch is None
                     else f"up to batch {self.new_committed_batch}")
        lines.append(f"The new version committed {committed}"
                     + (f"; batch {self.new_planned_batch} was planned, not committed (its sink may hold part of "
                        "its rows)" if self.new_planned_batch is not None else "") + ".")
        if not started:
            skipped = sum(p.skipped_by_new for p in self.partitions)
            reread = sum(p.reread_by_new for p in self.partitions)
            what = [f"skipped {skipped} records after the handover" if skipped else "",
                    f"read {reread} records before it again (the old version had written them: duplicates no "
                    "rollback undoes)" if reread else ""]
            lines.append("The new version did not start at the handover (it ignored the handed-over offsets): it "
                         + "; ".join(w for w in what if w) + ". The ranges below are what it processed.")
        lines.append(f"The old version processes again {self.again_committed} records the new version committed"
                     + (f", and {self.again_planned} of its uncommitted batch (written twice only where the sink "
                        "holds rows of that batch)" if self.again_planned else "") + ".")
        for p in self.partitions:
            parts = [f"[{first}, {end}) {label} ({end - first})"
                     for (first, end), label in ((p.again_committed, "committed"), (p.again_planned, "uncommitted"))
                     if end > first]
            if parts:
                lines.append(f"{p.topic}-{p.partition}: again " + ", ".join(parts))
        return lines

    def to_dict(self) -> dict[str, Any]:
        return _ROLLBACK.encode({
            "mode": self.mode.value, "checkpoint": self.checkpoint, "resume": self.resume.to_json(),
            "starting_offsets": self.starting_offsets,
            "new_committed_batch": self.new_committed_batch, "new_planned_batch": self.new_planned_batch,
            "new_started_at_handover": self.new_started_at_handover,
            "again_committed": self.again_committed, "again_planned": self.again_planned,
            "partitions": [p.to_dict() for p in self.partitions],
            "summary": self.describe(),
        })

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> RollbackHandover:
        """Rebuild from :meth:`to_dict` or its JSON (the rollback_handover step's result) through its
        strict codec; :class:`InvalidRollbackHandover` on anything else."""
        return cls(**_ROLLBACK.decode(data))

    from_dict = from_json


@dataclass(frozen=True)
class RollbackHandoverUnread:
    """The rollback step's result when the new checkpoint could not be read in ``restore`` mode:
    the old version restarts on ``checkpoint`` anyway, and what it processes twice is unknown
    (``error`` says why). JSON round trip with :meth:`to_dict` / :meth:`from_json`."""

    checkpoint: str
    error: str
    mode: RollbackMode = RollbackMode.RESTORE

    def describe(self) -> str:
        """One sentence for the log and the report."""
        return f"what the old version processes twice is unknown: {self.error}"

    def to_dict(self) -> dict[str, Any]:
        return _UNREAD.encode({"mode": self.mode.value, "checkpoint": self.checkpoint, "error": self.error})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> RollbackHandoverUnread:
        """Decode (strict: :class:`InvalidRollbackHandover` for anything else)."""
        return cls(**_UNREAD.decode(data))


#: What the rollback_handover step returns and the journal records: the handover, or in ``restore``
#: mode the error that kept it from being computed.
RollbackResult = RollbackHandover | RollbackHandoverUnread


def rollback_result(data: str | bytes | Mapping[str, Any]) -> RollbackResult:
    """The rollback_handover step's result (its XCom or its journal record): a
    :class:`RollbackHandoverUnread` when it carries ``error``, else a :class:`RollbackHandover`,
    each by its strict codec; :class:`InvalidRollbackHandover` on anything else."""
    raw = _ROLLBACK.parse(data)
    return RollbackHandoverUnread.from_json(raw) if "error" in raw else RollbackHandover.from_json(raw)


def _range(value: Any) -> tuple[int, ...]:  # noqa: ANN401 - a checked JSON array
    if len(value) != 2:
        raise ValueError(f"{len(value)} offsets, not [from, to)")
    return array_of(int)(value)


_COUNT = Field((int,), required=False, derived=True)
_OFFSET_OR_NULL = Field((int,), nullable=True)
#: :class:`PartitionReprocess`'s codec (no format number, as today's release writes it): the
#: ranges and counts :meth:`PartitionReprocess.to_dict` derives are type-checked, then left out.
_PARTITION = Codec("rollback partition", InvalidRollbackHandover, {
    "topic": Field((str,)),
    "partition": Field((int,)),
    "handover": Field((int,)),
    "resume": Field((int,)),
    "new_start": _OFFSET_OR_NULL,
    "new_committed_end": _OFFSET_OR_NULL,
    "new_planned_end": _OFFSET_OR_NULL,
    "again_committed": Field((list,), required=False, derived=True, decode=_range),
    "again_planned": Field((list,), required=False, derived=True, decode=_range),
    **{name: _COUNT for name in ("again_committed_count", "again_planned_count", "skipped_by_new", "reread_by_new")},
}, version=None)
#: :class:`RollbackHandover`'s codec (no format number, as today's release writes it): ``resume``
#: is the Kafka offsets' JSON text; what :meth:`RollbackHandover.to_dict` derives (the
#: startingOffsets, the counts, ``summary``) is type-checked, then left out.
_ROLLBACK = Codec("RollbackHandover", InvalidRollbackHandover, {
    "mode": Field((str,), decode=one_of(*RollbackMode, decode=RollbackMode)),
    "checkpoint": Field((str,)),
    "resume": Field((str,), decode=KafkaOffsets.from_json),
    "partitions": Field((list,), decode=array_of(dict, decode=PartitionReprocess.from_json)),
    "new_committed_batch": Field((int,), required=False, nullable=True),
    "new_planned_batch": Field((int,), required=False, nullable=True),
    "starting_offsets": Field((str,), required=False, derived=True),
    "new_started_at_handover": Field((bool,), required=False, nullable=True, derived=True),
    "again_committed": _COUNT,
    "again_planned": _COUNT,
    "summary": Field((list,), required=False, derived=True, decode=array_of(str)),
}, versions=(UNVERSIONED,))
#: :class:`RollbackHandoverUnread`'s codec (no format number, as today's release writes it): only
#: ``restore`` reaches it (a ``forward`` rollback fails instead).
_UNREAD = Codec("RollbackHandoverUnread", InvalidRollbackHandover, {
    "mode": Field((str,), decode=one_of(RollbackMode.RESTORE, decode=RollbackMode)),
    "checkpoint": Field((str,)),
    "error": Field((str,)),
}, versions=(UNVERSIONED,))


def _get(offsets: KafkaOffsets | None, key: Partition) -> int | None:
    return None if offsets is None else offsets.get(*key)


def forward_offsets(handover: KafkaOffsets, progress: NewVersionProgress) -> KafkaOffsets:
    """Where the old version starts on a fresh checkpoint so nothing is lost and as little as
    possible is processed twice, per partition of the handover and of the new version:

    - the new version never read the partition: the handover (earliest for one it lacks);
    - it started after the handover (it skipped records): the handover; no loss wins, so what
      it read after them is processed again (reported);
    - else the end of its last committed batch, or the handover if that is further (it started
      before the handover and committed less than the old version had). When it committed
      nothing this is the handover: its start was the handover, or before it.
    """
    result: dict[str, dict[int, int]] = {}
    keys = handover.partitions() | (progress.start.partitions() if progress.start is not None else frozenset())
    for topic, partition in sorted(keys):
        given = handover.get(topic, partition)
        start = _get(progress.start, (topic, partition))
        if start is None:
            chosen = given if given is not None else EARLIEST
        elif given is not None and given >= 0 and start > given:
            chosen = given
        else:
            done = _get(progress.committed_end, (topic, partition))
            done = done if done is not None else start
            chosen = max(done, given) if given is not None and given >= 0 else done
        result.setdefault(topic, {})[partition] = chosen
    return KafkaOffsets(result)


def rollback_handover(
    mode: RollbackMode | str,
    handover: KafkaOffsets,
    progress: NewVersionProgress,
    *,
    checkpoint: str,
) -> RollbackHandover:
    """Where the old version restarts (``checkpoint``) and, per partition, what it reads again.

    ``handover`` is the upgrade's handover (the old version's last committed end offsets);
    ``progress`` what the new checkpoint recorded after the new version stopped. ``restore``
    resumes at the handover (a partition it lacks: earliest, as Spark does for a new partition);
    ``forward`` at :func:`forward_offsets`. ``ValueError`` for an unknown mode.
    """
    mode = RollbackMode(mode)
    resume = handover if mode is RollbackMode.RESTORE else forward_offsets(handover, progress)
    keys = handover.partitions() | (progress.start.partitions() if progress.start is not None else frozenset())
    partitions = []
    for key in sorted(keys):
        given = handover.get(*key)
        at = resume.get(*key)
        partitions.append(PartitionReprocess(
            topic=key[0], partition=key[1], handover=given if given is not None else EARLIEST,
            resume=at if at is not None else EARLIEST, new_start=_get(progress.start, key),
            new_committed_end=_get(progress.committed_end, key), new_planned_end=_get(progress.planned_end, key),
        ))
    return RollbackHandover(mode=mode, checkpoint=checkpoint, resume=resume, partitions=tuple(partitions),
                            new_committed_batch=progress.committed_batch, new_planned_batch=progress.planned_batch)


__all__ = ["NewVersionProgress", "PartitionReprocess", "RollbackHandover", "RollbackHandoverUnread", "RollbackResult",
           "forward_offsets", "kafka_source", "new_version_progress", "rollback_handover", "rollback_result"]
