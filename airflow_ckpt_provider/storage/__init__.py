"""The storage layer: everything that lists, reads, writes, copies or locks files of a checkpoint,
an archive, a journal or a state export through an fsspec filesystem (the one the caller passes
in, or :func:`~airflow_ckpt_provider.storage.locations.open_location` for a URL), and the local
disk where it must (fsync, private modes). It imports the pure core
(:mod:`airflow_ckpt_provider.checkpoint`) for what it reads and decides, fsspec, and of the driver
side only the control-file protocol (:mod:`airflow_ckpt_provider.records.control`); never Airflow,
Spark or a Kafka client. This file only re-exports.
"""

from __future__ import annotations

from airflow_ckpt_provider.storage.reader import CheckpointReader

__all__ = ["CheckpointReader"]
