"""``ckpt check-upgrade``: does a new version need a new checkpoint, and will it start? Trial runs
of the new version on copies of the old checkpoint (:mod:`airflow_ckpt_provider.hooks.compat`);
the old checkpoint, the Kafka consumer groups and the live sinks are not touched."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from airflow_ckpt_provider.cli.common import EXIT_DOES_NOT_START, EXIT_OK, storage_options


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``check-upgrade`` to the ``ckpt`` parser."""
    check = sub.add_parser(
        "check-upgrade", help="try a new version on copies of the old checkpoint: in place OK, or why a new one",
        description="Run the new version twice on copies, never on the live checkpoint: in place (resuming a copy of "
        "the old checkpoint) and migrated (an empty checkpoint at the handover, with the old query's state "
        "unless --no-state), each for --batches batches with its "
        "output redirected to the trial location, then delete the copies. Prints the verdict: in place OK (a plain "
        "restart will do), or the rule of Spark's table that needs a new checkpoint with the operator and the schemas "
        "on both sides, and whether the new version starts at all. Settings Spark fixes for a checkpoint's life "
        "(state checkpoint format, state encoding, row checksums, source evolution, real-time mode) are judged from "
        "the old checkpoint and --conf first; one that needs a new checkpoint skips the in-place trial. "
        "Exit 0 with a verdict, 6 when the new version "
        "does not start, 2 when a trial is refused (job without the trial contract, trial location overlapping a "
        "live one).")
    check.add_argument("--old", required=True, metavar="CHECKPOINT", help="the running (old) version's checkpoint")
    check.add_argument("--new-application", required=True, metavar="APP", help="the new version (.py or jar)")
    check.add_argument("--master", default="local[2]", help="spark-submit --master of the trials (default local[2])")
    check.add_argument("--spark-home", help="the Spark that runs the trials (default: SPARK_HOME, else pyspark's)")
    check.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="Spark conf of the trials (repeatable)")
    check.add_argument("--trial-location", help="where the trials run (default: a new local temporary folder)")
    check.add_argument("--live", action="append", default=[], metavar="URI",
                       help="another location the live job uses (sink, new checkpoint): the trial location must not "
                            "overlap it (repeatable)")
    check.add_argument("--batches", type=int, default=2, help="batches per trial (default 2)")
    check.add_argument("--timeout", type=float, default=600.0, help="seconds a trial may run (default 600)")
    check.add_argument("--no-migrated", action="store_true", help="only the in-place trial")
    check.add_argument("--source", help="Kafka source index or name of the migrated trial's start (default: the "
                                        "only Kafka source, as the handover requires)")
    check.add_argument("--no-state", action="store_true",
                       help="the migrated trial starts with empty state (default: a stateful old query's state, "
                            "exported from the copy, as the upgrade carries it)")
    check.add_argument("--real-time", action="store_true",
                       help="the new version runs with trigger(realTime=...) (judged with the settings Spark fixes "
                            "for a checkpoint's life, before any trial)")
    check.add_argument("--json", action="store_true", help="print the verdict as JSON")
    check.add_argument("-o", "--storage-option", action="append", default=[], metavar="KEY=VALUE",
                       help="fsspec storage option for the checkpoint and the trial location (repeatable)")
    check.set_defaults(handler=_check, app_args=[])  # the new version's arguments: what follows `--`


def _check(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from airflow_ckpt_provider.cli.state import _conf
    from airflow_ckpt_provider.hooks.compat import check_upgrade
    from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
    from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook

    verdict = check_upgrade(
        old_checkpoint=args.old, new_application=args.new_application, application_args=list(args.app_args or ()),
        launcher=SparkLauncherHook(master=args.master, spark_home=args.spark_home or None),
        conf=_conf(args.conf), storage=CheckpointStorageHook(**storage_options(args.storage_option)),
        trial_root=args.trial_location, live_locations={f"live location {i + 1}": u for i, u in enumerate(args.live)},
        batches=args.batches, timeout=args.timeout, migrated=not args.no_migrated,
        carry_state=not args.no_state, source=args.source, real_time=args.real_time)
    if args.json:
        out.write(json.dumps(verdict.to_dict(), indent=1, sort_keys=True) + "\n")
    else:
        out.writelines(f"{line}\n" for line in verdict.describe())
        if not verdict.new_version_starts and verdict.log_tail:
            out.write("--- driver log tail ---\n" + verdict.log_tail.rstrip() + "\n")
    return EXIT_OK if verdict.new_version_starts else EXIT_DOES_NOT_START
