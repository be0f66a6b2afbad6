"""Registers the built-in job kinds: local, Spark standalone cluster, YARN cluster (launched and
adopted), and the kinds only adopted: a Kubernetes driver pod, an external job a person stops."""

from __future__ import annotations

from airflow_ckpt_provider.jobs.base import register_job_kind
from airflow_ckpt_provider.jobs.external import ExternalJob
from airflow_ckpt_provider.jobs.kubernetes import KubernetesJob
from airflow_ckpt_provider.jobs.local import LocalJob
from airflow_ckpt_provider.jobs.standalone import StandaloneJob
from airflow_ckpt_provider.jobs.yarn import YarnJob

for _kind in (LocalJob, StandaloneJob, YarnJob, KubernetesJob, ExternalJob):
    register_job_kind(_kind.kind, _kind)

#: The built-in kinds the provider launches, by name (a handle's mode names its kind).
BUILTIN_KINDS: dict[str, type[LocalJob] | type[StandaloneJob] | type[YarnJob]] = {
    LocalJob.kind: LocalJob, StandaloneJob.kind: StandaloneJob, YarnJob.kind: YarnJob,
}
