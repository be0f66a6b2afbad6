"""Parsers for single checkpoint files, and the one lister of the batch logs. The parsers are pure
functions over bytes (plus the path for messages); :func:`list_batch_ids` reads through an fsspec
filesystem: it lists a batch log folder (``offsets/``, ``commits/``) by the name rule of
:mod:`airflow_ckpt_provider.batch_names`.

Formats (checked against checkpoints written by Spark 4.2):

* ``offsets/N``: ``v1`` or ``v2``; then OffsetSeqMetadata JSON (may be empty in v1); then one line
  per source: offset JSON or ``-`` (v1, in source order) or ``name:json`` (v2, any order).
* ``commits/N``: ``v1``..``v3``; then ``{"nextBatchWatermarkMs":..}`` (v2 adds ``stateUniqueIds``,
  v3 ``sinkMetadataMap``); Spark treats a missing JSON line as ``{}``.
* ``metadata``: ``{"id":"<uuid>"}``.
* ``sources/<i>/0`` (Kafka initial offsets): optional 0x00 byte, ``v1\\n``, then offset JSON.
* ``.<name>.crc``: Hadoop ChecksumFileSystem: ``b"crc\\0"``, big-endian int32 bytesPerChecksum,
  then one big-endian CRC32 per chunk of the data file.

Every parser raises :class:`CorruptCheckpointFile` (or :class:`UnsupportedLogVersion`) with the
path and the 1-based line number when the content is not what Spark writes.
"""

from __future__ import annotations

import re
import struct
import uuid
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.batch_names import batch_number, zero_padded
from airflow_ckpt_provider.checkpoint.errors import (
    CorruptCheckpointFile,
    InvalidOffsets,
    UnsupportedLogVersion,
)
from airflow_ckpt_provider.checkpoint.listing import list_names
from airflow_ckpt_provider.checkpoint.offsets import SourceKind, SourceOffsets, parse_json

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

MAX_OFFSET_LOG_VERSION = 2
MAX_COMMIT_LOG_VERSION = 3
MAX_INITIAL_OFFSETS_VERSION = 1
CRC_MAGIC = b"crc\x00"
DEFAULT_BYTES_PER_CHECKSUM = 512

_VERSION = re.compile(r"v([0-9]+)\Z")


@dataclass(frozen=True)
class OffsetLogEntry:
    """One parsed ``offsets/N`` file."""

    version: int
    sources: tuple[SourceOffsets, ...]
    batch_watermark_ms: int | None = None
    batch_timestamp_ms: int | None = None
    conf: Mapping[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class CommitLogEntry:
    """One parsed ``commits/N`` file."""

    version: int
    next_batch_watermark_ms: int
    state_unique_ids: Mapping[str, Any] | None = field(default=None, hash=False)


def parse_batch_name(name: str, path: str | None = None) -> int | None:
    """Batch id of a listing entry of ``offsets/`` or ``commits/``, or None for anything else.

    The rule is :func:`airflow_ckpt_provider.batch_names.batch_number` (plain decimal names only;
    checksums, temporary files and directory markers are not batch files). A digits-only name with
    leading zeros (``007``) would be read by Spark as a batch too, so it raises
    :class:`CorruptCheckpointFile` instead of being silently skipped or silently used.
    """
    batch = batch_number(name)
    if batch is None and zero_padded(name):
        base = name.rsplit("/", 1)[-1]
        raise CorruptCheckpointFile(
            path=path or name,
            found=f"file name {base!r} (leading zeros)",
            expected="batch files named by a plain integer such as '7'",
            action="Remove or rename the stray file; it shadows a batch id.",
        )
    return batch


def batch_ids(entries: Iterable[str], folder: str) -> list[int]:
    """Sorted batch ids named by the listing ``entries`` of ``folder`` (paths or base names), by
    :func:`parse_batch_name`; an entry naming ``folder`` itself (a directory marker) is skipped.
    :class:`CorruptCheckpointFile` for a zero-padded name."""
    own = folder.rstrip("/")
    ids = (parse_batch_name(entry, entry) for entry in entries if entry.rstrip("/") != own)
    return sorted(batch for batch in ids if batch is not None)


def list_batch_ids(fs: AbstractFileSystem, folder: str) -> list[int]:
    """Sorted batch ids in the batch log ``folder`` (``<root>/offsets`` or ``<root>/commits``,
    a path of ``fs``); ``[]`` when the folder does not exist.

    Drops fsspec's listing cache of ``folder`` first, so a poll sees new batches, and lists names
    only (no metadata request per entry). :class:`CorruptCheckpointFile` for a zero-padded name;
    other I/O errors (``OSError``) propagate.
    """
    try:
        entries = list_names(fs, folder)
    except FileNotFoundError:
        return []
    return batch_ids((str(entry) for entry in entries), folder)


def crc_target(name: str) -> str | None:
    """Name of the data file a Hadoop checksum file ``.<name>.crc`` covers, else None."""
    if name.startswith(".") and name.endswith(".crc") and len(name) > 5:
        return name[1:-4]
    return None


def hadoop_crc(data: bytes, bytes_per_checksum: int = DEFAULT_BYTES_PER_CHECKSUM) -> bytes:
    """The bytes of the ``.crc`` file Hadoop's ChecksumFileSystem writes for ``data``."""
    sums = b"".join(
        struct.pack(">I", zlib.crc32(data[i : i + bytes_per_checksum]))
        for i in range(0, len(data), bytes_per_checksum)
    )
    return CRC_MAGIC + struct.pack(">i", bytes_per_checksum) + sums


def verify_crc(data: bytes, crc: bytes, path: str) -> None:
    """Check ``data`` against its Hadoop ``.crc`` bytes; raise CorruptCheckpointFile on mismatch."""
    if len(crc) < 8 or crc[:4] != CRC_MAGIC:
        raise CorruptCheckpointFile(
            path=path, found="a checksum file without the 'crc\\0' header",
            expected="a Hadoop ChecksumFileSystem .crc file",
        )
    (per_chunk,) = struct.unpack(">i", crc[4:8])
    chunks = (len(data) + per_chunk - 1) // per_chunk if per_chunk > 0 else -1
    if per_chunk <= 0 or len(crc) != 8 + 4 * chunks:
        raise CorruptCheckpointFile(
            path=path,
            found=f"a checksum file of {len(crc)} bytes (bytesPerChecksum={per_chunk})",
            expected=f"8 + 4 bytes per chunk for {len(data)} data bytes",
        )
    for number in range(chunks):
        start = number * per_chunk
        (stored,) = struct.unpack(">I", crc[8 + 4 * number : 12 + 4 * number])
        if zlib.crc32(data[start : start + per_chunk]) != stored:
            raise CorruptCheckpointFile(
                path=path,
                line=data[:start].count(b"\n") + 1,
                found=f"a CRC32 mismatch in bytes {start}..{min(start + per_chunk, len(data)) - 1}",
                expected="the content recorded in the .crc file written beside it",
            )


def _decode(data: bytes | str, path: str) -> str:
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointFile(
            path=path, line=data[: exc.start].count(b"\n") + 1,
            found="bytes that are not UTF-8", expected="UTF-8 text",
        ) from None


def _lines(text: str) -> list[str]:
    """Split like Scala's getLines: on \\n or \\r\\n; a trailing newline adds no line."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _version(lines: list[str], path: str, maximum: int, what: str) -> int:
    if not lines:
        raise CorruptCheckpointFile(path=path, line=1, found="an empty file", expected=f"a {what}")
    match = _VERSION.match(lines[0])
    if not match or int(match.group(1)) == 0:
        raise CorruptCheckpointFile(
            path=path, line=1, found=f"version line {lines[0][:20]!r}", expected="'v1'..'v9'"
        )
    version = int(match.group(1))
    if version > maximum:
        raise UnsupportedLogVersion(
            path=path, line=1, found=f"{what} version v{version}", expected=f"v1..v{maximum}"
        )
    return version


def _json_line(line: str, path: str, number: int, expected: str) -> Any:
    try:
        return parse_json(line)
    except ValueError as exc:
        raise CorruptCheckpointFile(
            path=path, line=number, found=f"invalid JSON ({exc})", expected=expected
        ) from None


def _int_field(obj: Mapping[str, Any], key: str, path: str, number: int) -> int | None:
    value = obj.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise CorruptCheckpointFile(
            path=path, line=number, found=f"{key}={value!r}", expected=f"{key} as an integer"
        )
    return value


def _source(index: int, raw: str | None, name: str | None, path: str, number: int) -> SourceOffsets:
    try:
        return SourceOffsets.parse(index, raw, name=name)
    except InvalidOffsets as exc:
        raise CorruptCheckpointFile(
            path=path, line=number, found=exc.found,
            expected="one source offset as JSON (valid Kafka offsets for a Kafka source), or '-'",
        ) from None


def parse_offset_log(data: bytes | str, path: str) -> OffsetLogEntry:
    """Parse ``offsets/N`` (v1 or v2); requires at least one source line."""
    lines = _lines(_decode(data, path))
    version = _version(lines, path, MAX_OFFSET_LOG_VERSION, "offset log")
    if len(lines) < 2:
        raise CorruptCheckpointFile(
            path=path, line=2, found="no metadata line", expected="OffsetSeqMetadata JSON or ''"
        )
    meta_line = lines[1].strip()
    meta: Any = {}
    if meta_line or version >= 2:
        meta = _json_line(meta_line, path, 2, "OffsetSeqMetadata JSON")
        if not isinstance(meta, dict):
            raise CorruptCheckpointFile(
                path=path, line=2, found=f"a JSON {type(meta).__name__}", expected="a JSON object"
            )
    conf = meta.get("conf", {})
    if not isinstance(conf, dict) or not all(isinstance(v, str) for v in conf.values()):
        raise CorruptCheckpointFile(path=path, line=2, found="a malformed conf", expected="string map")
    if len(lines) < 3:
        raise CorruptCheckpointFile(
            path=path, line=3, found="no source lines", expected="one offset line per source"
        )
    sources: list[SourceOffsets] = []
    if version == 1:
        for number, line in enumerate(lines[2:], start=3):
            sources.append(_source(number - 3, None if line == "-" else line, None, path, number))
    else:
        named: dict[str, tuple[int, str | None]] = {}
        for number, line in enumerate(lines[2:], start=3):
            name, sep, raw = line.partition(":")
            if not sep or not name or name in named:
                raise CorruptCheckpointFile(
                    path=path, line=number, found=f"source line {line[:40]!r}",
                    expected="'<unique source name>:<offset JSON or ->'",
                )
            named[name] = (number, None if raw == "-" else raw)
        for index, name in enumerate(sorted(named)):
            number, named_raw = named[name]
            sources.append(_source(index, named_raw, name, path, number))
    return OffsetLogEntry(
        version=version,
        sources=tuple(sources),
        batch_watermark_ms=_int_field(meta, "batchWatermarkMs", path, 2),
        batch_timestamp_ms=_int_field(meta, "batchTimestampMs", path, 2),
        conf=dict(conf),
    )


def parse_commit_log(data: bytes | str, path: str) -> CommitLogEntry:
    """Parse ``commits/N`` (v1..v3); a missing JSON line means ``{}`` as in Spark."""
    lines = _lines(_decode(data, path))
    version = _version(lines, path, MAX_COMMIT_LOG_VERSION, "commit log")
    body = _json_line(lines[1], path, 2, "commit metadata JSON") if len(lines) > 1 else {}
    if not isinstance(body, dict):
        raise CorruptCheckpointFile(
            path=path, line=2, found=f"a JSON {type(body).__name__}", expected="a JSON object"
        )
    ids = body.get("stateUniqueIds")
    if ids is not None and not isinstance(ids, dict):
        raise CorruptCheckpointFile(
            path=path, line=2, found=f"stateUniqueIds={ids!r:.40}", expected="an object"
        )
    return CommitLogEntry(
        version=version,
        next_batch_watermark_ms=_int_field(body, "nextBatchWatermarkMs", path, 2) or 0,
        state_unique_ids=ids,
    )


def parse_metadata(data: bytes | str, path: str) -> str:
    """Return the query id from the checkpoint's ``metadata`` file (``{"id":"<uuid>"}``)."""
    lines = _lines(_decode(data, path))
    if not lines:
        raise CorruptCheckpointFile(path=path, line=1, found="an empty file", expected='{"id":"<uuid>"}')
    body = _json_line(lines[0], path, 1, '{"id":"<uuid>"}')
    query_id = body.get("id") if isinstance(body, dict) else None
    try:
        uuid.UUID(str(query_id))
    except ValueError:
        raise CorruptCheckpointFile(
            path=path, line=1, found=f"id {query_id!r:.50}", expected="a UUID query id"
        ) from None
    return str(query_id)


def parse_initial_offsets(data: bytes | str, path: str) -> str:
    """Return the offset text of ``sources/<i>/0``.

    Tolerates the leading 0x00 byte of the Kafka source (or its absence), a missing version line
    (Spark 2.1 format, accepted by Spark too) and a trailing newline. Without the 0x00 byte, a
    multi-line log (the file source keeps one there) is returned as it is and will not classify as
    Kafka. With it, the Kafka source wrote exactly one offset line: anything more raises
    :class:`CorruptCheckpointFile` instead of passing for another kind of source.
    """
    marked = isinstance(data, bytes) and data[:1] == b"\x00"
    if marked:
        data = data[1:]
    text = _decode(data, path)
    if not text.startswith("v"):
        body = text.rstrip("\r\n")
        if marked and "\n" in body:
            first = body.split("\n", 1)[0]
            raise CorruptCheckpointFile(
                path=path, line=1, found=f"first line {first[:20]!r} and more lines",
                expected="'v1' then one line of Kafka initial offsets",
            )
        return body
    lines = _lines(text)
    _version(lines, path, MAX_INITIAL_OFFSETS_VERSION, "initial offsets")
    if marked and len(lines) != 2:
        raise CorruptCheckpointFile(
            path=path, line=min(len(lines) + 1, 3), found=f"{len(lines)} line(s) after the 0x00 byte",
            expected="a version line and one offset line (Kafka initial offsets)",
        )
    return "\n".join(lines[1:])


def parse_initial_source(
    data: bytes | str, path: str, index: int, name: str | None = None
) -> SourceOffsets:
    """Classified :class:`SourceOffsets` of ``sources/<i>/0``; unparsable bodies are 'unknown'."""
    body = parse_initial_offsets(data, path)
    try:
        return SourceOffsets.parse(index, body, name=name)
    except InvalidOffsets as exc:
        if "\n" in body:  # a source's own multi-line log (file source): not offsets
            return SourceOffsets(index=index, kind=SourceKind.UNKNOWN, raw=body, name=name)
        raise CorruptCheckpointFile(
            path=path, line=2, found=exc.found, expected="initial source offsets as JSON"
        ) from None
