"""``ckpt dev-stack start|stop|status``: the embedded Kafka broker for trying your own job.

``start`` runs the local KRaft broker (:class:`airflow_ckpt_provider.local.kafka.LocalKafka`,
jars from ``make jvm``) DETACHED in its own session, so it outlives the command, with its data,
log and a state file (``dev-stack.json``: process group, ports) in the work folder. It returns
once the broker answers metadata requests, creates the ``--topic``\\ s that do not exist yet and
prints the bootstrap servers and the Airflow connection to use. Started again while it runs, it
prints the same (a restart after ``stop`` reuses the port when free, so the connection stays
valid). ``status`` says whether it runs (exit 0) or not (exit 4); ``env`` prints ``export`` lines
(``KAFKA_BOOTSTRAP`` and the Airflow connection) for ``eval "$(ckpt dev-stack env)"``; ``stop``
ends its process group.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from airflow_ckpt_provider.cli.common import EXIT_ERROR, EXIT_NOT_RUNNING, EXIT_OK
from airflow_ckpt_provider.local.errors import InvalidDevStackState
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field
from airflow_ckpt_provider.storage.files import replace_file

DEFAULT_WORK = ".ckpt-dev"
STATE_FILE = "dev-stack.json"
CONN_ENV = "AIRFLOW_CONN_KAFKA_DEFAULT"
SERVERS_ENV = "KAFKA_BOOTSTRAP"


@dataclass(frozen=True)
class DevStack:
    """What ``start`` recorded (``dev-stack.json``, format 1; a file without a format number is one
    of the previous release, read as format 0): the broker's process group, ports and files."""

    pid: int
    port: int
    controller_port: int
    data_dir: str
    log_file: str

    def to_json(self) -> str:
        """The state file's text, with its format number."""
        return json.dumps(_DEV_STACK.encode(asdict(self)), indent=2) + "\n"

    @classmethod
    def from_json(cls, data: str | bytes, *, path: str = "") -> DevStack:
        """Decode a state file through its codec; :class:`InvalidDevStackState` (naming ``path``)
        when it is not one."""
        try:
            return cls(**_DEV_STACK.decode(data))
        except InvalidDevStackState as exc:
            raise InvalidDevStackState(found=exc.found, expected=exc.expected, path=path or None) from None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def connection_json(self) -> str:
        """The ``ckpt_kafka`` connection (as ``AIRFLOW_CONN_*`` JSON) for this broker."""
        return json.dumps({"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": self.bootstrap_servers}})

    def running(self) -> bool:
        from airflow_ckpt_provider.jobs.local import group_members

        return bool(group_members(self.pid))


#: :class:`DevStack`'s codec: format 1; the previous release wrote the same keys without a format number.
_DEV_STACK = Codec("dev stack state", InvalidDevStackState, {
    "pid": Field((int,)),
    "port": Field((int,)),
    "controller_port": Field((int,)),
    "data_dir": Field((str,)),
    "log_file": Field((str,)),
}, versions=(UNVERSIONED,))


def _state_path(work: Path) -> Path:
    return work / STATE_FILE


def read_state(work: Path) -> DevStack | None:
    """The recorded broker of ``work``, None when there is none (no file, or one that cannot be
    read); :class:`InvalidDevStackState` when the file is not the record ``start`` writes."""
    path = _state_path(work)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return DevStack.from_json(data, path=str(path))


def topic_spec(text: str) -> tuple[str, int]:
    """``NAME[:PARTITIONS]`` (default 1 partition) for ``--topic``."""
    name, _, count = text.partition(":")
    try:
        partitions = int(count) if count else 1
    except ValueError:
        partitions = 0
    if not name or partitions < 1:
        raise argparse.ArgumentTypeError(f"--topic expects NAME or NAME:PARTITIONS (a positive number), got {text!r}")
    return name, partitions


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``dev-stack`` to the ``ckpt`` parser."""
    stack = sub.add_parser(
        "dev-stack",
        help="start, stop or check the local Kafka broker for trying your own job",
        description="The embedded single-node Kafka broker (KRaft, jars from `make jvm`), detached, with its "
        f"data and log in a work folder (default {DEFAULT_WORK}). `start` prints the bootstrap servers and "
        "the Airflow connection to use; `status` exits 0 when it runs, 4 when not; `env` prints export lines "
        f"({SERVERS_ENV}, {CONN_ENV}) for `eval \"$(ckpt dev-stack env)\"`; `stop` stops it.",
    )
    stack.add_argument("action", choices=("start", "stop", "status", "env"))
    stack.add_argument("--work", type=Path, default=Path(DEFAULT_WORK), metavar="DIR",
                       help=f"folder of the broker's data, log and state (default {DEFAULT_WORK})")
    stack.add_argument("--port", type=int, help="broker port on 127.0.0.1 (default: a free one, kept across restarts)")
    stack.add_argument("--topic", type=topic_spec, action="append", default=[], metavar="NAME[:PARTITIONS]",
                       help="with start: create this topic unless it exists (repeatable)")
    stack.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS",
                       help="how long start waits for the broker to answer (default 180)")
    stack.set_defaults(handler=_dev_stack)


def _dev_stack(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    work = args.work.resolve()
    if args.action in ("status", "env"):
        state = read_state(work)
        running = state is not None and state.running()
        if args.action == "status":
            if state is None or not running:
                out.write(f"not running (work folder {work})\n")
                return EXIT_NOT_RUNNING
            _describe(state, out, "running")
            return EXIT_OK
        if state is None or not running:
            err.write(f"ckpt: error: the dev stack is not running (work folder {work}); "
                      "start it with `ckpt dev-stack start`\n")
            return EXIT_NOT_RUNNING
        out.write(f"export {SERVERS_ENV}={state.bootstrap_servers}\n"
                  f"export {CONN_ENV}={shlex.quote(state.connection_json())}\n")
        return EXIT_OK
    if args.action == "stop":
        return _stop(work, out)
    return _start(work, args, out, err)


def _describe(state: DevStack, out: TextIO, verb: str) -> None:
    out.write(f"Kafka broker {verb} on {state.bootstrap_servers} (process group {state.pid}; log {state.log_file})\n"
              "Airflow connection for it (the reference DAG's kafka_conn_id is kafka_default):\n"
              f"  export {CONN_ENV}={shlex.quote(state.connection_json())}\n")


def _start(work: Path, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from airflow_ckpt_provider.local.errors import LocalStackError
    from airflow_ckpt_provider.local.kafka import LocalKafka

    state = read_state(work)
    if state is not None and state.running():
        if args.port and args.port != state.port:
            err.write(f"ckpt: error: the dev stack in {work} already runs on port {state.port}, not {args.port}; "
                      "run `ckpt dev-stack stop` first to change it\n")
            return EXIT_ERROR
        _create_topics(work, state.port, args.topic, out)
        _describe(state, out, "already running")
        return EXIT_OK
    # a restart keeps the ports it had where they are free (the data and its cluster id are kept too)
    port = args.port or (state.port if state is not None and _port_free(state.port) else None)
    controller_port = state.controller_port if state is not None and _port_free(state.controller_port) else None
    broker = LocalKafka(work / "kafka", port=port, controller_port=controller_port, startup_timeout=args.timeout)
    try:
        broker.start()  # detached: its own session; stopped again if it does not come up
    except LocalStackError as exc:
        err.write(f"ckpt: error: {exc}\n")
        return EXIT_ERROR
    assert broker._process is not None
    state = DevStack(pid=broker._process.pid, port=broker.port, controller_port=broker.controller_port,
                     data_dir=str(broker.work_dir / "data"), log_file=str(broker.log_file))
    replace_file(str(_state_path(work)), state.to_json().encode())  # whole or absent: it is read strictly
    _create_topics(work, state.port, args.topic, out)
    _describe(state, out, "started")
    return EXIT_OK


def _port_free(port: int) -> bool:
    from airflow_ckpt_provider.local.errors import PortInUse
    from airflow_ckpt_provider.local.processes import ensure_port_free

    try:
        ensure_port_free(port, "Kafka broker listener")
    except PortInUse:
        return False
    return True


def _create_topics(work: Path, port: int, topics: list[tuple[str, int]], out: TextIO) -> None:
    from airflow_ckpt_provider.local.kafka import LocalKafka

    if not topics:
        return
    broker = LocalKafka(work / "kafka", port=port)  # not started: its topic helpers, for the running broker
    admin = broker.admin()
    try:
        existing = set(admin.list_topics())
    finally:
        admin.close()
    for name, partitions in topics:
        if name in existing:
            out.write(f"topic {name} exists already\n")
        else:
            broker.create_topic(name, partitions)
            out.write(f"topic {name} created with {partitions} partition(s)\n")


def _stop(work: Path, out: TextIO) -> int:
    from airflow_ckpt_provider.jobs.local import kill_group

    state = read_state(work)
    if state is None or not state.running():
        out.write(f"not running (work folder {work}): nothing to stop\n")
        return EXIT_OK
    logging.getLogger(__name__).info("stopping the Kafka broker, process group %d", state.pid)
    done = kill_group(state.pid, term_timeout=60.0, kill_timeout=30.0)
    out.write(f"stopped the Kafka broker on {state.bootstrap_servers} ({done}); data kept in {state.data_dir}\n")
    return EXIT_OK
