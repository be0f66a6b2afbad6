"""``ckpt``: look into a Spark checkpoint from a shell, without Airflow. Read-only.

Exit codes: 0 ok; 2 checkpoint/handover problem (one ``ckpt: error: ...`` line on stderr) or
usage error; 3 Kafka broker unreachable or failing.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from airflow_ckpt_provider.checkpoint.errors import BrokerError, CheckpointError
from airflow_ckpt_provider.checkpoint.handover import handover_from_snapshot
from airflow_ckpt_provider.checkpoint.offsets import SourceOffsets
from airflow_ckpt_provider.checkpoint.reader import CheckpointReader, CheckpointSnapshot
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView, reconcile

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_BROKER = 3


def broker_view(bootstrap_servers: str, topics: Sequence[str], **client_config: Any) -> BrokerView:
    """Ask Kafka for the partitions and offset ranges of ``topics`` (read-only)."""
    from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker

    return KafkaBroker(bootstrap_servers, **client_config).view(topics)


def _storage_options(pairs: Sequence[str]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--storage-option expects KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)  # numbers, booleans, objects
        except ValueError:
            options[key] = value
    return options


def _source_dict(source: SourceOffsets) -> dict[str, Any]:
    return {"index": source.index, "name": source.name, "kind": source.kind.value,
            "offsets": source.offsets_json()}


def _inspect_json(snap: CheckpointSnapshot) -> dict[str, Any]:
    return {
        "uri": snap.uri,
        "query_id": snap.query_id,
        "last_committed_batch": snap.last_committed_batch,
        "last_planned_batch": snap.last_planned_batch,
        "in_flight_batch": snap.in_flight_batch,
        "offsets_version": snap.offsets_version,
        "commit_version": snap.commit_version,
        "batch_timestamp_ms": snap.batch_timestamp_ms,
        "batch_watermark_ms": snap.batch_watermark_ms,
        "sources": [_source_dict(s) for s in snap.sources],
        "initial_sources": [_source_dict(s) for s in snap.initial_sources],
        "state_operators": list(snap.state_operators),
        "conf": dict(snap.conf),
    }


def _describe(source: SourceOffsets) -> str:
    label = f"[{source.index}]" + (f" {source.name}" if source.name else "")
    if source.kafka is not None:
        topics = ", ".join(f"{t} ({len(p)} partitions)" for t, p in source.kafka.offsets.items())
        return f"  {label} kafka: {topics}; total offset {source.kafka.total()}"
    raw = source.raw if source.raw is None or len(source.raw) < 60 else source.raw[:57] + "..."
    return f"  {label} {source.kind.value}: {raw if raw is not None else '-'}"


def _inspect_text(snap: CheckpointSnapshot, out: TextIO) -> None:
    def batch(value: int | None) -> str:
        return "none" if value is None else str(value)

    rows = [
        ("checkpoint", snap.uri),
        ("query id", snap.query_id or "unknown (no metadata file)"),
        ("last committed", batch(snap.last_committed_batch)),
        ("last planned", batch(snap.last_planned_batch)),
        ("in flight", batch(snap.in_flight_batch)
         + (" (its offsets are NOT used)" if snap.in_flight_batch is not None else "")),
        ("log versions", f"offsets v{snap.offsets_version or '-'}, commits v{snap.commit_version or '-'}"),
        ("state operators", ", ".join(map(str, snap.state_operators)) or "none (stateless)"),
    ]
    for key, value in rows:
        out.write(f"{key:<16} {value}\n")
    if snap.sources:
        out.write(f"sources at batch {snap.last_committed_batch}:\n")
        out.writelines(_describe(s) + "\n" for s in snap.sources)
    if snap.initial_sources:
        out.write("initial offsets (sources/):\n")
        out.writelines(_describe(s) + "\n" for s in snap.initial_sources)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckpt", description="Read-only Spark checkpoint tools.")
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("path", help="checkpoint path or URL (file://, s3://, memory://, ...)")
    common.add_argument("-o", "--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="fsspec storage option (repeatable)")
    common.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    inspect = sub.add_parser("inspect", parents=[common], help="summarise a checkpoint")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    offsets = sub.add_parser("offsets", parents=[common],
                             help="print startingOffsets JSON of the last committed batch")
    offsets.add_argument("--source", help="Kafka source index or name (default: the only one)")
    offsets.add_argument("--bootstrap-servers", metavar="HOSTS",
                         help="reconcile with the live partitions and retention of this cluster")
    offsets.add_argument("--accept-data-loss", action="store_true",
                         help="with --bootstrap-servers: start expired partitions at the earliest offset")
    return parser


def _offsets(args: argparse.Namespace, reader: CheckpointReader, out: TextIO, err: TextIO) -> None:
    handover = handover_from_snapshot(reader.snapshot())
    kafka = handover.kafka_offsets(args.source)
    if handover.from_initial:
        err.write("ckpt: note: nothing committed; these are the initial offsets from sources/\n")
    if not args.bootstrap_servers:
        out.write(kafka.to_json() + "\n")
        return
    result = reconcile(kafka, broker_view(args.bootstrap_servers, kafka.topics),
                       accept_data_loss=args.accept_data_loss)
    for topic, partition in sorted(result.added_partitions):
        err.write(f"ckpt: note: new partition {topic}-{partition} starts at earliest (-2)\n")
    for topic, partition, offset, earliest in result.expired:
        err.write(f"ckpt: warning: {topic}-{partition}: offsets {offset}..{earliest - 1} are gone "
                  f"(data loss accepted); starting at {earliest}\n")
    out.write(result.starting_offsets.to_json() + "\n")


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run ``ckpt``; returns the exit code. Never writes to the checkpoint."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = _parser().parse_args(argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, stream=err, format="ckpt: %(name)s: %(message)s")
    try:
        options = _storage_options(args.storage_option)
        reader = CheckpointReader(args.path, storage_options=options)
        if args.command == "inspect":
            snap = reader.snapshot()
            if args.json:
                out.write(json.dumps(_inspect_json(snap), indent=2, sort_keys=True) + "\n")
            else:
                _inspect_text(snap, out)
        else:
            _offsets(args, reader, out, err)
    except BrokerError as exc:
        err.write(f"ckpt: error: {exc}\n")
        return EXIT_BROKER
    except CheckpointError as exc:
        err.write(f"ckpt: error: {exc}\n")
        return EXIT_ERROR
    except (argparse.ArgumentTypeError, ValueError, ImportError) as exc:  # bad storage option/URL
        err.write(f"ckpt: error: {exc}\n")
        return EXIT_ERROR
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
