"""``ckpt stop``: stop the query running on a checkpoint between batches, without Airflow.

Same steps as the GracefulStopOperator, waiting synchronously: write (or join) the stop
request, poll for the acknowledgement, kill the process group ``--pid`` after ``--timeout``,
then check that the checkpoint stays quiet for ``--quiet-period`` seconds.
Exit 0 graceful or escalated, 4 when no query runs (its heartbeat ended), 5 when no heartbeat
was ever written and nothing committed while watching (cannot tell whether a query runs without
GracefulStop), 2 on any failure — a query running without GracefulStop and no ``--pid`` included.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
from typing import TextIO

from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.stop import NO_HEARTBEAT_ACTION, StopOutcome, StopResult
from airflow_ckpt_provider.cli.common import (
    EXIT_NO_HEARTBEAT,
    EXIT_NOT_RUNNING,
    EXIT_OK,
    location_parent,
    storage_options,
)
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.records.control import ProcessScope
from airflow_ckpt_provider.storage.locations import open_location
from airflow_ckpt_provider.storage.stop import ControlFiles, begin_stop, finish_stop, not_running_result, wait_for_ack


def _positive(value: str) -> float:
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {value}")
    return number


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``stop`` to the ``ckpt`` parser."""
    common = location_parent("checkpoint path or URL of the running query")
    stop = sub.add_parser("stop", parents=[common], help="stop the running query between batches (acknowledged)")
    stop.add_argument("--timeout", type=_positive, default=300.0, metavar="S",
                      help="seconds to wait for the acknowledgement before escalating (default 300)")
    stop.add_argument("--quiet-period", type=_positive, default=10.0, metavar="S",
                      help="seconds the checkpoint must stay quiet after the stop (default 10)")
    stop.add_argument("--acknowledged-quiet-period", type=_positive, metavar="S",
                      help="a shorter quiet check after a clean acknowledgement (default: --quiet-period)")
    stop.add_argument("--pid", type=int, metavar="PID",
                      help="process group of a local driver to kill after the timeout")
    stop.add_argument("--poll-interval", type=_positive, default=0.5, metavar="S", help=argparse.SUPPRESS)
    stop.add_argument("--json", action="store_true", help="print the result as JSON")
    stop.set_defaults(handler=_stop)


def _print(result: StopResult, out: TextIO, as_json: bool) -> None:
    if as_json:
        out.write(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        return
    ack = result.ack or {}
    rows = [
        ("outcome", result.outcome.value + (f" ({ack.get('outcome')})" if ack else "")),
        ("last committed", "none" if result.last_committed_batch is None else str(result.last_committed_batch)),
        ("interrupted", "none" if result.interrupted_batch is None
         else f"{result.interrupted_batch} (its offsets are NOT used)"),
        ("waited", f"{result.waited_s:.1f} s"),
    ]
    if result.detail:
        rows.append(("status", result.detail))
    if result.escalation:
        rows.append(("escalation", result.escalation))
    if result.timeline:
        rows.append(("where it went", result.describe_timeline()))
    for key, value in rows:
        out.write(f"{key:<16} {value}\n")


def _stop(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from airflow_ckpt_provider.jobs import job_for, observe

    fs, path = open_location(args.path, **storage_options(args.storage_option))
    control = ControlFiles(fs, path, uri=args.path)
    handle = None
    if args.pid is not None:  # a process group on this machine, as this shell sees it
        scope = ProcessScope.current()
        handle = LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=args.path, app_name="",
                              started_at=utc_iso(), pid=args.pid, host=scope.host,
                              boot_id=scope.boot_id, pid_namespace=scope.pid_namespace)
    running = bool(handle is not None and observe(handle, control).alive)
    start = begin_stop(control, requested_by=f"ckpt stop ({getpass.getuser()}@{socket.gethostname()})",
                       timeout_s=args.timeout, launched_job_running=running)
    if start.request is None:
        result = not_running_result(control, start.heartbeat, quiet_period=args.quiet_period,
                                    poll_interval=min(args.poll_interval, 0.5))
        _print(result, out, args.json)
        if result.outcome is StopOutcome.NO_HEARTBEAT:
            err.write(f"ckpt: nothing stopped on {args.path}: {result.detail}\n"
                      f"ckpt: {NO_HEARTBEAT_ACTION}\n")
            return EXIT_NO_HEARTBEAT
        err.write(f"ckpt: no query runs on {args.path}: nothing to stop\n")
        return EXIT_NOT_RUNNING
    if not start.wrote_request:
        err.write(f"ckpt: note: joining the pending stop request {start.request.request_id}\n")
    reason, ack = wait_for_ack(control, start, start.requested_at + args.timeout, poll_interval=args.poll_interval)
    result = finish_stop(
        control, reason=reason, request_id=start.request.request_id, requested_at=start.requested_at, ack=ack,
        kill=(lambda: job_for(handle).kill()) if handle is not None else None,
        timeout_s=args.timeout, quiet_period=args.quiet_period, poll_interval=min(args.poll_interval, 0.5),
        acknowledged_quiet_period=args.acknowledged_quiet_period,
    )
    _print(result, out, args.json)
    return EXIT_NOT_RUNNING if result.outcome is StopOutcome.NOT_RUNNING else EXIT_OK
