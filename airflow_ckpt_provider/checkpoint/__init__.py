"""Checkpoint core: read Spark checkpoints, compute and reconcile the Kafka handover. This file
only re-exports (pure); each module's docstring says whether it is pure or reads and writes
through fsspec.

Imports neither Airflow nor Spark.
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
from airflow_ckpt_provider.checkpoint.reader import CheckpointReader, CheckpointSnapshot
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView, Reconciliation, reconcile

__all__ = [
    "EARLIEST",
    "LATEST",
    "AmbiguousSource",
    "BrokerError",
    "BrokerUnreachable",
    "BrokerView",
    "CheckpointError",
    "CheckpointNotFound",
    "CheckpointReader",
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
