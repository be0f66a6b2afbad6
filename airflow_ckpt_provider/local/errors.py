"""Typed errors of the embedded local stack (Java, Maven, Kafka broker, Spark, Airflow home).

Each error says what was found, what was expected and what to do, and is raised only after
anything the failing step started has been stopped again.
"""

from __future__ import annotations


class LocalStackError(RuntimeError):
    """The local stack could not be set up or started."""

    summary = "local stack error"

    def __init__(self, *, found: str, expected: str, action: str, detail: str = "") -> None:
        self.found = found
        self.expected = expected
        self.action = action
        self.detail = detail
        message = f"{self.summary}: found {found}; expected {expected}. {action}"
        if detail:
            message += f"\n{detail}"
        super().__init__(message)


class ToolMissing(LocalStackError):
    """A required command line tool (java, mvn) is not on PATH or does not run."""

    summary = "required tool missing"


class JarsMissing(LocalStackError):
    """The Maven-resolved jars of a component are not in the JVM folder."""

    summary = "JVM jars missing"


class VersionMismatch(LocalStackError):
    """The pinned JVM artifacts do not match the installed Python packages."""

    summary = "version mismatch"


class PortInUse(LocalStackError):
    """A requested TCP port on 127.0.0.1 is already taken."""

    summary = "port already in use"


class BrokerStartFailed(LocalStackError):
    """The Kafka broker exited or did not answer metadata requests in time."""

    summary = "Kafka broker did not come up"


class AirflowHomeError(LocalStackError):
    """The Airflow home could not be prepared (``airflow db migrate`` failed)."""

    summary = "Airflow home not ready"


class AirflowApiError(LocalStackError):
    """The Airflow REST API answered a call with a status the caller did not expect.

    ``status`` is the HTTP status, or None when there was no answer at all.
    """

    summary = "Airflow REST API call failed"

    def __init__(self, *, found: str, expected: str, action: str, detail: str = "",
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
