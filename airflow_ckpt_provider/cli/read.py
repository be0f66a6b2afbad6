"""``ckpt inspect`` and ``ckpt offsets``: look into a checkpoint without Airflow. Read-only.

``ckpt inspect`` also says whether a query runs on the checkpoint (:func:`classify_query`): with
GracefulStop (a live heartbeat), without it (a recent commit and no heartbeat beating for it),
stopped, or unknown (no heartbeat ever written and no recent commit).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO

from airflow_ckpt_provider.checkpoint.handover import handover_from_snapshot
from airflow_ckpt_provider.checkpoint.offsets import SourceOffsets
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView, reconcile
from airflow_ckpt_provider.checkpoint.secrets import redact_conf
from airflow_ckpt_provider.checkpoint.snapshot import CheckpointSnapshot
from airflow_ckpt_provider.checkpoint.stop import QueryLiveness
from airflow_ckpt_provider.cli.common import EXIT_OK, location_parent, storage_options
from airflow_ckpt_provider.storage.locations import open_location
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.stop import ControlFiles

#: ``ckpt inspect``: a commit this recent, with no live heartbeat, is a query running without GracefulStop.
DEFAULT_RECENT_S = 60.0


def broker_view(bootstrap_servers: str, topics: Sequence[str], **client_config: Any) -> BrokerView:
    """Ask Kafka for the partitions and offset ranges of ``topics`` (read-only)."""
    from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker

    return KafkaBroker(bootstrap_servers, **client_config).view(topics)


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
        "spark_2_1": snap.spark_2_1,
        "repartitions": [r.to_dict() for r in snap.repartitions],
        "conf": redact_conf(snap.conf),  # output is pasted into tickets: no secrets
    }


def _describe(source: SourceOffsets) -> str:
    label = f"[{source.index}]" + (f" {source.name}" if source.name else "")
    if source.kafka is not None:
        topics = ", ".join(f"{t} ({len(p)} partitions)" for t, p in source.kafka.offsets.items())
        return f"  {label} kafka: {topics}; total offset {source.kafka.total()}"
    raw = source.raw if source.raw is None or len(source.raw) < 60 else source.raw[:57] + "..."
    return f"  {label} {source.kind.value}: {raw if raw is not None else '-'}"


def _inspect_text(snap: CheckpointSnapshot, liveness: QueryLiveness, out: TextIO) -> None:
    def batch(value: int | None) -> str:
        return "none" if value is None else str(value)

    rows = [
        ("checkpoint", snap.uri),
        ("query id", snap.query_id or "unknown (no metadata file)"),
        ("last committed", batch(snap.last_committed_batch)),
        ("last planned", batch(snap.last_planned_batch)),
        ("in flight", batch(snap.in_flight_batch)
         + (" (its offsets are NOT used)" if snap.in_flight_batch is not None else "")),
        ("log versions", f"offsets v{snap.offsets_version or '-'}, " + (
            "no commit log (Spark 2.1: the batch before the last planned one counts as committed)"
            if snap.spark_2_1 else f"commits v{snap.commit_version or '-'}")),
        ("state operators", ", ".join(map(str, snap.state_operators)) or "none (stateless)"),
        ("query", liveness.describe()),
    ]
    rows[-1:-1] = [("repartition", r.describe()) for r in snap.repartitions]
    if liveness.action():
        rows.append(("what to do", liveness.action()))
    for key, value in rows:
        out.write(f"{key:<16} {value}\n")
    if snap.sources:
        out.write(f"sources at batch {snap.last_committed_batch}:\n")
        out.writelines(_describe(s) + "\n" for s in snap.sources)
    if snap.initial_sources:
        out.write("initial offsets (sources/):\n")
        out.writelines(_describe(s) + "\n" for s in snap.initial_sources)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``inspect`` and ``offsets`` to the ``ckpt`` parser."""
    common = location_parent("checkpoint path or URL (file://, s3://, memory://, ...)")
    inspect = sub.add_parser("inspect", parents=[common], help="summarise a checkpoint")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.add_argument("--recent", type=float, default=DEFAULT_RECENT_S, metavar="S",
                         help="a commit at most S seconds old with no live heartbeat means a query runs "
                              f"without GracefulStop (default {DEFAULT_RECENT_S:g})")
    inspect.set_defaults(handler=_inspect)
    offsets = sub.add_parser("offsets", parents=[common],
                             help="print startingOffsets JSON of the last committed batch")
    offsets.add_argument("--source", help="Kafka source index or name (default: the only one)")
    offsets.add_argument("--bootstrap-servers", metavar="HOSTS",
                         help="reconcile with the live partitions and retention of this cluster")
    offsets.add_argument("--accept-data-loss", action="store_true",
                         help="with --bootstrap-servers: start expired partitions at the earliest offset")
    start = offsets.add_mutually_exclusive_group()
    start.add_argument("--rewind-to-batch", type=int, metavar="K",
                       help="the start of retained committed batch K (end offsets of batch K-1) instead")
    start.add_argument("--at-time", metavar="TIME",
                       help="per partition the first offset at or after TIME (ISO 8601 with zone; "
                            "needs --bootstrap-servers) instead")
    offsets.set_defaults(handler=_offsets)


def _inspect(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    options = storage_options(args.storage_option)
    snap = CheckpointReader(args.path, storage_options=options).snapshot()
    fs, path = open_location(args.path, **options)
    liveness = ControlFiles(fs, path, uri=args.path).liveness(recent_s=args.recent)
    if args.json:
        out.write(json.dumps({**_inspect_json(snap), "query_status": liveness.to_dict()}, indent=2,
                             sort_keys=True) + "\n")
    else:
        _inspect_text(snap, liveness, out)
    return EXIT_OK


def _offsets(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    reader = CheckpointReader(args.path, storage_options=storage_options(args.storage_option))
    if args.rewind_to_batch is not None or args.at_time:
        return _start_offsets(args, reader, out, err)
    handover = handover_from_snapshot(reader.snapshot())
    kafka = handover.kafka_offsets(args.source)
    if handover.from_initial:
        err.write("ckpt: note: nothing committed; these are the initial offsets from sources/\n")
    if not args.bootstrap_servers:
        out.write(kafka.to_json() + "\n")
        return EXIT_OK
    result = reconcile(kafka, broker_view(args.bootstrap_servers, kafka.topics),
                       accept_data_loss=args.accept_data_loss)
    for topic, partition in sorted(result.added_partitions):
        err.write(f"ckpt: note: new partition {topic}-{partition} starts at earliest (-2)\n")
    for topic, partition, offset, earliest in result.expired:
        err.write(f"ckpt: warning: {topic}-{partition}: offsets {offset}..{earliest - 1} are gone "
                  f"(data loss accepted); starting at {earliest}\n")
    out.write(result.starting_offsets.to_json() + "\n")
    return EXIT_OK


def _start_offsets(args: argparse.Namespace, reader: CheckpointReader, out: TextIO, err: TextIO) -> int:
    """``--rewind-to-batch`` / ``--at-time``: the offsets on stdout, what they cost on stderr."""
    from airflow_ckpt_provider.checkpoint.rewind import StartChoice, StartMode, choose_start, plan_start
    from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker

    resume = handover_from_snapshot(reader.snapshot()).kafka_offsets(args.source)
    if args.rewind_to_batch is not None:
        choice = StartChoice.parse(StartMode.REWIND_TO_BATCH, str(args.rewind_to_batch))
    else:
        choice = StartChoice.parse(StartMode.AT_TIME, args.at_time)
    if not args.bootstrap_servers:
        if choice.mode is StartMode.AT_TIME:
            raise ValueError("--at-time needs --bootstrap-servers: the offsets of a time come from the broker")
        plan = plan_start(choice, resume, reader.batch_start(args.rewind_to_batch).kafka_offsets(args.source))
    else:
        broker = KafkaBroker(args.bootstrap_servers)
        plan = choose_start(choice, resume, reader=reader, broker=broker.view(resume.topics),
                            offsets_for_time=broker.offsets_for_time, source=args.source)
    err.write(f"ckpt: {choice.describe()}: {plan.reprocessed} records processed again, {plan.skipped} skipped\n")
    err.writelines(f"ckpt:   {p.describe()}\n" for p in plan.partitions)
    out.write(plan.starting_offsets.to_json() + "\n")
    return EXIT_OK
