"""``ckpt journal``: the upgrade journals of a stream, and the escape hatch for its lock."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from airflow_ckpt_provider.checkpoint.errors import shorten
from airflow_ckpt_provider.checkpoint.manifest import check_name
from airflow_ckpt_provider.cli.common import EXIT_OK, location_parent, storage_options
from airflow_ckpt_provider.storage.journal import LOCK, UpgradeJournal, list_journals, read_lock
from airflow_ckpt_provider.storage.locations import open_location


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``ckpt journal`` to the ``ckpt`` parser."""
    parser = sub.add_parser(
        "journal", parents=[location_parent("archive root (path or URL) holding STREAM/_upgrades/")],
        help="show a stream's upgrade journals and lock; --release-lock frees an abandoned upgrade's lock")
    parser.add_argument("--name", required=True, help="stream name")
    parser.add_argument("--json", action="store_true", help="print the journals as JSON")
    parser.add_argument("--release-lock", action="store_true",
                        help="remove the stream's lock (only after checking both checkpoints by hand)")
    parser.set_defaults(handler=_journal)


def _journal(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    stream = check_name(args.name)
    fs, root = open_location(args.path, **storage_options(args.storage_option))
    folder = UpgradeJournal.folder(root, stream)
    lock = read_lock(fs, f"{folder}/{LOCK}")
    records = list_journals(fs, root, stream)
    if args.json:
        shown = None if lock is None else dict(lock.holder) if lock.problem is None else {"corrupt": lock.problem}
        out.write(json.dumps({"lock": shown, "journals": [json.loads(r.to_json()) for r in records]}, indent=2) + "\n")
    else:
        held = "free" if lock is None else f"held by {lock.describe()}" if lock.problem is None else (
            f"damaged: {lock.describe()} ({lock.path})")
        out.write(f"lock: {held}\n")
        for record in records:
            steps = ", ".join(f"{name} {step.state}" + (f" x{step.attempts}" if step.attempts > 1 else "")
                              for name, step in record.steps.items())
            out.write(f"{record.upgrade_id}  {record.outcome or 'open'}  phase {record.phase}  "
                      f"runs {len(record.runs)}  {record.intent.old_checkpoint} -> {record.intent.new_checkpoint}\n"
                      f"    {steps or 'no step yet'}\n")
            out.writelines(f"    run {entry.get('run_id') or '?'} at {entry.get('at', '?')}: {entry.get('what', '')}\n"
                           for entry in record.run_log)
    if args.release_lock:
        if lock is None:
            err.write("ckpt: the stream is not locked\n")
        else:
            UpgradeJournal(fs, UpgradeJournal.location(root, stream, "release")).release_lock()
            if lock.problem is None:
                err.write(f"ckpt: released the lock of upgrade {shorten(str(lock.upgrade_id), 200)}\n")
            else:
                err.write(f"ckpt: removed {lock.describe()} ({lock.path})\n")
    return EXIT_OK
