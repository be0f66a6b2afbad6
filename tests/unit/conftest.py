"""Synthetic Spark checkpoints written byte for byte the way Spark 4.x writes them.

``write_checkpoint`` builds one on a local directory or an fsspec URL (``memory://``) with the
knobs the tests need: v1/v2 offset logs, v1/v2 commit logs, ``.crc`` files, temp files, purged
history, gaps, in-flight batches, missing metadata, initial offsets under ``sources/``.
The Hadoop checksum writer here is deliberately independent of the library's.
"""

from __future__ import annotations

import json
import struct
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import fsspec
import pytest
from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets


@pytest.fixture(autouse=True)
def _one_look_before_deferring(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deferring step looks once before it defers in the unit tests (their fakes never change
    while the step waits); the tests of the wait in the task set ``wait_in_task_s`` themselves."""
    monkeypatch.setattr("airflow_ckpt_provider.operators.journaled.WAIT_IN_TASK_S", 0.0)


QUERY_ID = "abab5a79-a66c-41f4-85f8-55b2a371bf7e"
CONF = {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.multipleWatermarkPolicy": "min"}

Sources = Callable[[int], Sequence[str | None]]


def spark_crc(data: bytes, per_chunk: int = 512) -> bytes:
    """Hadoop ChecksumFileSystem .crc content."""
    sums = [zlib.crc32(data[i : i + per_chunk]) for i in range(0, len(data), per_chunk)]
    return b"crc\x00" + struct.pack(">i", per_chunk) + b"".join(struct.pack(">I", s) for s in sums)


def kafka_json(offsets: dict[str, dict[int, int]]) -> str:
    """Kafka offset JSON with keys in REVERSE order (Spark does not sort them)."""
    reverse = {
        t: {str(p): o for p, o in sorted(parts.items(), reverse=True)}
        for t, parts in sorted(offsets.items(), reverse=True)
    }
    return json.dumps(reverse, separators=(",", ":"))


def kafka_offsets_at(batch: int, partitions: int = 4, topic: str = "events") -> dict[str, dict[int, int]]:
    return {topic: {p: 100 * (batch + 1) + p for p in range(partitions)}}


def kafka_only(batch: int) -> list[str | None]:
    return [kafka_json(kafka_offsets_at(batch))]


def kafka_and_rate(batch: int) -> list[str | None]:
    return [kafka_json(kafka_offsets_at(batch)), str(max(batch, 0) * 5)]


@dataclass
class Built:
    """A written checkpoint and the truth about it."""

    fs: AbstractFileSystem
    root: str
    uri: str
    query_id: str | None
    planned: list[int]
    committed: list[int]
    lines: dict[int, list[str | None]]
    names: list[str] | None
    initial: list[str | None] = field(default_factory=list)

    def path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def write(self, rel: str, data: bytes) -> None:
        _pipe(self.fs, self.path(rel), data)

    def read(self, rel: str) -> bytes:
        return self.fs.cat_file(self.path(rel))

    def files(self) -> list[str]:
        """Relative paths of every file, sorted."""
        prefix = self.root.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in self.fs.find(self.root, withdirs=False))

    @property
    def last_committed(self) -> int | None:
        return max(self.committed, default=None)

    def kafka(self, batch: int, source: int = 0) -> KafkaOffsets:
        raw = self.lines[batch][source]
        assert raw is not None
        return KafkaOffsets.from_json(raw)


def _offset_file(version: int, lines: Sequence[str | None], names: Sequence[str] | None, batch: int,
                 empty_meta: bool, conf: dict[str, str]) -> bytes:
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": 1795290400000 + batch * 1000, "conf": conf}
    if version == 2:
        meta["sourceMetadataInfo"] = {}
        assert names is not None
        body = [f"{n}:{'-' if raw is None else raw}" for n, raw in reversed(list(zip(names, lines, strict=False)))]
    else:
        body = ["-" if raw is None else raw for raw in lines]
    meta_line = "" if empty_meta and version == 1 else json.dumps(meta, separators=(",", ":"))
    return "\n".join([f"v{version}", meta_line, *body]).encode()


def _pipe(fs: AbstractFileSystem, path: str, data: bytes) -> None:
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    fs.pipe_file(path, data)


def _commit_file(version: int, operators: Sequence[int]) -> bytes:
    body: dict[str, Any] = {"nextBatchWatermarkMs": 0}
    if version >= 2:
        body["stateUniqueIds"] = {str(op): [[str(uuid.uuid4())], [str(uuid.uuid4())]] for op in operators}
    return f"v{version}\n{json.dumps(body, separators=(',', ':'))}".encode()


def write_checkpoint(
    target: str,
    *,
    batches: Iterable[int] = range(3),
    committed: Iterable[int] | None = None,
    sources: Sources = kafka_only,
    names: Sequence[str] | None = None,
    offsets_version: int = 1,
    commit_version: int = 1,
    crc: bool = False,
    tmp_files: bool = False,
    metadata: bool = True,
    query_id: str = QUERY_ID,
    initial: bool = True,
    state_operators: Sequence[int] = (),
    empty_meta_line: bool = False,
    trailing_newline: bool = False,
    conf: dict[str, str] | None = None,
) -> Built:
    """Write a checkpoint at ``target`` (a local directory or a URL) and describe it."""
    fs, root = fsspec.core.url_to_fs(target)
    planned = sorted(batches)
    done = sorted(planned if committed is None else committed)
    if offsets_version == 2 and names is None:
        names = [f"src_{chr(97 + i)}" for i in range(len(sources(0)))]
    fs.makedirs(root, exist_ok=True)

    def put(rel: str, data: bytes) -> None:
        path = f"{root.rstrip('/')}/{rel}"
        if trailing_newline and rel.split("/")[0] in ("offsets", "commits"):
            data += b"\n"
        _pipe(fs, path, data)
        if crc:
            head, _, name = path.rpartition("/")
            _pipe(fs, f"{head}/.{name}.crc", spark_crc(data))

    if metadata:
        put("metadata", json.dumps({"id": query_id}, separators=(",", ":")).encode())
    lines = {b: list(sources(b)) for b in planned}
    fs.makedirs(f"{root}/offsets", exist_ok=True)
    fs.makedirs(f"{root}/commits", exist_ok=True)
    for b in planned:
        put(f"offsets/{b}", _offset_file(offsets_version, lines[b], names, b, empty_meta_line, conf or CONF))
    for b in done:
        put(f"commits/{b}", _commit_file(commit_version, state_operators))
    if tmp_files:
        nxt = (planned[-1] + 1) if planned else 0
        fs.pipe_file(f"{root}/offsets/.{nxt}.{uuid.uuid4()}.tmp", b"v1\n{}\ngarbage")
        fs.pipe_file(f"{root}/commits/..{nxt}.{uuid.uuid4()}.tmp.crc", b"crc\x00junk")
        fs.pipe_file(f"{root}/offsets/README", b"not a batch")
    first: list[str | None] = list(sources(min(planned, default=0) - 1)) if initial else []
    for i, raw in enumerate(first):
        if raw is None:
            continue
        label = names[i] if names else str(i)
        put(f"sources/{label}/0", b"\x00v1\n" + raw.encode())
    for op in state_operators:  # as the HDFS-backed store writes them: a delta per version, each batch
        _pipe(fs, f"{root}/state/{op}/_metadata/metadata", b'v1\n{"operatorInfo":{"operatorId":%d}}' % op)
        for part in (0, 1):
            for version in range(1, max(done, default=0) + 2):
                _pipe(fs, f"{root}/state/{op}/{part}/{version}.delta", b"\x00\x01")
    return Built(fs=fs, root=root, uri=target, query_id=query_id if metadata else None,
                 planned=planned, committed=done, lines=lines, names=list(names) if names else None,
                 initial=first)


@pytest.fixture(params=["local", "memory"])
def location(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[str]:
    """Where to build a checkpoint: a local directory or a fresh memory:// URL."""
    if request.param == "local":
        yield str(tmp_path / "ck")
        return
    url = f"memory://t-{uuid.uuid4().hex}/ck"
    yield url
    fs, root = fsspec.core.url_to_fs(url)
    if fs.exists(root):
        fs.rm(root.rsplit("/", 1)[0], recursive=True)
