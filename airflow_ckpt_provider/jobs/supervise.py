"""Supervisor of a local driver: runs spark-submit and records its state in the checkpoint.

``python -m airflow_ckpt_provider.jobs.supervise --checkpoint URI --launch-id ID --log PATH -- <spark-submit ...>``

:class:`~airflow_ckpt_provider.jobs.local.LocalJob` starts this process in a new session (its
process group is the job: the supervisor, spark-submit, the JVM and the Python driver) with its
output going to the driver log. It starts the command, writes ``_ckpt/driver.json``
(:class:`~airflow_ckpt_provider.records.control.DriverRecord`) through the checkpoint's storage,
state ``running``, refreshed every ``--interval`` seconds, and once the command ends, state
``exited`` with its exit code and the last lines of the log (secrets redacted). So any process
that can read the checkpoint — a triggerer in another container or PID namespace, a worker on
another host — can tell whether the driver lives and why it ended, without seeing its pid.

On SIGTERM or SIGINT (a kill of the process group reaches the command as well) it keeps waiting
for the command to end, then records the exit. SIGKILL ends it with the group: the record then
stops being refreshed, which readers take as dead after a few intervals. A failing record write
is logged and retried at the next interval; it never stops the driver. fsspec storage options of
the checkpoint come from the environment variable ``CKPT_STORAGE_OPTIONS`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

DEFAULT_INTERVAL_S = 5.0
LOG_TAIL_LINES = 40

log = logging.getLogger("airflow_ckpt_provider.supervise")


def _control(checkpoint: str) -> Any:  # noqa: ANN401 - ControlFiles, imported late
    from airflow_ckpt_provider.jobs.base import STORAGE_OPTIONS_ENV
    from airflow_ckpt_provider.storage.locations import open_location
    from airflow_ckpt_provider.storage.stop import ControlFiles

    options = json.loads(os.environ.get(STORAGE_OPTIONS_ENV) or "{}")
    fs, path = open_location(checkpoint, **options)
    return ControlFiles(fs, path, uri=checkpoint)


def supervise(command: Sequence[str], *, checkpoint: str, launch_id: str, log_path: str,
              interval_s: float = DEFAULT_INTERVAL_S) -> int:
    """Run ``command`` to its end, recording it in ``checkpoint``; returns its exit code."""
    from airflow_ckpt_provider.clock import utc_iso
    from airflow_ckpt_provider.jobs.base import tail_file
    from airflow_ckpt_provider.records.control import DRIVER, DriverRecord, DriverStatus, ProcessScope

    def utc_now() -> str:
        return utc_iso(timespec="milliseconds")

    ended = threading.Event()
    signals: list[int] = []

    def note_signal(number: int, _frame: object) -> None:
        signals.append(number)  # the command got it too (same process group); wait for its end

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, note_signal)
    control = _control(checkpoint)
    scope = ProcessScope.current()
    now = utc_now()
    record = DriverRecord(launch_id=launch_id, state=DriverStatus.RUNNING, pid=os.getpgrp(), started_at=now,
                          updated_at=now, interval_s=interval_s, host=scope.host, boot_id=scope.boot_id,
                          pid_namespace=scope.pid_namespace)
    lock = threading.Lock()

    def write(current: DriverRecord) -> None:
        with lock:
            try:
                control.write_record(DRIVER, current.to_json().encode())
            except Exception as exc:  # noqa: BLE001 - never let the record stop the driver
                log.warning("could not record the driver state in %s: %s", checkpoint, exc)

    try:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL)
    except OSError as exc:
        write(replace(record, state=DriverStatus.EXITED, exit_code=127, ended_at=utc_now(), updated_at=utc_now(),
                      log_tail=f"{command[0]} could not start ({exc})"))
        log.error("%s could not start: %s", command[0], exc)
        return 127
    write(record)

    def refresh() -> None:
        while not ended.wait(interval_s):
            write(replace(record, updated_at=utc_now()))

    beats = threading.Thread(target=refresh, name="driver-record", daemon=True)
    beats.start()
    while True:
        try:
            code = process.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries wait() itself
            continue
    ended.set()
    beats.join()
    sys.stdout.flush()
    tail = tail_file(log_path, LOG_TAIL_LINES)
    write(replace(record, state=DriverStatus.EXITED, exit_code=code, ended_at=utc_now(), updated_at=utc_now(),
                  log_tail=tail))
    if signals:
        log.info("driver ended with exit code %d after signal %s", code, ", ".join(map(str, signals)))
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_ckpt_provider.jobs.supervise",
                                     description="run a local Spark driver and record its state in its checkpoint")
    parser.add_argument("--checkpoint", required=True, help="the job's checkpoint path or URL")
    parser.add_argument("--launch-id", required=True)
    parser.add_argument("--log", required=True, help="the driver log (this process's output)")
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL_S, help="seconds between refreshes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- spark-submit ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s ckpt-supervisor %(levelname)s %(message)s")
    return supervise(command, checkpoint=args.checkpoint, launch_id=args.launch_id, log_path=args.log,
                     interval_s=args.interval)


if __name__ == "__main__":
    sys.exit(main())
