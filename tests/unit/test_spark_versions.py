"""Every checkpoint layout Spark's own readers resume from (Spark 2.1 onward) reads; the rest is
refused with the true reason.

Spark 2.1 cannot run here, so its files are bytes that mirror its writers; each case names the Spark
code the bytes come from. The readers they must agree with:

* ``KafkaSourceInitialOffsetWriter.deserialize`` (Spark 2.1.1+): skip the first byte; if the rest
  starts with ``v``, the version line ends at the first ``\\n`` and goes to
  ``MetadataVersionUtil.validateVersion(_, 1)``; otherwise the rest is Spark 2.1.0's JSON.
* Spark 2.1.0's Kafka source wrote ``out.write(bytes.length); out.write(bytes)`` (the length as one
  byte, then the JSON; ``KafkaSourceSuite`` "deserialization of initial offset written by Spark
  2.1.0" reads it back that way).
* ``MetadataVersionUtil.extractVersion``: ``v`` then ``Integer.parseInt`` (``v01`` is 1), above 0.
* ``OffsetSeqLog`` and ``CommitLog``: lines as ``Source.getLines`` splits them (``\\n``, ``\\r\\n``, a
  lone ``\\r``); ``CommitLog`` trims its version line, ``OffsetSeqLog`` does not.
* ``StreamMetadata.read``: json4s ``Serialization.read`` of the whole ``metadata`` file.
* Spark 2.1 kept no commit log (``BatchCommitLog`` came with 2.2); on restart Spark counts the batch
  before the last planned one as committed and runs the last planned one again
  (``populateStartOffsets``). Its ``OffsetSeqMetadata`` had no ``conf`` (added in 2.2).
"""

from __future__ import annotations

import io
import json
import pickle

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    CommitWithoutOffsets,
    CorruptCheckpointFile,
    UnsupportedLogVersion,
)
from airflow_ckpt_provider.checkpoint.logs import (
    parse_commit_log,
    parse_initial_offsets,
    parse_initial_source,
    parse_metadata,
    parse_offset_log,
)
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceKind
from airflow_ckpt_provider.checkpoint.verify import recorded_start
from airflow_ckpt_provider.cli import main as cli_main
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.unit.conftest import QUERY_ID

KAFKA = {"events": {"0": 5, "1": 7}}


def kafka_json(size: int | None = None) -> bytes:
    """Compact Kafka offsets JSON as json4s writes it, padded (topic name) to ``size`` bytes."""
    text = json.dumps(KAFKA, separators=(",", ":")).encode()
    if size is None:
        return text
    topic = "e" * (size - len(text) + len("events"))
    return json.dumps({topic: KAFKA["events"]}, separators=(",", ":")).encode()


def spark_2_1_0_initial(body: bytes) -> bytes:
    """Spark 2.1.0's KafkaSource: ``out.write(bytes.length)`` (low 8 bits) then the JSON."""
    return bytes([len(body) & 0xFF]) + body


# -- sources/<i>/0 of the Kafka source ------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "writer"),
    [
        (b"\x00v1\n" + kafka_json(), "KafkaSourceInitialOffsetWriter.serialize (Spark 2.1.1 to 4.x)"),
        (spark_2_1_0_initial(kafka_json()), "Spark 2.1.0, length 27"),
        (spark_2_1_0_initial(kafka_json(118)), "Spark 2.1.0, length 118: first byte 'v'"),
        (spark_2_1_0_initial(kafka_json(123)), "Spark 2.1.0, length 123: first byte '{'"),
        (spark_2_1_0_initial(kafka_json(256)), "Spark 2.1.0, length 256: first byte 0x00"),
        (spark_2_1_0_initial(kafka_json(200)), "Spark 2.1.0, length 200: not UTF-8"),
        (spark_2_1_0_initial(kafka_json(266)), "Spark 2.1.0, length 266: first byte '\\n'"),
        (spark_2_1_0_initial(kafka_json(269)), "Spark 2.1.0, length 269: first byte '\\r'"),
        (b"\x00v01\n" + kafka_json(), "a version line Integer.parseInt reads as 1"),
        (b"\x00v1\n" + kafka_json() + b"\n", "a trailing line break"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_kafka_initial_offsets_that_spark_resumes_from(data: bytes, writer: str) -> None:
    source = parse_initial_source(data, "sources/0/0", 0)
    assert source.kind is SourceKind.KAFKA, writer
    assert source.kafka is not None and dict(source.kafka.offsets[source.kafka.topics[0]]) == {0: 5, 1: 7}


def test_spark_2_1_0_fixtures_have_the_first_byte_they_claim() -> None:
    assert [spark_2_1_0_initial(kafka_json(n))[0] for n in (118, 123, 256, 266, 269)] == [
        ord("v"), ord("{"), 0, ord("\n"), ord("\r")]


@pytest.mark.parametrize("version", [2, 99999])
def test_kafka_initial_offsets_of_a_newer_spark_name_the_version(version: int) -> None:
    # KafkaSourceSuite "deserialization of initial offset written by future version": 0x00, v99999
    data = b"\x00v%d\n" % version + kafka_json()
    with pytest.raises(UnsupportedLogVersion) as refused:
        parse_initial_source(data, "ck/sources/0/0", 0)
    error = refused.value
    assert (error.version, error.maximum, error.path, error.line) == (version, 1, "ck/sources/0/0", 1)
    assert f"found Kafka initial offsets version v{version}; expected 'v1'" in str(error)
    assert "newer Spark" in error.action and "Nothing was changed" in error.action
    assert "not Kafka" not in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.version, copy.maximum, str(copy)) == (version, 1, str(error))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"v1\n" + kafka_json(), "first byte is 'v', not the 0x00 byte"),  # Spark reads '1\n{...' as JSON
        (kafka_json(), "first byte is '{', not the 0x00 byte"),  # Spark reads '"events":...' as JSON
        (b"\x00v1\r\n" + kafka_json(), "version line 'v1\\r'"),  # the \r stays in Spark's version line
        (b"\x00v0\n" + kafka_json(), "version line 'v0'"),
        (b"\x00v-1\n" + kafka_json(), "version line 'v-1'"),
        (b"\x00v1x\n" + kafka_json(), "version line 'v1x'"),
        (b"\x00v1", "only a version line"),
        (b"\x00v1\n" + kafka_json() + b"\n" + kafka_json(), "2 line(s) after the version line"),
        (b"", "an empty file"),
    ],
)
def test_kafka_initial_offsets_spark_would_not_read_are_refused(data: bytes, reason: str) -> None:
    with pytest.raises(CorruptCheckpointFile) as refused:
        parse_initial_source(data, "sources/0/0", 0)
    assert not isinstance(refused.value, UnsupportedLogVersion)
    assert reason in str(refused.value)


def test_other_sources_keep_their_own_versioned_logs() -> None:
    # RateStreamMicroBatchStream's log: "v1\n" + the start time, no leading byte
    assert parse_initial_source(b"v1\n1795290389976", "s", 0).kind is SourceKind.RATE
    with pytest.raises(UnsupportedLogVersion) as refused:
        parse_initial_offsets(b"v2\n1795290389976", "s")
    assert (refused.value.version, refused.value.maximum) == (2, 1)


# -- version lines and line breaks of the batch logs --------------------------------------------------

OFFSETS_BODY = '\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n{"events":{"0":5}}'


@pytest.mark.parametrize("line", ["v1", "v01", "v+1", "v2"])
def test_offset_log_version_lines_integer_parseint_accepts(line: str) -> None:
    body = OFFSETS_BODY if line != "v2" else '\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\nsrc:{"events":{"0":5}}'
    entry = parse_offset_log((line + body).encode(), "offsets/3")
    assert entry.version == int(line[1:]) and entry.sources[0].kafka == KafkaOffsets({"events": {0: 5}})


@pytest.mark.parametrize(("line", "found"), [("v3", 3), ("v10", 10), ("v2147483647", 2147483647)])
def test_offset_log_of_a_newer_spark_is_unsupported_not_corrupt(line: str, found: int) -> None:
    with pytest.raises(UnsupportedLogVersion) as refused:
        parse_offset_log((line + OFFSETS_BODY).encode(), "offsets/3")
    assert (refused.value.version, refused.value.maximum) == (found, 2)
    assert f"offset log version v{found}; expected 'v1'..'v2'" in str(refused.value)


@pytest.mark.parametrize("line", ["v0", "v-1", "v", "x1", "V1", "v1 ", "v 1", "v1.0", "v2147483648", "v1_0"])
def test_malformed_offset_log_version_lines_are_corrupt(line: str) -> None:
    with pytest.raises(CorruptCheckpointFile) as refused:
        parse_offset_log((line + OFFSETS_BODY).encode(), "offsets/3")
    assert not isinstance(refused.value, UnsupportedLogVersion)
    assert refused.value.line == 1 and "version line" in str(refused.value)


def test_commit_log_trims_its_version_line_and_refuses_a_newer_one() -> None:
    assert parse_commit_log(b' v1 \n{"nextBatchWatermarkMs":7}', "c").next_batch_watermark_ms == 7
    assert parse_commit_log(b"v1\n{}", "c").version == 1  # Spark 2.2's BatchCommitLog wrote "v1\n{}"
    with pytest.raises(UnsupportedLogVersion) as refused:
        parse_commit_log(b'v4\n{"nextBatchWatermarkMs":0}', "commits/9")
    assert (refused.value.version, refused.value.maximum) == (4, 3)


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_batch_logs_split_lines_as_getlines_does(newline: str) -> None:
    text = OFFSETS_BODY.replace("\n", newline)
    assert parse_offset_log(("v1" + text).encode(), "o").sources[0].kafka == KafkaOffsets({"events": {0: 5}})
    assert parse_commit_log(f"v1{newline}{{}}".encode(), "c").version == 1


# -- metadata -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b'{"id":"%s"}' % QUERY_ID.encode(),  # StreamMetadata.write: json4s, one line, no newline
        b'{\n  "id" : "%s"\n}\n' % QUERY_ID.encode(),  # pretty-printed by a tool or by hand
        b'{"id":"%s","comment":"moved"}' % QUERY_ID.encode(),  # json4s ignores other fields
        b'\r\n\t{"id":\r\n"%s"}\r\n' % QUERY_ID.encode(),
    ],
)
def test_metadata_as_json4s_reads_it(data: bytes) -> None:
    assert parse_metadata(data, "metadata") == QUERY_ID


@pytest.mark.parametrize(
    ("data", "line", "reason"),
    [
        (b'{"id":"%s"}\n{"id":"x"}' % QUERY_ID.encode(), 2, "more after the JSON value"),
        (b'{\n  "id": "%s",\n}' % QUERY_ID.encode(), 3, "invalid JSON"),
        (b'{\n  "name": "q"\n}', 1, "id None"),
        (b"   \n", 1, "an empty file"),
    ],
)
def test_metadata_refusals_name_the_line(data: bytes, line: int, reason: str) -> None:
    with pytest.raises(CorruptCheckpointFile) as refused:
        parse_metadata(data, "metadata")
    assert refused.value.line == line and reason in str(refused.value)


# -- a whole Spark 2.1 checkpoint -------------------------------------------------------------------

# OffsetSeqLog (Spark 2.1): "v1", OffsetSeqMetadata(batchWatermarkMs, batchTimestampMs) without conf,
# then one offset line per source
SPARK_2_1_META = '{"batchWatermarkMs":0,"batchTimestampMs":1487000000000}'


def spark_2_1_offsets(batch: int) -> bytes:
    return f'v1\n{SPARK_2_1_META}\n{{"events":{{"0":{10 * (batch + 1)},"1":{20 * (batch + 1)}}}}}'.encode()


def write_spark_2_1(root: str, batches: int, *, metadata: bytes | None = None) -> fsspec.AbstractFileSystem:
    fs, path = fsspec.core.url_to_fs(root)
    for folder in ("offsets", "sources/0"):
        fs.makedirs(f"{path}/{folder}", exist_ok=True)
    fs.pipe_file(f"{path}/metadata", metadata or b'{"id":"%s"}' % QUERY_ID.encode())
    for batch in range(batches):
        fs.pipe_file(f"{path}/offsets/{batch}", spark_2_1_offsets(batch))
    fs.pipe_file(f"{path}/sources/0/0", spark_2_1_0_initial(b'{"events":{"1":0,"0":0}}'))
    return fs


def test_spark_2_1_checkpoint_hands_over_where_spark_resumes(location: str) -> None:
    write_spark_2_1(location, 3, metadata=b'{\n  "id": "%s"\n}\n' % QUERY_ID.encode())
    snap = CheckpointReader(location).snapshot()
    assert snap.spark_2_1 and (snap.last_committed_batch, snap.in_flight_batch) == (1, 2)
    assert snap.commit_version is None and snap.conf == {}
    handover = CheckpointReader(location).handover()
    assert (handover.query_id, handover.batch_id, handover.from_initial) == (QUERY_ID, 1, False)
    assert handover.kafka_offsets() == KafkaOffsets({"events": {0: 20, 1: 40}})  # offsets/1
    assert CheckpointReader(location).retained_batches() == ((0, 1, 2), (0, 1))


def test_inspect_says_how_a_spark_2_1_checkpoint_is_read(location: str) -> None:
    write_spark_2_1(location, 3)
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["inspect", location, "--json"], stdout=out, stderr=err) == 0, err.getvalue()
    data = json.loads(out.getvalue())
    assert (data["spark_2_1"], data["last_committed_batch"], data["in_flight_batch"]) == (True, 1, 2)
    out = io.StringIO()
    assert cli_main(["inspect", location], stdout=out, stderr=err) == 0, err.getvalue()
    assert "no commit log (Spark 2.1" in out.getvalue()


def test_spark_2_1_checkpoint_with_one_planned_batch_starts_at_its_initial_offsets(location: str) -> None:
    write_spark_2_1(location, 1)
    reader = CheckpointReader(location)
    handover = reader.handover()
    assert handover.from_initial and handover.batch_id is None and handover.in_flight_batch == 0
    assert handover.kafka_offsets() == KafkaOffsets({"events": {0: 0, 1: 0}})
    index, recorded = recorded_start(CheckpointReader(location).snapshot(include_initial=True))
    assert (index, recorded) == (0, KafkaOffsets({"events": {0: 0, 1: 0}}))


def test_spark_2_1_checkpoint_missing_the_batch_spark_counts_as_committed(location: str) -> None:
    fs = write_spark_2_1(location, 3)
    fs.rm(fsspec.core.url_to_fs(location)[1] + "/offsets/1")
    with pytest.raises(CommitWithoutOffsets) as refused:
        CheckpointReader(location).snapshot()
    assert "Spark 2.1" in str(refused.value) and "offsets/1" in str(refused.value)


def test_a_newer_checkpoint_without_commits_is_not_taken_for_spark_2_1(location: str) -> None:
    fs = write_spark_2_1(location, 3)
    path = fsspec.core.url_to_fs(location)[1]
    for batch in range(3):  # Spark 2.2+ records its SQL conf in every offset log entry
        fs.pipe_file(f"{path}/offsets/{batch}", spark_2_1_offsets(batch).replace(
            b'1487000000000}', b'1487000000000,"conf":{"spark.sql.shuffle.partitions":"200"}}'))
    snap = CheckpointReader(location).snapshot()
    assert not snap.spark_2_1 and snap.last_committed_batch is None and snap.in_flight_batch == 2


def test_unknown_initial_offsets_version_is_reported_as_such_by_the_reader(location: str) -> None:
    fs = write_spark_2_1(location, 1)
    fs.pipe_file(fsspec.core.url_to_fs(location)[1] + "/sources/0/0", b"\x00v2\n" + kafka_json())
    with pytest.raises(UnsupportedLogVersion) as refused:
        CheckpointReader(location).handover()
    assert refused.value.path == location.rstrip("/") + "/sources/0/0" and refused.value.version == 2
