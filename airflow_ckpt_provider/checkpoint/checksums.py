"""Spark's own checksums of state files (Spark 4.1+): a parser and CRC32C. Pure: no I/O (the check
of a tree read through fsspec is :func:`airflow_ckpt_provider.storage.checksums.check_state_checksums`).

With ``spark.sql.streaming.checkpoint.fileChecksum.enabled`` Spark's ``ChecksumCheckpointFileManager``
writes, beside a state file ``<name>`` (RocksDB's ``<version>_<uuid>.zip``, for example), a sidecar
``<name>.crc``: one JSON object ``{"algorithm":"CRC32C","value":<CRC32C as a Java int>,
"mainFileSize":<bytes>,"timestampMs":..,"creator":{..}}``. Spark verifies the file against it when
it reads the state back and fails the query with ``CHECKPOINT_FILE_CHECKSUM_VERIFICATION_FAILED``
on a mismatch; a file without a sidecar is read unverified. The sidecar is a visible file, not
Hadoop's hidden ``.<name>.crc`` (:func:`airflow_ckpt_provider.checkpoint.logs.verify_crc`), which
the local filesystem writes beside every file, sidecars included.

:func:`check_state_checksums` checks a copied tree (an archive, a restored checkpoint): every
sidecar agrees with its file (size, then CRC32C), and every sidecar ``expected`` is there. An
orphan sidecar (its file gone) is left alone, as Spark leaves it.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_ckpt_provider.checkpoint.errors import CorruptCheckpointFile
from airflow_ckpt_provider.checkpoint.jsonin import load_json

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

SIDECAR_SUFFIX = ".crc"
STATE_DIR = "state/"
ALGORITHM = "CRC32C"
#: a sidecar is a few hundred bytes; anything much larger is not one
MAX_SIDECAR_BYTES = 64 * 1024


def _table() -> tuple[int, ...]:
    poly = 0x82F63B78  # CRC-32C (Castagnoli), reflected
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _table()


def _crc32c_python(data: bytes, crc: int = 0) -> int:
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _fast_crc32c() -> Callable[[bytes, int], int] | None:
    """A compiled CRC32C when one is installed (the ``crc32c`` package); None otherwise."""
    try:
        import crc32c as compiled
    except ImportError:
        return None
    return lambda data, crc: int(compiled.crc32c(data, crc))


_FAST = _fast_crc32c()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC32C of ``data`` (continuing from ``crc``), unsigned, as ``java.util.zip.CRC32C`` computes it."""
    return _FAST(data, crc) if _FAST is not None else _crc32c_python(data, crc)


def is_sidecar(rel_path: str) -> bool:
    """Whether a file (path relative to the checkpoint) is a Spark checksum sidecar: a visible
    ``<name>.crc`` under ``state/``, where Spark writes them. Hadoop's hidden ``.<name>.crc`` files
    are not, nor is a ``.crc`` file elsewhere (Spark writes no sidecar there)."""
    name = posixpath.basename(rel_path)
    return (rel_path.startswith(STATE_DIR) and name.endswith(SIDECAR_SUFFIX) and not name.startswith(".")
            and len(name) > len(SIDECAR_SUFFIX))


def main_file(sidecar: str) -> str:
    """The file a sidecar covers: its path without ``.crc``."""
    return sidecar[: -len(SIDECAR_SUFFIX)]


@dataclass(frozen=True)
class SparkChecksum:
    """One parsed sidecar: the file's CRC32C (unsigned) and size."""

    value: int
    main_file_size: int
    algorithm: str = ALGORITHM

    @classmethod
    def parse(cls, data: bytes, path: str) -> SparkChecksum:
        """Parse a sidecar's JSON; :class:`CorruptCheckpointFile` for anything Spark would not read."""
        try:
            body = load_json(data.decode("utf-8"), what="checksum file", path=path, strict=True)
        except (UnicodeDecodeError, ValueError) as exc:
            raise CorruptCheckpointFile(path=path, line=1, found=f"a checksum file that is not JSON ({exc})",
                                        expected='{"algorithm":"CRC32C","value":..,"mainFileSize":..}') from None
        if not isinstance(body, dict):
            raise CorruptCheckpointFile(path=path, line=1, found=f"a JSON {type(body).__name__}",
                                        expected="a JSON object")
        value, size, algorithm = body.get("value"), body.get("mainFileSize"), body.get("algorithm")
        if (type(value) is not int or not -(2**31) <= value < 2**32 or type(size) is not int  # noqa: E721
                or size < 0 or algorithm != ALGORITHM):
            raise CorruptCheckpointFile(
                path=path, line=1,
                found=f"algorithm={algorithm!r:.20}, value={value!r:.20}, mainFileSize={size!r:.20}",
                expected="algorithm 'CRC32C', value a Java int, mainFileSize a byte count")
        return cls(value=value & 0xFFFFFFFF, main_file_size=size, algorithm=algorithm)

    def to_json(self) -> bytes:
        """The sidecar as Spark writes it (the value as a signed Java int; no creator)."""
        signed = self.value - 2**32 if self.value >= 2**31 else self.value
        return (f'{{"algorithm":"{self.algorithm}","value":{signed},"mainFileSize":{self.main_file_size},'
                f'"timestampMs":0}}').encode()

    @classmethod
    def of(cls, data: bytes) -> SparkChecksum:
        return cls(value=crc32c(data), main_file_size=len(data))


def sidecars(files: Iterable[str]) -> list[str]:
    """The sidecars among ``files`` (relative paths) whose file is among them too, sorted."""
    present = set(files)
    return sorted(p for p in present if is_sidecar(p) and main_file(p) in present)
