"""What a checkpoint says, read once (:class:`CheckpointSnapshot`), and what the core's decisions
need of a checkpoint they are handed (:class:`CheckpointView`). Pure: no I/O (the reader,
:class:`airflow_ckpt_provider.checkpoint.snapshot_reader.SnapshotReader`, reads a checkpoint into a
snapshot through the files it is handed: fsspec's in
:class:`airflow_ckpt_provider.storage.reader.CheckpointReader`, Hadoop's in the Spark driver).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from airflow_ckpt_provider.checkpoint.offsets import SourceOffsets
from airflow_ckpt_provider.checkpoint.repartition import RepartitionBatch

if TYPE_CHECKING:
    from airflow_ckpt_provider.checkpoint.handover import Handover


@dataclass(frozen=True)
class CheckpointSnapshot:
    """What a checkpoint says, read once.

    ``sources`` are the offsets at ``last_committed_batch`` (empty if nothing committed);
    ``initial_sources`` the initial offsets from ``sources/`` (read only when nothing was
    committed or when requested). ``query_id`` is None when ``metadata`` is missing (Spark then
    creates a new id on restart). ``conf`` is the OffsetSeqMetadata conf of the committed batch.
    ``repartitions`` are the state repartition batches among the last committed and the in-flight
    batch (Spark 4.2's offline repartition; stateful checkpoints only), oldest first.
    """

    uri: str
    query_id: str | None
    last_committed_batch: int | None
    last_planned_batch: int | None
    in_flight_batch: int | None
    sources: tuple[SourceOffsets, ...]
    initial_sources: tuple[SourceOffsets, ...]
    conf: Mapping[str, str] = field(default_factory=dict, hash=False)
    state_operators: tuple[int, ...] = ()
    commit_version: int | None = None
    offsets_version: int | None = None
    batch_watermark_ms: int | None = None
    batch_timestamp_ms: int | None = None
    #: written by Spark 2.1, which kept no commit log: the batch before the last planned one
    #: counts as committed and the last planned one as in flight, as Spark's own restart does
    spark_2_1: bool = False
    repartitions: tuple[RepartitionBatch, ...] = ()

    @property
    def unfinished_repartition(self) -> RepartitionBatch | None:
        """The in-flight batch when it is a state repartition Spark did not finish (a restart of
        this checkpoint on Spark 4.2 fails until it is run again), else None."""
        return next((r for r in self.repartitions if not r.committed), None)


class CheckpointView(Protocol):
    """A checkpoint as the core's decisions read it: its location, a snapshot, and the start of a
    retained batch. :class:`~airflow_ckpt_provider.storage.reader.CheckpointReader` is one; a
    test may pass its own."""

    @property
    def uri(self) -> str: ...

    def snapshot(self, *, include_initial: bool = False) -> CheckpointSnapshot: ...

    def batch_start(self, batch_id: int, *, taken_at: str | None = None) -> Handover: ...
