"""``ckpt archive``, ``ckpt verify-archive``, ``ckpt restore`` and ``ckpt archives``.

Locations are local paths or fsspec URLs; ``-o`` storage options apply to the first location,
``--to-option`` to the second (they may be different stores).
"""

from __future__ import annotations

import argparse
import json
import logging
import posixpath
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from airflow_ckpt_provider.checkpoint.manifest import human_bytes, sanitize_upgrade_id
from airflow_ckpt_provider.cli.common import EXIT_OK, location_parent, storage_options
from airflow_ckpt_provider.clock import utc_now
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.locations import open_location
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive


@contextmanager
def _progress(err: TextIO) -> Iterator[None]:
    """Show the core's progress lines (files, bytes, rate) on stderr unless logging is set up."""
    core = logging.getLogger("airflow_ckpt_provider.checkpoint")
    if logging.getLogger().handlers:  # ckpt -v configured logging already
        yield
        return
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("ckpt: %(message)s"))
    level = core.level
    core.addHandler(handler)
    core.setLevel(logging.INFO)
    try:
        yield
    finally:
        core.removeHandler(handler)
        core.setLevel(level)


def _to_args(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--to", required=True, metavar="LOCATION", help=help_text)
    parser.add_argument("--to-option", action="append", default=[], metavar="KEY=VALUE",
                        help="fsspec storage option for --to (repeatable)")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the archive subcommands to the ``ckpt`` parser."""
    archive = sub.add_parser(
        "archive", parents=[location_parent("checkpoint of a STOPPED query (path or URL)")],
        help="copy a stopped query's checkpoint to a verified archive; prints its location")
    _to_args(archive, "archive root; the archive goes to ROOT/STREAM/<time>-<upgrade id>/")
    archive.add_argument("--name", help="stream name (default: the checkpoint directory's name)")
    archive.add_argument("--upgrade-id", help="re-use to resume or re-find an archive "
                         "(default: cli-<UTC time>)")
    archive.add_argument("--reason", default="", help="why (recorded in the manifest)")
    archive.add_argument("--remove-source", action="store_true",
                         help="delete the checkpoint after the archive verified")
    archive.add_argument("--workers", type=int,
                         help="parallel copies (default: one per CPU, 2-8, on local disks; 16 with an object store)")
    archive.set_defaults(handler=_archive)

    verify = sub.add_parser("verify-archive", parents=[location_parent("archive directory (path or URL)")],
                            help="re-read an archive and check every file against its manifest")
    verify.add_argument("--json", action="store_true", help="print the manifest summary as JSON")
    verify.set_defaults(handler=_verify)

    restore = sub.add_parser("restore", parents=[location_parent("archive directory (path or URL)")],
                             help="copy an archive back to an empty location and verify it")
    _to_args(restore, "target checkpoint location (must be empty or missing)")
    restore.set_defaults(handler=_restore)

    listing = sub.add_parser("archives", parents=[location_parent("archive root (path or URL)")],
                             help="list archives: complete or not, size, time")
    listing.add_argument("--name", help="only this stream")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.set_defaults(handler=_archives)


def _archive(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    src_fs, src = open_location(args.path, **storage_options(args.storage_option))
    dst_fs, root = open_location(args.to, **storage_options(args.to_option))
    name = args.name or posixpath.basename(src.rstrip("/"))
    upgrade_id = args.upgrade_id or sanitize_upgrade_id(
        "cli-" + utc_now().strftime("%Y%m%dT%H%M%SZ"))
    if not args.upgrade_id:
        err.write(f"ckpt: upgrade id {upgrade_id} (pass --upgrade-id {upgrade_id} to resume after a failure)\n")
    with _progress(err):
        manifest = CheckpointArchive(dst_fs, root, archive_uri=args.to, workers=args.workers).archive(
            src_fs, src, stream_name=name, upgrade_id=upgrade_id, source_uri=args.path, reason=args.reason,
            remove_source=args.remove_source)
    out.write(manifest.archive_uri + "\n")
    return EXIT_OK


def _verify(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    fs, path = open_location(args.path, **storage_options(args.storage_option))
    with _progress(err):
        manifest = verify_archive(fs, path)
    if args.json:
        out.write(json.dumps(manifest.summary(), indent=2, sort_keys=True) + "\n")
    else:
        out.write(f"OK {args.path}: {manifest.file_count:,} files, {human_bytes(manifest.total_bytes)} "
                  f"match the manifest (query {manifest.query_id}, archived {manifest.completed_at})\n")
    return EXIT_OK


def _restore(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    fs, path = open_location(args.path, **storage_options(args.storage_option))
    target_fs, target = open_location(args.to, **storage_options(args.to_option))
    with _progress(err):
        restore_archive(fs, path, target_fs, target)
    out.write(args.to + "\n")
    return EXIT_OK


def _archives(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    fs, root = open_location(args.path, **storage_options(args.storage_option))
    infos = CheckpointArchive(fs, root, archive_uri=args.path).list(args.name)
    if args.json:
        out.write(json.dumps([i.to_dict() for i in infos], indent=2) + "\n")
        return EXIT_OK
    if not infos:
        err.write(f"ckpt: no archives under {args.path}\n")
    for info in infos:
        size = human_bytes(info.total_bytes) if info.total_bytes is not None else "-"
        files = f"{info.file_count:,} files" if info.file_count is not None else "-"
        state = "complete" if info.complete else "INCOMPLETE"
        out.write(f"{info.stream_name}/{info.name}  {state:<10}  {info.started_at:%Y-%m-%d %H:%M:%SZ}  "
                  f"{files:>12}  {size:>10}\n")
    return EXIT_OK
