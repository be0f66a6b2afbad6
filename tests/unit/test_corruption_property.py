"""Property: a corrupted checkpoint WITH .crc files yields a CheckpointError or the true handover.

Corruptions: truncate a file, flip a byte, change a digit into another digit (valid-looking, so
only the checksum can tell), delete a file, copy a batch file under another name, replace a
version line. Files the reader depends on are drawn more often.

Left out on purpose: copying ``commits/N`` onto the id of an in-flight batch (with or without its
.crc). The result is byte for byte a checkpoint in which that batch did commit; no reader can
tell the difference.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import fsspec
from hypothesis import event, given, settings
from hypothesis import strategies as st

from airflow_ckpt_provider.checkpoint.errors import CheckpointError
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.unit.conftest import Built, kafka_and_rate, kafka_only, write_checkpoint


@dataclass(frozen=True)
class Shape:
    start: int
    planned: int
    committed: int  # number of committed batches (prefix of planned)
    offsets_version: int
    commit_version: int
    two_sources: bool
    trailing_newline: bool


shapes = st.builds(
    Shape,
    start=st.sampled_from([0, 0, 97]),
    planned=st.integers(1, 5),
    committed=st.integers(0, 5),
    offsets_version=st.sampled_from([1, 2]),
    commit_version=st.sampled_from([1, 2]),
    two_sources=st.booleans(),
    trailing_newline=st.booleans(),
)


def build(shape: Shape) -> Built:
    planned = list(range(shape.start, shape.start + shape.planned))
    return write_checkpoint(
        f"memory://prop-{uuid.uuid4().hex}/ck",
        batches=planned,
        committed=planned[: min(shape.committed, len(planned))],
        sources=kafka_and_rate if shape.two_sources else kafka_only,
        offsets_version=shape.offsets_version,
        commit_version=shape.commit_version,
        trailing_newline=shape.trailing_newline,
        crc=True,
    )


def essence(handover: Handover) -> tuple[object, ...]:
    return (handover.query_id, handover.batch_id, handover.from_initial, handover.sources)


def corrupt(built: Built, data: st.DataObject) -> str:
    files = built.files()
    last, newest = built.last_committed, max(built.planned)
    read_set = {"metadata", f"commits/{last}", f"offsets/{last}", f"offsets/{newest}", f"commits/{newest}"}
    if last is None:
        read_set |= {f for f in files if f.startswith("sources/")}
    read_set |= {f"{h}/.{n}.crc".lstrip("/") for h, _, n in (f.rpartition("/") for f in set(read_set))}
    important = sorted(read_set & set(files))
    target = data.draw(st.sampled_from(important) | st.sampled_from(files), label="file")
    content = built.read(target)
    kinds = ["truncate", "flip", "digit", "delete", "duplicate", "version"]
    kind = data.draw(st.sampled_from(kinds), label="kind")
    head, _, name = target.rpartition("/")
    if kind == "truncate" and content:
        built.write(target, content[: data.draw(st.integers(0, len(content) - 1), label="length")])
    elif kind == "flip" and content:
        position = data.draw(st.integers(0, len(content) - 1), label="position")
        mask = data.draw(st.integers(1, 255), label="mask")
        built.write(target, content[:position] + bytes([content[position] ^ mask]) + content[position + 1 :])
    elif kind == "digit" and any(c in b"0123456789" for c in content):
        # a plausible-looking change only the checksum can reveal
        digits = [i for i, c in enumerate(content) if c in b"0123456789"]
        position = data.draw(st.sampled_from(digits), label="digit position")
        other = data.draw(st.sampled_from([d for d in b"0123456789" if d != content[position]]), label="digit")
        built.write(target, content[:position] + bytes([other]) + content[position + 1 :])
    elif kind == "delete":
        built.fs.rm(built.path(target))
    elif kind == "duplicate" and name.isdigit():
        existing = set(files)
        fresh = str(max(built.planned) + 1 + data.draw(st.integers(0, 3), label="ahead"))
        candidates = [f"0{name}", f".{name}.{uuid.uuid4()}.tmp", f"{name}.bak", f"{name} copy"]
        if head == "offsets" or (head == "commits" and f"offsets/{fresh}" not in existing):
            candidates.append(fresh)
        new = data.draw(st.sampled_from(candidates), label="new name")
        built.write(f"{head}/{new}" if head else new, content)
        if data.draw(st.booleans(), label="with crc") and f"{head}/.{name}.crc" in existing:
            built.write(f"{head}/.{new}.crc", built.read(f"{head}/.{name}.crc"))
    elif kind == "version" and content:
        bad = data.draw(st.sampled_from([b"v9", b"v0", b"x1", b"v", b"v1 ", b"v3"]), label="version")
        prefix = b"\x00" if content[:1] == b"\x00" else b""
        rest = content[len(prefix):]
        built.write(target, prefix + bad + rest[rest.find(b"\n"):] if b"\n" in rest else prefix + bad)
    return f"{kind} {target}"


@settings(max_examples=200, deadline=None)
@given(shape=shapes, data=st.data())
def test_corruption_never_yields_a_wrong_handover(shape: Shape, data: st.DataObject) -> None:
    built = build(shape)
    try:
        try:
            truth = essence(CheckpointReader(built.uri).handover())
        except CheckpointError:
            assert built.last_committed is None and not built.initial  # only "nothing to hand over"
            truth = None
        if truth is not None:
            assert truth[1] == built.last_committed
            if built.last_committed is not None:
                assert [s.raw for s in truth[3]] == built.lines[built.last_committed]  # type: ignore[index]
        what = corrupt(built, data)
        event(what.split()[0])
        try:
            result = essence(CheckpointReader(built.uri).handover())
        except CheckpointError:
            return
        assert result == truth, what
    finally:
        fs, root = fsspec.core.url_to_fs(built.uri)
        fs.rm(root.rsplit("/", 1)[0], recursive=True)
