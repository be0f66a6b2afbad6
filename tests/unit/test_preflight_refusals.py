"""The preflight's refusals read as refusals, the sink is declared (or its absence accepted), a
file sink's location is read, a failure before a side effect frees the stream, and the output
topic's scan ends by its own deadline. Kafka is faked at its hook; the files are real."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint import BrokerView
from airflow_ckpt_provider.checkpoint.errors import (
    FileSinkHazard,
    FileSinkLocationMismatch,
    OutputScanTimedOut,
    UndeclaredSink,
    UnsafeEntry,
    UpgradeFailed,
    UpgradeRefused,
)
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.operators.approval import UpgradeApprovalOperator
from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator
from airflow_ckpt_provider.operators.report import UpgradeReportOperator
from airflow_ckpt_provider.sinks import SinkKind, SinkSpec
from airflow_ckpt_provider.sinks.ledger import assess_file_sink, file_sink_batches, inspect_sink, undeclared_finding
from airflow_ckpt_provider.storage.journal import UpgradeJournal, read_lock
from airflow_ckpt_provider.upgrade.steps import PATHS
from airflow_ckpt_provider.upgrade.steps import Path as StepPath
from tests.unit.conftest import write_checkpoint
from tests.unit.test_journaled_operators import ReportTI, context
from tests.unit.test_launch_operators import TI
from tests.unit.test_rollback import FakeKafkaHook

FILE = SinkSpec(SinkKind.FILE, "/out/v1")


# -- the decisions: pure ------------------------------------------------------------------------------


def test_an_undeclared_sink_is_refused_unless_accepted_and_then_the_approver_reads_what_it_means() -> None:
    with pytest.raises(UndeclaredSink) as refused:
        undeclared_finding(SinkSpec(), accept_undeclared_sink=False)
    assert "accept_undeclared_sink false" in refused.value.found and "Nothing was stopped" in str(refused.value)
    finding = undeclared_finding(SinkSpec(), accept_undeclared_sink=True)
    assert finding.accepted_undeclared and not finding.exact
    assert "may skip or duplicate a batch the stop cuts" in finding.line and "NOT proven" in finding.line
    assert finding.to_dict()["accepted_undeclared"] is True
    with pytest.raises(UndeclaredSink):
        inspect_sink(None, "", SinkSpec(), old_query_id=None, accept_undeclared_sink=False)


@pytest.mark.parametrize(("logged", "committed", "planned", "last"), [
    ([0, 1, 2, 3], 3, 3, 3),              # the log ends at the last commit
    ([0, 1, 2, 3, 4], 3, 4, 4),           # the cut batch 4 is in the log: the sink holds it whole
    ([9, 10, 11], 10, 11, 11),            # compacted and purged: only the newest ids are left
    (None, None, None, None),             # the old query committed nothing, no log yet
])
def test_a_file_sink_log_that_follows_the_old_checkpoint_is_exact(logged: list[int] | None, committed: int | None,
                                                                 planned: int | None, last: int | None) -> None:
    finding = assess_file_sink(FILE, metadata_batches=logged, committed_batch=committed, planned_batch=planned,
                               uri="/out/v1")
    assert finding.exact and finding.old_last_batch == last and "`/out/v1`" in finding.line


@pytest.mark.parametrize(("logged", "committed", "planned", "words"), [
    (None, 3, 3, "no _spark_metadata log at /out/v1, and the old query committed batches up to 3"),
    ([], 3, 4, "an empty _spark_metadata log at /out/v1"),
    ([0, 1], 3, 4, "ends at batch 1, before the old query's last committed batch 3"),
    ([0, 1, 2, 3, 4, 5, 6], 3, 4, "ends at batch 6, past the old query's last planned batch 4"),
])
def test_a_file_sink_location_that_does_not_hold_the_old_output_is_refused(
        logged: list[int] | None, committed: int, planned: int, words: str) -> None:
    with pytest.raises(FileSinkLocationMismatch) as refused:
        assess_file_sink(FILE, metadata_batches=logged, committed_batch=committed, planned_batch=planned,
                         uri="/out/v1")
    assert words in refused.value.found
    assert f"ends at a batch from {committed} to {planned}" in refused.value.expected


# -- the file sink's log, read from real files --------------------------------------------------------


def _sink_log(folder: Path, names: list[str], head: bytes = b"v1\n{}") -> Path:
    log = folder / "_spark_metadata"
    log.mkdir(parents=True)
    for name in names:
        (log / name).write_bytes(head)
    return folder


def test_the_file_sink_log_names_its_batches_and_nothing_else(tmp_path: Path) -> None:
    fs = fsspec.filesystem("file")
    out = _sink_log(tmp_path / "out", ["0", "1", "9.compact", "10", ".10.crc", ".11.abc.tmp", "007"])
    assert file_sink_batches(fs, str(out)) == [0, 1, 9, 10]
    assert file_sink_batches(fs, str(tmp_path / "nowhere")) is None
    empty = tmp_path / "empty"
    (empty / "_spark_metadata").mkdir(parents=True)
    assert file_sink_batches(fs, str(empty)) == []


def test_a_file_sink_log_that_is_not_one_is_refused(tmp_path: Path) -> None:
    out = _sink_log(tmp_path / "out", ["0", "1"], head=b"PAR1\x00\x00")
    with pytest.raises(FileSinkLocationMismatch, match="starting b'PAR1"):
        file_sink_batches(fsspec.filesystem("file"), str(out))


def test_a_file_sink_log_linked_out_of_the_output_path_is_not_followed(tmp_path: Path) -> None:
    elsewhere = _sink_log(tmp_path / "elsewhere", ["0", "1"])
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(elsewhere / "_spark_metadata", out / "_spark_metadata")
    with pytest.raises(UnsafeEntry):
        file_sink_batches(fsspec.filesystem("file"), str(out))


# -- the preflight: refusals recorded, the journal closed refused, the stream free ---------------------


def _preflight(tmp_path: Path, **kwargs: Any) -> UpgradePreflightOperator:  # noqa: ANN401
    op = UpgradePreflightOperator(task_id="preflight", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                                  new_checkpoint_uri=str(tmp_path / "v2"), archive_root=str(tmp_path / "archive"),
                                  new_application="v2.py", relaunch_mode="standby", carry_state=False, **kwargs)
    op.kafka_hook = FakeKafkaHook(BrokerView({"events": {p: (0, 1000) for p in range(4)}}))  # type: ignore[assignment]
    return op


def _digest(folder: Path) -> dict[Path, str]:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


def test_an_undeclared_sink_ends_the_upgrade_refused_with_its_report_and_the_stream_free(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    before = _digest(tmp_path / "v1")
    ti = TI()
    with pytest.raises(UndeclaredSink):
        _preflight(tmp_path).execute(context("run-1", ti))  # type: ignore[arg-type]
    pushed = ti.xcom["return_value"]
    journal = UpgradeJournal(fsspec.filesystem("file"), pushed["journal"])
    record = journal.read()
    assert record.outcome == "refused" and record.steps == {}, "closed refused; no step with a side effect began"
    assert record.planning["preflight"].state == "failed"
    reason = record.planning["preflight"].notes["refusal"]
    assert reason.startswith("the job's sink is not declared: an empty sink declaration")
    assert read_lock(journal.fs, journal.lock_path) is None, "the stream's lock is released at once"
    assert _digest(tmp_path / "v1") == before and not (tmp_path / "v2").exists()

    report = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                                   new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.STANDBY],
                                   in_place=PATHS[StepPath.IN_PLACE], journal=pushed["journal"])
    with pytest.raises(UpgradeRefused) as refused:
        report.execute(context("run-1", ReportTI({})))  # type: ignore[arg-type]
    assert "found outcome 'refused': preflight refused the upgrade before anything was stopped: the job's sink " \
           "is not declared" in str(refused.value)
    entries = journal.read().run_log
    assert [e.get("outcome") for e in entries[-2:]] == ["refused", "refused"]
    assert entries[-1]["reason"] == reason and journal.read().closing_entry() == entries[-1], "it names the report"
    stored = json.loads((Path(entries[-1]["report"]) / "upgrade-report.json").read_text())
    assert stored["outcome"] == "refused" and stored["notes"][0].startswith(
        "preflight refused the upgrade before anything was stopped: the job's sink is not declared")
    assert "no upgrade journal" not in " ".join(stored["notes"])
    assert {s["name"]: s["state"] for s in stored["steps"]}["preflight"] == "refused"

    # declared, the next run goes ahead on the same stream
    declared = _preflight(tmp_path, sink={"kind": "foreach_batch"}).execute(context("run-2"))  # type: ignore[arg-type]
    assert declared["journal"] == pushed["journal"] and declared["sink"]["exact"] is False
    assert read_lock(journal.fs, journal.lock_path) is not None


def test_an_accepted_undeclared_sink_goes_ahead_and_says_what_it_means(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    result = _preflight(tmp_path, accept_undeclared_sink="True").execute(context("run-1"))  # type: ignore[arg-type]
    assert result["sink"]["accepted_undeclared"] is True
    assert "**Sink: not declared, accepted**" in result["summary_md"] and "NOT proven" in result["summary_md"]
    journal = UpgradeJournal(fsspec.filesystem("file"), result["journal"])
    planning = journal.read().planning["preflight"]
    assert planning.state == "done" and planning.result["accepted_undeclared_sink"] is True
    report = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                                   new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.STANDBY],
                                   journal=result["journal"])
    with pytest.raises(UpgradeFailed):  # (the run ended here: nothing else ran)
        report.execute(context("run-1", ReportTI({})))  # type: ignore[arg-type]
    stored = json.loads((Path(journal.read().run_log[-1]["report"]) / "upgrade-report.json").read_text())
    assert any("accept_undeclared_sink" in n and "exactness is not proven" in n for n in stored["notes"])


def test_a_file_sink_is_read_where_the_old_version_writes(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "v1"), batches=range(3))  # commits 0-2
    new_out = str(tmp_path / "out-v2")
    wrong = {"kind": "file", "location": str(tmp_path / "out-v2")}
    with pytest.raises(FileSinkLocationMismatch, match="no _spark_metadata log"):
        _preflight(tmp_path, sink=wrong, new_sink_path=new_out, journal=False).execute(context("r"))  # type: ignore
    old_out = _sink_log(tmp_path / "out-v1", ["0", "1", "2"])
    right = {"kind": "file", "location": str(old_out)}
    with pytest.raises(FileSinkHazard, match="no new_sink_path"):
        _preflight(tmp_path, sink=right, journal=False).execute(context("r"))  # type: ignore[arg-type]
    with pytest.raises(FileSinkHazard, match="_spark_metadata from an earlier query"):
        _preflight(tmp_path, sink=right, new_sink_path=str(old_out), journal=False).execute(context("r"))  # type: ignore
    found = _preflight(tmp_path, sink=right, new_sink_path=new_out, journal=False).execute(context("r"))  # type: ignore
    assert found["sink"]["exact"] is True and found["sink"]["old_last_batch"] == 2
    assert "records the old query's batches up to 2" in found["summary_md"]


# -- a failure before a side effect frees the stream ---------------------------------------------------


def test_an_approval_that_errors_leaves_the_stream_free(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    uri = _preflight(tmp_path, sink={"kind": "foreach_batch"}).execute(context("run-1"))["journal"]  # type: ignore
    journal = UpgradeJournal(fsspec.filesystem("file"), uri)
    approval = UpgradeApprovalOperator(task_id="approve", subject="upgrade?", journal=uri)
    with pytest.raises(Exception, match="the HITL wait failed"):
        approval.execute_complete(context("run-1"), {"error": "the HITL wait failed",  # type: ignore[arg-type]
                                                     "error_type": "unknown"})
    assert journal.read().planning["approve"].state == "failed"
    assert read_lock(journal.fs, journal.lock_path) is not None
    report = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                                   new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.STANDBY], journal=uri)
    with pytest.raises(UpgradeFailed) as failed:
        report.execute(context("run-1", ReportTI({})))  # type: ignore[arg-type]
    assert "found outcome 'failed':" in str(failed.value) and "UpgradeOutcome" not in str(failed.value)
    assert read_lock(journal.fs, journal.lock_path) is None, "nothing was stopped: the stream is free"
    assert journal.read().outcome == "failed"


def test_a_compatibility_check_killed_before_recording_leaves_the_stream_free(tmp_path: Path) -> None:
    write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    uri = _preflight(tmp_path, sink={"kind": "foreach_batch"}).execute(context("run-1"))["journal"]  # type: ignore
    journal = UpgradeJournal(fsspec.filesystem("file"), uri)
    journal.record_planning("compatibility_check", run_id="run-1", state="started")  # then its worker is killed
    report = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                                   new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.STANDBY], journal=uri)
    with pytest.raises(UpgradeFailed):
        report.execute(context("run-1", ReportTI({})))  # type: ignore[arg-type]
    assert read_lock(journal.fs, journal.lock_path) is None
    again = _preflight(tmp_path, sink={"kind": "foreach_batch"}).execute(context("run-2"))  # type: ignore[arg-type]
    assert again["journal"] == uri and not again["resuming"], "a new run starts afresh"


# -- the output topic's scan has its own deadline ------------------------------------------------------


class _SilentConsumer:
    """A consumer whose broker went away mid-scan: metadata answered, every poll empty."""

    def __init__(self) -> None:
        self.polls = 0

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0, 1}

    def end_offsets(self, parts: list[Any]) -> dict[Any, int]:
        return {tp: 50 for tp in parts}

    def offsets_for_times(self, wanted: dict[Any, int]) -> dict[Any, Any]:
        return {tp: None if tp.partition == 1 else type("At", (), {"offset": 10})() for tp in wanted}

    def assign(self, parts: list[Any]) -> None:
        self.assigned = parts

    def seek(self, tp: Any, offset: int) -> None:  # noqa: ANN401
        pass

    def position(self, tp: Any) -> int:  # noqa: ANN401
        return 10

    def poll(self, timeout_ms: int, max_records: int) -> dict[Any, Any]:
        self.polls += 1
        return {}

    def close(self) -> None:
        pass


def test_the_output_topic_scan_ends_at_its_deadline_and_says_what_it_read() -> None:
    consumer = _SilentConsumer()

    class Broker(KafkaBroker):
        def _make_consumer(self) -> Any:  # noqa: ANN401
            return consumer

    with pytest.raises(OutputScanTimedOut) as late:
        Broker("127.0.0.1:1").sources_written_since("out", 0, scan_timeout_s=0.2)
    assert "0 of 40 records of out read in 0.2 s" in late.value.found and "out-0 at 10 of 50" in late.value.found
    assert "scan_timeout_s" in str(late.value) and consumer.polls >= 1
    with pytest.raises(ValueError, match="above 0"):
        Broker("127.0.0.1:1").sources_written_since("out", 0, scan_timeout_s=0)


# -- a trigger's check that never answers does not hold the wait past its deadline ---------------------


def test_a_stop_wait_whose_storage_hangs_fires_its_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import threading
    import time

    from airflow_ckpt_provider.triggers import checks
    from airflow_ckpt_provider.triggers.stop import GracefulStopTrigger

    monkeypatch.setattr(checks, "CHECK_GRACE_S", 0.2)
    release = threading.Event()
    entered = threading.Event()

    class Hanging(GracefulStopTrigger):
        def _poll(self, control: Any) -> dict[str, Any] | None:  # noqa: ANN401
            entered.set()
            release.wait()  # a storage read that never answers (released when the test ends)
            return None

    write_checkpoint(str(tmp_path / "ck"), batches=range(2))
    now = time.time()
    trigger = Hanging(checkpoint_uri=str(tmp_path / "ck"), request_id="r", deadline=now + 0.3, requested_at=now,
                      run_id="run", poll_interval=0.05)

    async def first() -> dict[str, Any]:
        try:
            async for event in trigger.run():
                return event.payload
            raise AssertionError("no event")
        finally:
            release.set()  # before asyncio.run waits for its threads

    event = asyncio.run(asyncio.wait_for(first(), 60))
    assert entered.is_set() and event["reason"] == "timeout"


def test_a_bounded_check_returns_its_result_and_passes_its_errors_on() -> None:
    import asyncio
    import time

    from airflow_ckpt_provider.triggers.checks import bounded_check

    assert asyncio.run(bounded_check(lambda a, b: a + b, 2, 3, deadline=time.time() + 5)) == 5

    def broken() -> None:
        raise TimeoutError("the socket's own timeout")

    with pytest.raises(TimeoutError, match="the socket's own timeout"):
        asyncio.run(bounded_check(broken, deadline=time.time() + 5))
