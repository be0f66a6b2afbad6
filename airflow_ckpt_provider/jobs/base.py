"""The contract every kind of launched job implements, its states, and the registry of kinds.

A *job kind* knows how a driver runs somewhere (a detached process on this machine, a Spark
standalone cluster, YARN; a team can add Kubernetes or Databricks): how to submit it, ask its
state, read the tail of its log and kill it. Everything else in the provider talks to
:class:`LaunchedJob` and :class:`DriverState` only, and knows a job by its
:class:`~airflow_ckpt_provider.checkpoint.launch.LaunchHandle` (JSON in XCom, the journal and
trigger events).

No Airflow import: the ``ckpt`` command line uses this package too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from airflow_ckpt_provider.checkpoint.errors import UnknownJobKind
from airflow_ckpt_provider.checkpoint.launch import DriverState, LaunchHandle
from airflow_ckpt_provider.checkpoint.secrets import redact_text

#: Entry-point group through which installed packages register more job kinds.
ENTRY_POINT_GROUP = "airflow_ckpt_provider.job_kinds"
#: Environment variable carrying the checkpoint storage's fsspec options (JSON) to a supervisor.
STORAGE_OPTIONS_ENV = "CKPT_STORAGE_OPTIONS"

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class SubmitRequest:
    """One launch: the spark-submit argument list (never a shell) and where it goes.

    ``log_path`` receives spark-submit's output (a local driver's whole log), created owner-only.
    ``storage_options`` are the fsspec options of the checkpoint's storage (for the local
    driver's supervisor, which records the driver's state in the checkpoint); ``launch_id`` names
    this launch there (the caller notes it before submitting, so a re-run can find the job).
    """

    command: Sequence[str]
    env: Mapping[str, str]
    log_path: Path
    checkpoint_uri: str
    app_name: str
    master: str
    started_at: str
    submit_timeout: float = 300.0
    ui_url: str | None = None
    master_ui_url: str | None = None
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    launch_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(frozen=True)
class JobOptions:
    """How to reach a job's cluster manager from here: environment for the commands run
    (``SPARK_HOME``, ``HADOOP_CONF_DIR``), their timeout, the runner (tests inject one), and
    ``cluster``: the cluster manager's endpoints, over what the handle's ``extra`` says (a
    connection's settings win) — ``rm_url`` (YARN ResourceManager web URLs, comma-separated) and
    ``user`` (a YARN kill's ``user.name``); ``api_server``, ``token_file`` (a path: the token is
    read from it, never recorded) and ``ca_file`` (Kubernetes). No secret goes in here."""

    env: Mapping[str, str] = field(default_factory=dict)
    command_timeout: float = 120.0
    runner: Runner = subprocess.run
    cluster: Mapping[str, str] = field(default_factory=dict)

    def endpoint(self, handle: LaunchHandle, key: str) -> str:
        """``cluster[key]``, else the handle's ``extra[key]``, else ""."""
        return str(self.cluster.get(key) or handle.extra.get(key) or "")


@runtime_checkable
class LaunchedJob(Protocol):
    """A launched streaming job of one kind. Implement this to add a kind (see docs "Jobs").

    * :meth:`launch` submits a :class:`SubmitRequest` and returns at once with the job; it raises
      :class:`~airflow_ckpt_provider.checkpoint.errors.LaunchFailed` (with the output tail) when
      the submission itself fails;
    * :meth:`state` asks where the driver runs; it never guesses: :attr:`DriverState.UNKNOWN`
      when this process cannot tell (the provider then judges by the job's heartbeat in the
      checkpoint, see :mod:`airflow_ckpt_provider.jobs.liveness`);
    * :meth:`log_tail` returns the last lines of the driver log, secrets redacted ("" if none);
    * :meth:`kill` ends the job and says what it did; raises
      :class:`~airflow_ckpt_provider.checkpoint.errors.EscalationFailed` when it cannot (for
      example a local process seen from another host: it never signals a pid it cannot see).
    """

    kind: ClassVar[str]
    handle: LaunchHandle

    @classmethod
    def launch(cls, request: SubmitRequest, options: JobOptions | None = None) -> LaunchedJob: ...

    def state(self) -> DriverState: ...

    def log_tail(self, lines: int = 50) -> str: ...

    def kill(self, *, timeout: float = 60.0) -> str: ...


class JobOfKind:
    """Base of the built-in kinds: holds the handle (refusing one of another kind) and options."""

    kind: ClassVar[str]

    def __init__(self, handle: LaunchHandle, options: JobOptions | None = None) -> None:
        if handle.kind != self.kind:
            raise ValueError(f"not a {self.kind} handle: {handle.kind}")
        self.handle = handle
        self.options = options or JobOptions()


_KINDS: dict[str, Callable[[LaunchHandle, JobOptions], LaunchedJob]] = {}


def register_job_kind(kind: str, factory: Callable[[LaunchHandle, JobOptions], LaunchedJob]) -> None:
    """Make ``kind`` (a handle's ``mode``) known; ``factory(handle, options)`` builds its job."""
    _KINDS[kind] = factory


def job_for(handle: LaunchHandle, options: JobOptions | None = None) -> LaunchedJob:
    """The :class:`LaunchedJob` that follows ``handle``; :class:`UnknownJobKind` if none is
    registered for its mode (built-in kinds, then the entry-point group)."""
    from airflow_ckpt_provider.jobs import builtin  # noqa: F401 - registers the built-in kinds

    factory = _KINDS.get(handle.kind)
    if factory is None:
        for point in entry_points(group=ENTRY_POINT_GROUP):
            if point.name == handle.kind:
                register_job_kind(point.name, point.load())
                factory = _KINDS[point.name]
    if factory is None:
        raise UnknownJobKind(found=f"job kind {handle.kind!r}", expected=f"one of {', '.join(sorted(_KINDS))}")
    return factory(handle, options or JobOptions())


# -- small helpers shared by the kinds ---------------------------------------------------------


def tail_text(text: str, lines: int) -> str:
    """The last ``lines`` lines of ``text``, secrets redacted (a tail is shown in logs and errors)."""
    return redact_text("\n".join(text.splitlines()[-lines:])) if lines > 0 else ""


def tail_file(path: str | None, lines: int, max_bytes: int = 256_000) -> str:
    """The last ``lines`` lines of the file at ``path`` (its last ``max_bytes``), redacted; "" when
    there is no such file here."""
    if not path:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            return tail_text(handle.read().decode("utf-8", errors="replace"), lines)
    except OSError:
        return ""


def resolve_binary(name: str, env: Mapping[str, str] | None = None, homes: Sequence[str] = ("SPARK_HOME",)) -> str:
    """An absolute path for the command ``name``: as given if it is a path, else on PATH, beside
    this interpreter (a virtualenv's bin/), in ``$<home>/bin`` for each of ``homes``, or in
    pyspark's own bin/; ``name`` itself when none is executable."""
    if os.sep in name:
        return name
    environ = {**os.environ, **(env or {})}
    candidates = [shutil.which(name, path=environ.get("PATH")), str(Path(sys.executable).parent / name)]
    candidates += [str(Path(environ[home]) / "bin" / name) for home in homes if environ.get(home)]
    if "SPARK_HOME" in homes:
        try:
            import pyspark

            candidates.append(str(Path(pyspark.__file__).parent / "bin" / name))
        except ImportError:
            pass
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return name


def run_command(command: Sequence[str], options: JobOptions, *, what: str) -> subprocess.CompletedProcess[str]:
    """Run a cluster-manager command (argument list) with the job options' environment and
    timeout; raises ``OSError`` when it cannot start or times out (callers turn that into their
    own typed error)."""
    env = {**os.environ, **options.env}
    try:
        return options.runner(list(command), capture_output=True, text=True, timeout=options.command_timeout,
                              check=False, env=env)
    except subprocess.TimeoutExpired:
        raise OSError(f"{what}: {command[0]} still running after {options.command_timeout:g} s") from None


__all__ = [
    "DriverState",
    "JobOfKind",
    "JobOptions",
    "LaunchedJob",
    "Runner",
    "SubmitRequest",
    "UnknownJobKind",
    "job_for",
    "register_job_kind",
    "resolve_binary",
    "run_command",
    "tail_file",
    "tail_text",
]
