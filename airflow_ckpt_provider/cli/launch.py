"""``ckpt verify-handover``: did a new query start exactly where the old one stopped? Read-only."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.verify import verify_start
from airflow_ckpt_provider.cli.common import EXIT_OK, storage_options
from airflow_ckpt_provider.storage.reader import CheckpointReader


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``verify-handover`` to the ``ckpt`` parser."""
    verify = sub.add_parser(
        "verify-handover",
        help="check a new checkpoint's recorded start offsets against a handover",
        description="Compare the start a new query recorded (sources/<i>/0) with the handover: every "
        "handed-over partition must start exactly at its offset, partitions added since at earliest. "
        "Exit 0 when exact, 2 naming every differing partition otherwise.",
    )
    verify.add_argument("handover", metavar="HANDOVER_JSON",
                        help="file with a Handover JSON or the handover operator's XCom "
                        '({"handover": ..., "starting_offsets": ...}); "-" reads stdin')
    verify.add_argument("checkpoint", metavar="NEW_CHECKPOINT", help="the new query's checkpoint path or URL")
    verify.add_argument("--starting-offsets", metavar="JSON",
                        help="the startingOffsets given to the new query (default: from HANDOVER_JSON)")
    verify.add_argument("--source", help="Kafka source index or name (default: the only one)")
    verify.add_argument("--bootstrap-servers", metavar="HOSTS",
                        help="check partitions started at earliest against this cluster")
    verify.add_argument("--json", action="store_true", help="print the result as JSON")
    verify.add_argument("-o", "--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="fsspec storage option for NEW_CHECKPOINT (repeatable)")
    verify.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.handover == "-":
        text = sys.stdin.read()
    else:
        with open(args.handover, encoding="utf-8") as handle:
            text = handle.read()
    result_in = HandoverResult.from_json(text)
    accepted = result_in.accepted_loss
    starting = (KafkaOffsets.from_json(args.starting_offsets) if args.starting_offsets
                else result_in.offsets(args.source))
    snapshot = CheckpointReader(args.checkpoint, storage_options=storage_options(args.storage_option)).snapshot(
        include_initial=True)
    broker = None
    if args.bootstrap_servers:
        from airflow_ckpt_provider.cli.read import broker_view

        broker = broker_view(args.bootstrap_servers, starting.topics)
    result = verify_start(snapshot, starting, handover=result_in.expected_start(args.source), broker=broker,
                          accepted_loss=accepted, source=args.source)
    if args.json:
        out.write(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
        return EXIT_OK
    out.write(f"OK: {args.checkpoint} started exactly at the handover ({len(result.partitions)} partitions)\n")
    out.writelines(f"  {p.describe()}\n" for p in result.partitions)
    return EXIT_OK
