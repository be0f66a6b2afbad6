"""Bad inputs through the real entry points: refused with a typed error, and NOTHING changes.

Real Kafka (KRaft), real Spark checkpoints, a real running query. Each test feeds one kind of bad
input to the entry points that meet it in production - the ``ckpt`` command line, the preflight
operator's ``execute``, and the core functions the operators call (``reconciled_handover``,
``check_launch_target``, ``CheckpointArchive.archive``, ``check_query_stopped``,
``restore_archive``) - and checks:

* the error's exact type, and that its message says what was found, what was expected and what
  to do (the ``found`` / ``expected`` / ``action`` fields, all present in ``str(error)``), naming
  the culprit (partition, topic, file, version, name);
* the command line prints one ``ckpt: error:`` line, no traceback, nothing on stdout, exit 2;
* nothing changed: every involved directory tree (file list, sizes, sha256, mtimes, modes) and
  the broker (all topic names, consumer groups, partitions and earliest/latest offsets of the
  topics involved) are the same before and after.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.errors import (
    ArchiveInsideCheckpoint,
    BrokerError,
    CheckpointError,
    CheckpointNotEmpty,
    CorruptCheckpointFile,
    ExpiredOffsets,
    FileSinkHazard,
    OffsetsAheadOfBroker,
    QueryStillRunning,
    SharedCheckpoint,
    SourceNotKafka,
    TargetNotEmpty,
    UnknownTopic,
    UnsafeStreamName,
    UnsupportedLogVersion,
    VanishedPartitions,
)
from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.operators.handover import reconciled_handover
from airflow_ckpt_provider.records.control import HEARTBEAT, Heartbeat
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.archive import CheckpointArchive, check_archive_location, check_query_stopped
from airflow_ckpt_provider.storage.locations import check_launch_target
from airflow_ckpt_provider.storage.restore import restore_archive
from tests.harness.records import produce_records
from tests.integration.streams import batch_ids, drain, kafka_reader

pytestmark = pytest.mark.integration

JOBS = Path(__file__).parent / "jobs"
REPO = Path(__file__).resolve().parents[2]


# -- what "nothing changed" means -----------------------------------------------------------------


def tree_state(*roots: Path) -> dict[str, Any]:
    """Every entry below each root: kind, mode, size, mtime (ns) and sha256 of files."""
    state: dict[str, Any] = {}
    for root in roots:
        if not os.path.lexists(root):
            state[str(root)] = "absent"
            continue
        top = root.lstat()
        entries: dict[str, tuple[object, ...]] = {}
        for folder, dirs, names in os.walk(root):
            for name in sorted(dirs + names):
                path = Path(folder, name)
                info = path.lstat()
                digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else None
                entries[str(path.relative_to(root))] = (
                    oct(info.st_mode), info.st_size if digest else None, info.st_mtime_ns, digest)
        state[str(root)] = (oct(top.st_mode), top.st_mtime_ns, entries)
    return state


def broker_state(kafka: Any, *topics: str) -> dict[str, Any]:  # noqa: ANN401
    """All topic names and consumer groups; partitions and (earliest, latest) of ``topics``."""
    admin = kafka.admin()
    try:
        names = sorted(admin.list_topics())
        groups = sorted(json.dumps(g, sort_keys=True, default=str) for g in admin.list_groups())
    finally:
        admin.close()
    view = KafkaBroker(kafka.bootstrap_servers).view(topics)
    return {"topics": names, "groups": groups, "ranges": {t: dict(view.partitions(t)) for t in topics}}


class Unchanged:
    """Record the state of some trees (and the broker) now; :meth:`check` compares again."""

    def __init__(self, *roots: Path, kafka: Any = None, topics: tuple[str, ...] = ()) -> None:  # noqa: ANN401
        self.roots, self.kafka, self.topics = roots, kafka, topics
        self.before = self._state()
        assert self.before, "nothing recorded"

    def _state(self) -> dict[str, Any]:
        state = tree_state(*self.roots)
        if self.kafka is not None:
            state["broker"] = broker_state(self.kafka, *self.topics)
        return state

    def check(self) -> None:
        assert self._state() == self.before, "a refused input changed something"


# -- what "refused, explained" means --------------------------------------------------------------


def explains(error: BaseException, kind: type[CheckpointError], *mentions: str) -> None:
    """Exactly ``kind``; found / expected / action all present and in the message; ``mentions`` too."""
    assert type(error) is kind, f"{type(error).__name__}: {error}"
    text = str(error)
    assert error.found and error.expected and error.action, text  # type: ignore[attr-defined]
    assert f"found {error.found}" in text and f"expected {error.expected}" in text, text  # type: ignore[attr-defined]
    assert error.action in text, text  # type: ignore[attr-defined]
    for mention in mentions:
        assert mention in text, f"{mention!r} not in {text!r}"


def refuses(kind: type[CheckpointError], call: Callable[[], object], *mentions: str, case: str) -> CheckpointError:
    """``call`` refuses the bad input ``case`` with exactly ``kind``, explained (:func:`explains`)."""
    try:
        call()
    except CheckpointError as error:
        try:
            explains(error, kind, *mentions)
        except AssertionError as wrong:
            raise AssertionError(f"{case}: {wrong}") from error
        return error
    pytest.fail(f"{case}: not refused (expected {kind.__name__})")


def cli_refuses(argv: list[str], *mentions: str, code: int = 2) -> str:
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(argv, stdout=out, stderr=err) == code, err.getvalue()
    text = err.getvalue()
    assert out.getvalue() == "" and "Traceback" not in text, text
    assert text.startswith("ckpt: error: ") and text.count("\n") == 1, text
    assert "found " in text and "expected " in text, text
    for mention in mentions:
        assert mention in text, f"{mention!r} not in {text!r}"
    return text


# -- real checkpoints and the Airflow connection --------------------------------------------------


@dataclass(frozen=True)
class Stream:
    topic: str
    checkpoint: Path
    sink: Path
    partitions: int


def make_stream(kafka: Any, spark: Any, base: Path, partitions: int = 3, records: int = 90) -> Stream:  # noqa: ANN401
    topic = f"bad-{uuid.uuid4().hex[:10]}"
    kafka.create_topic(topic, partitions)
    produce_records(kafka.bootstrap_servers, topic, records)
    base.mkdir(parents=True, exist_ok=True)
    cp, sink = base / "cp", base / "sink"
    drain(spark, kafka_reader(spark, kafka.bootstrap_servers, [topic], max_per_trigger=records // 3), cp, sink)
    assert len(batch_ids(cp / "commits")) >= 2
    return Stream(topic, cp, sink, partitions)


@pytest.fixture(scope="module")
def shared(kafka, spark, tmp_path_factory: pytest.TempPathFactory) -> Stream:  # noqa: ANN001
    """A real Kafka -> Parquet checkpoint for the tests that do not change Kafka."""
    return make_stream(kafka, spark, tmp_path_factory.mktemp("shared"))


@pytest.fixture
def conn(kafka, monkeypatch: pytest.MonkeyPatch) -> str:  # noqa: ANN001
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_BAD_INPUTS",
                       json.dumps({"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": kafka.bootstrap_servers}}))
    return "ckpt_bad_inputs"


def handover_call(checkpoint: Path, conn_id: str) -> Callable[[], object]:
    """The handover operator's core, as it runs in a task."""
    return lambda: reconciled_handover(CheckpointReader(str(checkpoint)), KafkaBrokerHook(conn_id), source=None,
                                       accept_data_loss=False, log=logging.getLogger("test"))


def preflight_call(conn_id: str, old: Path | str, new: Path | str, archive: Path | str, *,
                   sink: Path | None = None, stream: str = "orders", journal: bool = False,
                   declared: dict[str, str] | None = None) -> Callable[[], object]:
    """UpgradePreflightOperator.execute: every refusal of the reference DAG happens there. Without
    ``journal`` a refusal writes nothing at all (with one, it closes a journal ``refused``: see
    :func:`test_an_undeclared_sink_is_refused_recorded_and_frees_the_stream`); the sink is declared
    as the shared stream writes it (``declared``, default a ``foreach_batch`` writer)."""
    from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator

    op = UpgradePreflightOperator(task_id="preflight", stream_name=stream, old_checkpoint_uri=str(old),
                                  new_checkpoint_uri=str(new), archive_root=str(archive),
                                  new_sink_path=str(sink) if sink else None, kafka_conn_id=conn_id,
                                  journal=journal, sink=declared if declared is not None else {"kind": "foreach_batch"})
    return lambda: op.execute(context={})  # type: ignore[arg-type]


def local(path: Path | str) -> tuple[Any, str]:
    fs, inner = fsspec.core.url_to_fs(str(path))
    return fs, inner


def recreate_topic(kafka: Any, topic: str, partitions: int) -> None:  # noqa: ANN401
    """Delete ``topic`` and create it again with ``partitions`` (Kafka cannot shrink a topic)."""
    from kafka.errors import TopicAlreadyExistsError

    admin = kafka.admin()
    try:
        admin.delete_topics([topic])
        deadline = time.monotonic() + 60
        while True:
            try:
                kafka.create_topic(topic, partitions)
                return
            except TopicAlreadyExistsError:  # deletion still in progress
                assert time.monotonic() < deadline, f"{topic} was not deleted within 60 s"
                time.sleep(0.3)
    finally:
        admin.close()


# -- Kafka side: retention, deleted topic, fewer partitions, recreated topic -----------------------


def test_expired_offsets_are_refused_naming_the_partition(kafka, spark, conn, tmp_path: Path) -> None:  # noqa: ANN001
    from kafka import TopicPartition

    stream = make_stream(kafka, spark, tmp_path / "old", partitions=2, records=60)
    produce_records(kafka.bootstrap_servers, stream.topic, 60, start=60)
    end0 = KafkaBroker(kafka.bootstrap_servers).view([stream.topic]).partitions(stream.topic)[0][1]
    admin = kafka.admin()
    try:
        admin.delete_records({TopicPartition(stream.topic, 0): end0})  # retention took partition 0's unread records
    finally:
        admin.close()
    new, archive = tmp_path / "new-cp", tmp_path / "archive"
    unchanged = Unchanged(tmp_path, kafka=kafka, topics=(stream.topic,))

    error = refuses(ExpiredOffsets, handover_call(stream.checkpoint, conn), f"{stream.topic}-0", case="expired offsets")
    assert [d[:2] for d in error.details] == [(stream.topic, 0)] and error.details[0][3] == end0  # type: ignore[attr-defined]
    refuses(ExpiredOffsets, preflight_call(conn, stream.checkpoint, new, archive), f"{stream.topic}-0",
            case="expired offsets")
    cli_refuses(["offsets", str(stream.checkpoint), "--bootstrap-servers", kafka.bootstrap_servers],
                f"{stream.topic}-0", "accept-data-loss")
    unchanged.check()


def test_deleted_topic_is_refused_and_not_recreated(kafka, spark, conn, tmp_path: Path) -> None:  # noqa: ANN001
    stream = make_stream(kafka, spark, tmp_path / "old", partitions=2, records=40)
    admin = kafka.admin()
    try:
        admin.delete_topics([stream.topic])
    finally:
        admin.close()
    deadline = time.monotonic() + 60
    while stream.topic in broker_state(kafka)["topics"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    unchanged = Unchanged(tmp_path, kafka=kafka, topics=(stream.topic,))

    error = refuses(UnknownTopic, handover_call(stream.checkpoint, conn), stream.topic, case="deleted topic")
    assert error.topics == (stream.topic,)  # type: ignore[attr-defined]
    refuses(UnknownTopic, preflight_call(conn, stream.checkpoint, tmp_path / "new", tmp_path / "arch"),
            stream.topic, case="deleted topic")
    cli_refuses(["offsets", str(stream.checkpoint), "--bootstrap-servers", kafka.bootstrap_servers], stream.topic)
    unchanged.check()
    assert stream.topic not in broker_state(kafka)["topics"], "a read-only check must not create the topic"


def test_fewer_partitions_than_the_handover_are_refused(kafka, spark, conn, tmp_path: Path) -> None:  # noqa: ANN001
    stream = make_stream(kafka, spark, tmp_path / "old", partitions=3, records=90)
    recreate_topic(kafka, stream.topic, 1)
    unchanged = Unchanged(tmp_path, kafka=kafka, topics=(stream.topic,))

    gone = (f"{stream.topic}-1", f"{stream.topic}-2")
    error = refuses(VanishedPartitions, handover_call(stream.checkpoint, conn), *gone, case="fewer partitions")
    assert error.partitions == ((stream.topic, 1), (stream.topic, 2))  # type: ignore[attr-defined]
    refuses(VanishedPartitions, preflight_call(conn, stream.checkpoint, tmp_path / "new", tmp_path / "arch"), *gone,
            case="fewer partitions")
    cli_refuses(["offsets", str(stream.checkpoint), "--bootstrap-servers", kafka.bootstrap_servers], *gone)
    unchanged.check()


def test_recreated_topic_offsets_ahead_of_the_log_end_are_refused(kafka, spark, conn, tmp_path: Path) -> None:  # noqa: ANN001
    stream = make_stream(kafka, spark, tmp_path / "old", partitions=2, records=40)
    recreate_topic(kafka, stream.topic, 2)  # same partitions, empty again: the handover is past the end
    unchanged = Unchanged(tmp_path, kafka=kafka, topics=(stream.topic,))

    refuses(OffsetsAheadOfBroker, handover_call(stream.checkpoint, conn), f"{stream.topic}-0", f"{stream.topic}-1",
            case="offsets ahead of a recreated topic")
    refuses(OffsetsAheadOfBroker, preflight_call(conn, stream.checkpoint, tmp_path / "new", tmp_path / "arch"),
            f"{stream.topic}-0", case="offsets ahead of a recreated topic")
    cli_refuses(["offsets", str(stream.checkpoint), "--bootstrap-servers", kafka.bootstrap_servers], f"{stream.topic}-0")
    unchanged.check()


def test_kafka_setting_of_the_wrong_type_is_refused(kafka, shared: Stream, monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
                                                    tmp_path: Path) -> None:
    extra = {"bootstrap.servers": kafka.bootstrap_servers, "request.timeout.ms": "fifteen seconds"}
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_BAD_SETTING", json.dumps({"conn_type": "ckpt_kafka", "extra": extra}))
    unchanged = Unchanged(shared.checkpoint, tmp_path, kafka=kafka, topics=(shared.topic,))

    refuses(BrokerError, handover_call(shared.checkpoint, "ckpt_bad_setting"), "request_timeout_ms",
            case="Kafka setting of the wrong type")
    refuses(BrokerError, preflight_call("ckpt_bad_setting", shared.checkpoint, tmp_path / "new", tmp_path / "arch"),
            "request_timeout_ms", case="Kafka setting of the wrong type")
    unchanged.check()


# -- the new checkpoint and the sink ----------------------------------------------------------------


@pytest.mark.parametrize("spelling", ["same", "trailing slash", "file url", "dot segment", "symlink"])
def test_new_checkpoint_equal_to_the_old_one_is_refused(kafka, shared: Stream, conn, spelling: str,  # noqa: ANN001
                                                        tmp_path: Path) -> None:
    link = tmp_path / "link-to-old"
    link.symlink_to(shared.checkpoint, target_is_directory=True)
    new = {"same": str(shared.checkpoint), "trailing slash": f"{shared.checkpoint}/",
           "file url": f"file://{shared.checkpoint}",
           "dot segment": f"{shared.checkpoint.parent}/./{shared.checkpoint.name}", "symlink": str(link)}[spelling]
    unchanged = Unchanged(shared.checkpoint, shared.sink, tmp_path, kafka=kafka, topics=(shared.topic,))

    refuses(SharedCheckpoint, preflight_call(conn, shared.checkpoint, new, tmp_path / "archive"), new,
            case=f"new checkpoint = old ({spelling})")
    refuses(SharedCheckpoint, lambda: check_launch_target(local(new), new, old=local(shared.checkpoint)), new,
            case=f"new checkpoint = old ({spelling})")
    unchanged.check()


@pytest.mark.parametrize("content", ["another checkpoint", "one stray file", "a file, not a directory"])
def test_new_checkpoint_that_is_not_empty_is_refused(kafka, shared: Stream, conn, content: str,  # noqa: ANN001
                                                     tmp_path: Path) -> None:
    new = tmp_path / "new-cp"
    if content == "another checkpoint":
        shutil.copytree(shared.checkpoint, new)
    elif content == "one stray file":
        new.mkdir()
        (new / "notes.txt").write_text("left over\n")
    else:
        new.write_text("not a directory\n")
    unchanged = Unchanged(shared.checkpoint, tmp_path, kafka=kafka, topics=(shared.topic,))

    refuses(CheckpointNotEmpty, preflight_call(conn, shared.checkpoint, new, tmp_path / "archive"), str(new),
            case=f"new checkpoint not empty ({content})")
    refuses(CheckpointNotEmpty, lambda: check_launch_target(local(new), str(new), old=local(shared.checkpoint)),
            str(new), case=f"new checkpoint not empty ({content})")
    unchanged.check()


def test_file_sink_with_spark_metadata_is_refused(kafka, shared: Stream, conn, tmp_path: Path) -> None:  # noqa: ANN001
    assert (shared.sink / "_spark_metadata").is_dir(), "the real Parquet sink keeps a _spark_metadata log"
    new = tmp_path / "new-cp"
    unchanged = Unchanged(shared.checkpoint, shared.sink, tmp_path, kafka=kafka, topics=(shared.topic,))

    refuses(FileSinkHazard, preflight_call(conn, shared.checkpoint, new, tmp_path / "archive", sink=shared.sink),
            "_spark_metadata", case="file sink hazard")
    refuses(FileSinkHazard, lambda: check_launch_target(local(new), str(new), old=local(shared.checkpoint),
                                                        sink=local(shared.sink)),
            "_spark_metadata", case="file sink hazard")
    unchanged.check()



def test_a_declared_file_sink_is_read_where_the_old_version_writes(kafka, shared: Stream, conn,  # noqa: ANN001
                                                                   tmp_path: Path) -> None:
    """The real Parquet sink's ``_spark_metadata`` follows the old checkpoint's commits: exact. A
    location that is not the old version's output (a folder without a log, another query's output)
    is refused before anything changes, instead of counting a cut batch as absent."""
    from airflow_ckpt_provider.checkpoint.errors import FileSinkLocationMismatch

    committed = max(batch_ids(shared.checkpoint / "commits"))
    unchanged = Unchanged(shared.checkpoint, shared.sink, kafka=kafka, topics=(shared.topic,))
    found = preflight_call(conn, shared.checkpoint, tmp_path / "new-cp", tmp_path / "archive", sink=tmp_path / "out-v2",
                           declared={"kind": "file", "location": str(shared.sink)})()
    assert isinstance(found, dict) and found["sink"]["exact"] is True
    assert found["sink"]["old_last_batch"] == committed, "the log ends at the old query's last commit"
    assert f"records the old query's batches up to {committed}" in found["summary_md"]

    empty = tmp_path / "not-the-output"
    empty.mkdir()
    refuses(FileSinkLocationMismatch,
            preflight_call(conn, shared.checkpoint, tmp_path / "new-cp", tmp_path / "archive",
                           sink=tmp_path / "out-v2", declared={"kind": "file", "location": str(empty)}),
            "no _spark_metadata log", f"committed batches up to {committed}", case="file sink location without a log")
    unchanged.check()


def test_an_undeclared_sink_is_refused_recorded_and_frees_the_stream(kafka, shared: Stream, conn,  # noqa: ANN001
                                                                    tmp_path: Path) -> None:
    """The reference DAG with its ``sink`` param left empty: the preflight refuses before anything
    stops (:class:`UndeclaredSink`), closes the upgrade's journal ``refused`` with the reason in the
    user's words, and leaves the stream unlocked; the checkpoint, the sink and Kafka are unchanged.
    With ``accept_undeclared_sink`` the same upgrade goes ahead and the approver reads what that means."""
    from airflow_ckpt_provider.checkpoint.errors import UndeclaredSink
    from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator
    from airflow_ckpt_provider.storage.journal import LOCK, list_journals

    archive = tmp_path / "archive"
    unchanged = Unchanged(shared.checkpoint, shared.sink, kafka=kafka, topics=(shared.topic,))

    def preflight(**kwargs: Any) -> Any:  # noqa: ANN401
        op = UpgradePreflightOperator(task_id="preflight", stream_name="orders",
                                      old_checkpoint_uri=str(shared.checkpoint),
                                      new_checkpoint_uri=str(tmp_path / "v2"), archive_root=str(archive),
                                      kafka_conn_id=conn, new_application="v2.py", carry_state=False, **kwargs)
        return op.execute(context={"run_id": "manual__undeclared"})  # type: ignore[arg-type]

    refuses(UndeclaredSink, lambda: preflight(sink=""), "accept_undeclared_sink", case="undeclared sink")
    unchanged.check()
    [record] = list_journals(fsspec.filesystem("file"), str(archive), "orders")
    assert record.outcome == "refused" and record.steps == {}
    assert record.planning["preflight"].notes["refusal"].startswith("the job's sink is not declared")
    assert not (archive / "orders" / "_upgrades" / LOCK).exists(), "the stream is not left locked"

    accepted = preflight(sink="", accept_undeclared_sink="True")
    assert accepted["sink"]["accepted_undeclared"] is True and "exactness is NOT proven" in accepted["summary_md"]
    assert (archive / "orders" / "_upgrades" / LOCK).exists(), "the accepted upgrade holds the stream"
    unchanged.check()


# -- a query that still runs ------------------------------------------------------------------------


#: The test that needs a running query; its driver starts with the module (see running_driver).
RUNNING_QUERY_TEST = "test_archive_of_a_running_query_is_refused"


@pytest.fixture(scope="module", autouse=True)
def running_driver(request: pytest.FixtureRequest, kafka,  # noqa: ANN001
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[bytes], Stream] | None]:
    """A real query under GracefulStop (10 s heartbeat), started with umask 0 as soon as the module's
    first test starts, so that its driver's start (a JVM of its own) runs beside the tests before the
    one that uses it; None when that test was not collected."""
    if not any(item.name == RUNNING_QUERY_TEST and getattr(item, "module", None) is request.module
               for item in request.session.items):
        yield None
        return
    topic = f"bad-run-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 2)
    produce_records(kafka.bootstrap_servers, topic, 50)
    base = tmp_path_factory.mktemp("running-job")
    stream = Stream(topic, base / "cp", base / "sink", 2)
    with (base / "job.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, str(JOBS / "stop_job.py"), kafka.bootstrap_servers, topic, str(stream.checkpoint),
             str(stream.sink), "graceful", "10"],
            start_new_session=True, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, umask=0,
        )
    try:
        yield proc, stream
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture
def running_job(running_driver) -> tuple[subprocess.Popen[bytes], Stream]:  # noqa: ANN001
    """The module's running query (:func:`running_driver`) once it committed and heartbeats."""
    assert running_driver is not None
    proc, stream = running_driver
    deadline = time.monotonic() + 180
    beat = stream.checkpoint / HEARTBEAT
    while not (beat.exists() and (stream.checkpoint / "commits" / "0").exists()):
        assert proc.poll() is None, f"exit {proc.returncode}:\n" + "\n".join(
            line for line in (stream.checkpoint.parent / "job.log").read_text().splitlines()
            if "ERROR" in line or "Error:" in line or "Exception:" in line)[:4000]
        assert time.monotonic() < deadline, "the job did not commit and heartbeat within 180 s"
        time.sleep(0.2)
    return proc, stream


def test_archive_of_a_running_query_is_refused(running_job, tmp_path: Path) -> None:  # noqa: ANN001
    proc, stream = running_job
    os.killpg(proc.pid, signal.SIGSTOP)  # freeze the driver: the checkpoint cannot change, the beat stays fresh
    try:
        beat = Heartbeat.from_json((stream.checkpoint / HEARTBEAT).read_text())
        assert beat.is_alive(), "the heartbeat must still be fresh for this test to mean anything"
        archive = tmp_path / "archive"
        unchanged = Unchanged(stream.checkpoint, archive)
        fs, cp = local(stream.checkpoint)

        refuses(QueryStillRunning, lambda: check_query_stopped(fs, cp, uri=str(stream.checkpoint)), beat.query_id,
                case="query still running")
        refuses(QueryStillRunning, lambda: CheckpointArchive(*local(archive)).archive(
            fs, cp, stream_name="orders", upgrade_id="u1", remove_source=True), "live heartbeat",
            case="query still running")
        cli_refuses(["archive", str(stream.checkpoint), "--to", str(archive), "--upgrade-id", "u1",
                     "--remove-source"], "live heartbeat", beat.query_id)
        unchanged.check()
        assert beat.is_alive(), "the checks ran while the heartbeat was fresh"
        # the Spark side wrote its control files without group/world write, although its umask was 0
        for path in (stream.checkpoint / "_ckpt", stream.checkpoint / HEARTBEAT):
            assert path.stat().st_mode & 0o022 == 0, f"{path} mode {oct(path.stat().st_mode)}"
    finally:
        os.killpg(proc.pid, signal.SIGCONT)


# -- the checkpoint itself: corrupt logs, unknown versions, a source that is not Kafka --------------


def _flip_offsets_json(cp: Path, batch: int) -> str:
    path = cp / "offsets" / str(batch)
    data = bytearray(path.read_bytes())
    data[data.rindex(b":") + 1] ^= 0x01  # one digit of the last offset: still valid JSON, only the .crc knows
    path.write_bytes(bytes(data))
    return f"offsets/{batch}"


def _truncate_offsets(cp: Path, batch: int) -> str:
    path = cp / "offsets" / str(batch)
    (cp / "offsets" / f".{batch}.crc").unlink()
    path.write_bytes(path.read_bytes()[:-5])
    return f"offsets/{batch}, line 3"


def _version(folder: str) -> Callable[[Path, int], str]:
    def corrupt(cp: Path, batch: int) -> str:
        path = cp / folder / str(batch)
        (cp / folder / f".{batch}.crc").unlink()
        path.write_bytes(b"v99" + path.read_bytes()[2:])
        return "v99"
    return corrupt


def _garbage_metadata(cp: Path, batch: int) -> str:
    (cp / ".metadata.crc").unlink()
    (cp / "metadata").write_bytes(b'{"id":"not-a-uuid"}')
    return "metadata"


CORRUPTIONS: dict[str, tuple[Callable[[Path, int], str], type[CheckpointError]]] = {
    "digit changed, .crc present": (_flip_offsets_json, CorruptCheckpointFile),
    "offsets truncated, no .crc": (_truncate_offsets, CorruptCheckpointFile),
    "unknown offset log version v99": (_version("offsets"), UnsupportedLogVersion),
    "unknown commit log version v99": (_version("commits"), UnsupportedLogVersion),
    "garbage metadata": (_garbage_metadata, CorruptCheckpointFile),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_logs_are_refused(kafka, shared: Stream, conn, corruption: str, tmp_path: Path) -> None:  # noqa: ANN001
    cp = tmp_path / "cp"
    shutil.copytree(shared.checkpoint, cp)
    last = batch_ids(cp / "commits")[-1]
    corrupt, kind = CORRUPTIONS[corruption]
    mention = corrupt(cp, last)
    unchanged = Unchanged(tmp_path, kafka=kafka, topics=(shared.topic,))

    refuses(kind, handover_call(cp, conn), mention, case=f"corrupt log ({corruption})")
    refuses(kind, preflight_call(conn, cp, tmp_path / "new", tmp_path / "archive"), mention,
            case=f"corrupt log ({corruption})")
    cli_refuses(["offsets", str(cp)], mention)
    cli_refuses(["inspect", str(cp), "--json"], mention)
    unchanged.check()


@pytest.fixture(scope="module")
def rate_checkpoint(spark, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: ANN001
    """A real checkpoint of Spark's ``rate`` source with two committed batches."""
    base = tmp_path_factory.mktemp("rate")
    cp = base / "cp"
    query = (spark.readStream.format("rate").option("rowsPerSecond", 20).load()
             .writeStream.format("parquet").option("path", str(base / "sink"))
             .option("checkpointLocation", str(cp)).trigger(processingTime="300 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while not (cp / "commits" / "1").exists():
            assert query.isActive and time.monotonic() < deadline, query.exception()
            time.sleep(0.1)
    finally:
        query.stop()
    return cp


def test_source_that_is_not_kafka_is_refused(kafka, rate_checkpoint: Path, conn, tmp_path: Path) -> None:  # noqa: ANN001
    snapshot = CheckpointReader(str(rate_checkpoint)).snapshot()
    assert [s.kind.value for s in snapshot.sources] == ["rate"]
    unchanged = Unchanged(rate_checkpoint, tmp_path, kafka=kafka)

    refuses(SourceNotKafka, handover_call(rate_checkpoint, conn), "rate", case="source not Kafka")
    refuses(SourceNotKafka, preflight_call(conn, rate_checkpoint, tmp_path / "new", tmp_path / "archive"), "rate",
            case="source not Kafka")
    cli_refuses(["offsets", str(rate_checkpoint)], "rate")
    unchanged.check()


# -- archive locations and names ---------------------------------------------------------------------


@pytest.mark.parametrize("where", ["archive root inside the checkpoint", "archive root = the checkpoint",
                                   "checkpoint inside the archive's stream folder"])
def test_archive_location_overlapping_the_checkpoint_is_refused(kafka, shared: Stream, conn, where: str,  # noqa: ANN001
                                                                tmp_path: Path) -> None:
    cp = tmp_path / "streams" / "orders" / "cp"
    shutil.copytree(shared.checkpoint, cp)
    root, stream = {"archive root inside the checkpoint": (cp / "archives", "orders"),
                    "archive root = the checkpoint": (cp, "orders"),
                    "checkpoint inside the archive's stream folder": (tmp_path / "streams", "orders")}[where]
    unchanged = Unchanged(tmp_path, kafka=kafka, topics=(shared.topic,))
    fs, path = local(cp)

    refuses(ArchiveInsideCheckpoint, lambda: CheckpointArchive(*local(root)).archive(
        fs, path, stream_name=stream, upgrade_id="u1", remove_source=True), str(cp), case=f"archive overlap ({where})")
    refuses(ArchiveInsideCheckpoint, lambda: check_archive_location(local(cp), local(root), stream), str(cp),
            case=f"archive overlap ({where})")
    refuses(ArchiveInsideCheckpoint, preflight_call(conn, cp, tmp_path / "new", root, stream=stream), str(cp),
            case=f"archive overlap ({where})")
    cli_refuses(["archive", str(cp), "--to", str(root), "--name", stream, "--upgrade-id", "u1", "--remove-source"],
                str(cp))
    unchanged.check()


@pytest.mark.parametrize("name", ["../x", "a/b", "/abs", "", "..", ".", "a\\b", "x/../../y"])
def test_unsafe_stream_names_are_refused(kafka, shared: Stream, conn, name: str, tmp_path: Path) -> None:  # noqa: ANN001
    cp = tmp_path / "work" / "cp"
    shutil.copytree(shared.checkpoint, cp)
    archive = tmp_path / "work" / "archive"
    unchanged = Unchanged(tmp_path, kafka=kafka, topics=(shared.topic,))  # nothing appears next to it either
    fs, path = local(cp)

    refuses(UnsafeStreamName, lambda: CheckpointArchive(*local(archive)).archive(
        fs, path, stream_name=name, upgrade_id="u1"), repr(name), case=f"unsafe stream name {name!r}")
    refuses(UnsafeStreamName, preflight_call(conn, cp, tmp_path / "new", archive, stream=name), repr(name),
            case=f"unsafe stream name {name!r}")
    if name:  # an empty --name means "the checkpoint's folder name" on the command line
        cli_refuses(["archive", str(cp), "--to", str(archive), "--name", name, "--upgrade-id", "u1"], repr(name))
        cli_refuses(["archives", str(archive), "--name", name], repr(name))
    cli_refuses(["archive", str(cp), "--to", str(archive), "--name", "orders", "--upgrade-id", name or "../u"],
                "upgrade id")
    unchanged.check()


def test_restore_over_an_existing_checkpoint_is_refused(shared: Stream, tmp_path: Path) -> None:
    cp = tmp_path / "cp"
    shutil.copytree(shared.checkpoint, cp)
    archive_root = tmp_path / "archive"
    manifest = CheckpointArchive(*local(archive_root)).archive(*local(cp), stream_name="orders", upgrade_id="u1")
    location = Path(manifest.archive_uri)
    unchanged = Unchanged(tmp_path)

    refuses(TargetNotEmpty, lambda: restore_archive(*local(location), *local(cp)), str(cp),
            case="restore target not empty")
    cli_refuses(["restore", str(location), "--to", str(cp)], str(cp))
    unchanged.check()


def test_a_second_upgrade_of_a_locked_stream_is_refused(kafka, shared: Stream, conn, tmp_path: Path) -> None:  # noqa: ANN001
    """Two upgrades of one stream at once: the second preflight names the first and writes nothing."""
    from airflow_ckpt_provider.checkpoint.errors import UpgradeInProgress

    archive = tmp_path / "archive"
    first = preflight_call(conn, shared.checkpoint, tmp_path / "v2", archive, journal=True)()
    assert isinstance(first, dict) and first["upgrade_id"] and Path(first["journal"]).exists()
    unchanged = Unchanged(shared.checkpoint, tmp_path, kafka=kafka, topics=(shared.topic,))
    refuses(UpgradeInProgress, preflight_call(conn, shared.checkpoint, tmp_path / "v3", archive, journal=True),
            first["upgrade_id"], case="second upgrade of a locked stream")
    unchanged.check()
    again = preflight_call(conn, shared.checkpoint, tmp_path / "v2", archive, journal=True)()  # the same upgrade
    assert isinstance(again, dict) and again["upgrade_id"] == first["upgrade_id"]


def test_a_rolled_back_upgrade_does_not_go_forward_again(shared: Stream, tmp_path: Path) -> None:
    """After a rollback began, an upgrade step of the same upgrade refuses and writes nothing."""
    from airflow_ckpt_provider.checkpoint.errors import UpgradeRolledBack
    from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator
    from airflow_ckpt_provider.storage.journal import UpgradeJournal
    from airflow_ckpt_provider.upgrade.record import ROLLBACK_PHASE, UpgradeIntent

    intent = UpgradeIntent(stream_name="orders", old_checkpoint=str(shared.checkpoint),
                           new_checkpoint=str(tmp_path / "v2"))
    journal = UpgradeJournal(fsspec.filesystem("file"), UpgradeJournal.location(str(tmp_path / "archive"), "orders",
                                                                                 "up-x"))
    journal.open(intent, "up-x", run_id="run-1")
    journal.record_planning("preflight", run_id="run-1", result={"relaunch_mode": "cold"})  # the path it took
    journal.begin("graceful_stop", run_id="run-1")  # the step before the handover on that path: done
    journal.finish("graceful_stop", {"stopped": True})
    journal.begin("rollback_stop_new", run_id="run-1", phase=ROLLBACK_PHASE)
    unchanged = Unchanged(shared.checkpoint, tmp_path)
    op = CheckpointHandoverOperator(task_id="extract_handover", checkpoint_uri=str(shared.checkpoint),
                                    journal=journal.path)
    refuses(UpgradeRolledBack, lambda: op.execute({"run_id": "run-2"}),  # type: ignore[arg-type]
            "up-x", case="upgrade step after its rollback began")
    unchanged.check()


# -- where the new version starts: rewinds, times, offsets -----------------------------------------


@pytest.mark.parametrize(("start", "accept", "kind", "mentions"), [
    ({"mode": "rewind_to_batch", "value": "99"}, True, "BatchNotRewindable",
     ("batch 99, which is not committed", "batches 0..")),
    ({"mode": "rewind_to_batch", "value": "1"}, False, "ReprocessingNotAccepted",
     ("accept_reprocessing=True", "processed again")),
    ({"mode": "offsets", "value": '{"%(topic)s": {"0": 1}}'}, True, "InvalidStartChoice",
     ("missing partitions %(topic)s-1", "handover_mode")),
    ({"mode": "offsets", "value": '{"%(topic)s": {"0": 0, "1": 0, "2": 999999}}'}, True, "OffsetsAheadOfBroker",
     ("%(topic)s-2",)),
    ({"mode": "at_time", "value": "yesterday"}, True, "InvalidStartChoice", ("time 'yesterday'",)),
    ({"mode": "rewind", "value": "1"}, True, "InvalidStartChoice", ("handover mode 'rewind'",)),
], ids=["uncommitted batch", "no consent", "partitions missing", "past the log end", "bad time", "unknown mode"])
def test_a_bad_start_is_refused_by_the_preflight(kafka, shared: Stream, conn, tmp_path: Path,  # noqa: ANN001
                                                start: dict, accept: bool, kind: str, mentions: tuple) -> None:
    from airflow_ckpt_provider.checkpoint import errors
    from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator

    given = {k: v % {"topic": shared.topic} for k, v in start.items()}
    op = UpgradePreflightOperator(task_id="preflight", stream_name="orders", old_checkpoint_uri=str(shared.checkpoint),
                                  new_checkpoint_uri=str(tmp_path / "v2"), archive_root=str(tmp_path / "archive"),
                                  kafka_conn_id=conn, start=json.dumps(given), accept_reprocessing=str(accept),
                                  journal=False, sink={"kind": "foreach_batch"})
    unchanged = Unchanged(shared.checkpoint, tmp_path, kafka=kafka, topics=(shared.topic,))
    refuses(getattr(errors, kind), lambda: op.execute(context={}),  # type: ignore[arg-type]
            *(m % {"topic": shared.topic} for m in mentions), case=f"start: {given['mode']} {kind}")
    unchanged.check()
    assert not (tmp_path / "archive").exists(), "no journal (none asked), no lock"
    if given["mode"] == "rewind_to_batch" and accept:
        cli_refuses(["offsets", str(shared.checkpoint), "--rewind-to-batch", given["value"]], "batch 99")


@pytest.mark.parametrize("handle", ["{'pid': 42}", '{"mode": "local"}'], ids=["python repr", "no ids"])
def test_an_old_launch_handle_that_does_not_parse_is_refused_before_anything_starts(
        kafka, shared: Stream, conn, tmp_path: Path, handle: str) -> None:  # noqa: ANN001
    from airflow_ckpt_provider.checkpoint.errors import InvalidLaunchHandle
    from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator

    op = UpgradePreflightOperator(task_id="preflight", stream_name="orders", old_checkpoint_uri=str(shared.checkpoint),
                                  new_checkpoint_uri=str(tmp_path / "v2"), archive_root=str(tmp_path / "archive"),
                                  kafka_conn_id=conn, old_launch_handle=handle,
                                  journal=False, sink={"kind": "foreach_batch"})
    unchanged = Unchanged(shared.checkpoint, tmp_path, kafka=kafka, topics=(shared.topic,))
    refuses(InvalidLaunchHandle, lambda: op.execute(context={}), "old_launch_handle",  # type: ignore[arg-type]
            case=f"old launch handle: {handle[:20]}")
    unchanged.check()
    assert not (tmp_path / "archive").exists(), "no journal (none asked), no lock"
