"""Errors of the embedded local stack (``ckpt dev-stack``, ``make jvm``, ``make spark35``): Java and
Maven missing, jars not fetched, versions that do not match, a taken port, a broker that did not
come up; pure (no I/O).

They are :class:`~airflow_ckpt_provider.checkpoint.errors.ProviderError` s like every error of the
provider (same fields, same one-line reading, they pickle), on their own branch,
:class:`LocalStackError` (a ``RuntimeError``, not a ``CheckpointError``), which is raised only
after anything the failing step started has been stopped again (also the local Airflow home's:
:class:`AirflowHomeError`, :class:`DagNotFound`). The test harness's errors
(``tests/harness/errors.py``) join this branch.
"""

from __future__ import annotations

from airflow_ckpt_provider.checkpoint.errors import ProviderError


class LocalStackError(ProviderError, RuntimeError):
    """The local stack could not be set up or started."""

    summary = "local stack error"
    default_action = "Nothing was left running; fix the cause and retry."


class ToolMissing(LocalStackError):
    """A required command line tool (java, mvn) is not on PATH or does not run."""

    summary = "required tool missing"


class JarsMissing(LocalStackError):
    """The Maven-resolved jars of a component are not in the JVM folder."""

    summary = "JVM jars missing"


class VersionMismatch(LocalStackError):
    """The pinned JVM artifacts do not match the installed Python packages."""

    summary = "version mismatch"


class SparkNotInstalled(LocalStackError):
    """A Spark version the local stack runs (its own virtualenv) is not installed."""

    summary = "Spark version not installed"
    default_action = ("Run `make spark35` or `make spark40` "
                      "(`python -m airflow_ckpt_provider.local.spark install 3.5|4.0`).")


class PortInUse(LocalStackError):
    """A requested TCP port on 127.0.0.1 is already taken."""

    summary = "port already in use"


class BrokerStartFailed(LocalStackError):
    """The Kafka broker exited or did not answer metadata requests in time."""

    summary = "Kafka broker did not come up"


class InvalidDevStackState(LocalStackError, ValueError):
    """The dev stack's state file (``dev-stack.json``) is not the record ``ckpt dev-stack start`` writes."""

    summary = "dev stack state file unreadable"
    default_action = ("Nothing was started or stopped. A broker started with it may still run (its log is in the "
                      "work folder's kafka/ folder): stop it by hand if so, delete the file, then run "
                      "`ckpt dev-stack start` again.")


class AirflowHomeError(LocalStackError):
    """The Airflow home could not be prepared (``airflow db migrate`` failed)."""

    summary = "Airflow home not ready"


class DagNotFound(LocalStackError):
    """A DAG file could not be imported, or does not define the DAG asked for."""

    summary = "DAG not found"
