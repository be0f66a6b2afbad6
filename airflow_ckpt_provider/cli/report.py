"""``ckpt report``: the newest upgrade report stored for a stream (its Markdown, or ``--json``).
Read-only; exits 2 when no report is stored yet."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from airflow_ckpt_provider.cli.common import EXIT_ERROR, EXIT_OK, location_parent, storage_options
from airflow_ckpt_provider.storage.locations import open_location
from airflow_ckpt_provider.storage.reports import stored_reports


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``ckpt report`` to the ``ckpt`` parser."""
    parser = sub.add_parser(
        "report", parents=[location_parent("archive root (path or URL) the stream's upgrades stored reports in")],
        help="print the newest upgrade report stored for a stream",
        description="The report the reference DAG's report step stored last for the stream (newest by its time), "
        "as Markdown; its folder and outcome follow on stderr. Exit 2 when none is stored.")
    parser.add_argument("--name", required=True, help="stream name")
    parser.add_argument("--json", action="store_true", help="print the report's JSON instead")
    parser.set_defaults(handler=_report)


def _report(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    fs, root = open_location(args.path, **storage_options(args.storage_option))
    reports = stored_reports(fs, root, args.name)
    if not reports:
        err.write(f"ckpt: error: found no upgrade report for the stream {args.name} under {args.path}; expected "
                  "one the report step stored; check the archive root and the stream name, or wait for the DAG run "
                  "to end\n")
        return EXIT_ERROR
    report = reports[-1]
    out.write(json.dumps(report.data, indent=2) + "\n" if args.json else report.markdown.rstrip("\n") + "\n")
    err.write(f"report in {report.folder} (outcome: {report.outcome or 'not recorded'}; {len(reports)} stored)\n")
    return EXIT_OK
