"""``ckpt launch``: start a streaming job detached, wait for its first commit, print its handle.

The job goes through the provider's launcher (:class:`SparkLauncherHook`, the same detached
spark-submit the reference DAG uses) with the driver settings a local run needs: on a ``local``
master the conf of :func:`airflow_ckpt_provider.local.spark.local_spark_conf` (the Maven-resolved
Kafka connector, loopback, small machine settings) and ``spark.pyspark.python`` = this interpreter,
so the driver imports the provider; ``--conf`` wins over both. The wait is the launch trigger's
(:class:`LaunchTrigger`): the checkpoint's ``commits/`` and the job's liveness. On success the
handle JSON goes to stdout (the reference DAG's ``old_launch_handle``) and the driver log path to
stderr. A job that dies first is a :class:`LaunchFailed` with its log tail; no commit within
``--timeout`` kills it (:class:`FirstCommitTimeout`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from airflow_ckpt_provider.checkpoint.errors import FirstCommitTimeout, LaunchFailed
from airflow_ckpt_provider.cli.common import EXIT_OK

if TYPE_CHECKING:
    from airflow_ckpt_provider.triggers.launch import LaunchTrigger, LaunchTriggerEvent

DEFAULT_MASTER = "local[2]"
DEFAULT_TIMEOUT_S = 900.0


def conf_pair(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` for ``--conf``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--conf expects KEY=VALUE, got {text!r}")
    return key, value


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``launch`` to the ``ckpt`` parser."""
    launch = sub.add_parser(
        "launch",
        help="start a streaming job detached and wait for its first committed batch",
        usage="ckpt launch APPLICATION --checkpoint PATH [options] [-- APP_ARGS ...]",
        description="spark-submit APPLICATION detached (client mode) on --checkpoint, the way the reference DAG "
        "launches versions: the checkpoint and --starting-offsets reach the job as spark.ckpt.* conf "
        "(read them with airflow_ckpt_provider.spark.read_kafka / checkpoint_location). On a local master it "
        "adds the Kafka connector jars (`make jvm`) and spark.pyspark.python = this Python. Waits for a new "
        "committed batch, then prints the launch handle JSON (for the DAG's old_launch_handle) on stdout and "
        "the driver log path on stderr. Exit 2 with the driver's log tail when it dies first, or after "
        "--timeout (the job is killed).",
    )
    launch.add_argument("application", help="the job's .py file (or jar); the job's own arguments follow a `--`")
    launch.add_argument("--checkpoint", required=True, metavar="PATH", help="the query's checkpoint path or URL")
    launch.add_argument("--starting-offsets", metavar="JSON",
                        help='startingOffsets for a fresh checkpoint: "earliest", "latest" or offsets JSON')
    launch.add_argument("--conf", type=conf_pair, action="append", default=[], metavar="KEY=VALUE",
                        help="Spark conf (repeatable); wins over the defaults, except spark.jars: added to the "
                             "Kafka connector's on a local master")
    launch.add_argument("--master", default=DEFAULT_MASTER, help=f"spark-submit --master (default {DEFAULT_MASTER})")
    launch.add_argument("--name", help="application name (default: the file name without extension)")
    launch.add_argument("--spark-binary", metavar="PATH",
                        help="spark-submit to use (default: on PATH, beside this Python, $SPARK_HOME/bin or pyspark's)")
    launch.add_argument("--log-dir", metavar="DIR",
                        help="folder of the driver log (default: $TMPDIR/airflow-ckpt-launch)")
    launch.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"wait this long for the first commit (default {DEFAULT_TIMEOUT_S:g})")
    launch.set_defaults(handler=_launch, app_args=[])  # filled from what follows `--` (cli.parse_args)


def launch_conf(master: str, overrides: list[tuple[str, str]], name: str) -> dict[str, str]:
    """The Spark conf of a ``ckpt launch``: local defaults on a ``local`` master, the driver's Python,
    then ``overrides`` — except that ``spark.jars`` given there (Delta's, for example) are ADDED to
    the Kafka connector's, which the job needs as much. :class:`JarsMissing` on a local master
    before ``make jvm``."""
    if not master.startswith("local"):
        return dict(overrides)
    from airflow_ckpt_provider.local.spark import local_spark_conf

    conf = local_spark_conf(name, master=master, extra=dict(overrides))
    conf.pop("spark.app.name")
    conf.pop("spark.master")
    conf.setdefault("spark.pyspark.python", sys.executable)
    return conf


def _checkpoint_uri(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


def _launch(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    # Airflow's logging (the hooks log through it) prints to stdout: keep stdout for the handle
    with contextlib.redirect_stdout(err):
        handle = _launch_and_wait(args, err)
    out.write(handle + "\n")
    return EXIT_OK


def _launch_and_wait(args: argparse.Namespace, err: TextIO) -> str:
    """Launch, wait; the handle JSON once committed, else the typed error (see the module doc)."""
    from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
    from airflow_ckpt_provider.storage.locations import open_location
    from airflow_ckpt_provider.triggers.launch import LaunchEvent, LaunchTrigger, committed_batches

    application = args.application if "://" in args.application else os.path.abspath(args.application)
    name = args.name or Path(args.application).stem
    checkpoint = _checkpoint_uri(args.checkpoint)
    conf = launch_conf(args.master, args.conf, name)
    fs, root = open_location(checkpoint)
    before = committed_batches(fs, root)
    hook = SparkLauncherHook(master=args.master, deploy_mode="client", log_dir=args.log_dir,
                             spark_binary=args.spark_binary)
    handle = hook.launch(application, checkpoint_uri=checkpoint, application_args=args.app_args, conf=conf,
                         name=name, starting_offsets=args.starting_offsets)
    err.write(f"launched {name} (process group {handle.pid}); driver log {handle.log_path}\n"
              f"waiting up to {args.timeout:g} s for a committed batch in {checkpoint}/commits ...\n")
    trigger = LaunchTrigger(checkpoint, deadline=time.time() + args.timeout, handle=handle.to_dict(),
                            min_batch=(before[-1] + 1) if before else 0, poll_interval=2.0)
    fired = asyncio.run(_first_event(trigger))
    if fired.reason is LaunchEvent.COMMITTED:
        err.write(f"{name} committed batch {fired.batch} after {fired.waited_s:.0f} s and keeps running; "
                  f"driver log {handle.log_path}\n")
        return handle.to_json()
    if fired.reason is LaunchEvent.DIED:
        raise LaunchFailed(found=f"the driver ended ({fired.state.value}: {fired.evidence}) before committing a batch",
                           expected=f"a committed batch in {checkpoint}/commits",
                           log_tail=fired.log_tail or hook.log_tail(handle, 60), path=handle.log_path)
    done = hook.kill(handle)
    raise FirstCommitTimeout(found=f"no new commits/N after {fired.waited_s:.0f} s (job {fired.state.value}: "
                                   f"{fired.evidence}); {done}",
                             expected=f"a committed batch within {args.timeout:g} s", path=checkpoint,
                             action=f"Read the driver log {handle.log_path}. A Kafka query commits its first "
                                    "batch once the topic has records; produce some, or raise --timeout.")


async def _first_event(trigger: LaunchTrigger) -> LaunchTriggerEvent:
    from airflow_ckpt_provider.triggers.launch import LaunchTriggerEvent

    async for event in trigger.run():
        return LaunchTriggerEvent.from_json(event.payload)
    raise RuntimeError("the launch trigger ended without an event")  # pragma: no cover - it always fires one

