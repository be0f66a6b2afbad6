"""``ckpt``: the provider's core operations from a shell, without Airflow.

Each subcommand lives in a module of this package that has ``register(subparsers)``; the
registered handler is called as ``handler(args, stdout, stderr) -> exit code``.

Exit codes: 0 ok; 2 a checkpoint, handover, archive or launch problem (one ``ckpt: error:``
line on stderr, no traceback), a local stack problem (Java or the ``make jvm`` jars missing) or a
usage error — for ``ckpt stop`` also a query running without GracefulStop and no ``--pid`` to kill
it; 3 Kafka unreachable or failing; 4 ``ckpt stop`` found no running query (its heartbeat stopped
or went stale), or ``ckpt dev-stack status`` no running broker; 5 ``ckpt stop`` found no heartbeat
ever written and nothing committing, so it cannot tell whether a query runs (nothing stopped); 6
``ckpt check-upgrade`` found that the new version does not start; 7 ``ckpt audit`` found records
lost, duplicated or unexpected in the sink.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import TextIO

from airflow_ckpt_provider.checkpoint.errors import BrokerError, CheckpointError, StorageError, os_error_parts, shorten
from airflow_ckpt_provider.checkpoint.secrets import redact_location
from airflow_ckpt_provider.cli.common import EXIT_BROKER, EXIT_ERROR
from airflow_ckpt_provider.local.errors import LocalStackError

# Modules with a register(subparsers) function, in the order of `ckpt --help`.
COMMAND_MODULES: tuple[str, ...] = (
    "airflow_ckpt_provider.cli.read",
    "airflow_ckpt_provider.cli.archive",
    "airflow_ckpt_provider.cli.stop",
    "airflow_ckpt_provider.cli.launch",
    "airflow_ckpt_provider.cli.state",
    "airflow_ckpt_provider.cli.compat",
    "airflow_ckpt_provider.cli.journal",
    "airflow_ckpt_provider.cli.report",
    "airflow_ckpt_provider.cli.dev_stack",
    "airflow_ckpt_provider.cli.run",
    "airflow_ckpt_provider.cli.audit",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckpt", description="Spark Structured Streaming checkpoint tools.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parse ``argv``; what follows the first ``--`` goes, as it is, to a command that takes
    pass-through arguments (``app_args``, e.g. ``ckpt launch``); other commands refuse it."""
    argv = list(argv)
    head, tail = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, None)
    parser = build_parser()
    args = parser.parse_args(head)
    if tail is not None:
        if not hasattr(args, "app_args"):
            parser.error(f"unrecognized arguments: -- {' '.join(tail)} (`ckpt {args.command}` takes no `--` arguments)")
        args.app_args = tail
    return args


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Run ``ckpt``; returns the exit code."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.verbose:
        logging.basicConfig(level=logging.DEBUG, stream=err, format="ckpt: %(name)s: %(message)s")
    try:
        return int(args.handler(args, out, err))
    except BrokerError as exc:
        err.write(f"ckpt: error: {exc}\n")
        return EXIT_BROKER
    except (CheckpointError, LocalStackError) as exc:  # LocalStackError: java or `make jvm` jars missing
        err.write(f"ckpt: error: {exc}\n")
        return EXIT_ERROR
    except (argparse.ArgumentTypeError, ValueError, ImportError) as exc:  # bad storage option/URL
        err.write(f"ckpt: error: {redact_location(shorten(str(exc)))}\n")
        return EXIT_ERROR
    except OSError as exc:  # an input file (handover JSON, ...) or a location the storage refused
        found, action = os_error_parts(exc)
        error = StorageError(found=found, expected="a location the storage lets this user use", action=action)
        err.write(f"ckpt: error: {error}\n")
        return EXIT_ERROR
