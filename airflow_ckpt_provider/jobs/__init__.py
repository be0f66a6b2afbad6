"""Launched jobs, whatever runs their driver: one protocol, one state vocabulary, one liveness rule.

* :class:`LaunchedJob` — launch, state, log tail, kill; implemented by :class:`LocalJob`,
  :class:`StandaloneJob` and :class:`YarnJob`, and for adopted jobs :class:`KubernetesJob` and
  :class:`ExternalJob`; more kinds through :func:`register_job_kind`;
* :class:`DriverState` — the states every kind reports in the same words;
* :func:`judge_liveness` — whether a launched job lives, from what works wherever the asking
  process runs: the job's records in its checkpoint (the driver record a local launch's
  supervisor writes, the query's heartbeat) and what the kind can ask remotely (the standalone
  master, the YARN ResourceManager); a process id only from the scope that launched it.
"""

from __future__ import annotations

from airflow_ckpt_provider.jobs.base import (
    DriverState,
    JobOptions,
    LaunchedJob,
    SubmitRequest,
    UnknownJobKind,
    job_for,
    register_job_kind,
)
from airflow_ckpt_provider.jobs.external import ExternalJob
from airflow_ckpt_provider.jobs.kubernetes import KubernetesJob
from airflow_ckpt_provider.jobs.liveness import Liveness, judge_liveness, observe
from airflow_ckpt_provider.jobs.local import LocalJob
from airflow_ckpt_provider.jobs.standalone import StandaloneJob
from airflow_ckpt_provider.jobs.yarn import YarnJob

__all__ = [
    "DriverState",
    "ExternalJob",
    "JobOptions",
    "KubernetesJob",
    "LaunchedJob",
    "Liveness",
    "LocalJob",
    "StandaloneJob",
    "SubmitRequest",
    "UnknownJobKind",
    "YarnJob",
    "job_for",
    "judge_liveness",
    "observe",
    "register_job_kind",
]
