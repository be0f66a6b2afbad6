"""Parsers for single checkpoint files: pure functions over bytes (plus the path for messages), and
the batch ids of a listing by the name rule of :mod:`airflow_ckpt_provider.batch_names`
(:func:`batch_ids`). The one lister of the batch logs, which reads through an fsspec filesystem, is
:func:`airflow_ckpt_provider.storage.listing.list_batch_ids`.

Formats (checked against checkpoints written by Spark 4.2, and against Spark's readers for what
Spark 2.1 onward wrote and still resumes from):

* Version lines: ``v`` + a Java int above 0, as ``MetadataVersionUtil.validateVersion`` reads them;
  lines end at ``\\n``, ``\\r\\n`` or ``\\r`` (``getLines``).
* ``offsets/N``: ``v1`` or ``v2``; then OffsetSeqMetadata JSON (may be empty in v1; no ``conf``
  from Spark 2.1; required in v2, where it may add ``sourceMetadataInfo`` and
  ``controlBatchInfo``); then one line per source: offset JSON or ``-`` (v1, in source order) or
  ``<key>:<offset JSON or ->`` (v2, any order; Spark's ``OffsetSeqLog`` splits at the first
  ``:``). A v2 key is the source's name when source evolution names it
  (``DataStreamReader.name``: ASCII letters, digits, ``_``), else its id, the source's position
  (``0``, ``1``, ...; ``spark.sql.streaming.offsetLog.formatVersion=2``).
* ``commits/N``: ``v1``..``v3`` (version line trimmed); then ``{"nextBatchWatermarkMs":..}`` (v2
  adds ``stateUniqueIds``, v3 ``sinkMetadataMap``); Spark treats a missing JSON line as ``{}``.
  Spark 2.1 wrote no commit log.
* ``<state file>.crc`` (Spark 4.1+, ``spark.sql.streaming.checkpoint.fileChecksum.enabled``):
  Spark's own checksum of a state file, one JSON object ``{"algorithm":"CRC32C","value":<Java
  int>,"mainFileSize":<bytes>,"timestampMs":..,"creator":{..}}`` (``ChecksumCheckpointFileManager``).
  Not to be confused with Hadoop's hidden ``.<name>.crc`` below.
* ``metadata``: the JSON document ``{"id":"<uuid>"}``, in any layout (json4s reads it whole).
* ``sources/<i>/0`` (Kafka initial offsets): a 0x00 byte, ``v1\\n``, then offset JSON; Spark 2.1.0
  wrote the JSON's length as one byte, then the JSON. Other sources: ``v1`` + their own lines.
* ``.<name>.crc``: Hadoop ChecksumFileSystem: ``b"crc\\0"``, big-endian int32 bytesPerChecksum,
  then one big-endian CRC32 per chunk of the data file.

Every parser raises :class:`CorruptCheckpointFile` (or :class:`UnsupportedLogVersion`) with the
path and the 1-based line number when the content is not what Spark writes.
"""

from __future__ import annotations

import json
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
    ImpossibleOffsets,
    InvalidOffsets,
    JsonTooLarge,
    UnsupportedLogVersion,
)
from airflow_ckpt_provider.checkpoint.jsonin import check_json_limits, load_json
from airflow_ckpt_provider.checkpoint.offsets import (
    SourceKind,
    SourceOffsets,
    classify,
    parse_json,
    sentinel_offsets,
)

if TYPE_CHECKING:
    pass

MAX_OFFSET_LOG_VERSION = 2
MAX_COMMIT_LOG_VERSION = 3
MAX_INITIAL_OFFSETS_VERSION = 1
CRC_MAGIC = b"crc\x00"
DEFAULT_BYTES_PER_CHECKSUM = 512

_LINE_BREAK = re.compile(r"\r\n|\n|\r")
# a v2 offset log key naming a source by its id (its position), not by a name
_SOURCE_ID = re.compile(r"(0|[1-9][0-9]{0,8})")
# Java's Integer.parseInt: an optional sign, then decimal digits (Unicode digits too), within int32
_JAVA_INT = re.compile(r"[+-]?\d+")
_INT_MAX = 2**31 - 1
_JSON_SPACE = " \t\r\n"
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class OffsetLogEntry:
    """One parsed ``offsets/N`` file."""

    version: int
    sources: tuple[SourceOffsets, ...]
    batch_watermark_ms: int | None = None
    batch_timestamp_ms: int | None = None
    conf: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: written by Spark 2.1: its OffsetSeqMetadata has both times and no ``conf`` (recorded since 2.2)
    spark_2_1: bool = False


@dataclass(frozen=True)
class CommitLogEntry:
    """One parsed ``commits/N`` file."""

    version: int
    next_batch_watermark_ms: int
    state_unique_ids: Mapping[str, Any] | None = field(default=None, hash=False)
    #: commits v3 (sink evolution): sink name -> what the sink recorded for the batch
    sink_metadata: Mapping[str, Any] | None = field(default=None, hash=False)


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
    """Split like Spark's readers (Scala ``getLines``, Java ``BufferedReader.readLine``): a line
    ends at ``\\n``, ``\\r\\n`` or a lone ``\\r``; a trailing line break adds no line."""
    if not text:
        return []
    lines = _LINE_BREAK.split(text)
    if lines[-1] == "":
        lines.pop()
    return lines


def _java_trim(text: str) -> str:
    """Java's ``String.trim``: drop every character up to U+0020 at both ends."""
    return text.strip("".join(map(chr, range(0x21))))


def log_version(line: str, path: str, maximum: int, what: str, *, number: int = 1) -> int:
    """The version of a log's version line, read as Spark's ``MetadataVersionUtil.validateVersion``
    reads it: ``v`` then a Java int above 0 (``v1``, also ``v01``).

    Raises :class:`CorruptCheckpointFile` for a malformed line (Spark: "Log file was malformed")
    and :class:`UnsupportedLogVersion` naming the version found and the versions supported when it
    is above ``maximum`` (Spark: "UnsupportedLogVersion: maximum supported log version is ...").
    """
    match = _JAVA_INT.fullmatch(line[1:]) if line[:1] == "v" else None
    version = int(line[1:]) if match else 0
    if not match or not 0 < version <= _INT_MAX:
        raise CorruptCheckpointFile(
            path=path, line=number, found=f"version line {line[:20]!r}",
            expected=f"{_supported(maximum)} (the {what} version line Spark writes)",
        )
    if version > maximum:
        raise UnsupportedLogVersion(
            path=path, line=number, version=version, maximum=maximum,
            found=f"{what} version v{version}",
            expected=f"{_supported(maximum)}, the {what} versions this provider reads",
        )
    return version


def _supported(maximum: int) -> str:
    return "'v1'" if maximum == 1 else f"'v1'..'v{maximum}'"


def _version(lines: list[str], path: str, maximum: int, what: str) -> int:
    if not lines:
        raise CorruptCheckpointFile(path=path, line=1, found="an empty file", expected=f"a {what}")
    return log_version(lines[0], path, maximum, what)


def _json_line(line: str, path: str, number: int, expected: str) -> Any:
    try:
        return load_json(line, what=f"line {number}", path=path, line=number, strict=True)
    except JsonTooLarge:
        raise
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
    except JsonTooLarge as exc:
        raise JsonTooLarge(found=exc.found, expected=exc.expected, path=path, line=number) from None
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
    meta_line = _java_trim(lines[1])
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
        sources = _keyed_sources(lines[2:], path)
    return OffsetLogEntry(
        version=version,
        sources=tuple(sources),
        batch_watermark_ms=_int_field(meta, "batchWatermarkMs", path, 2),
        batch_timestamp_ms=_int_field(meta, "batchTimestampMs", path, 2),
        conf=dict(conf),
        spark_2_1=version == 1 and "conf" not in meta and {"batchWatermarkMs", "batchTimestampMs"} <= set(meta),
    )


def _keyed_sources(lines: list[str], path: str) -> list[SourceOffsets]:
    """The source lines of a v2 offset log, ``<key>:<offset JSON or ->`` in any order.

    A key of decimal digits is a source id (unnamed sources, ``offsetLog.formatVersion=2``): the
    source keeps that position as its index and has no name, exactly as in a v1 log, so a handover
    reads the same whichever version wrote it. Any other key is a source name (source evolution);
    named sources follow the numbered ones in name order and are indexed by that position."""
    keyed: dict[str, tuple[int, str | None]] = {}
    for number, line in enumerate(lines, start=3):
        key, sep, raw = line.partition(":")
        if not sep or not key or key in keyed:
            raise CorruptCheckpointFile(
                path=path, line=number, found=f"source line {line[:40]!r}",
                expected="'<unique source name or id>:<offset JSON or ->'",
            )
        keyed[key] = (number, None if raw == "-" else raw)
    ids = sorted((int(key), key) for key in keyed if _SOURCE_ID.fullmatch(key))
    names = sorted(key for key in keyed if not _SOURCE_ID.fullmatch(key))
    sources = [_source(index, keyed[key][1], None, path, keyed[key][0]) for index, key in ids]
    first = len(ids)
    sources += [_source(first + position, keyed[key][1], key, path, keyed[key][0])
                for position, key in enumerate(names)]
    return sources


def check_committed_sources(sources: tuple[SourceOffsets, ...], batch: int, path: str) -> None:
    """Refuse Kafka offsets Spark never records for a committed batch: a sentinel (-1 latest, -2
    earliest) instead of a resolved position. :class:`ImpossibleOffsets` names the batch, the file
    and the first partitions concerned. Only for ``offsets/N`` of a committed batch: initial offsets
    and ``startingOffsets`` may legitimately hold sentinels."""
    for source in sources:
        found = sentinel_offsets(source.kafka) if source.kafka is not None else []
        if found:
            shown = ", ".join(f"{topic}-{partition}={offset}" for topic, partition, offset in found[:5])
            more = f" and {len(found) - 5} more" if len(found) > 5 else ""
            raise ImpossibleOffsets(
                batch=batch, path=path,
                found=f"committed batch {batch}, source {source.label}: sentinel offsets {shown}{more} "
                      "(-1 means latest, -2 earliest)",
                expected="the resolved offsets (>= 0) Spark records for every committed batch",
            )


def parse_committed_offset_log(data: bytes | str, path: str, batch: int) -> OffsetLogEntry:
    """:func:`parse_offset_log` of the committed batch ``batch``, refused by
    :func:`check_committed_sources` when a Kafka source holds a sentinel."""
    entry = parse_offset_log(data, path)
    check_committed_sources(entry.sources, batch, path)
    return entry


def parse_commit_log(data: bytes | str, path: str) -> CommitLogEntry:
    """Parse ``commits/N`` (v1..v3); a missing JSON line means ``{}`` as in Spark."""
    lines = _lines(_decode(data, path))
    if lines:  # CommitLog trims its version line (the offset log does not)
        lines[0] = _java_trim(lines[0])
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
    sinks = body.get("sinkMetadataMap")
    if sinks is not None and not isinstance(sinks, dict):
        raise CorruptCheckpointFile(
            path=path, line=2, found=f"sinkMetadataMap={sinks!r:.40}", expected="an object"
        )
    return CommitLogEntry(
        version=version,
        next_batch_watermark_ms=_int_field(body, "nextBatchWatermarkMs", path, 2) or 0,
        state_unique_ids=ids,
        sink_metadata=sinks,
    )


def _json_document(text: str, path: str, expected: str) -> Any:
    """One JSON value filling ``text`` (whitespace and line breaks around and inside allowed, as
    json4s reads it); :class:`CorruptCheckpointFile` with the line of the first problem."""
    body = text.lstrip(_JSON_SPACE)
    check_json_limits(body, what=expected, path=path)
    try:
        end = _DECODER.raw_decode(body)[1]
        value = parse_json(body[:end])  # strict: no duplicate keys, no NaN
    except ValueError as exc:
        position = len(text) - len(body) + getattr(exc, "pos", 0)
        raise CorruptCheckpointFile(path=path, line=text[:position].count("\n") + 1,
                                    found=f"invalid JSON ({exc})", expected=expected) from None
    rest = body[end:]
    if rest.strip(_JSON_SPACE):
        position = len(text) - len(rest.lstrip(_JSON_SPACE))
        raise CorruptCheckpointFile(path=path, line=text[:position].count("\n") + 1,
                                    found=f"more after the JSON value: {rest.strip()[:30]!r}", expected=expected)
    return value


def parse_metadata(data: bytes | str, path: str) -> str:
    """Return the query id from the checkpoint's ``metadata`` file: the JSON object
    ``{"id":"<uuid>"}``. Spark writes it on one line; like Spark's ``StreamMetadata.read`` (json4s)
    any JSON layout is read (several lines, indentation) and other fields are ignored."""
    text = _decode(data, path)
    if not text.strip(_JSON_SPACE):
        raise CorruptCheckpointFile(path=path, line=1, found="an empty file", expected='{"id":"<uuid>"}')
    body = _json_document(text, path, '{"id":"<uuid>"}')
    query_id = body.get("id") if isinstance(body, dict) else None
    try:
        uuid.UUID(str(query_id))
    except ValueError:
        raise CorruptCheckpointFile(
            path=path, line=1, found=f"id {query_id!r:.50}", expected="a UUID query id"
        ) from None
    return str(query_id)


def parse_initial_offsets(data: bytes | str, path: str) -> str:
    """Return the offset text of ``sources/<i>/0``, told apart by its first byte.

    * ``0x00``: the Kafka source (Spark 2.1.1+ ``KafkaSourceInitialOffsetWriter``): then ``v1``, a
      line break and the offsets as one line of JSON (a trailing line break is tolerated). After
      the byte, Spark also reads the Spark 2.1.0 layout (JSON without a version line).
    * any other byte followed by ``{``: Spark 2.1.0's Kafka source, which wrote the JSON's length
      as one byte, then the JSON. Spark 2.1.1+ skips that byte the same way.
    * ``v`` + version line: a source's own versioned log (rate: ``v1`` + a number; file source:
      ``v1`` + one JSON line per file), returned as it is after the version line.

    Raises :class:`UnsupportedLogVersion` for a version newer than v1 and
    :class:`CorruptCheckpointFile` for what Spark's Kafka source would not read (or reads
    differently), e.g. Kafka offsets without the leading byte, or a second line.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if not raw:
        raise CorruptCheckpointFile(path=path, line=1, found="an empty file",
                                    expected="initial source offsets")
    lead, rest = raw[:1], raw[1:]
    if lead == b"\x00":
        return _kafka_initial(_decode(rest, path), path)
    if rest[:1] == b"{":  # Spark 2.1.0: a length byte (any value, '{' and 'v' too), then the JSON
        return _kafka_initial(_decode(rest, path), path)
    text = _decode(raw, path)
    if lead != b"v":
        _refuse_unmarked_kafka(text, path)
        return text.rstrip("\r\n")
    lines = _lines(text)
    _version(lines, path, MAX_INITIAL_OFFSETS_VERSION, "initial offsets")
    body = "\n".join(lines[1:])
    if len(lines) == 2:
        _refuse_unmarked_kafka(body, path, version_line=True)
    return body


def _kafka_initial(text: str, path: str) -> str:
    """The Kafka initial offsets after their first byte, as ``KafkaSourceInitialOffsetWriter``
    reads them: ``v<N>`` and a line break then JSON, or JSON alone (Spark 2.1.0)."""
    if text[:1] != "v":
        body = text.rstrip("\r\n")
        several = _LINE_BREAK.search(body) is not None
        if not body.startswith("{") or several:
            first = _lines(body)[0] if body else ""
            raise CorruptCheckpointFile(
                path=path, line=1, found=f"first line {first[:20]!r}" + (" and more lines" if several else ""),
                expected="'v1' then one line of Kafka initial offsets (or, Spark 2.1.0, one line of JSON)",
            )
        return body
    newline = text.find("\n")
    if newline <= 0:
        raise CorruptCheckpointFile(path=path, line=1, found=f"only a version line {text[:20]!r}",
                                    expected="'v1' then one line of Kafka initial offsets")
    # Spark takes everything before the first \n as the version line: a \r stays part of it
    log_version(text[:newline], path, MAX_INITIAL_OFFSETS_VERSION, "Kafka initial offsets")
    lines = _lines(text[newline + 1 :])
    if len(lines) != 1:
        raise CorruptCheckpointFile(
            path=path, line=2 if not lines else 3, found=f"{len(lines)} line(s) after the version line",
            expected="one line of Kafka initial offsets (Spark writes them on one line)",
        )
    return lines[0]


def _refuse_unmarked_kafka(body: str, path: str, *, version_line: bool = False) -> None:
    """Kafka offsets in a file that does not start with the byte Spark's Kafka source writes first
    would be misread by Spark (it skips the first byte); refuse them instead of guessing."""
    try:
        kind, _ = classify(body)
    except (InvalidOffsets, JsonTooLarge):  # refused with its path when the body is parsed
        return
    if kind is SourceKind.KAFKA:
        first = "'v'" if version_line else repr(body[:1])
        raise CorruptCheckpointFile(
            path=path, line=1,
            found=f"Kafka initial offsets whose first byte is {first}, not the 0x00 byte Spark's Kafka source writes",
            expected="0x00, 'v1', a line break, then the offsets (or Spark 2.1.0's length byte, then the offsets)",
            action="Spark skips the first byte and would fail to read the rest. Restore the file from a backup or "
            "write the byte back (it is 0x00); nothing was changed.",
        )


def parse_initial_source(
    data: bytes | str, path: str, index: int, name: str | None = None
) -> SourceOffsets:
    """Classified :class:`SourceOffsets` of ``sources/<i>/0``; unparsable bodies are 'unknown'."""
    body = parse_initial_offsets(data, path)
    try:
        return SourceOffsets.parse(index, body, name=name)
    except JsonTooLarge as exc:
        raise JsonTooLarge(found=exc.found, expected=exc.expected, path=path, line=2) from None
    except InvalidOffsets as exc:
        if "\n" in body:  # a source's own multi-line log (file source): not offsets
            return SourceOffsets(index=index, kind=SourceKind.UNKNOWN, raw=body, name=name)
        raise CorruptCheckpointFile(
            path=path, line=2, found=exc.found, expected="initial source offsets as JSON"
        ) from None
