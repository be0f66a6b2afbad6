"""Spark's own checksums of state files, checked over a tree read through fsspec
(:func:`check_state_checksums`); the parser and CRC32C are the pure core's,
:mod:`airflow_ckpt_provider.checkpoint.checksums`.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from airflow_ckpt_provider.checkpoint.checksums import SparkChecksum, crc32c, main_file, sidecars
from airflow_ckpt_provider.checkpoint.errors import CorruptCheckpointFile, StateChecksumMismatch
from airflow_ckpt_provider.storage.files import read_file

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

log = logging.getLogger(__name__)
#: bytes read at a time when a file's CRC32C is computed
_CHUNK = 1 << 20


def check_state_checksums(
    fs: AbstractFileSystem,
    root: str,
    files: Mapping[str, int],
    *,
    where: str,
    expected: Collection[str] = (),
    content: bool = True,
) -> int:
    """Check the sidecars in a tree; returns how many were checked.

    ``files`` is the tree's listing ({relative path: size}). Every sidecar in ``expected`` (relative
    paths: the sidecars the original held) must be present, and every sidecar whose file is
    present must match that file's size and CRC32C. :class:`StateChecksumMismatch` names the first
    file concerned (``where`` is the location shown), the sidecar itself when it is not what Spark
    writes. ``content=False`` checks only that the expected sidecars are
    listed (reads nothing).
    """
    missing = sorted(p for p in expected if p not in files and main_file(p) in files)
    if missing:
        raise StateChecksumMismatch(
            file=missing[0], path=where,
            found=f"Spark's checksum file {missing[0]} is missing"
                  + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""),
            expected=f"every checksum file the original checkpoint held beside {main_file(missing[0])}")
    checked = 0
    for sidecar in sidecars(files) if content else ():
        target = main_file(sidecar)
        try:
            recorded = SparkChecksum.parse(read_file(fs, posixpath.join(root, sidecar)), f"{where}/{sidecar}")
        except CorruptCheckpointFile as exc:  # Spark fails to read it too
            raise StateChecksumMismatch(file=sidecar, path=where, found=exc.found, expected=exc.expected) from None
        if files[target] != recorded.main_file_size:
            raise StateChecksumMismatch(
                file=target, path=where, found=f"{files[target]} bytes",
                expected=f"{recorded.main_file_size} bytes, as {sidecar} records")
        actual = _file_crc32c(fs, posixpath.join(root, target))
        if actual != recorded.value:
            raise StateChecksumMismatch(
                file=target, path=where, found=f"CRC32C {actual:#010x}",
                expected=f"CRC32C {recorded.value:#010x}, as {sidecar} records")
        checked += 1
    log.debug("%s: %d state file checksums verified", where, checked)
    return checked


def _file_crc32c(fs: AbstractFileSystem, path: str) -> int:
    crc = 0
    with fs.open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            crc = crc32c(chunk, crc)
    return crc
