"""Typed errors of the test harness's servers (Airflow standalone, Spark standalone, HDFS); the
local Airflow home's own (:class:`~airflow_ckpt_provider.local.errors.AirflowHomeError`) is the package's.

They belong to the local stack's family (:class:`LocalStackError`, a ``RuntimeError``) and read
like every error of the provider (what was found, what was expected, what to do), but only the
harness raises them, so they live here, outside the package.
"""

from __future__ import annotations

from airflow_ckpt_provider.local.errors import LocalStackError


class HdfsStartFailed(LocalStackError):
    """The local HDFS NameNode or DataNode exited, or WebHDFS did not take a write in time."""

    summary = "HDFS did not come up"


class YarnStartFailed(LocalStackError):
    """The local YARN ResourceManager or NodeManager exited, or no node registered in time."""

    summary = "YARN did not come up"


class StandaloneStartFailed(LocalStackError):
    """The Spark standalone master or worker exited or did not register in time."""

    summary = "Spark standalone cluster did not come up"


class AirflowApiError(LocalStackError):
    """The Airflow REST API answered a call with a status the caller did not expect.

    ``status`` is the HTTP status, or None when there was no answer at all.
    """

    summary = "Airflow REST API call failed"

    def __init__(self, *, found: str, expected: str, action: str | None = None, detail: str = "",
                 status: int | None = None) -> None:
        self.status = status
        super().__init__(found=found, expected=expected, action=action, detail=detail)


class AirflowApiUnavailable(AirflowApiError):
    """The Airflow REST API did not answer (timeouts, refused connections, 5xx) before the deadline,
    or a call that must not be repeated blindly got no usable answer."""

    summary = "Airflow REST API did not answer"


class PidNamespaceUnavailable(LocalStackError):
    """A component cannot run in its own PID namespace: ``unshare`` is missing or not permitted."""

    summary = "cannot start a process in its own PID namespace"
