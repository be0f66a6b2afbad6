"""Pieces shared by the ``ckpt`` subcommands: exit codes and location arguments."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 2  # a checkpoint, handover, archive or launch problem; also usage errors
EXIT_BROKER = 3  # Kafka unreachable or failing
EXIT_NOT_RUNNING = 4  # ``ckpt stop``: no query runs on that checkpoint (its heartbeat ended; nothing to do)
#: ``ckpt stop``: no heartbeat was ever written and nothing committed during the quiet check, so
#: whether a query runs without GracefulStop cannot be seen (nothing was stopped)
EXIT_NO_HEARTBEAT = 5
#: ``ckpt check-upgrade``: the new version does not start (its trial failed)
EXIT_DOES_NOT_START = 6
#: ``ckpt audit``: records of the topics lost, duplicated or unexpected in the sink
EXIT_AUDIT_FAILED = 7


def storage_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs as fsspec storage options; values are JSON when they parse."""
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


def location_parent(help_text: str) -> argparse.ArgumentParser:
    """Parent parser with a positional ``path`` and repeatable ``-o KEY=VALUE`` storage options."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("path", help=help_text)
    parent.add_argument("-o", "--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="fsspec storage option (repeatable)")
    return parent
