"""Step operators with an upgrade journal: done steps are not repeated, interrupted ones resume.

The Spark launcher is faked at its hook boundary; checkpoints are written like Spark writes them;
processes that must be alive are real (``sleep`` in its own process group).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fsspec
import jinja2
import pytest
from airflow.sdk.exceptions import AirflowSkipException, TaskDeferred

from airflow_ckpt_provider.checkpoint.errors import StartMismatch, UnknownStepKind, UpgradeRolledBack
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.faults import ENV, LOG_ENV
from airflow_ckpt_provider.operators.archive import CheckpointArchiveOperator, CheckpointRestoreOperator
from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator
from airflow_ckpt_provider.operators.launch import HANDLE_XCOM_KEY, HandoverVerifyOperator, StreamLaunchOperator
from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator
from airflow_ckpt_provider.operators.stop import GracefulStopOperator
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade.record import ROLLBACK_PHASE, UpgradeIntent
from airflow_ckpt_provider.upgrade.steps import PATHS, PLANNING, ROLLBACK_SEQUENCE
from airflow_ckpt_provider.upgrade.steps import Path as StepPath
from tests.unit.conftest import write_checkpoint
from tests.unit.step_results import path_choice
from tests.unit.test_launch_operators import TI, FakeLauncher, local_handle

INTENT = UpgradeIntent(stream_name="orders", old_checkpoint="/cp/v1", new_checkpoint="/cp/v2")


@pytest.fixture
def journal(tmp_path: Path) -> UpgradeJournal:
    fs = fsspec.filesystem("file")
    path = UpgradeJournal.location(str(tmp_path / "archive"), "orders", "up-1")
    journal = UpgradeJournal(fs, path)
    journal.open(INTENT, "up-1", run_id="run-1")
    # a cold upgrade, planned and approved: each test records the steps before the one it runs
    journal.record_planning("preflight", run_id="run-1", result={"relaunch_mode": "cold"})
    journal.record_planning("approve", run_id="run-1", result={"chosen": "Approve"})
    return journal


def ready(journal: UpgradeJournal, step: str) -> None:
    """Record as done what the planner needs done before ``step`` on the cold path (for a rollback step:
    the old version's stop, and the rollback's steps before it in restore mode)."""
    path = PATHS[StepPath.COLD]
    rollback = ROLLBACK_SEQUENCE[StepPath.COLD][RollbackMode.RESTORE]
    before = (path.steps[:path.steps.index(step)] if step in path.steps
              else (path.stop, path.handover, *rollback[:rollback.index(step)]))
    for name in before:
        journal.begin(name, run_id="run-1", phase=ROLLBACK_PHASE if name in rollback else "upgrade")
        journal.finish(name, None)


def context(run_id: str, ti: Any = None) -> dict[str, Any]:
    return {"run_id": run_id, "ti": ti or TI(), "dag": SimpleNamespace(dag_id="upgrade"),
            "dag_run": SimpleNamespace(triggering_user_name="alice")}


@pytest.fixture
def live_group() -> Iterator[int]:
    """A live process group (its leader's pid), like a detached spark-submit."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_done_handover_is_returned_even_after_the_checkpoint_is_gone(tmp_path: Path, journal: UpgradeJournal,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    ready(journal, "extract_handover")
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(3))
    op = CheckpointHandoverOperator(task_id="extract_handover", checkpoint_uri=built.uri, journal=journal.path)
    monkeypatch.setattr("airflow_ckpt_provider.operators.handover.reconciled_handover_view",
                        lambda reader, hook, **kw: (reader.handover(), SimpleNamespace(
                            starting_offsets=reader.handover().kafka_offsets(), to_dict=lambda: {}), None))
    first = op.execute(context("run-1"))
    assert first["handover"]["batch_id"] == 2
    shutil.rmtree(built.root)  # archived and removed
    again = CheckpointHandoverOperator(task_id="extract_handover", checkpoint_uri=built.uri,
                                       journal=journal.path).execute(context("run-2"))
    assert again == first
    step = journal.step("extract_handover")
    assert step is not None and step.done and step.run_id == "run-1" and step.attempts == 1


def test_a_failed_step_records_its_error(tmp_path: Path, journal: UpgradeJournal) -> None:
    ready(journal, "extract_handover")
    op = CheckpointHandoverOperator(task_id="extract_handover", checkpoint_uri=str(tmp_path / "missing"),
                                    journal=journal.path)
    with pytest.raises(Exception) as failed:
        op.execute(context("run-1"))
    step = journal.step("extract_handover")
    assert step is not None and step.state == "failed" and step.error == str(failed.value)


def test_a_done_stop_is_not_repeated(tmp_path: Path, journal: UpgradeJournal) -> None:
    cp = tmp_path / "v2"
    journal.begin("graceful_stop", run_id="run-1")
    journal.finish("graceful_stop", {"outcome": "graceful", "last_committed_batch": 7})
    op = GracefulStopOperator(task_id="graceful_stop", checkpoint_uri=str(cp), journal=journal.path)
    assert op.execute(context("run-2")) == {"outcome": "graceful", "last_committed_batch": 7}
    assert not cp.exists()  # no stop request was written anywhere


def test_a_done_launch_returns_and_publishes_its_handle(tmp_path: Path, journal: UpgradeJournal) -> None:
    ready(journal, "relaunch")
    handle = local_handle(4242, tmp_path / "log", str(tmp_path / "v2")).to_dict()
    journal.begin("relaunch", run_id="run-1")
    journal.finish("relaunch", handle)
    op = StreamLaunchOperator(task_id="relaunch", application="job.py", checkpoint_uri=str(tmp_path / "v2"),
                              journal=journal.path)
    fake = FakeLauncher(_dead_pid(), tmp_path / "log")
    op.__dict__["launcher_hook"] = fake
    ti = TI()
    assert op.execute(context("run-2", ti)) == handle
    assert fake.launches == [] and ti.xcom[HANDLE_XCOM_KEY] == handle


def test_an_interrupted_launch_adopts_the_live_job(tmp_path: Path, journal: UpgradeJournal, live_group: int) -> None:
    ready(journal, "relaunch")
    cp = tmp_path / "v2"
    started = local_handle(live_group, tmp_path / "log", str(cp))
    journal.begin("relaunch", run_id="run-1")
    journal.note("relaunch", launching=True, min_batch=0)
    journal.note("relaunch", handle=started.to_dict())  # then the worker died
    op = StreamLaunchOperator(task_id="relaunch", application="job.py", checkpoint_uri=str(cp),
                              starting_offsets='{"events":{"0":5}}', journal=journal.path)
    fake = FakeLauncher(_dead_pid(), tmp_path / "log")
    op.__dict__["launcher_hook"] = fake
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context("run-2"))
    assert fake.launches == []  # no second job
    assert deferred.value.trigger.handle == started.to_dict() and deferred.value.trigger.min_batch == 0


def test_an_interrupted_launch_without_a_handle_adopts_by_heartbeat(tmp_path: Path, journal: UpgradeJournal,
                                                                    live_group: int) -> None:
    ready(journal, "relaunch")
    from datetime import datetime, timezone

    from airflow_ckpt_provider.records.control import HEARTBEAT, RUNNING, Heartbeat, ProcessScope

    cp = tmp_path / "v2"
    (cp / "_ckpt").mkdir(parents=True)
    now = datetime.now(timezone.utc).isoformat()
    scope = ProcessScope.current()  # the driver beats from this machine, as GracefulStop records it
    beat = Heartbeat(query_id="q2", run_id="r", state=RUNNING, started_at=now, updated_at=now, interval_s=60,
                     host=scope.host, pid=live_group, boot_id=scope.boot_id, pid_namespace=scope.pid_namespace)
    (cp / HEARTBEAT).write_text(beat.to_json())
    journal.begin("relaunch", run_id="run-1")
    journal.note("relaunch", launching=True, min_batch=0)  # died before recording the handle
    op = StreamLaunchOperator(task_id="relaunch", application="job.py", checkpoint_uri=str(cp),
                              journal=journal.path, adopt_grace_s=0)
    fake = FakeLauncher(_dead_pid(), tmp_path / "log")
    op.__dict__["launcher_hook"] = fake
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context("run-2"))
    assert fake.launches == []
    assert deferred.value.trigger.handle["pid"] == live_group  # its process group
    step = journal.step("relaunch")
    assert step is not None and step.notes["handle"]["pid"] == live_group


def test_an_interrupted_launch_whose_job_died_launches_again_on_its_checkpoint(
        tmp_path: Path, journal: UpgradeJournal, live_group: int) -> None:
    ready(journal, "relaunch")
    built = write_checkpoint(str(tmp_path / "v2"), batches=range(2))  # the dead job had begun it
    dead = local_handle(_dead_pid(), tmp_path / "log", built.uri)
    journal.begin("relaunch", run_id="run-1")
    journal.note("relaunch", launching=True, min_batch=0, handle=dead.to_dict())
    op = StreamLaunchOperator(task_id="relaunch", application="job.py", checkpoint_uri=built.uri,
                              starting_offsets='{"events":{"0":5}}', journal=journal.path, adopt_grace_s=0)
    fake = FakeLauncher(live_group, tmp_path / "log")  # the job launched again runs, and has not committed
    op.__dict__["launcher_hook"] = fake
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context("run-2"))
    assert len(fake.launches) == 1
    assert deferred.value.trigger.min_batch == 2  # a batch committed after this restart
    assert journal.step("relaunch").attempts == 2  # type: ignore[union-attr]


def test_a_fresh_launch_refuses_a_non_empty_checkpoint_but_notes_nothing(tmp_path: Path,
                                                                       journal: UpgradeJournal) -> None:
    ready(journal, "relaunch")
    built = write_checkpoint(str(tmp_path / "v2"), batches=range(2))
    op = StreamLaunchOperator(task_id="relaunch", application="job.py", checkpoint_uri=built.uri,
                              journal=journal.path)
    op.__dict__["launcher_hook"] = FakeLauncher(_dead_pid(), tmp_path / "log")
    with pytest.raises(Exception, match="not empty"):
        op.execute(context("run-1"))
    step = journal.step("relaunch")
    assert step is not None and step.state == "failed" and "launching" not in step.notes


def test_upgrade_steps_refuse_once_the_rollback_began(tmp_path: Path, journal: UpgradeJournal) -> None:
    ready(journal, "verify")
    journal.begin("rollback_stop_new", run_id="run-1", phase=ROLLBACK_PHASE)
    op = HandoverVerifyOperator(task_id="verify", handover="{}", checkpoint_uri=str(tmp_path / "v2"),
                                journal=journal.path)
    with pytest.raises(Exception, match="rolled back"):
        op.execute(context("run-2"))
    assert journal.step("verify") is None


def test_verify_failure_is_recorded(tmp_path: Path, journal: UpgradeJournal) -> None:
    ready(journal, "verify")
    built = write_checkpoint(str(tmp_path / "old"), batches=range(3))
    handover = CheckpointReader(built.uri).handover()
    new = write_checkpoint(str(tmp_path / "v2"), batches=range(1))  # started from its own offsets
    op = HandoverVerifyOperator(task_id="verify", handover=handover.to_json(), checkpoint_uri=new.uri,
                                progress_window_s=0, journal=journal.path)
    with pytest.raises(StartMismatch):
        op.execute(context("run-1"))
    assert journal.step("verify").state == "failed"  # type: ignore[union-attr]


def test_an_interrupted_restore_clears_its_partial_copy_and_restores(tmp_path: Path, journal: UpgradeJournal) -> None:
    ready(journal, "rollback_restore")
    built = write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    fs = fsspec.filesystem("file")
    manifest = CheckpointArchive(fs, str(tmp_path / "archive")).archive(fs, built.uri, stream_name="orders",
                                                                      upgrade_id="up-1")
    original = {p: built.read(p) for p in built.files()}
    shutil.rmtree(built.root)
    journal.begin("rollback_restore", run_id="run-1", phase=ROLLBACK_PHASE)
    journal.note("rollback_restore", restoring=True, archive=manifest.archive_uri)
    partial = Path(built.root) / "offsets"
    partial.mkdir(parents=True)
    (partial / "0").write_text("v1\npartial")  # what the killed attempt had copied
    op = CheckpointRestoreOperator(task_id="rollback_restore", archive_uri=manifest.archive_uri,
                                   target_uri=built.uri, skip_if_target_exists=True, journal=journal.path)
    result = op.execute(context("run-2"))
    assert result["restored_to"] == built.uri
    assert {p: built.read(p) for p in built.files()} == original


def test_a_restore_without_a_note_keeps_an_existing_target(tmp_path: Path, journal: UpgradeJournal) -> None:
    ready(journal, "rollback_restore")
    built = write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    op = CheckpointRestoreOperator(task_id="rollback_restore", archive_uri="", target_uri=built.uri,
                                   skip_if_target_exists=True, journal=journal.path)
    assert op.execute(context("run-1")) == {"restored_to": None, "target_in_place": True}


def test_archive_operator_records_its_manifest_and_does_not_archive_twice(tmp_path: Path,
                                                                         journal: UpgradeJournal) -> None:
    ready(journal, "archive")
    built = write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    kwargs = {"task_id": "archive", "checkpoint_uri": built.uri, "archive_root": str(tmp_path / "archive"),
              "stream_name": "orders", "upgrade_id": "up-1", "journal": journal.path}
    first = CheckpointArchiveOperator(**kwargs).execute(context("run-1"))
    second = CheckpointArchiveOperator(**kwargs).execute(context("run-2"))
    assert second == first
    archives = [p for p in (tmp_path / "archive" / "orders").iterdir() if not p.name.startswith("_")]
    assert len(archives) == 1


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"], start_new_session=True)
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("armed", [True, False])
def test_a_fault_point_kills_the_process_and_says_so(tmp_path: Path, armed: bool) -> None:
    record = tmp_path / "faults.log"
    env = {**os.environ, LOG_ENV: str(record), ENV: "other,archive:copying" if armed else "archive:done"}
    code = "from airflow_ckpt_provider.faults import fault_point; fault_point('archive:copying'); print('alive')"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    if armed:
        assert done.returncode == -9 and "alive" not in done.stdout
        assert "archive:copying" in record.read_text()
    else:
        assert done.returncode == 0 and done.stdout.strip() == "alive" and not record.exists()


# -- re-runs of a closed upgrade: the preflight refuses a rolled-back one, a finished one is done ------


def _preflight(tmp_path: Path) -> UpgradePreflightOperator:
    write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    return UpgradePreflightOperator(task_id="preflight", sink={"kind": "foreach_batch"}, stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                                    new_checkpoint_uri=str(tmp_path / "v2"), archive_root=str(tmp_path / "archive"),
                                    upgrade_id="up-7", new_application="v2.py", kafka_conn_id="no_such_connection")


def _closed_journal(tmp_path: Path, outcome: str, report: str = "") -> UpgradeJournal:
    intent = UpgradeIntent(stream_name="orders", old_checkpoint=str(tmp_path / "v1"),
                           new_checkpoint=str(tmp_path / "v2"), new_application="v2.py",
                           archive_root=str(tmp_path / "archive"))
    journal = UpgradeJournal(fsspec.filesystem("file"),
                             UpgradeJournal.location(str(tmp_path / "archive"), "orders", "up-7"))
    journal.open(intent, "up-7", run_id="run-1")
    for step in ("graceful_stop", "extract_handover", "archive"):
        journal.begin(step, run_id="run-1")
        journal.finish(step, {"location": str(tmp_path / "archive" / "orders" / "a1")} if step == "archive" else {})
    if outcome == "rolled back":
        journal.begin("rollback_restart_old", run_id="run-1", phase=ROLLBACK_PHASE)
        journal.finish("rollback_restart_old", {})
    journal.close(outcome, run_id="run-1", report=report)
    return journal


def test_the_preflight_refuses_a_rolled_back_upgrade_id_at_once(tmp_path: Path) -> None:
    journal = _closed_journal(tmp_path, "rolled back")
    before = journal.read()
    with pytest.raises(UpgradeRolledBack) as refused:
        _preflight(tmp_path).execute(context("run-2"))  # type: ignore[arg-type]
    text = str(refused.value)
    assert "upgrade up-7 rolled back at " + before.closed_at + " by run run-1" in text
    assert journal.path in text and "set the `upgrade_id` param to a new value" in text
    assert "leave it empty after changing the new checkpoint" in text
    after = journal.read()
    assert (after.steps, after.outcome, after.closed_at, after.runs, after.phase) == \
           (before.steps, before.outcome, before.closed_at, before.runs, before.phase), "nothing replayed or rewritten"
    assert after.run_log[:-1] == before.run_log and after.run_log[-1]["run_id"] == "run-2"
    assert after.run_log[-1]["what"].startswith("refused by the preflight: upgrade rolled back at ")


def test_a_finished_upgrade_is_already_done_and_its_report_is_kept(tmp_path: Path) -> None:
    """The preflight says "already done", the steps are skipped, and the report of this run says it
    did nothing, names the first report and is stored beside it, which stays byte-identical."""
    from airflow_ckpt_provider.checkpoint.report import UpgradeReport
    from airflow_ckpt_provider.operators.report import UpgradeReportOperator

    report_op = UpgradeReportOperator(
        task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
        new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.COLD], step_names=["preflight", "graceful_stop"],
        journal=UpgradeJournal.location(str(tmp_path / "archive"), "orders", "up-7"))
    archive = tmp_path / "archive" / "orders" / "a1"
    first_folder = report_op._store(UpgradeReport(stream="orders", outcome="upgraded", run_id="run-1"), str(archive))
    first = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (archive / "report").rglob("*") if p.is_file()}
    journal = _closed_journal(tmp_path, "upgraded", report=first_folder)
    before = journal.read()

    found = _preflight(tmp_path).execute(context("run-2"))  # type: ignore[arg-type]
    assert found["already_done"] is True and found["first_report"] == str(archive / "report")
    # the locations the steps use come from the preflight's one rule, on every path through it
    assert found["state_export"] == str(tmp_path / "archive" / "orders" / "_state" / "up-7")
    assert found["rollback_checkpoint"] == str(tmp_path / "v2") + ".rollback"
    assert found["done_by_run"] == "run-1" and "already done" in found["summary_md"]
    assert "`upgrade_id` param" in found["summary_md"]

    # the report reads "already done" from the journal (the preflight's run entry), not from any XCom
    result = report_op.execute(context("run-2", ReportTI({})))  # type: ignore[arg-type]
    assert result["outcome"] == "already done" and result["run_id"] == "run-2"
    assert any("this run did nothing" in note for note in result["notes"])
    assert f"the upgrade's report: {archive / 'report'}" in result["notes"]
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in first} == first, "the first report is untouched"
    second = (archive / "report" / "run-2" / "upgrade-report.md").read_text()
    assert "already done" in second and "this run did nothing" in second and "run-2" in second
    after = journal.read()
    assert (after.steps, after.outcome, after.closed_at, after.runs) == \
           (before.steps, before.outcome, before.closed_at, before.runs), "closed once, never again"
    assert after.run_log[:len(before.run_log)] == before.run_log
    assert [e["run_id"] for e in after.run_log[len(before.run_log):]] == ["run-2", "run-2"]
    assert after.run_log[-1]["report"] == str(archive / "report" / "run-2")


class ReportTI:
    """The report's view of its DAG run: XComs by (task id, key); no Airflow task states."""

    dag_id, run_id = "upgrade", "run-2"

    def __init__(self, xcoms: dict[tuple[str, str], Any]) -> None:
        self.xcoms = xcoms

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        return self.xcoms.get((task_ids, key))


def plan_in(journal: UpgradeJournal, *, relaunch_mode: str = "cold", in_place: bool = False) -> None:
    """Record the planning a reference upgrade's preflight, path and approval record."""
    journal.record_planning("preflight", run_id="run-1", result={"resuming": False, "relaunch_mode": relaunch_mode,
                                                                 "rollback_mode": "restore"})
    journal.record_planning("choose_path", run_id="run-1", result=path_choice(in_place=in_place).to_dict())
    journal.record_planning("approve", run_id="run-1", result={"chosen": "Approve"})


def test_a_step_the_record_does_not_call_for_skips_itself_and_records_nothing(tmp_path: Path,
                                                                              journal: UpgradeJournal) -> None:
    """The planner decides from the journal: a step of the path not taken, a step whose predecessor
    failed, and a rollback step of a verified upgrade each skip (Airflow's skip, with the reason),
    touch no checkpoint and record nothing."""
    from airflow.sdk.exceptions import AirflowSkipException

    plan_in(journal, in_place=True)
    cp = tmp_path / "v1"
    stop = GracefulStopOperator(task_id="graceful_stop", checkpoint_uri=str(cp), journal=journal.path)
    with pytest.raises(AirflowSkipException, match="in_place path, which has no step graceful_stop"):
        stop.execute(context("run-1"))
    assert journal.step("graceful_stop") is None and not cp.exists()  # no stop request written

    journal.begin("in_place_stop", run_id="run-1")
    journal.fail("in_place_stop", "escalated")
    handover = CheckpointHandoverOperator(task_id="in_place_handover", step="in_place_handover", checkpoint_uri=str(cp), journal=journal.path)
    with pytest.raises(AirflowSkipException, match="in_place_stop, before it on the in_place path, is failed"):
        handover.execute(context("run-1"))
    assert journal.step("in_place_handover") is None

    for name in PATHS[StepPath.IN_PLACE].steps:
        if name != "in_place_stop":
            journal.begin(name, run_id="run-1")
            journal.finish(name, {})
    journal.begin("in_place_stop", run_id="run-1")
    journal.finish("in_place_stop", {})
    rollback = GracefulStopOperator(task_id="in_place_rollback_stop", step="in_place_rollback_stop", checkpoint_uri=str(cp), journal=journal.path,
                                    journal_phase=ROLLBACK_PHASE)
    with pytest.raises(AirflowSkipException, match="the upgrade completed"):
        rollback.execute(context("run-1"))
    record = journal.read()
    assert "in_place_rollback_stop" not in record.steps and record.phase == "upgrade"


@pytest.mark.parametrize(("written", "named"), [
    ({"format": 1}, "an earlier release (its journals name none)"),  # today's journals before the release field
    ({"format": 3, "release": "9.1.0"}, "release 9.1.0"),
])
def test_the_preflight_refuses_a_journal_of_another_release_and_changes_nothing(
        tmp_path: Path, written: dict[str, Any], named: str) -> None:
    """An upgrade under way in another release's journal format is that release's to finish or
    abandon: the preflight refuses it with what it found and what to do, and neither the journal
    nor the stream's lock changes (no journal is rewritten in this release's meaning)."""
    import json

    from airflow_ckpt_provider.checkpoint.errors import JournalOfAnotherRelease

    journal = _closed_journal(tmp_path, "upgraded")
    data = json.loads(Path(journal.path).read_text())
    data.update({"outcome": None, "closed_at": ""})  # an upgrade under way
    data.pop("release")
    data.update(written)
    Path(journal.path).write_text(json.dumps(data))
    lock = Path(journal.lock_path)
    lock.write_text(json.dumps({"upgrade_id": "up-7", "run_id": "run-1"}))
    before = {p: p.read_bytes() for p in (tmp_path / "archive").rglob("*") if p.is_file()}
    with pytest.raises(JournalOfAnotherRelease) as refused:
        _preflight(tmp_path).execute(context("run-2"))  # type: ignore[arg-type]
    text = str(refused.value)
    assert f"found journal format {written['format']}, written by {named}" in text
    assert "expected journal format 2" in text and journal.path in text
    assert "With the release that wrote it, finish that upgrade" in text and "--release-lock" in text
    assert {p: p.read_bytes() for p in (tmp_path / "archive").rglob("*") if p.is_file()} == before
    assert not (tmp_path / "v2").exists()


def test_a_step_not_called_for_skips_before_its_templates_and_inputs_are_read(tmp_path: Path,
                                                                              journal: UpgradeJournal) -> None:
    """A rollback restart the rollback does not call for runs (all_done) after steps that never ran:
    its templates name their results, which do not exist. It decides from the journal first and
    skips before anything else is rendered; a step the journal calls for renders as usual."""
    from airflow.sdk.exceptions import AirflowSkipException

    plan_in(journal)  # cold, restore mode: the forward restart is never called for
    context = {"run_id": "run-1", "ti": SimpleNamespace(xcom_pull=lambda **_: None)}
    forward = StreamLaunchOperator(
        task_id="rollback_restart_forward", step="rollback_restart_forward", application="v1.py", checkpoint_uri=str(tmp_path / "fresh"),
        starting_offsets="{{ ti.xcom_pull(task_ids='rollback_handover')['starting_offsets'] }}",
        journal="{{ ti.xcom_pull(task_ids='absent') or '" + journal.path + "' }}", journal_phase=ROLLBACK_PHASE)
    with pytest.raises(AirflowSkipException, match="rollback_restart_forward is not part of this rollback"):
        forward.render_template_fields(context, jinja2.Environment())  # type: ignore[arg-type]
    assert forward.starting_offsets.startswith("{{"), "nothing else was rendered"

    needed = GracefulStopOperator(task_id="graceful_stop", checkpoint_uri="{{ run_id }}/v1", journal=journal.path)
    needed.render_template_fields(context, jinja2.Environment())  # type: ignore[arg-type]
    assert needed.checkpoint_uri == "run-1/v1"

    orphan = GracefulStopOperator(task_id="rollback_stop_new", step="rollback_stop_new", checkpoint_uri="{{ ti.xcom_pull()['x'] }}",
                                  journal="{{ ti.xcom_pull(task_ids='preflight') or '' }}", require_journal=True)
    with pytest.raises(AirflowSkipException, match="no upgrade journal"):
        orphan.render_template_fields(context, jinja2.Environment())  # type: ignore[arg-type]


def test_an_attempt_decides_once_when_its_templates_render(tmp_path: Path, journal: UpgradeJournal,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Render, then run: the planner's decision from the rendering is the run's; the journal is read
    once for it and once more as the start is recorded (not a third time), and a step run without
    rendering still decides for itself."""
    journal.begin("graceful_stop", run_id="run-1")
    journal.finish("graceful_stop", {"outcome": "graceful", "last_committed_batch": 7})
    reads: list[str] = []
    original = UpgradeJournal.read
    monkeypatch.setattr(UpgradeJournal, "read", lambda self: reads.append(self.path) or original(self))
    op = GracefulStopOperator(task_id="graceful_stop", checkpoint_uri=str(tmp_path / "v2"), journal=journal.path)
    op.render_template_fields(context("run-2"), jinja2.Environment())  # type: ignore[arg-type]
    assert len(reads) == 1
    assert op.execute(context("run-2")) == {"outcome": "graceful", "last_committed_batch": 7}
    assert len(reads) == 2, "decided at rendering; read again only to record the start"
    again = GracefulStopOperator(task_id="graceful_stop", checkpoint_uri=str(tmp_path / "v2"), journal=journal.path)
    assert again.execute(context("run-3")) == {"outcome": "graceful", "last_committed_batch": 7}
    assert len(reads) == 4, "without rendering: its own decision, then the start"


# -- a refusal before any side effect ends the upgrade: refused, its journal closed, the stream free ----


def _fresh_preflight(tmp_path: Path, new_application: str) -> UpgradePreflightOperator:
    """The reference upgrade's preflight (standby) of a new upgrade, Kafka faked at its hook."""
    from airflow_ckpt_provider.checkpoint import BrokerView
    from tests.unit.test_rollback import FakeKafkaHook

    op = UpgradePreflightOperator(task_id="preflight", sink={"kind": "foreach_batch"}, stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                                  new_checkpoint_uri=str(tmp_path / "v2"), archive_root=str(tmp_path / "archive"),
                                  new_application=new_application, relaunch_mode="standby")
    op.kafka_hook = FakeKafkaHook(BrokerView({"events": {p: (0, 1000) for p in range(4)}}))  # type: ignore[assignment]
    return op


def test_a_compatibility_refusal_ends_the_upgrade_refused_and_frees_the_stream(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference upgrade's decisions, run as its tasks run: the preflight opens the journal and
    takes the lock, the check's trials (faked at the hook boundary) say the new version does not
    start. The steps after it skip themselves with the refusal; the report closes the journal
    ``refused`` with the verdict's reason, releases the lock and fails with UpgradeRefused; nothing
    on the old checkpoint changed, and the next upgrade of the stream is accepted."""
    from airflow.sdk.exceptions import AirflowSkipException

    from airflow_ckpt_provider.checkpoint.errors import NewVersionDoesNotStart, UpgradeRefused
    from airflow_ckpt_provider.operators.compat import CompatibilityCheckOperator, UpgradePathOperator
    from airflow_ckpt_provider.operators.report import UpgradeReportOperator
    from airflow_ckpt_provider.storage.journal import read_lock
    from tests.unit.test_compat import CRASH, fake_check

    write_checkpoint(str(tmp_path / "v1"), batches=range(3))
    old_files = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "v1").rglob("*") if p.is_file()}
    uri = _fresh_preflight(tmp_path, "v2.py").execute(context("run-1"))["journal"]  # type: ignore[arg-type]
    journal = UpgradeJournal(fsspec.filesystem("file"), uri)
    assert read_lock(journal.fs, journal.lock_path) is not None

    calls = fake_check(monkeypatch, CRASH, "airflow_ckpt_provider.operators.compat")
    check = CompatibilityCheckOperator(task_id="compatibility_check", old_checkpoint_uri=str(tmp_path / "v1"),
                                       new_application="v2.py", journal=uri)
    with pytest.raises(NewVersionDoesNotStart, match="deliberate crash"):
        check.execute(context("run-1"))  # type: ignore[arg-type]
    assert len(calls) == 1
    refused = journal.read().planning["compatibility_check"]
    assert refused.state == "failed" and refused.notes["refusal"] == \
        "the new version does not start: v2.py fails in its trial: driver failed RuntimeError: deliberate crash"

    # the steps after it: an upgrade step and a rollback step (all_done) skip themselves, saying why
    for step in (GracefulStopOperator(task_id="start_standby", checkpoint_uri=str(tmp_path / "v2"), journal=uri),
                 GracefulStopOperator(task_id="rollback_stop_new", step="rollback_stop_new", checkpoint_uri=str(tmp_path / "v2"), journal=uri,
                                      journal_phase=ROLLBACK_PHASE)):
        with pytest.raises(AirflowSkipException, match="compatibility_check refused the upgrade before anything was "
                                                       "stopped: the new version does not start"):
            step.execute(context("run-1"))  # type: ignore[arg-type]
    assert journal.read().steps == {}, "no step with a side effect began"

    report = UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                                   new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.STANDBY],
                                   in_place=PATHS[StepPath.IN_PLACE], journal=uri)
    with pytest.raises(UpgradeRefused) as failed:
        report.execute(context("run-1", ReportTI({})))  # type: ignore[arg-type]
    text = str(failed.value)
    assert "found outcome 'refused': compatibility_check refused the upgrade" in text
    assert "the stream's lock released" in text and "trigger the upgrade again" in text

    record = journal.read()
    closing = record.closing_entry()
    assert record.outcome == "refused" and record.closed and closing is not None
    assert closing["run_id"] == "run-1" and closing["reason"] == refused.notes["refusal"]
    assert closing["what"] == f"ended refused: {refused.notes['refusal']}"
    assert read_lock(journal.fs, journal.lock_path) is None, "the stream's lock is released"
    stored = Path(closing["report"]) / "upgrade-report.json"
    import json

    shown = json.loads(stored.read_text())
    assert shown["outcome"] == "refused" and shown["new_batches"] == []
    assert shown["notes"][0].startswith("compatibility_check refused the upgrade before anything was stopped: the "
                                        "new version does not start: v2.py fails in its trial")
    assert "nothing was stopped, copied or started" in shown["notes"][0]
    assert {s["name"]: s["state"] for s in shown["steps"]}["compatibility_check"] == "refused"
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "v1").rglob("*") if p.is_file()} \
        == old_files, "the old checkpoint is untouched"
    assert not (tmp_path / "v2").exists()

    # the stream is free: the next upgrade (a fixed new version, another upgrade id) takes it
    fixed = _fresh_preflight(tmp_path, "v3.py").execute(context("run-2"))  # type: ignore[arg-type]
    assert fixed["upgrade_id"] != record.upgrade_id and not fixed["resuming"]
    held = read_lock(journal.fs, journal.lock_path)
    assert held is not None and held.upgrade_id == fixed["upgrade_id"]

    # a path choice that fails before any side effect is the same refusal
    path = UpgradePathOperator(task_id="choose_path", mode="sideways", verdict=None, journal=fixed["journal"])
    with pytest.raises(ValueError, match="sideways"):
        path.execute(context("run-2"))  # type: ignore[arg-type]
    second = UpgradeJournal(fsspec.filesystem("file"), fixed["journal"])
    with pytest.raises(UpgradeRefused, match="choose_path refused the upgrade"):
        UpgradeReportOperator(task_id="report", stream_name="orders", old_checkpoint_uri=str(tmp_path / "v1"),
                              new_checkpoint_uri=str(tmp_path / "v2"), path=PATHS[StepPath.STANDBY],
                              journal=fixed["journal"]).execute(context("run-2", ReportTI({})))  # type: ignore[arg-type]
    assert second.read().outcome == "refused" and read_lock(second.fs, second.lock_path) is None


def test_every_journaled_operator_class_serves_kinds_of_the_step_table() -> None:
    from airflow_ckpt_provider.operators.handover import RollbackHandoverOperator
    from airflow_ckpt_provider.operators.launch import StandbyReleaseOperator
    from airflow_ckpt_provider.operators.state import StateExportOperator
    from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator
    from airflow_ckpt_provider.upgrade.steps import KINDS

    classes = (GracefulStopOperator, CheckpointHandoverOperator, RollbackHandoverOperator, StateExportOperator,
               CheckpointArchiveOperator, CheckpointRestoreOperator, StreamLaunchOperator, StandbyReleaseOperator,
               StandbySwitchoverOperator, HandoverVerifyOperator)
    served = [kind for cls in classes for kind in cls.STEP_KINDS]
    assert set(served) <= set(KINDS)
    assert sorted(served) == sorted([*(k for k in KINDS if k not in PLANNING), "relaunch"]), \
        "every step kind has its class (relaunch two: a cold launch and a standby's release)"


@pytest.mark.parametrize(("step", "found"), [("launch", "step kind 'launch'"),
                                             ("relaunch", "step='relaunch' for a GracefulStopOperator")])
def test_an_operator_declared_as_a_kind_its_class_does_not_serve_is_refused(step: str, found: str) -> None:
    with pytest.raises(UnknownStepKind, match=found):
        GracefulStopOperator(task_id="stop", step=step, checkpoint_uri="/cp/v1")


def test_an_operator_under_another_task_id_is_planned_and_recorded_as_its_kind(tmp_path: Path,
                                                                              journal: UpgradeJournal) -> None:
    """Another team's DAG: the stop runs as ``stop_orders``, the rollback's stop as ``undo_v2``: each
    is planned as the step it is (a Reject skips them too) and recorded under its task id with its kind."""
    op = GracefulStopOperator(task_id="stop_orders", checkpoint_uri=str(tmp_path / "v1"), journal=journal.path)
    assert op.step_kind == "graceful_stop"
    undo = GracefulStopOperator(task_id="undo_v2", step="rollback_stop_new", checkpoint_uri=str(tmp_path / "v2"),
                                journal=journal.path, journal_phase=ROLLBACK_PHASE)
    assert undo.step_kind == "rollback_stop_new"
    with pytest.raises(AirflowSkipException, match="undo_v2: the old version was not stopped by this upgrade"):
        undo.execute(context("run-1"))
    journal.record_planning("approve", run_id="run-1", result={"chosen": "Reject"})
    with pytest.raises(AirflowSkipException, match="stop_orders: the approval answered Reject"):
        op.execute(context("run-1"))
    assert journal.read().steps == {}
    journal.record_planning("approve", run_id="run-1", result={"chosen": "Approve"})
    journal.begin("stop_orders", run_id="run-1", kind="graceful_stop")
    journal.finish("stop_orders", {"outcome": "graceful"})
    assert op.execute(context("run-2")) == {"outcome": "graceful"}  # reused, by its kind
    entry = journal.read().steps["stop_orders"]
    assert entry.kind == "graceful_stop" and journal.read().entry("graceful_stop") == entry
