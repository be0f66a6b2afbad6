"""Fuzzing: 1,000+ corruptions of REAL checkpoints written by Spark reading a real Kafka broker.

Two checkpoints are written once per module: ``committed`` (an availableNow Kafka -> Parquet
query, every batch committed) and ``in-flight`` (a foreachBatch query whose batch 2 fails: Spark
leaves ``offsets/2`` without ``commits/2``, the shape a crash mid-batch leaves). Each is fuzzed as
Spark wrote it on the local filesystem (with Hadoop ``.crc`` files) and with the ``.crc`` files
removed (what object stores and ``hdfs://`` look like to the reader). The TRUE handover is worked out
from the pristine bytes independently of the reader: the largest id in ``commits/``, line 3 of its
``offsets/N``, the id in ``metadata``.

Every example copies a pristine checkpoint to ``memory://``, applies ONE corruption (truncate,
flip a byte, change a digit, delete a file, copy a batch file under another name, replace the
version line, garbage metadata / metadata line / commit body) and runs ``CheckpointReader.handover()``
and ``.snapshot(include_initial=True)``. Only :class:`CheckpointError` subclasses may escape, and a
returned handover must equal the true one (query id, batch id, sources byte for byte); a returned
snapshot must agree with it. Where the damage is certain to be detectable the error is REQUIRED
(``must``): any change of a file the call reads when its ``.crc`` is there, an unknown version
``v99`` without it, a deleted last ``offsets/N``, a commit without offsets, a ``007``-style name.

Left out, because no reader can detect them (they produce a valid-looking checkpoint that says
something else; the unit property in ``tests/unit/test_corruption_property.py`` leaves out the
first for the same reason):

* ``commits/N`` copied onto the id of the in-flight batch (with or without its ``.crc``): byte for
  byte a checkpoint in which that batch committed;
* a batch file copied together with its ``.crc`` over the LAST COMMITTED ``offsets/N``: another
  batch's offsets with a matching checksum.

Without ``.crc`` files, additionally left out:

* changing a digit into another digit, and flipping a byte that is not JSON structure
  (``{}[]":,`` or a newline): inside a number, a topic name or the query id it yields another
  valid value;
* deleting the last ``commits/N``: exactly what a crash between ``offsets/N`` and ``commits/N``
  leaves, so the previous batch is (correctly, as far as anyone can tell) the last committed one;
* overwriting the last committed ``offsets/N`` with another batch's file.

Two outcomes are exact but not the pristine handover, and are asserted as such: without
``.crc``, a deleted ``metadata`` gives query id None (Spark, too, starts a new id then), and a
deleted ``sources/0/0`` gives no initial sources (``verify`` then says NotStartedYet).

The number of examples run is counted per variant; ``test_zz_fuzz_case_count`` asserts the total
(1,600: 400 per variant, derandomized, no example database; about 6 s after ~20 s of Spark).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import fsspec
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    CommitWithoutOffsets,
    CorruptCheckpointFile,
    UnsupportedLogVersion,
)
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind, SourceOffsets
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.harness.records import produce_records
from tests.integration.streams import drain, kafka_reader

pytestmark = pytest.mark.integration

RECORDS = 300
PER_TRIGGER = 60
FAILING_BATCH = 2
EXAMPLES = {"committed-crc": 400, "committed-nocrc": 400, "in-flight-crc": 400, "in-flight-nocrc": 400}
RUNS: Counter[str] = Counter()
KINDS: Counter[str] = Counter()
TIMINGS: dict[str, float] = {}

STRUCTURAL = frozenset(b'{}[]":,\n')
DIGITS = frozenset(b"0123456789")
_CANONICAL = re.compile(r"(0|[1-9][0-9]*)\Z")


@dataclass(frozen=True)
class Pristine:
    """A real checkpoint's bytes and the truth about it, worked out without the reader."""

    name: str
    files: dict[str, bytes]
    crc: bool
    query_id: str
    last_committed: int
    planned: tuple[int, ...]
    committed: tuple[int, ...]
    sources: tuple[SourceOffsets, ...]
    initial: tuple[SourceOffsets, ...]

    def essence(self, query_id: object = "same") -> tuple[object, ...]:
        return (self.query_id if query_id == "same" else query_id, self.last_committed, False, self.sources)

    def handover_files(self) -> set[str]:
        """Data files handover() depends on (its .crc partners are added by the caller)."""
        return {"metadata", f"commits/{self.last_committed}", f"offsets/{self.last_committed}"}


def _batches(files: dict[str, bytes], folder: str) -> tuple[int, ...]:
    names = (p.split("/", 1)[1] for p in files if p.startswith(folder + "/") and p.count("/") == 1)
    return tuple(sorted(int(n) for n in names if _CANONICAL.match(n)))


def _tree(root: Path) -> dict[str, bytes]:
    return {str(Path(d, n).relative_to(root)): Path(d, n).read_bytes() for d, _, names in os.walk(root) for n in names}


def _pristine(name: str, files: dict[str, bytes], crc: bool) -> Pristine:
    if not crc:
        files = {p: b for p, b in files.items() if not p.rsplit("/", 1)[-1].endswith(".crc")}
    planned, committed = _batches(files, "offsets"), _batches(files, "commits")
    last = committed[-1]
    source_line = files[f"offsets/{last}"].decode().split("\n")[2]
    initial_raw = files["sources/0/0"]
    assert initial_raw[:4] == b"\x00v1\n"
    initial_line = initial_raw[4:].decode()
    kafka, initial = KafkaOffsets.from_json(source_line), KafkaOffsets.from_json(initial_line)
    return Pristine(
        name=name, files=files, crc=crc, query_id=json.loads(files["metadata"])["id"], last_committed=last,
        planned=planned, committed=committed,
        sources=(SourceOffsets(0, SourceKind.KAFKA, source_line, kafka=kafka),),
        initial=(SourceOffsets(0, SourceKind.KAFKA, initial_line, kafka=initial),),
    )


@pytest.fixture(scope="module")
def pristine(kafka, spark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pristine]:  # noqa: ANN001
    """Write the two real checkpoints once; return the four variants by name."""
    started = time.monotonic()
    base = tmp_path_factory.mktemp("fuzz")
    topic = f"fuzz-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 3)
    produce_records(kafka.bootstrap_servers, topic, RECORDS)

    committed_cp = base / "committed"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic], max_per_trigger=PER_TRIGGER),
          committed_cp, base / "committed-sink")

    in_flight_cp, sink = base / "in-flight", str(base / "in-flight-sink")

    def write(frame, batch_id: int) -> None:  # noqa: ANN001
        if batch_id == FAILING_BATCH:
            raise RuntimeError(f"batch {batch_id} fails on purpose")
        frame.write.mode("append").parquet(sink)

    query = (kafka_reader(spark, kafka.bootstrap_servers, [topic], max_per_trigger=PER_TRIGGER)
             .writeStream.foreachBatch(write).option("checkpointLocation", str(in_flight_cp))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception, match="fails on purpose"):
        query.awaitTermination(180)
    written = spark.read.parquet(sink).count()

    result: dict[str, Pristine] = {}
    for name, cp in (("committed", committed_cp), ("in-flight", in_flight_cp)):
        files = _tree(cp)
        assert any(p.endswith(".crc") for p in files), "Spark writes .crc files on the local filesystem"
        for crc in (True, False):
            variant = _pristine(name, files, crc)
            result[f"{name}-{'crc' if crc else 'nocrc'}"] = variant
            # the independent truth agrees with the reader on the pristine checkpoint
            handover = CheckpointReader(str(cp)).handover()
            assert essence(handover) == variant.essence()
    committed, in_flight = result["committed-crc"], result["in-flight-crc"]
    assert committed.planned == committed.committed and committed.sources[0].kafka.total() == RECORDS
    assert in_flight.planned[-1] == FAILING_BATCH and in_flight.committed[-1] == FAILING_BATCH - 1
    assert in_flight.sources[0].kafka.total() == written > 0
    TIMINGS["build"] = time.monotonic() - started
    return result


def essence(handover: Handover) -> tuple[object, ...]:
    return (handover.query_id, handover.batch_id, handover.from_initial, handover.sources)


# -- corruptions ---------------------------------------------------------------------------------


Expected = type[CheckpointError] | tuple[type[CheckpointError], ...] | None


@dataclass(frozen=True)
class Case:
    """One corruption and what the reader must do with it."""

    what: str
    files: dict[str, bytes]
    must_handover: Expected = None  # handover() must raise this
    must_snapshot: Expected = None  # snapshot(include_initial=True) must raise this
    query_id: object = "same"  # expected query id when a handover is returned
    no_initial: bool = False  # sources/0/0 is gone without a trace: initial sources may be empty


def _crc_name(path: str) -> str:
    head, _, name = path.rpartition("/")
    return f"{head}/.{name}.crc" if head else f".{name}.crc"


def _is_crc(path: str) -> bool:
    return path.rsplit("/", 1)[-1].endswith(".crc")


_METADATA_GARBAGE = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"", b"{}", b"[]", b"null", b'{"id":7}', b'{"id":"not-a-uuid"}', b'{"id":null}',
                     b'{"id":"abab5a79-a66c-41f4-85f8-55b2a371bf7e","id":"abab5a79-a66c-41f4-85f8-55b2a371bf7f"}',
                     b"\xff\xfe\x00", b"v1\n{}"]),
)
_LINE_GARBAGE = st.one_of(
    st.text(max_size=40).filter(lambda s: "\n" not in s),
    st.sampled_from(["{", "[]", "null", '{"conf":[]}', '{"conf":{"a":1}}', '{"batchWatermarkMs":"x"}',
                     '{"batchTimestampMs":true}', '{"nextBatchWatermarkMs":1.5}', '{"stateUniqueIds":3}', "-"]),
)
_VERSIONS = [b"v99", b"v0", b"v", b"x1", b"v1 ", b"V1", b"v2", b"v3", b"v-1", b""]


def _valid_metadata(data: bytes) -> bool:
    """Would this garbage pass as a real metadata file? (then it is no corruption one can see)"""
    try:
        body = json.loads(data)
        uuid.UUID(str(body["id"]))
    except (ValueError, TypeError, KeyError, UnicodeDecodeError):
        return False
    return True


def corrupt(p: Pristine, data: st.DataObject) -> Case:  # noqa: C901 - one branch per kind, kept together
    files = dict(p.files)
    names = sorted(files)
    read = p.handover_files()
    read_all = read | {"sources/0/0"}
    data_files = [n for n in names if not _is_crc(n)]
    kinds = ["truncate", "flip", "delete", "duplicate", "version", "garbage"] + (["digit"] if p.crc else [])
    kind = data.draw(st.sampled_from(kinds), label="kind")
    KINDS[f"{p.name}{'-crc' if p.crc else '-nocrc'}:{kind}"] += 1
    important = sorted(read_all | ({_crc_name(f) for f in read_all} if p.crc else set()))

    def pick(candidates: list[str]) -> str:
        preferred = [c for c in candidates if c in important]
        strategy = st.sampled_from(candidates)
        if preferred:
            strategy = st.sampled_from(preferred) | strategy
        return data.draw(strategy, label="file")

    def must(target: str, error: type[CheckpointError]) -> dict[str, Expected]:
        """The error required when ``target`` was changed: only files the call reads, only with .crc
        (or a specific error) - otherwise None (an error is allowed, a wrong answer is not)."""
        return {"must_handover": error if target in read else None,
                "must_snapshot": error if target in read_all else None}

    if kind == "truncate":
        target = pick([n for n in names if files[n]])
        length = data.draw(st.integers(0, len(files[target]) - 1), label="length")
        files[target] = files[target][:length]
        checked = p.crc and not _is_crc(target)
        return Case(f"truncate {target} to {length}", files, **(must(target, CorruptCheckpointFile) if checked else {}))

    if kind == "flip":
        if p.crc:
            target = pick([n for n in names if files[n]])
            position = data.draw(st.integers(0, len(files[target]) - 1), label="position")
            mask = data.draw(st.integers(1, 255), label="mask")
        else:
            target = pick([n for n in names if STRUCTURAL & set(files[n])])
            position = data.draw(st.sampled_from([i for i, c in enumerate(files[target]) if c in STRUCTURAL]),
                                 label="position")
            mask = data.draw(st.integers(1, 255), label="mask")
        content = files[target]
        files[target] = content[:position] + bytes([content[position] ^ mask]) + content[position + 1:]
        checked = p.crc and not _is_crc(target)
        return Case(f"flip {target}[{position}] ^ {mask:#x}", files,
                    **(must(target, CorruptCheckpointFile) if checked else {}))

    if kind == "digit":  # crc variants only: a plausible value only the checksum can reveal
        target = pick([n for n in data_files if DIGITS & set(files[n])])
        content = files[target]
        position = data.draw(st.sampled_from([i for i, c in enumerate(content) if c in DIGITS]), label="position")
        other = data.draw(st.sampled_from(sorted(DIGITS - {content[position]})), label="digit")
        files[target] = content[:position] + bytes([other]) + content[position + 1:]
        return Case(f"digit {target}[{position}] -> {chr(other)}", files, **must(target, CorruptCheckpointFile))

    if kind == "delete":
        candidates = names if p.crc else [n for n in names if n != f"commits/{p.last_committed}"]
        target = pick(candidates)
        del files[target]
        if target == f"offsets/{p.last_committed}":  # with .crc the orphan checksum may tell first
            error = (CommitWithoutOffsets, CorruptCheckpointFile) if p.crc else CommitWithoutOffsets
            return Case(f"delete {target}", files, must_handover=error, must_snapshot=error)
        if p.crc and target in read_all:  # its .crc stays behind and gives it away
            return Case(f"delete {target}", files, **must(target, CorruptCheckpointFile))
        return Case(f"delete {target}", files, query_id=None if target == "metadata" else "same",
                    no_initial=target == "sources/0/0")

    if kind == "duplicate":
        folder = data.draw(st.sampled_from(["offsets", "commits"]), label="folder")
        ids = p.planned if folder == "offsets" else p.committed
        source_id = data.draw(st.sampled_from(ids), label="source id")
        fresh = [str(max(p.planned) + k) for k in (1, 2, 3)]
        existing = [str(i) for i in ids if i != source_id]
        odd = [f"0{source_id}", f".{source_id}.{uuid.UUID(int=source_id)}.tmp", f"{source_id}.bak", f"{source_id} copy"]
        with_crc = p.crc and data.draw(st.booleans(), label="with crc")
        if folder == "commits":  # never onto a planned, uncommitted id: that IS a commit (left out)
            existing = [e for e in existing if int(e) in p.committed]
        elif with_crc or not p.crc:  # another batch's offsets passed off as the last committed ones (left out)
            existing = [e for e in existing if int(e) != p.last_committed]
        new = data.draw(st.sampled_from(fresh + existing + odd), label="new name")
        source, target = f"{folder}/{source_id}", f"{folder}/{new}"
        files[target] = files[source]
        if with_crc:
            files[_crc_name(target)] = files[_crc_name(source)]
        what = f"copy {source} to {target}{' with its .crc' if with_crc else ''}"
        if new.startswith("0") and new != "0" and new.isdigit():
            return Case(what, files, must_handover=CorruptCheckpointFile, must_snapshot=CorruptCheckpointFile)
        if folder == "commits" and new in fresh:
            return Case(what, files, must_handover=CommitWithoutOffsets, must_snapshot=CommitWithoutOffsets)
        changed = files[target] != p.files.get(target, files[target])
        if p.crc and not with_crc and changed and _crc_name(target) in files:
            return Case(what, files, **must(target, CorruptCheckpointFile))
        return Case(what, files)

    if kind == "version":
        target = pick([n for n in data_files if n.startswith(("offsets/", "commits/", "sources/"))])
        bad = data.draw(st.sampled_from(_VERSIONS), label="version")
        content = files[target]
        prefix = b"\x00" if content[:1] == b"\x00" else b""
        rest = content[len(prefix):]
        files[target] = prefix + bad + rest[rest.index(b"\n"):]
        what = f"version {bad!r} in {target}"
        if p.crc:
            return Case(what, files, **must(target, CorruptCheckpointFile))
        if bad == b"v99":
            return Case(what, files, **must(target, UnsupportedLogVersion))
        return Case(what, files)

    assert kind == "garbage"
    target = pick(["metadata"] + [n for n in data_files if n.startswith(("offsets/", "commits/"))])
    if target == "metadata":
        garbage = data.draw(_METADATA_GARBAGE.filter(lambda g: not _valid_metadata(g)), label="garbage")
        files[target] = garbage
    else:
        line = data.draw(_LINE_GARBAGE, label="garbage").encode()
        lines = files[target].split(b"\n")
        lines[1] = line
        files[target] = b"\n".join(lines)
        garbage = line
    what = f"garbage {garbage[:30]!r} in {target}"
    if p.crc and files[target] != p.files[target]:
        return Case(what, files, **must(target, CorruptCheckpointFile))
    return Case(what, files)


# -- the property ----------------------------------------------------------------------------------

_FS = fsspec.filesystem("memory")
_SEQ = itertools.count()


def _check(p: Pristine, case: Case) -> None:
    root = f"/fuzz-{os.getpid()}-{next(_SEQ)}/cp"
    _FS.pipe({f"{root}/{rel}": blob for rel, blob in case.files.items()})
    try:
        try:
            handover = CheckpointReader(f"memory://{root}").handover()
        except CheckpointError as exc:
            assert str(exc) and exc.found and exc.expected and exc.action, case.what
            if case.must_handover is not None:
                assert isinstance(exc, case.must_handover), f"{case.what}: {exc!r}"
            event(f"handover refused: {type(exc).__name__}")
        else:
            assert case.must_handover is None, f"{case.what}: returned {handover.to_json()}"
            assert essence(handover) == p.essence(case.query_id), f"{case.what}: WRONG handover {handover.to_json()}"
            event("handover returned (exact)")
        try:
            snap = CheckpointReader(f"memory://{root}").snapshot(include_initial=True)
        except CheckpointError as exc:
            if case.must_snapshot is not None:
                assert isinstance(exc, case.must_snapshot), f"{case.what}: {exc!r}"
        else:
            assert case.must_snapshot is None, f"{case.what}: snapshot returned"
            assert (snap.query_id, snap.last_committed_batch, snap.sources) == p.essence(case.query_id)[:2] + (
                p.sources,), case.what
            assert snap.initial_sources == p.initial or (case.no_initial and snap.initial_sources == ()), case.what
    finally:
        _FS.rm(root.rsplit("/", 1)[0], recursive=True)


@pytest.mark.parametrize("variant", list(EXAMPLES))
def test_corrupted_real_checkpoint_gives_typed_error_or_true_handover(pristine, variant: str) -> None:  # noqa: ANN001
    p = pristine[variant]
    started = time.monotonic()

    @settings(max_examples=EXAMPLES[variant], deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        case = corrupt(p, data)
        note(case.what)
        _check(p, case)
        RUNS[variant] += 1

    fuzz()
    TIMINGS[variant] = time.monotonic() - started


def test_zz_fuzz_case_count() -> None:
    """The figure is provable: every variant ran its examples, 1,000 or more in all."""
    if not RUNS:
        pytest.skip("the fuzz tests did not run in this session")
    print(f"\nfuzz cases run: {dict(RUNS)} = {sum(RUNS.values())}; seconds: "
          f"{ {k: round(v, 1) for k, v in TIMINGS.items()} }")
    print("corruption kinds drawn:", dict(sorted(KINDS.items())))
    for variant, budget in EXAMPLES.items():
        assert RUNS[variant] >= budget, f"{variant}: {RUNS[variant]} of {budget} examples"
    assert sum(RUNS.values()) >= 1000
