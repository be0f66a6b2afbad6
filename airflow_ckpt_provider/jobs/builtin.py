"""Registers the built-in job kinds: local, Spark standalone cluster, YARN cluster."""

from __future__ import annotations

from airflow_ckpt_provider.jobs.base import register_job_kind
from airflow_ckpt_provider.jobs.local import LocalJob
from airflow_ckpt_provider.jobs.standalone import StandaloneJob
from airflow_ckpt_provider.jobs.yarn import YarnJob

for _kind in (LocalJob, StandaloneJob, YarnJob):
    register_job_kind(_kind.kind, _kind)

#: The built-in kinds by name, for launching (a handle's mode names its kind).
BUILTIN_KINDS: dict[str, type[LocalJob] | type[StandaloneJob] | type[YarnJob]] = {
    LocalJob.kind: LocalJob, StandaloneJob.kind: StandaloneJob, YarnJob.kind: YarnJob,
}
