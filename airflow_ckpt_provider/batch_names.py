"""Which entries of a checkpoint's batch logs (``offsets/``, ``commits/``) are batch files.

Standard library only: the Spark driver side (:mod:`airflow_ckpt_provider.spark.graceful_stop`,
listing through Hadoop's FileSystem) and the core (:func:`airflow_ckpt_provider.storage.listing.list_batch_ids`,
listing through fsspec) apply this one rule.

Spark names batch N's file by the plain decimal ``N`` and writes ``.N.crc`` checksums and
``.N.<uuid>.tmp`` temporary files beside it. Listings of object stores may also hold directory
markers: names ending in ``/``, or an entry named like the listed folder itself. Only plain
decimal names are batch files here. A digits-only name with leading zeros (``007``) would be read
by Spark as a batch too; :func:`zero_padded` spots it so the core can refuse it.
"""

from __future__ import annotations

import re

__all__ = ["batch_number", "zero_padded"]

_CANONICAL = re.compile(r"(0|[1-9][0-9]*)\Z")
_DIGITS = re.compile(r"[0-9]+\Z")


def batch_number(entry: str) -> int | None:
    """The batch id a listing entry (a base name or a path) names, or None for anything else:
    checksums, temporary files, other names, zero-padded digits and directory markers (ending
    in ``/``). Never raises."""
    if entry.endswith("/"):
        return None
    name = entry.rsplit("/", 1)[-1]
    return int(name) if _CANONICAL.match(name) else None


def zero_padded(entry: str) -> bool:
    """True for a digits-only base name with leading zeros (``00``, ``007``): not a batch file by
    :func:`batch_number`, yet Spark would read it as one."""
    if entry.endswith("/"):
        return False
    name = entry.rsplit("/", 1)[-1]
    return bool(_DIGITS.match(name)) and not _CANONICAL.match(name)
