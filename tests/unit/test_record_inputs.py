"""What a step takes from the upgrade record (``FromRecord``): every input in every recorded state of
the steps it reads, as a table; the journaled operators read them once the planner says the step
runs and after their own templates rendered (a recorded value is never rendered as a template);
the compatibility check asks the planner; the report reads "already done" from the journal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fsspec
import jinja2
import pytest
import structlog
from airflow.sdk.exceptions import AirflowSkipException

from airflow_ckpt_provider.checkpoint.compat import CompatibilitySkipped
from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult, RecordInputMissing
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.rollback import NewVersionProgress, RollbackHandoverUnread, rollback_handover
from airflow_ckpt_provider.checkpoint.state import StateExport
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade import planner
from airflow_ckpt_provider.upgrade.inputs import INPUTS, FromRecord, RecordInput, resolve
from airflow_ckpt_provider.upgrade.record import (
    DONE,
    FAILED,
    ROLLBACK_PHASE,
    STARTED,
    JournalRecord,
    JournalStep,
    UpgradeIntent,
)
from tests.unit.step_results import archive, handover, path_choice, switchover
from tests.unit.step_results import handle as launch

INTENT = UpgradeIntent(stream_name="s", old_checkpoint="/c/old", new_checkpoint="/c/new")

#: each step's result as its own type writes it (tests/unit/step_results.py); an input passes on its type's JSON
HANDOVER = handover(7).to_dict()
IN_PLACE_HANDOVER = handover(9).to_dict()
EXPORT = StateExport(location="/arch/s/_state/u", batch_id=7).to_dict()
ARCHIVE = archive("/arch/s/20260101-u").to_dict()
SEED = "/c/new/_ckpt/seed-state/r1"
#: a switchover whose standby seeded the state (the migration's own steps above win for the rest)
SWITCHED = switchover(state_path=SEED).to_dict()
#: a forward rollback after the new version committed up to offset 11 (the handover was 5)
NEW_PROGRESS = NewVersionProgress(start=KafkaOffsets({"t": {0: 5}}), committed_batch=0,
                                  committed_end=KafkaOffsets({"t": {0: 11}}))
ROLLBACK = rollback_handover("forward", KafkaOffsets({"t": {0: 5}}), NEW_PROGRESS,
                             checkpoint="/c/new.rollback").to_dict()
#: the compatibility check's verdict as the journal's planning keeps it (without trials, log tail, Markdown)
VERDICT = CompatibilitySkipped("switched off").to_dict()
PLANNED = {"resuming": False, "relaunch_mode": "standby", "rollback_mode": "forward",
           "state_export": "/arch/s/_state/u", "rollback_checkpoint": "/c/new.rollback"}


def handle(step: str, noted: bool) -> dict[str, Any]:
    """The launch handle ``step`` noted right after launching, or (``noted`` False) the one it returned."""
    return replace(launch(step), pid=4243 if noted else 4244, ui_url=None if noted else f"http://{step}").to_dict()


#: Every step and decision an input is read from, with what it records when done.
RESULTS: dict[str, Any] = {
    "preflight": PLANNED, "compatibility_check": VERDICT, "extract_handover": HANDOVER, "in_place_handover": IN_PLACE_HANDOVER,
    "export_state": EXPORT, "archive": ARCHIVE, "rollback_handover": ROLLBACK,
    "start_standby": handle("start_standby", False), "relaunch": handle("relaunch", False),
    "in_place_restart": handle("in_place_restart", False), "switchover": SWITCHED,
}
LAUNCHES = ("start_standby", "relaunch", "in_place_restart")
STATES = ["not run", "started", "done", "failed", "rolled back"]


def step(name: str, state: str, **fields: Any) -> JournalStep:  # noqa: ANN401
    return JournalStep(name=name, state=state, run_id="run-1", started_at="2026-01-01T00:00:01+00:00", **fields)


def record_in(state: str) -> JournalRecord:
    """A record whose steps and preflight decision above are all in ``state``: never begun, begun
    (a launch noted its handle), done, failed after noting its handle, or done in an upgrade rolled back."""
    steps: dict[str, JournalStep] = {}
    planning: dict[str, JournalStep] = {}
    for name, result in RESULTS.items():
        if state == "not run":
            continue
        recorded = DONE if state in ("done", "rolled back") else STARTED if state == "started" else FAILED
        notes = {"handle": handle(name, True)} if name in LAUNCHES else {}
        entry = step(name, recorded, result=result if recorded == DONE else None, notes=notes)
        (planning if name in ("preflight", "compatibility_check") else steps)[name] = entry
    rec = JournalRecord(upgrade_id="u", intent=INTENT, created_at="2026-01-01T00:00:00+00:00", steps=steps,
                        planning=planning)
    if state == "rolled back":
        rec = replace(rec, phase=ROLLBACK_PHASE, outcome="rolled back", closed_at="2026-01-01T00:09:00+00:00")
    return rec


MISSING = RecordInputMissing
#: input -> its value in each of STATES; MISSING: resolve raises RecordInputMissing.
TABLE: dict[RecordInput, list[Any]] = {
    RecordInput.COMPATIBILITY_VERDICT: [None, None, VERDICT, None, VERDICT],
    RecordInput.HANDOVER: [None, None, HANDOVER, None, HANDOVER],
    RecordInput.IN_PLACE_HANDOVER: [None, None, IN_PLACE_HANDOVER, None, IN_PLACE_HANDOVER],
    RecordInput.STATE_EXPORT_LOCATION: ["", "", "/arch/s/_state/u", "", "/arch/s/_state/u"],
    RecordInput.STATE_EXPORT: [None, None, EXPORT, None, EXPORT],
    RecordInput.SEEDED_STATE: ["", "", SEED, "", SEED],
    RecordInput.STANDBY_HANDLE: [None, handle("start_standby", True), handle("start_standby", False),
                                 handle("start_standby", True), handle("start_standby", False)],
    RecordInput.NEW_HANDLE: ["", handle("relaunch", True), handle("relaunch", False), handle("relaunch", True),
                             handle("relaunch", False)],
    RecordInput.IN_PLACE_HANDLE: ["", handle("in_place_restart", True), handle("in_place_restart", False),
                                  handle("in_place_restart", True), handle("in_place_restart", False)],
    RecordInput.ARCHIVE_LOCATION: ["", "", ARCHIVE["location"], "", ARCHIVE["location"]],
    RecordInput.UPGRADE_ID: ["u"] * 5,
    RecordInput.ROLLBACK_CHECKPOINT: [MISSING, MISSING, "/c/new.rollback", MISSING, "/c/new.rollback"],
    RecordInput.ROLLBACK_STARTING_OFFSETS: [MISSING, MISSING, ROLLBACK["starting_offsets"], MISSING,
                                            ROLLBACK["starting_offsets"]],
}
CASES = [(what, state, TABLE[what][index]) for what in RecordInput for index, state in enumerate(STATES)]


def test_the_table_covers_every_input() -> None:
    assert set(TABLE) == set(RecordInput) == set(INPUTS)
    # the old templates' empty values, except where none is safe
    assert {what for what, values in TABLE.items() if MISSING in values} == {
        RecordInput.ROLLBACK_CHECKPOINT, RecordInput.ROLLBACK_STARTING_OFFSETS}


@pytest.mark.parametrize(("what", "state", "expected"), CASES, ids=[f"{w.value}-{s}" for w, s, _ in CASES])
def test_every_input_in_every_recorded_state(what: RecordInput, state: str, expected: Any) -> None:  # noqa: ANN401
    rec = record_in(state)
    if expected is MISSING:
        with pytest.raises(RecordInputMissing) as missing:
            resolve(rec, what, argument="checkpoint_uri")
        text = str(missing.value)
        assert f"checkpoint_uri=FromRecord({what.value})" in text and "upgrade u" in text
        state_word = "not run" if state == "not run" else str(STARTED if state == "started" else FAILED)
        assert f"{next(iter(INPUTS[what].steps))} {state_word}" in text, text  # what the record shows instead
        assert text.endswith(RecordInputMissing.default_action) or RecordInputMissing.default_action in text
        return
    value = resolve(rec, what)
    assert value == expected
    if isinstance(value, Mapping):  # a copy: the step cannot change the record it read
        value["changed"] = True  # type: ignore[index]
        assert resolve(rec, what) == expected


def test_the_new_version_is_the_relaunch_else_the_standby() -> None:
    """The rollback stops what runs: the released (or cold-launched) job, else the standby; as the
    template did with the launches' ``launch_handle`` XComs."""
    standby = handle("start_standby", False)
    rec = replace(record_in("not run"), steps={"start_standby": step("start_standby", DONE, result=standby)})
    assert resolve(rec, RecordInput.NEW_HANDLE) == standby
    # the relaunch began but died before it launched anything: the standby is what runs
    rec = replace(rec, steps={**rec.steps, "relaunch": step("relaunch", STARTED, notes={"launching": True})})
    assert resolve(rec, RecordInput.NEW_HANDLE) == standby
    noted = handle("relaunch", True)
    rec = replace(rec, steps={**rec.steps, "relaunch": step("relaunch", FAILED, notes={"handle": noted})})
    assert resolve(rec, RecordInput.NEW_HANDLE) == noted


def test_a_switchover_gives_the_handover_and_the_new_version_it_recorded() -> None:
    """On the switchover path the handover and the new version's handle are parts of the switchover's
    result; while it runs (or after it failed) the new version is the standby it noted."""
    standby = handle("start_standby", False)
    noted = handle("switchover", True)
    rec = replace(record_in("not run"), steps={"start_standby": step("start_standby", DONE, result=standby),
                                               "switchover": step("switchover", STARTED, notes={"handle": noted})})
    assert resolve(rec, RecordInput.NEW_HANDLE) == noted
    assert resolve(rec, RecordInput.HANDOVER) is None
    released = handle("switchover", False)
    result = replace(switchover(), handle=released, handover=HANDOVER).to_dict()
    rec = replace(rec, steps={**rec.steps, "switchover": step("switchover", DONE, result=result)})
    assert resolve(rec, RecordInput.NEW_HANDLE) == released
    assert resolve(rec, RecordInput.HANDOVER) == HANDOVER
    assert resolve(rec, RecordInput.SEEDED_STATE) == "", "a standby that seeded no state"


def test_no_record_is_missing_for_every_input() -> None:
    for what in RecordInput:
        with pytest.raises(RecordInputMissing, match="on a step without an upgrade journal"):
            resolve(None, what, argument="handover")


def with_rollback(result: Any) -> JournalRecord:  # noqa: ANN401 - a recorded JSON value
    done = record_in("done")
    return replace(done, steps={**done.steps, "rollback_handover": step("rollback_handover", DONE, result=result)})


@pytest.mark.parametrize("result", [
    rollback_handover("restore", KafkaOffsets({"t": {0: 5}}), NEW_PROGRESS, checkpoint="/c/old").to_dict(),
    RollbackHandoverUnread(checkpoint="/c/old", error="unreadable").to_dict(),
], ids=["restore", "restore, new checkpoint unread"])
def test_a_rollback_handover_without_offsets_is_missing(result: dict[str, Any]) -> None:
    """A restore rollback's result (no starting_offsets) never feeds a forward restart."""
    with pytest.raises(RecordInputMissing, match="rollback_handover done"):
        resolve(with_rollback(result), RecordInput.ROLLBACK_STARTING_OFFSETS)


def test_a_recorded_rollback_handover_that_is_not_one_is_refused() -> None:
    """The offsets are read from the decoded result, never picked out of whatever was recorded."""
    made_up = {"mode": "forward", "checkpoint": "/c/new.rollback", "starting_offsets": '{"t":{"0":11}}'}
    with pytest.raises(InvalidStepResult, match="without 'resume'"):
        resolve(with_rollback(made_up), RecordInput.ROLLBACK_STARTING_OFFSETS)


@pytest.mark.parametrize(("what", "name", "entry"), [
    (RecordInput.HANDOVER, "extract_handover", {"result": {"handover": {"batch_id": 7}}}),
    (RecordInput.IN_PLACE_HANDOVER, "in_place_handover", {"result": {**HANDOVER, "surprise": 1}}),
    (RecordInput.STATE_EXPORT, "export_state", {"result": "/arch/s/_state/u"}),
    (RecordInput.ARCHIVE_LOCATION, "archive", {"result": {"file_count": 3}}),
    (RecordInput.SEEDED_STATE, "switchover", {"result": {**SWITCHED, "used": {"state_path": ["/x"]}}}),
    (RecordInput.STANDBY_HANDLE, "start_standby", {"result": {"mode": "local", "app_name": "v2"}}),
    (RecordInput.NEW_HANDLE, "relaunch", {"state": FAILED, "notes": {"handle": "v2"}}),
    (RecordInput.NEW_HANDLE, "relaunch", {"state": STARTED, "notes": {"launching": "yes"}}),
    (RecordInput.COMPATIBILITY_VERDICT, "compatibility_check", {"result": {"in_place": "ok"}}),
    (RecordInput.STATE_EXPORT_LOCATION, "preflight", {"result": {**PLANNED, "state_export": 7}}),
    (RecordInput.ROLLBACK_CHECKPOINT, "preflight", {"result": {**PLANNED, "relaunch_mode": "sideways"}}),
], ids=lambda v: v.value if isinstance(v, RecordInput) else "")
def test_a_malformed_record_is_refused_for_every_input_that_reads_it(what: RecordInput, name: str,
                                                                     entry: dict[str, Any]) -> None:
    """What the record holds is read through its step's row: what is not that row's type is refused
    with a typed error naming the step, never a KeyError or a value picked out of it."""
    fields = {"state": DONE, **entry}
    rec = replace(record_in("not run"), steps={name: step(name, **fields)})
    with pytest.raises(InvalidStepResult) as refused:
        resolve(rec, what, argument="arg")
    assert f"{name} recorded" in refused.value.found and refused.value.expected, refused.value.found


def test_from_record_reads_as_its_input() -> None:
    marker = FromRecord(RecordInput.NEW_HANDLE)
    assert marker == FromRecord("new_handle") and str(marker) == "FromRecord(new_handle)"  # type: ignore[arg-type]
    assert not hasattr(marker, "resolve"), "Airflow's renderer would call it: the marker must pass through unrendered"
    with pytest.raises(ValueError):
        FromRecord("no_such_input")  # type: ignore[arg-type]


# -- the journaled operators read their inputs once they run -----------------------------------------


@pytest.fixture
def journal(tmp_path: Path) -> UpgradeJournal:
    journal = UpgradeJournal(fsspec.filesystem("file"), UpgradeJournal.location(str(tmp_path / "archive"), "s", "u"))
    journal.open(INTENT, "u", run_id="run-1")
    return journal


def plan(journal: UpgradeJournal, **preflight: Any) -> None:  # noqa: ANN401
    """The planning of a cold upgrade the preflight opened, approved; ``preflight`` overrides its decisions."""
    journal.record_planning("preflight", run_id="run-1", result={**PLANNED, "relaunch_mode": "cold", **preflight})
    journal.record_planning("choose_path", run_id="run-1", result=path_choice().to_dict())
    journal.record_planning("approve", run_id="run-1", result={"chosen": "Approve"})


def done(journal: UpgradeJournal, name: str, result: Any = None, phase: str = "upgrade") -> None:  # noqa: ANN401
    journal.begin(name, run_id="run-1", phase=phase)
    journal.finish(name, result if result is not None else {})


def failed_after_the_stop(journal: UpgradeJournal, *, mode: str = "restore", **preflight: Any) -> None:  # noqa: ANN401
    """A cold upgrade whose old version was stopped and whose relaunch failed after launching."""
    plan(journal, rollback_mode=mode, **preflight)
    for name in ("graceful_stop", "extract_handover", "export_state", "archive"):
        done(journal, name, RESULTS.get(name))
    journal.begin("relaunch", run_id="run-1")
    journal.note("relaunch", launching=True)


def render(op: Any) -> None:  # noqa: ANN401
    op.render_template_fields({"run_id": "run-1", "ti": SimpleNamespace(xcom_pull=lambda **_: None)},
                              jinja2.Environment())


def test_a_recorded_value_is_read_after_the_templates_and_never_rendered(tmp_path: Path,
                                                                         journal: UpgradeJournal) -> None:
    """The rollback's stop takes the new version's handle from the record: a handle whose app name
    holds a template is taken as written, while the step's own templates are rendered."""
    from airflow_ckpt_provider.operators.stop import GracefulStopOperator
    from tests.unit.test_launch_operators import local_handle

    failed_after_the_stop(journal)
    written = {**local_handle(4242, tmp_path / "log", "/c/new").to_dict(), "app_name": "v2 {{ 7 * 7 }}"}
    journal.note("relaunch", handle=written)
    journal.fail("relaunch", "no first commit")
    op = GracefulStopOperator(task_id="rollback_stop_new", step="rollback_stop_new", checkpoint_uri="/c/new-{{ 7 * 7 }}",
                              launch_handle=FromRecord(RecordInput.NEW_HANDLE), journal=journal.path,
                              journal_phase=ROLLBACK_PHASE, require_journal=True)
    with structlog.testing.capture_logs() as logs:
        render(op)
    assert op.checkpoint_uri == "/c/new-49", "the step's own template is rendered"
    assert op.launch_handle == written and op.launch_handle["app_name"] == "v2 {{ 7 * 7 }}", "the record's is not"
    read = [entry["event"] for entry in logs if "read from the upgrade record" in entry["event"]]
    assert len(read) == 1 and read[0].startswith("launch_handle: the new version's launch handle, read from the "
                                                 f"upgrade record {journal.path}: "), read
    assert op._handle() is not None and op._handle().app_name == "v2 {{ 7 * 7 }}"  # type: ignore[union-attr]


def test_locations_read_from_the_record_are_logged_masked(journal: UpgradeJournal) -> None:
    from airflow_ckpt_provider.operators.stop import GracefulStopOperator

    failed_after_the_stop(journal)
    journal.note("relaunch", handle=launch("v2", "s3a://KEY:SECRET@b/cp").to_dict())
    op = GracefulStopOperator(task_id="rollback_stop_new", step="rollback_stop_new", checkpoint_uri="/c/new", journal=journal.path,
                              launch_handle=FromRecord(RecordInput.NEW_HANDLE), journal_phase=ROLLBACK_PHASE)
    with structlog.testing.capture_logs() as logs:
        render(op)
    text = "\n".join(str(entry["event"]) for entry in logs)
    assert "s3a://***@b/cp" in text and "SECRET" not in text and "KEY:" not in text
    assert op.launch_handle["checkpoint_uri"] == "s3a://KEY:SECRET@b/cp", "the step gets the value itself"


def test_a_step_not_called_for_skips_before_reading_its_inputs(journal: UpgradeJournal) -> None:
    """The forward restart of a restore rollback has no offsets to read: it skips, it does not fail."""
    from airflow_ckpt_provider.operators.launch import StreamLaunchOperator

    failed_after_the_stop(journal, mode="restore")
    op = StreamLaunchOperator(task_id="rollback_restart_forward", step="rollback_restart_forward", application="v1.py",
                              checkpoint_uri=FromRecord(RecordInput.ROLLBACK_CHECKPOINT),
                              starting_offsets=FromRecord(RecordInput.ROLLBACK_STARTING_OFFSETS),
                              journal=journal.path, journal_phase=ROLLBACK_PHASE, require_journal=True)
    with pytest.raises(AirflowSkipException, match="not part of this rollback"):
        render(op)
    assert op.starting_offsets == FromRecord(RecordInput.ROLLBACK_STARTING_OFFSETS), "nothing was read"


def test_a_done_step_reuses_its_result_without_reading_its_inputs(journal: UpgradeJournal) -> None:
    from airflow_ckpt_provider.operators.launch import StreamLaunchOperator
    from tests.unit.test_launch_operators import TI

    failed_after_the_stop(journal, mode="forward")
    done(journal, "rollback_restart_forward", {"mode": "local", "app_name": "v1 again"}, phase=ROLLBACK_PHASE)
    op = StreamLaunchOperator(task_id="rollback_restart_forward", step="rollback_restart_forward", application="v1.py",
                              checkpoint_uri=FromRecord(RecordInput.ROLLBACK_CHECKPOINT),
                              starting_offsets=FromRecord(RecordInput.ROLLBACK_STARTING_OFFSETS),
                              journal=journal.path, journal_phase=ROLLBACK_PHASE)
    render(op)  # rollback_handover never recorded its offsets: they are not read
    assert op.starting_offsets == FromRecord(RecordInput.ROLLBACK_STARTING_OFFSETS)
    assert op.execute({"run_id": "run-2", "ti": TI()}) == {"mode": "local", "app_name": "v1 again"}  # type: ignore[arg-type]


def test_a_forward_rollback_without_its_recorded_checkpoint_is_refused_before_it_acts(
        journal: UpgradeJournal) -> None:
    """A journal whose preflight recorded no rollback checkpoint (an earlier release's): the
    rollback's handover says what is missing and records nothing."""
    from airflow_ckpt_provider.operators.handover import RollbackHandoverOperator

    failed_after_the_stop(journal, mode="forward", rollback_checkpoint="")
    journal.fail("relaunch", "died")
    done(journal, "rollback_stop_new", {"outcome": "not_running"}, phase=ROLLBACK_PHASE)
    op = RollbackHandoverOperator(task_id="rollback_handover", checkpoint_uri="/c/new", old_checkpoint_uri="/c/old",
                                  handover=FromRecord(RecordInput.HANDOVER), rollback_mode="forward",
                                  rollback_checkpoint_uri=FromRecord(RecordInput.ROLLBACK_CHECKPOINT),
                                  journal=journal.path, require_journal=True)
    with pytest.raises(RecordInputMissing) as missing:
        render(op)
    assert "rollback_checkpoint_uri=FromRecord(rollback_checkpoint)" in str(missing.value)
    assert "preflight done" in str(missing.value) and "in the preflight's planning" in str(missing.value)
    assert journal.step("rollback_handover") is None, "nothing recorded: the step never began"
    with pytest.raises(RecordInputMissing):  # the same when it runs without rendering
        op.execute({"run_id": "run-1"})  # type: ignore[arg-type]
    assert journal.step("rollback_handover") is None


def test_a_forward_restart_needs_the_offsets_its_rollback_handover_recorded(journal: UpgradeJournal) -> None:
    from airflow_ckpt_provider.operators.launch import StreamLaunchOperator

    failed_after_the_stop(journal, mode="forward")
    journal.fail("relaunch", "died")
    done(journal, "rollback_stop_new", {"outcome": "not_running"}, phase=ROLLBACK_PHASE)
    done(journal, "rollback_handover", RollbackHandoverUnread(checkpoint="/c/old", error="unreadable").to_dict(),
         phase=ROLLBACK_PHASE)
    op = StreamLaunchOperator(task_id="rollback_restart_forward", step="rollback_restart_forward", application="v1.py",
                              checkpoint_uri=FromRecord(RecordInput.ROLLBACK_CHECKPOINT),
                              starting_offsets=FromRecord(RecordInput.ROLLBACK_STARTING_OFFSETS),
                              journal=journal.path, journal_phase=ROLLBACK_PHASE, require_journal=True)
    with pytest.raises(RecordInputMissing, match="the forward rollback's starting offsets"):
        render(op)
    assert op.checkpoint_uri == "/c/new.rollback", "read in order; the offsets are missing"


def test_a_record_input_without_a_journal_is_refused() -> None:
    """An operator used alone takes explicit values; a FromRecord there has no record to read."""
    from airflow_ckpt_provider.operators.stop import GracefulStopOperator

    op = GracefulStopOperator(task_id="stop", checkpoint_uri="/c/new", launch_handle=FromRecord(RecordInput.NEW_HANDLE))
    with pytest.raises(RecordInputMissing, match=r"launch_handle=FromRecord\(new_handle\) on a step without an "
                                                 "upgrade journal"):
        render(op)
    with pytest.raises(RecordInputMissing):
        op.execute({"run_id": "run-1"})  # type: ignore[arg-type]


def test_explicit_arguments_are_used_as_given(journal: UpgradeJournal) -> None:
    """Another team's DAG passes typed values (or XComArgs, rendered by Airflow): nothing is read,
    with a journal or without one."""
    from airflow_ckpt_provider.operators.archive import CheckpointRestoreOperator

    failed_after_the_stop(journal)
    done(journal, "rollback_stop_new", phase="rollback")
    done(journal, "rollback_handover", phase="rollback")
    for journaled in (journal.path, None):  # "my_restore" is planned as the rollback_restore it is
        op = CheckpointRestoreOperator(task_id="my_restore", archive_uri="/mine/{{ run_id }}", target_uri="/c/old",
                                       journal=journaled)
        render(op)
        assert op.archive_uri == "/mine/run-1"


# -- the compatibility check asks the planner ---------------------------------------------------------


def check(journal: UpgradeJournal, monkeypatch: pytest.MonkeyPatch, enabled: str = "True") -> Any:  # noqa: ANN401
    from airflow_ckpt_provider.operators.compat import CompatibilityCheckOperator

    def trial(**_: Any) -> Any:  # noqa: ANN401
        raise AssertionError("trial started")

    monkeypatch.setattr("airflow_ckpt_provider.operators.compat.check_upgrade", trial)
    return CompatibilityCheckOperator(task_id="compatibility_check", old_checkpoint_uri="/c/old",
                                      new_application="v2.py", journal=journal.path, enabled=enabled)


def test_the_compatibility_check_of_an_upgrade_under_way_tries_nothing_and_says_why(
        journal: UpgradeJournal, monkeypatch: pytest.MonkeyPatch) -> None:
    plan(journal)
    journal.record_planning("compatibility_check", run_id="run-1", result={"in_place": "ok"})
    journal.begin("graceful_stop", run_id="run-1")
    before = journal.read().planning
    result = check(journal, monkeypatch).execute({"run_id": "run-2"})
    assert result["summary_md"] == ""
    assert result["skipped"].startswith("the upgrade is under way (graceful_stop began in run run-1 at ")
    assert "no trial runs again" in result["skipped"]
    assert journal.read().planning == before, "the first run's verdict stays the upgrade's"


def test_the_compatibility_check_of_an_ended_upgrade_tries_nothing(journal: UpgradeJournal,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    plan(journal)
    done(journal, "graceful_stop")
    journal.close("upgraded", run_id="run-1")
    result = check(journal, monkeypatch).execute({"run_id": "run-2"})
    assert result["skipped"].startswith("the upgrade ended upgraded in run run-1")


def test_the_compatibility_check_of_a_new_upgrade_runs_unless_switched_off(journal: UpgradeJournal,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    plan(journal)
    assert check(journal, monkeypatch, enabled="False").execute({"run_id": "run-1"}) == \
        {"format": 1, "skipped": "switched off", "summary_md": ""}
    assert journal.read().planning["compatibility_check"].result == {"format": 1, "skipped": "switched off"}
    assert planner.approval_text(journal.read()) == ""  # a check switched off says nothing to the approver
    with pytest.raises(AssertionError, match="trial started"):  # the param on: the trials run
        check(journal, monkeypatch).execute({"run_id": "run-1"})
    assert journal.read().planning["compatibility_check"].state == FAILED


# -- the preflight records what the steps read; the report reads "already done" from the journal ---------


def preflight_op(tmp_path: Path, **kwargs: Any) -> Any:  # noqa: ANN401
    from airflow_ckpt_provider.checkpoint import BrokerView
    from airflow_ckpt_provider.operators.preflight import UpgradePreflightOperator
    from tests.unit.test_rollback import FakeKafkaHook

    op = UpgradePreflightOperator(task_id="preflight", sink={"kind": "foreach_batch"}, stream_name="orders", old_checkpoint_uri=str(tmp_path / "old"),
                                  new_checkpoint_uri=str(tmp_path / "new"), archive_root=str(tmp_path / "archive"),
                                  upgrade_id="up-9", new_application="v2.py", relaunch_mode="cold", **kwargs)
    op.kafka_hook = FakeKafkaHook(BrokerView({"events": {p: (0, 1000) for p in range(4)}}))
    return op


def test_the_preflight_records_the_locations_and_a_resumed_upgrade_keeps_them(tmp_path: Path) -> None:
    from tests.unit.conftest import write_checkpoint

    write_checkpoint(str(tmp_path / "old"))
    first = preflight_op(tmp_path, rollback_mode="forward",
                         rollback_checkpoint_uri=str(tmp_path / "rb")).execute({"run_id": "run-1"})
    journal = UpgradeJournal(fsspec.filesystem("file"), first["journal"])
    recorded = journal.read()
    assert resolve(recorded, RecordInput.ROLLBACK_CHECKPOINT) == first["rollback_checkpoint"] == str(tmp_path / "rb")
    assert resolve(recorded, RecordInput.STATE_EXPORT_LOCATION) == first["state_export"] == \
        str(tmp_path / "archive" / "orders" / "_state" / "up-9")
    assert resolve(recorded, RecordInput.UPGRADE_ID) == first["upgrade_id"] == "up-9"
    assert planner.approval_text(recorded) == first["summary_md"].strip()  # what the approver reads

    journal.begin("graceful_stop", run_id="run-1")  # under way; the next run's params moved the rollback checkpoint
    again = preflight_op(tmp_path, rollback_mode="forward",
                         rollback_checkpoint_uri=str(tmp_path / "elsewhere")).execute({"run_id": "run-2"})
    assert again["resuming"] is True and again["rollback_checkpoint"] == str(tmp_path / "rb")
    resumed = journal.read()
    assert resolve(resumed, RecordInput.ROLLBACK_CHECKPOINT) == str(tmp_path / "rb"), "the first run's, kept"
    assert resolve(resumed, RecordInput.STATE_EXPORT_LOCATION) == first["state_export"]
    assert resumed.planning["preflight"].run_id == "run-2"
    assert planner.approval_text(resumed) == again["summary_md"].strip()


def test_the_report_reads_already_done_from_this_runs_entry() -> None:
    from airflow_ckpt_provider.operators.report import already_done

    rec = replace(record_in("done"), run_log=(
        {"run_id": "run-1", "what": "ended upgraded", "outcome": "upgraded", "report": "/a/report"},
        {"run_id": "run-2", "what": "already done: ...", "already_done": True, "first_report": "/a/report",
         "done_by_run": "run-1", "done_at": "2026-01-01T00:09:00+00:00"},
        {"run_id": "run-3", "what": "resumed: ..."},
    ))
    found = already_done(rec, "run-2")
    assert found is not None and found["first_report"] == "/a/report" and found["done_by_run"] == "run-1"
    assert already_done(rec, "run-1") is None and already_done(rec, "run-3") is None
    assert already_done(rec, "") is None and already_done(None, "run-2") is None
