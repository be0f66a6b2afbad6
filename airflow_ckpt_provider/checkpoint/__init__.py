"""The pure core: the checkpoint format's parsers over bytes and JSON, value objects (Kafka offsets,
snapshot, handover, launch handle, archive manifest, verdicts), every decision, and the provider's
typed errors. Pure: no I/O; imports neither fsspec nor Airflow, Spark, a Kafka client or the
storage layer. This file only re-exports.

Which files of a checkpoint to read and what to refuse is the core's
(:class:`~airflow_ckpt_provider.checkpoint.snapshot_reader.SnapshotReader`); the reading itself is
the storage layer's through fsspec (``from airflow_ckpt_provider.storage import CheckpointReader``)
and the driver side's through Hadoop
(:mod:`airflow_ckpt_provider.spark.checkpoint_files`).
"""

from __future__ import annotations

from airflow_ckpt_provider.checkpoint.errors import (
    AmbiguousSource,
    BrokerError,
    BrokerUnreachable,
    CheckpointError,
    CheckpointNotFound,
    CommitWithoutOffsets,
    CorruptCheckpointFile,
    ExpiredOffsets,
    InvalidHandover,
    InvalidOffsets,
    NoOffsets,
    NotACheckpoint,
    OffsetsAheadOfBroker,
    SourceNotKafka,
    UnknownTopic,
    UnreadableCheckpoint,
    UnsupportedLogVersion,
    VanishedPartitions,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult, handover_from_snapshot
from airflow_ckpt_provider.checkpoint.launch import InvalidLaunchHandle, LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.offsets import (
    EARLIEST,
    LATEST,
    KafkaOffsets,
    SourceKind,
    SourceOffsets,
)
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView, Reconciliation, reconcile
from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot

__all__ = [
    "EARLIEST",
    "LATEST",
    "AmbiguousSource",
    "BrokerError",
    "BrokerUnreachable",
    "BrokerView",
    "CheckpointError",
    "CheckpointNotFound",
    "CheckpointSnapshot",
    "CommitWithoutOffsets",
    "CorruptCheckpointFile",
    "ExpiredOffsets",
    "Handover",
    "HandoverResult",
    "InvalidHandover",
    "InvalidLaunchHandle",
    "InvalidOffsets",
    "KafkaOffsets",
    "LaunchHandle",
    "LaunchMode",
    "NoOffsets",
    "NotACheckpoint",
    "OffsetsAheadOfBroker",
    "Reconciliation",
    "SourceKind",
    "SourceNotKafka",
    "SourceOffsets",
    "UnknownTopic",
    "UnreadableCheckpoint",
    "UnsupportedLogVersion",
    "VanishedPartitions",
    "handover_from_snapshot",
    "reconcile",
]
