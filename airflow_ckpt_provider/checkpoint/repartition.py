"""Offline state repartition batches (Spark 4.2, SPARK-54345). Pure: no I/O.

Spark 4.2's ``StreamingCheckpointManager.repartition(checkpoint, n)`` (private in 4.2: pyspark's
``spark._streamingCheckpointManager``, Scala ``private[spark]``) rewrites the state of a stopped
stateful query to ``n`` partitions and records that as one more batch in the SAME checkpoint:
``offsets/N+1`` is ``offsets/N`` of the last committed batch N byte for byte except
``spark.sql.shuffle.partitions`` in its conf (same sources, watermark and batch timestamp), and
``commits/N+1`` is ``commits/N`` (format v2: with the new state's ``stateUniqueIds``). Such a batch
reads no records. Spark leaves no other marker: its own rule
(``OfflineStateRepartitionUtils.isRepartitionBatch``) is "the shuffle partitions differ from the
previous batch's", which :func:`repartition_batch` follows.

So a handover taken after a repartition batch hands over the offsets of N: nothing is skipped or
read twice. Two cases need words: a repartition that failed after writing ``offsets/N+1`` (Spark
4.2 then refuses to restart the checkpoint, ``STREAMING_UNFINISHED_REPARTITION_DETECTED``, until
the repartition is run again with the same partition count), and a repartition run with
``enforceExactlyOnceSink=false`` over an uncommitted batch (Spark writes empty commits for the
skipped batches and copies the offsets of the last batch committed before them, so their records
are read again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_ckpt_provider.checkpoint.logs import OffsetLogEntry

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
#: The error Spark 4.2 gives on restart when the latest batch is an unfinished repartition.
UNFINISHED_REPARTITION_ERROR = "STREAMING_UNFINISHED_REPARTITION_DETECTED"


def shuffle_partitions(conf: Mapping[str, str]) -> int | None:
    """The ``spark.sql.shuffle.partitions`` an offset log entry recorded, or None (absent or not a number)."""
    value = conf.get(SHUFFLE_PARTITIONS)
    return int(value) if isinstance(value, str) and value.isdigit() else None


@dataclass(frozen=True)
class RepartitionBatch:
    """Batch ``batch`` is Spark's offline state repartition after batch ``batch - 1``.

    ``from_partitions``/``to_partitions`` are the shuffle partitions before and after;
    ``committed`` whether Spark finished it (``commits/<batch>`` exists); ``same_offsets``
    whether its source offsets equal those of batch ``batch - 1`` (they do unless Spark skipped
    uncommitted batches before it).
    """

    batch: int
    from_partitions: int
    to_partitions: int
    committed: bool
    same_offsets: bool

    @property
    def previous(self) -> int:
        return self.batch - 1

    def describe(self) -> str:
        """One line for people: what the batch is and what it means for a restart or a handover."""
        change = f"{SHUFFLE_PARTITIONS} {self.from_partitions} -> {self.to_partitions}"
        if not self.committed:
            return (f"batch {self.batch} is an unfinished state repartition of batch {self.previous} ({change}): "
                    f"Spark 4.2 refuses to restart this checkpoint ({UNFINISHED_REPARTITION_ERROR}) until the "
                    f"repartition is run again with {self.to_partitions} partitions; the handover from batch "
                    f"{self.previous} is unaffected (the repartition reads no records)")
        what = f"batch {self.batch} is a state repartition of batch {self.previous} ({change}); it read no records"
        if self.same_offsets:
            return f"{what}: its offsets are those of batch {self.previous}"
        return (f"{what}: its offsets are those of an earlier committed batch (Spark skipped the uncommitted "
                f"batches before it, enforceExactlyOnceSink=false), so the records of batch {self.previous} are "
                "read again")

    def to_dict(self) -> dict[str, int | bool]:
        return {"batch": self.batch, "of_batch": self.previous, "from_partitions": self.from_partitions,
                "to_partitions": self.to_partitions, "committed": self.committed, "same_offsets": self.same_offsets}


def repartition_batch(batch: int, entry: OffsetLogEntry, previous: OffsetLogEntry, *,
                      committed: bool) -> RepartitionBatch | None:
    """Whether ``offsets/<batch>`` (``entry``) is a repartition of ``offsets/<batch - 1>``
    (``previous``), by Spark's own rule: both record the shuffle partitions and they differ.
    None otherwise (also for batch 0, which Spark never writes as a repartition)."""
    before, after = shuffle_partitions(previous.conf), shuffle_partitions(entry.conf)
    if batch <= 0 or before is None or after is None or before == after:
        return None
    same = [(s.label, s.offsets_json()) for s in entry.sources] == [(s.label, s.offsets_json())
                                                                  for s in previous.sources]
    return RepartitionBatch(batch=batch, from_partitions=before, to_partitions=after, committed=committed,
                            same_offsets=same)


__all__ = ["SHUFFLE_PARTITIONS", "UNFINISHED_REPARTITION_ERROR", "RepartitionBatch", "repartition_batch",
           "shuffle_partitions"]
