"""Where the new version starts, and what that costs per partition. Pure but for
:func:`choose_start`, which reads through the reader and the broker it is given.

Four modes (:class:`StartMode`):

``resume``
    where the old query stopped: the end offsets of its last committed batch (the default);
``rewind_to_batch``
    the START of a retained committed batch K: the end offsets of batch K-1, or for K = 0 the
    initial offsets in ``sources/<i>/0`` (read by :meth:`CheckpointReader.batch_start`);
``at_time``
    per partition, the first offset whose record timestamp is at or after T, from the broker
    (``offsets_for_times``); a partition with no such record starts at its end offset;
``offsets``
    an explicit ``startingOffsets`` JSON that names every partition of the subscription.

:func:`plan_start` compares the chosen start with where the old query stopped (``resume_at``)
and gives, per partition, the range processed a second time (start before resume) or skipped
(start after resume) with its record count, the offsets' difference (exact for topics without
compaction or transactions; an upper bound otherwise). Anything but ``resume`` needs consent:
:meth:`StartPlan.require_consent` refuses with :class:`ReprocessingNotAccepted` unless
``accept_reprocessing`` (and ``accept_data_loss`` for a skip).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.checkpoint.errors import InvalidOffsets, InvalidStartChoice, ReprocessingNotAccepted
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView, reconcile
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import Codec, Field, array_of

if TYPE_CHECKING:
    from airflow_ckpt_provider.checkpoint.snapshot import CheckpointView

#: Kafka's offsets_for_times: (topic, partition) -> first offset at or after a time (None: none).
OffsetsForTime = Callable[[Iterable[tuple[str, int]], int], Mapping[tuple[str, int], "int | None"]]


class StartMode(StrEnum):
    """Where the new version starts (see the module docstring)."""

    RESUME = "resume"
    REWIND_TO_BATCH = "rewind_to_batch"
    AT_TIME = "at_time"
    OFFSETS = "offsets"


def _bad(found: str, expected: str) -> InvalidStartChoice:
    return InvalidStartChoice(found=found, expected=expected)


@dataclass(frozen=True)
class StartChoice:
    """What the user chose: a mode and its value (a batch id, a time or offsets)."""

    mode: StartMode = StartMode.RESUME
    batch: int | None = None
    at_time: datetime | None = None
    offsets: KafkaOffsets | None = None

    def __post_init__(self) -> None:
        wanted = {StartMode.REWIND_TO_BATCH: "batch", StartMode.AT_TIME: "at_time", StartMode.OFFSETS: "offsets"}
        given = [name for name in ("batch", "at_time", "offsets") if getattr(self, name) is not None]
        expected = [wanted[self.mode]] if self.mode in wanted else []
        if given != expected:
            raise _bad(f"mode {self.mode.value} with {', '.join(given) or 'no value'}",
                       f"mode {self.mode.value} with {', '.join(expected) or 'no value'}")
        if self.batch is not None and (isinstance(self.batch, bool) or not isinstance(self.batch, int)
                                       or self.batch < 0):
            raise _bad(f"batch {self.batch!r}", "a batch id: an integer >= 0")
        if self.at_time is not None and self.at_time.utcoffset() is None:
            raise _bad(f"time {self.at_time.isoformat()} without a zone",
                       "an ISO 8601 time with its zone (Z or +hh:mm)")

    @classmethod
    def parse(cls, mode: str, value: Any = None) -> StartChoice:
        """From a DAG param or CLI pair: ``("resume", None)``, ``("rewind_to_batch", "12")``,
        ``("at_time", "2026-11-23T10:00:00Z")``, ``("offsets", '{"t": {"0": 5}}')``. Raises
        :class:`InvalidStartChoice`."""
        try:
            start_mode = StartMode(str(mode or StartMode.RESUME.value).strip())
        except ValueError:
            raise _bad(f"handover mode {mode!r}", f"one of {', '.join(m.value for m in StartMode)}") from None
        empty = value is None or (isinstance(value, str) and not value.strip())
        if start_mode is StartMode.RESUME:
            if not empty:
                raise _bad(f"a value ({value!r}) with mode resume",
                           "no value: resume starts where the old query stopped")
            return cls()
        if empty:
            raise _bad(f"mode {start_mode.value} without a value", f"a value for {start_mode.value}")
        text = str(value).strip()
        if start_mode is StartMode.REWIND_TO_BATCH:
            if not text.isdigit():
                raise _bad(f"batch {value!r}", "a batch id: an integer >= 0")
            return cls(start_mode, batch=int(text))
        if start_mode is StartMode.AT_TIME:
            try:
                moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
            except ValueError:
                raise _bad(f"time {value!r}", "an ISO 8601 time with its zone, e.g. 2026-11-23T10:00:00Z") from None
            return cls(start_mode, at_time=moment)
        try:
            offsets = KafkaOffsets.from_json(value if isinstance(value, (str, Mapping)) else json.dumps(value))
        except InvalidOffsets as exc:
            raise _bad(f"offsets {text[:120]!r} ({exc.found})",
                       'a startingOffsets JSON like {"topic": {"0": 42}}') from None
        if any(offset < 0 for _, _, offset in offsets.items()):
            raise _bad("offsets with -1/-2 (latest/earliest)", "explicit offsets >= 0 for every partition")
        return cls(start_mode, offsets=offsets)

    @property
    def at_time_ms(self) -> int | None:
        """The time as epoch milliseconds (what Kafka's ``offsets_for_times`` takes)."""
        return None if self.at_time is None else int(self.at_time.timestamp() * 1000)

    def value(self) -> str:
        """The value as the DAG param and the CLI take it ('' for resume)."""
        if self.batch is not None:
            return str(self.batch)
        if self.at_time is not None:
            return self.at_time.isoformat()
        return self.offsets.to_json() if self.offsets is not None else ""

    def describe(self) -> str:
        return {
            StartMode.RESUME: "resume where the old version stopped",
            StartMode.REWIND_TO_BATCH: f"rewind to the start of batch {self.batch}",
            StartMode.AT_TIME: f"start at the first record at or after {self.value()}",
            StartMode.OFFSETS: "start at explicit offsets",
        }[self.mode]

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "value": self.value()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StartChoice:
        """From :meth:`to_dict` (or the ``start`` param's object) through its codec; an absent
        mode is resume. :class:`InvalidStartChoice` for unknown keys or a start that does not parse."""
        values = _CHOICE.decode(data)
        return cls.parse(values["mode"], values["value"])


def offsets_at_time(found: Mapping[tuple[str, int], int | None], broker: BrokerView) -> KafkaOffsets:
    """``startingOffsets`` for ``at_time`` from the broker's answer per partition (the first
    offset at or after the time, None when every record is older): None becomes the partition's
    end offset. Every partition of ``found`` must be live on ``broker``."""
    result: dict[str, dict[int, int]] = {}
    for (topic, partition), offset in sorted(found.items()):
        live = broker.partitions(topic)
        if partition not in live:
            raise _bad(f"partition {topic}-{partition} not on the broker", "live partitions of the subscribed topics")
        result.setdefault(topic, {})[partition] = live[partition][1] if offset is None else int(offset)
    return KafkaOffsets(result)


@dataclass(frozen=True)
class PartitionStart:
    """One partition: where the old query stopped (``resume_at``) and where the new one starts."""

    topic: str
    partition: int
    resume_at: int
    start_at: int

    @property
    def reprocessed(self) -> int:
        """Records processed a second time: ``[start_at, resume_at)``."""
        return max(0, self.resume_at - self.start_at)

    @property
    def skipped(self) -> int:
        """Records never processed: ``[resume_at, start_at)``."""
        return max(0, self.start_at - self.resume_at)

    def describe(self) -> str:
        name = f"{self.topic}-{self.partition}"
        if self.reprocessed:
            return f"{name}: offsets {self.start_at}..{self.resume_at - 1} processed again ({self.reprocessed} records)"
        if self.skipped:
            return f"{name}: offsets {self.resume_at}..{self.start_at - 1} SKIPPED ({self.skipped} records)"
        return f"{name}: starts at {self.start_at}, where the old version stopped"

    def to_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "resume_at": self.resume_at,
                "start_at": self.start_at, "reprocessed": self.reprocessed, "skipped": self.skipped}


@dataclass(frozen=True)
class StartPlan:
    """The chosen start, the offsets the new version gets, and the cost per partition."""

    choice: StartChoice
    starting_offsets: KafkaOffsets
    partitions: tuple[PartitionStart, ...]

    @property
    def reprocessed(self) -> int:
        return sum(p.reprocessed for p in self.partitions)

    @property
    def skipped(self) -> int:
        return sum(p.skipped for p in self.partitions)

    def require_consent(self, *, accept_reprocessing: bool, accept_data_loss: bool) -> None:
        """Refuse (:class:`ReprocessingNotAccepted`, naming the ranges) a start that is not
        ``resume`` without ``accept_reprocessing``, or one that skips records without
        ``accept_data_loss``."""
        if self.choice.mode is StartMode.RESUME:
            return
        missing = [flag for flag, needed, given in (
            ("accept_reprocessing=True", True, accept_reprocessing),
            ("accept_data_loss=True", self.skipped > 0, accept_data_loss)) if needed and not given]
        if missing:
            raise ReprocessingNotAccepted(
                found=f"{self.choice.describe()}: {self.reprocessed} records processed again, "
                      f"{self.skipped} skipped",
                expected=f"{' and '.join(missing)} for this start",
                detail="\n".join(p.describe() for p in self.partitions if p.reprocessed or p.skipped),
            )

    def markdown(self) -> list[str]:
        """Lines for the approval body and the report."""
        lines = [f"**Where v2 starts:** {self.choice.describe()} — {self.reprocessed:,} records processed again, "
                 f"{self.skipped:,} skipped.", "", "| partition | old stopped at | v2 starts at | processed again | "
                 "skipped |", "| --- | ---: | ---: | ---: | ---: |"]
        lines += [f"| {p.topic}-{p.partition} | {p.resume_at} | {p.start_at} | {p.reprocessed:,} | {p.skipped:,} |"
                  for p in self.partitions]
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {"choice": self.choice.to_dict(), "starting_offsets": self.starting_offsets.to_dict(),
                "partitions": [p.to_dict() for p in self.partitions],
                "reprocessed": self.reprocessed, "skipped": self.skipped}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StartPlan:
        """From :meth:`to_dict` through its codec (its counts are derived: checked, recomputed);
        :class:`InvalidStartChoice` for anything else."""
        values = _PLAN.decode(data)
        return cls(values["choice"], values["starting_offsets"], values["partitions"])


def plan_start(choice: StartChoice, resume_at: KafkaOffsets, start_at: KafkaOffsets,
               broker: BrokerView | None = None) -> StartPlan:
    """The plan for starting at ``start_at`` when the old query stopped at ``resume_at``.

    ``start_at`` must name exactly the partitions of ``resume_at`` (:class:`InvalidStartChoice`
    names the missing and the extra ones). With ``broker`` the start is checked against the live
    log as a handover is (:func:`reconcile`: unknown topic, vanished partition, offsets past the
    log end, offsets no longer retained — a rewind never accepts data loss), and partitions added
    since start at their earliest offset. Offsets -1/-2 of ``resume_at`` (a query that never
    read a partition) count as no cost.
    """
    wanted, given = resume_at.partitions(), start_at.partitions()
    if wanted != given:
        missing = sorted(wanted - given)
        extra = sorted(given - wanted)
        raise _bad(", ".join(filter(None, [
            f"missing partitions {', '.join(f'{t}-{p}' for t, p in missing)}" if missing else "",
            f"partitions not subscribed {', '.join(f'{t}-{p}' for t, p in extra)}" if extra else ""])),
            f"the {len(wanted)} partitions the old query reads, each with an offset")
    offsets = reconcile(start_at, broker).starting_offsets if broker is not None else start_at
    partitions = tuple(
        PartitionStart(topic, partition, resume, start)
        for topic, partition, resume in resume_at.items()
        if resume >= 0 and (start := offsets.get(topic, partition, -1) or 0) >= 0
    )
    return StartPlan(choice, offsets, partitions)


def choose_start(choice: StartChoice, resume_at: KafkaOffsets, *, reader: CheckpointView, broker: BrokerView,
                 offsets_for_time: OffsetsForTime, source: int | str | None = None) -> StartPlan:
    """The plan for ``choice`` on the checkpoint of ``reader`` whose query stopped at
    ``resume_at``: the start of batch K read from the checkpoint, the offsets of a time asked of
    the broker, or the explicit offsets; checked as :func:`plan_start` does. Raises its errors and
    :class:`BatchNotRewindable`."""
    if choice.mode is StartMode.REWIND_TO_BATCH:
        assert choice.batch is not None
        start = reader.batch_start(choice.batch).kafka_offsets(source)
    elif choice.mode is StartMode.AT_TIME:
        assert choice.at_time_ms is not None
        start = offsets_at_time(offsets_for_time(resume_at.partitions(), choice.at_time_ms), broker)
    elif choice.mode is StartMode.OFFSETS:
        assert choice.offsets is not None
        start = choice.offsets
    else:
        start = resume_at
    return plan_start(choice, resume_at, start, broker)


#: Spark's default ``spark.sql.streaming.minBatchesToRetain``.
DEFAULT_BATCHES_TO_RETAIN = 100


def rewind_margin(batch: int, last_planned: int, batches_to_retain: int = DEFAULT_BATCHES_TO_RETAIN) -> int | None:
    """How many more batches the old query may plan before the start of ``batch`` (``offsets/<batch-1>``)
    is purged: Spark keeps the offset log entries from ``current batch - minBatchesToRetain``
    on. None for batch 0, whose start is in ``sources/`` and never purged."""
    if batch <= 0:
        return None
    return max(0, batch - 1 + batches_to_retain - last_planned)


def rewind_warning(batch: int, last_planned: int, batches_to_retain: int = DEFAULT_BATCHES_TO_RETAIN,
                   *, within: int = 30) -> str:
    """A line for the approver when the rewound batch's start is close to being purged ('' otherwise)."""
    margin = rewind_margin(batch, last_planned, batches_to_retain)
    if margin is None or margin > within:
        return ""
    return (f"**Batch {batch}'s start is purged after about {margin} more batches of the old version** "
            f"(Spark keeps {batches_to_retain}): approve soon, or choose a later batch or at_time; a start "
            "purged by the time of the stop is refused then and the upgrade rolls back.")


# -- the codecs (airflow_ckpt_provider.records.codec): parts of the handover step's result, whose
# format number covers them; a start's mode and value are also the ``start`` param's object --------

_CHOICE = Codec("start", InvalidStartChoice, {
    "mode": Field((str,), required=False, default=""),
    "value": Field(required=False, nullable=True),
}, version=None)
_PARTITION = Codec("start partition", InvalidStartChoice, {
    "topic": Field((str,)), "partition": Field((int,)), "resume_at": Field((int,)), "start_at": Field((int,)),
    "reprocessed": Field((int,), required=False, derived=True), "skipped": Field((int,), required=False, derived=True),
}, version=None)
_PLAN = Codec("start plan", InvalidStartChoice, {
    "choice": Field((dict,), decode=StartChoice.from_dict),
    "starting_offsets": Field((dict,), decode=lambda offsets: KafkaOffsets.from_json(dict(offsets))),
    "partitions": Field((list,), decode=array_of(dict, decode=lambda p: PartitionStart(**_PARTITION.decode(p)))),
    "reprocessed": Field((int,), required=False, derived=True),
    "skipped": Field((int,), required=False, derived=True),
}, version=None)
