"""``ckpt audit``: count every Kafka record of some topics in a Parquet sink (none lost, none
duplicated), the proof of an upgrade on a test stream. Read-only.

Run it once the producers stopped: the expectation is every offset from each partition's first
offset to its log end as the broker reports them at the start (:mod:`airflow_ckpt_provider.local.audit`).
With ``--checkpoint`` it first waits until the query on that checkpoint committed a batch ending at
those log ends (the job has read everything). With ``--keep FIELD=VALUE`` only the records whose
JSON value has that field are expected in the sink (the job's filter drops the others, and one of
them in the sink is unexpected). It prints one line (:meth:`~airflow_ckpt_provider.local.audit.SinkAudit.describe`,
or ``--json``) and exits 0 when nothing is lost, duplicated or unexpected, 7 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from airflow_ckpt_provider.checkpoint.errors import (
    AmbiguousSource,
    CheckpointError,
    CredentialsInLocation,
    SourceNotKafka,
)
from airflow_ckpt_provider.checkpoint.secrets import redact_location
from airflow_ckpt_provider.cli.common import EXIT_AUDIT_FAILED, EXIT_ERROR, EXIT_OK
from airflow_ckpt_provider.cli.dev_stack import SERVERS_ENV
from airflow_ckpt_provider.hooks.kafka_admin import broker_ranges
from airflow_ckpt_provider.local.audit import Record, audit, json_fields_match, read_sink_records, topic_records
from airflow_ckpt_provider.storage.reader import CheckpointReader

#: ``--wait``: how long the query on ``--checkpoint`` may take to read to the log ends.
DEFAULT_WAIT_S = 900.0
#: How often the checkpoint is looked at while waiting.
POLL_S = 2.0


def field_value(text: str) -> tuple[str, str]:
    """``FIELD=VALUE`` for ``--keep``."""
    field, sep, value = text.partition("=")
    if not sep or not field:
        raise argparse.ArgumentTypeError(
            f"--keep expects FIELD=VALUE (a field of the records' JSON value), got {text!r}")
    return field, value


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``ckpt audit`` to the ``ckpt`` parser."""
    parser = sub.add_parser(
        "audit", help="count every Kafka record of the topics in a Parquet sink: none lost, none duplicated",
        description="Compare a Parquet sink holding each record's Kafka topic, partition and offset columns "
        "with the topics' records on the broker (from the first offset to the log end, read at the start: stop "
        "the producers first). Exit 0 when every expected record is there exactly once and nothing else is; 7 "
        "when not.")
    parser.add_argument("sink", type=Path, help="the sink's folder of Parquet files (topic, partition, offset columns)")
    parser.add_argument("--topic", action="append", required=True, metavar="NAME",
                        help="a topic the job reads (repeatable)")
    parser.add_argument("--bootstrap-servers", metavar="HOSTS", default=os.environ.get(SERVERS_ENV),
                        help=f"Kafka bootstrap servers (default ${SERVERS_ENV}, as `ckpt dev-stack env` exports it)")
    parser.add_argument("--keep", type=field_value, action="append", default=[], metavar="FIELD=VALUE",
                        help="only records whose JSON value has FIELD equal to VALUE are expected in the sink (the "
                             "job's filter; repeatable: all must hold)")
    parser.add_argument("--checkpoint", metavar="PATH",
                        help="first wait until the query on this checkpoint committed a batch ending at the log ends")
    parser.add_argument("--wait", type=float, default=DEFAULT_WAIT_S, metavar="SECONDS",
                        help=f"how long to wait for --checkpoint (default {DEFAULT_WAIT_S:g})")
    parser.add_argument("--json", action="store_true", help="print the audit as JSON")
    parser.set_defaults(handler=_audit)


def _audit(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.bootstrap_servers:
        err.write(f"ckpt: error: found no --bootstrap-servers and no ${SERVERS_ENV}; expected the Kafka brokers "
                  f"the topics are on; pass --bootstrap-servers HOSTS (or run `eval \"$(ckpt dev-stack env)\"`)\n")
        return EXIT_ERROR
    topics: Sequence[str] = args.topic
    ranges = broker_ranges(args.bootstrap_servers, topics)
    unknown = sorted(set(topics) - {topic for topic, _ in ranges})
    if unknown:
        err.write(f"ckpt: error: found no topic {', '.join(unknown)} on {args.bootstrap_servers}; expected every "
                  "--topic on the broker; check the names\n")
        return EXIT_ERROR
    if args.checkpoint and not caught_up(args.checkpoint, ranges, args.wait):
        err.write(f"ckpt: error: found the query on {redact_location(args.checkpoint)} short of the log ends after "
                  f"{args.wait:g} s; "
                  "expected it to have read every record; read its driver log, or wait longer with --wait\n")
        return EXIT_ERROR
    keep = dict(args.keep)
    dropped: set[Record] = set()
    if keep:
        dropped = {record for record, value in topic_records(args.bootstrap_servers, topics)
                   if not json_fields_match(value, keep)}
    result = audit(read_sink_records(args.sink), ranges, dropped=dropped)
    out.write((json.dumps(result.to_dict(), indent=2) if args.json else result.describe()) + "\n")
    return EXIT_OK if result.ok else EXIT_AUDIT_FAILED


def caught_up(checkpoint: str, ranges: Mapping[tuple[str, int], tuple[int, int]], wait_s: float) -> bool:
    """Whether the last committed batch of ``checkpoint`` ends at or past every log end of
    ``ranges`` within ``wait_s`` seconds (a checkpoint without a committed batch yet, or with a file
    being written, is waited for). What waiting cannot mend is raised: a location with credentials in
    it, a query that does not read Kafka alone."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            done = CheckpointReader(checkpoint).handover().kafka_offsets()
            if all((done.get(topic, partition) or 0) >= end for (topic, partition), (_, end) in ranges.items()):
                return True
        except (CredentialsInLocation, SourceNotKafka, AmbiguousSource):
            raise
        except CheckpointError:
            pass  # no committed batch yet, or a file of the next one being written
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
