"""``ckpt state`` and ``ckpt export-state``: the stateful operators of a stopped checkpoint, and
their state exported as Parquet with ``state-manifest.json`` (the same export as the
``StateExportOperator``). Both run a short Spark job (spark-submit, ``--master``); the
checkpoint is only read."""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any, TextIO

from airflow_ckpt_provider.cli.common import EXIT_OK, storage_options
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.state import plan_state_export


def _spark_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--batch", type=int, help="a committed batch (default: the last committed one)")
    parser.add_argument("--master", default="local[2]", help="spark-submit --master of the job (default local[2])")
    parser.add_argument("--spark-home", help="the Spark that runs the job (default: SPARK_HOME, else pyspark's)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="Spark conf of the job (repeatable)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds the job may run (default 3600)")
    parser.add_argument("-o", "--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="fsspec storage option for the checkpoint and the export (repeatable)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``state`` and ``export-state`` to the ``ckpt`` parser."""
    state = sub.add_parser(
        "state", help="list a stopped checkpoint's stateful operators, stores, schemas and row counts",
        description="List every stateful operator's stores (or state variables) with their key/value schemas and "
        "row counts after a committed batch (default: the last committed one), as Spark's state reader sees them. "
        "Refuses an uncommitted or purged batch and state Spark 4.0 cannot read, before Spark runs.")
    state.add_argument("checkpoint", metavar="CHECKPOINT", help="the stopped query's checkpoint path or URL")
    state.add_argument("--json", action="store_true", help="print the listing as JSON")
    _spark_options(state)
    state.set_defaults(handler=_state)
    export = sub.add_parser(
        "export-state", help="export a stopped checkpoint's state as Parquet with state-manifest.json",
        description="Write the state after a committed batch (default: the last committed one) of every stateful "
        "operator under DIR/state/<operator>/<store>/ and DIR/state-manifest.json, read every file back "
        "(sha256, rows) and print DIR. A complete export of the same batch in DIR is verified and kept; an "
        "unfinished one is replaced; anything else in DIR is refused.")
    export.add_argument("checkpoint", metavar="CHECKPOINT", help="the stopped query's checkpoint path or URL")
    export.add_argument("--to", required=True, metavar="DIR", help="the export location (empty or missing)")
    export.add_argument("--upgrade-id", default="", help="recorded in the manifest")
    _spark_options(export)
    export.set_defaults(handler=_export)


def _conf(pairs: list[str]) -> dict[str, str]:
    conf: dict[str, str] = {"spark.ui.enabled": "false"}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--conf {pair!r}: expected KEY=VALUE")
        conf[key] = value
    return conf


def _hooks(args: argparse.Namespace) -> tuple[Any, Any]:
    from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
    from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook

    return (SparkLauncherHook(master=args.master, spark_home=args.spark_home or None),
            CheckpointStorageHook(**storage_options(args.storage_option)))


def _state(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from airflow_ckpt_provider.hooks.state_export import run_state_job

    launcher, storage = _hooks(args)
    fs, _ = storage.filesystem(args.checkpoint)
    plan = plan_state_export(CheckpointReader(args.checkpoint, fs=fs), args.batch, reader_spark=launcher.spark_version)
    listing: dict[str, Any] = {**plan.to_dict(), "stores": []}
    if plan.exportable:
        assert plan.batch_id is not None
        with tempfile.TemporaryDirectory(prefix="ckpt-state-") as scratch:
            result = run_state_job(launcher, checkpoint_uri=args.checkpoint, batch=plan.batch_id, target_uri=scratch,
                                   conf=_conf(args.conf), list_only=True, stores=plan.inferred_stores,
                                   checkpoint_format=plan.checkpoint_format_version, timeout=args.timeout)
        listing["stores"] = [dict(store) for store in result.stores]
        listing["spark_version"] = result.spark_version
    if args.json:
        out.write(json.dumps(listing, indent=1, sort_keys=True) + "\n")
        return EXIT_OK
    if not plan.stateful:
        out.write(f"{args.checkpoint}: no stateful operator (a stateless query: no state to carry)\n")
        return EXIT_OK
    if plan.batch_id is None:
        out.write(f"{args.checkpoint}: stateful operators {list(plan.operators)}, no committed batch (empty state)\n")
        return EXIT_OK
    out.write(f"{args.checkpoint}: state after batch {plan.batch_id} ({plan.state_store_provider.rsplit('.', 1)[-1]}, "
              f"checkpoint format v{plan.checkpoint_format_version}, watermark after the batch "
              f"{plan.next_batch_watermark_ms} ms)\n")
    for store in listing["stores"]:
        name = store.get("state_variable") or store["store_name"]
        out.write(f"  operator {store['operator_id']} {store['operator_name']} store {name}: {store['rows']:,} rows, "
                  f"{store['num_partitions']} partitions\n")
        for column in ("key", "value"):
            fields = store[f"{column}_schema"].get("fields", [])
            out.write(f"    {column}: " + ", ".join(f"{f['name']} {_type(f['type'])}" for f in fields) + "\n")
    return EXIT_OK


def _type(value: Any) -> str:
    return value if isinstance(value, str) else str(value.get("type", "?"))


def _export(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from airflow_ckpt_provider.hooks.state_export import export_checkpoint_state

    launcher, storage = _hooks(args)
    plan, manifest = export_checkpoint_state(
        checkpoint_uri=args.checkpoint, export_uri=args.to, launcher=launcher, batch=args.batch,
        conf=_conf(args.conf), upgrade_id=args.upgrade_id, storage=storage, timeout=args.timeout)
    if manifest is None:
        why = "a stateless query" if not plan.stateful else "no committed batch: the state is empty"
        err.write(f"ckpt: nothing exported ({why})\n")
        return EXIT_OK
    err.write(f"ckpt: exported the state after batch {manifest.batch_id}: {len(manifest.stores)} stores, "
              f"{manifest.rows:,} rows, {manifest.total_bytes:,} bytes, verified\n")
    out.write(args.to + "\n")
    return EXIT_OK
