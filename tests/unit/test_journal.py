"""The upgrade journal and the stream lock, on a local directory and on memory://."""

from __future__ import annotations

import json
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import JournalCorrupt, UpgradeInProgress, UpgradeRolledBack
from airflow_ckpt_provider.storage.journal import LOCK, UpgradeJournal, list_journals
from airflow_ckpt_provider.upgrade.record import (
    DONE,
    FAILED,
    ROLLBACK_PHASE,
    STARTED,
    JournalRecord,
    JournalStep,
    Rerun,
    UpgradeIntent,
    derive_upgrade_id,
    rerun_of,
)

INTENT = UpgradeIntent(stream_name="orders", old_checkpoint="/cp/v1", new_checkpoint="/cp/v2",
                       old_application="v1.py", new_application="v2.py", archive_root="/archive")


@pytest.fixture(params=["local", "memory"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, str]]:
    if request.param == "local":
        yield fsspec.filesystem("file"), str(tmp_path / "archive")
    else:
        fs = fsspec.filesystem("memory")
        path = f"/journal-{uuid.uuid4().hex}/archive"
        yield fs, path
        fs.rm(path, recursive=True) if fs.exists(path) else None


def journal_for(root: tuple[Any, str], intent: UpgradeIntent = INTENT, upgrade_id: str | None = None) -> UpgradeJournal:
    fs, path = root
    uid = upgrade_id or derive_upgrade_id(intent)
    return UpgradeJournal(fs, UpgradeJournal.location(path, intent.stream_name, uid))


def tree(fs: Any, path: str) -> dict[str, bytes]:
    return {name: fs.cat_file(name) for name in fs.find(path)} if fs.exists(path) else {}


def test_upgrade_id_is_stable_and_specific() -> None:
    same = UpgradeIntent(**{**INTENT.__dict__, "old_checkpoint": "/cp/v1/", "archive_root": "/elsewhere"})
    assert derive_upgrade_id(INTENT) == derive_upgrade_id(same)
    assert derive_upgrade_id(INTENT).startswith("up-") and len(derive_upgrade_id(INTENT)) == 15
    for change in ({"new_checkpoint": "/cp/v3"}, {"new_application": "v3.py"}, {"stream_name": "other"}):
        assert derive_upgrade_id(UpgradeIntent(**{**INTENT.__dict__, **change})) != derive_upgrade_id(INTENT)


def test_open_records_the_intent_and_takes_the_lock(root: tuple[Any, str]) -> None:
    journal = journal_for(root)
    record = journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1", planned_handover={"batch_id": 4})
    assert record.intent == INTENT and record.runs == ("run-1",) and record.planned_handover == {"batch_id": 4}
    assert journal.read() == record
    lock = json.loads(root[0].cat_file(journal.lock_path))
    assert lock["upgrade_id"] == derive_upgrade_id(INTENT) and lock["run_id"] == "run-1"


def test_a_second_upgrade_of_the_stream_is_refused_and_changes_nothing(root: tuple[Any, str]) -> None:
    fs, path = root
    first = journal_for(root)
    first.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    other = UpgradeIntent(**{**INTENT.__dict__, "new_checkpoint": "/cp/v3"})
    before = tree(fs, path)
    with pytest.raises(UpgradeInProgress) as refused:
        journal_for(root, other).open(other, derive_upgrade_id(other), run_id="run-2")
    assert derive_upgrade_id(INTENT) in refused.value.found and "run-1" in refused.value.found
    assert "--release-lock" in str(refused.value)
    assert tree(fs, path) == before


def test_the_same_upgrade_resumes_and_adds_its_run(root: tuple[Any, str]) -> None:
    journal = journal_for(root)
    uid = derive_upgrade_id(INTENT)
    journal.open(INTENT, uid, run_id="run-1")
    journal.begin("graceful_stop", run_id="run-1")
    journal.finish("graceful_stop", {"outcome": "graceful"})
    again = journal_for(root).open(INTENT, uid, run_id="run-2")
    assert again.runs == ("run-1", "run-2")
    assert again.steps["graceful_stop"].state == DONE


def test_a_done_step_returns_its_result_without_writing(root: tuple[Any, str]) -> None:
    fs, _ = root
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    assert not journal.begin("archive", run_id="run-1").done
    journal.finish("archive", {"location": "/archive/orders/x"})
    before = fs.cat_file(journal.path)
    start = journal.begin("archive", run_id="run-2")
    assert start.done and start.result == {"location": "/archive/orders/x"}
    assert fs.cat_file(journal.path) == before


def test_an_interrupted_step_is_reported_with_its_notes(root: tuple[Any, str]) -> None:
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    journal.begin("relaunch", run_id="run-1")
    journal.note("relaunch", launching=True, min_batch=0)
    journal.note("relaunch", handle={"pid": 42})
    start = journal.begin("relaunch", run_id="run-2")  # the first attempt's process died
    assert not start.done and start.interrupted
    assert start.previous is not None and start.previous.notes == {"launching": True, "min_batch": 0,
                                                                   "handle": {"pid": 42}}
    step = journal.step("relaunch")
    assert step is not None and step.state == STARTED and step.attempts == 2 and step.run_id == "run-2"
    assert step.notes["handle"] == {"pid": 42}  # kept for a third attempt


def test_a_failure_is_recorded_and_the_step_may_run_again(root: tuple[Any, str]) -> None:
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    journal.begin("verify", run_id="run-1")
    journal.fail("verify", RuntimeError("no progress"))
    step = journal.step("verify")
    assert step is not None and step.state == FAILED and step.error == "no progress"
    start = journal.begin("verify", run_id="run-2")
    assert not start.done and not start.interrupted and start.previous is not None


def test_after_a_rollback_began_upgrade_steps_refuse_to_run(root: tuple[Any, str]) -> None:
    fs, _ = root
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    journal.begin("relaunch", run_id="run-1")
    journal.fail("relaunch", "v2 crashed")
    journal.begin("rollback_stop_new", run_id="run-1", phase=ROLLBACK_PHASE)
    assert journal.read().phase == ROLLBACK_PHASE
    before = fs.cat_file(journal.path)
    with pytest.raises(UpgradeRolledBack) as refused:
        journal.begin("relaunch", run_id="run-2")
    assert "rolling back" in refused.value.found
    assert fs.cat_file(journal.path) == before
    assert not journal.begin("rollback_restart_old", run_id="run-2", phase=ROLLBACK_PHASE).done


def test_a_final_outcome_releases_the_lock_a_failure_keeps_it(root: tuple[Any, str]) -> None:
    fs, _ = root
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    journal.begin("graceful_stop", run_id="run-1")
    kept = journal.close("failed")
    assert kept.outcome is None and fs.exists(journal.lock_path)
    closed = journal.close("upgraded")
    assert closed.outcome == "upgraded" and closed.closed_at and not fs.exists(journal.lock_path)
    other = UpgradeIntent(**{**INTENT.__dict__, "new_checkpoint": "/cp/v3"})
    journal_for(root, other).open(other, derive_upgrade_id(other), run_id="run-3")  # the stream is free


def test_a_lock_left_by_a_closed_upgrade_is_taken_over(root: tuple[Any, str]) -> None:
    fs, _ = root
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    lock = fs.cat_file(journal.lock_path)
    journal.close("rolled back")
    fs.pipe_file(journal.lock_path, lock)  # as if the process died between closing and unlocking
    other = UpgradeIntent(**{**INTENT.__dict__, "new_checkpoint": "/cp/v3"})
    journal_for(root, other).open(other, derive_upgrade_id(other), run_id="run-2")
    assert json.loads(fs.cat_file(journal.lock_path))["upgrade_id"] == derive_upgrade_id(other)


def test_a_rejected_upgrade_starts_afresh(root: tuple[Any, str]) -> None:
    journal = journal_for(root)
    uid = derive_upgrade_id(INTENT)
    journal.open(INTENT, uid, run_id="run-1")
    journal.close("rejected")
    record = journal.open(INTENT, uid, run_id="run-2")
    assert record.runs == ("run-2",) and record.outcome is None and not record.steps


def test_a_refused_upgrade_is_closed_with_its_reason_and_frees_the_stream(root: tuple[Any, str]) -> None:
    """A refusal is a final outcome: the closing entry says why, the lock goes, another upgrade of
    the stream takes it, and the refused one triggered again starts afresh."""
    fs, _ = root
    journal = journal_for(root)
    uid = derive_upgrade_id(INTENT)
    journal.open(INTENT, uid, run_id="run-1")
    closed = journal.close("refused", run_id="run-1", report="/r", reason="the new version does not start: boom")
    assert closed.closed and closed.outcome == "refused" and not fs.exists(journal.lock_path)
    closing = closed.closing_entry()
    assert closing is not None and closing["reason"] == "the new version does not start: boom"
    assert closing["what"] == "ended refused: the new version does not start: boom"
    other = UpgradeIntent(**{**INTENT.__dict__, "new_application": "v3.py"})
    journal_for(root, other).open(other, derive_upgrade_id(other), run_id="run-2")
    assert json.loads(fs.cat_file(journal.lock_path))["upgrade_id"] == derive_upgrade_id(other)
    assert "reason" not in (journal_for(root, other).close("upgraded").closing_entry() or {"reason": 1})


def test_a_journal_of_another_intent_under_the_same_id_is_refused(root: tuple[Any, str]) -> None:
    journal = journal_for(root, upgrade_id="fixed")
    journal.open(INTENT, "fixed", run_id="run-1")
    journal.close("upgraded")
    other = UpgradeIntent(**{**INTENT.__dict__, "new_checkpoint": "/cp/v3"})
    with pytest.raises(JournalCorrupt) as refused:
        journal_for(root, other, "fixed").open(other, "fixed", run_id="run-2")
    assert "another upgrade" in refused.value.found
    assert not root[0].exists(journal.lock_path)  # the lock this call took is dropped again


@pytest.mark.parametrize("content", [b"{not json", b'{"format": 99}', b'{"format": 2, "intent": {}}', b"[]"])
def test_an_unreadable_journal_is_a_typed_error(root: tuple[Any, str], content: bytes) -> None:
    fs, _ = root
    journal = journal_for(root)
    fs.makedirs(os.path.dirname(journal.path), exist_ok=True)
    fs.pipe_file(journal.path, content)
    with pytest.raises(JournalCorrupt):
        journal.read()


def test_a_journal_names_the_release_that_wrote_it(root: tuple[Any, str]) -> None:
    from airflow_ckpt_provider import __version__
    from airflow_ckpt_provider.checkpoint.errors import JournalOfAnotherRelease

    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    assert journal.read().release == __version__ and journal.read().format == 2
    fs, _ = root
    fs.pipe_file(journal.path, journal.read().to_json().replace('"format": 2', '"format": 1').encode())
    with pytest.raises(JournalOfAnotherRelease, match="found journal format 1, written by release"):
        journal.read()


def test_list_journals_skips_the_lock_and_damaged_files(root: tuple[Any, str]) -> None:
    fs, path = root
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    fs.pipe_file(os.path.join(os.path.dirname(journal.path), "broken.json"), b"{")
    records = list_journals(fs, path, "orders")
    assert [r.upgrade_id for r in records] == [derive_upgrade_id(INTENT)]


def test_local_journal_files_are_private_and_written_whole(tmp_path: Path) -> None:
    root = (fsspec.filesystem("file"), str(tmp_path / "archive"))
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    for path in (journal.path, journal.lock_path):
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode & 0o077 & ~0o040 == 0, oct(mode)  # no access for others, no write for the group
    folder = os.path.dirname(journal.path)
    assert stat.S_IMODE(os.stat(folder).st_mode) & 0o007 == 0
    assert sorted(os.listdir(folder)) == sorted([os.path.basename(journal.path), LOCK])  # no temp file left


def test_ckpt_journal_shows_the_lock_and_releases_it(tmp_path: Path) -> None:
    import io

    from airflow_ckpt_provider.cli import main as ckpt

    root = (fsspec.filesystem("file"), str(tmp_path / "archive"))
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    journal.begin("relaunch", run_id="run-1")
    out, err = io.StringIO(), io.StringIO()
    assert ckpt(["journal", root[1], "--name", "orders"], stdout=out, stderr=err) == 0
    assert f"held by upgrade {derive_upgrade_id(INTENT)} (run run-1" in out.getvalue()
    assert "relaunch started" in out.getvalue()
    out = io.StringIO()
    assert ckpt(["journal", root[1], "--name", "orders", "--json", "--release-lock"], stdout=out, stderr=err) == 0
    assert json.loads(out.getvalue())["journals"][0]["upgrade_id"] == derive_upgrade_id(INTENT)
    assert "released the lock" in err.getvalue() and not os.path.exists(journal.lock_path)
    assert ckpt(["journal", root[1], "--name", "../x"], stdout=out, stderr=err) == 2


# -- re-runs of a closed upgrade: decided once, recorded, never rewriting earlier records -------------


def _closed(root: tuple[Any, str], outcome: str, *, steps: bool = True) -> UpgradeJournal:
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    if steps:
        journal.begin("graceful_stop", run_id="run-1")
        journal.finish("graceful_stop", {"outcome": "graceful"})
    if outcome == "rolled back":
        journal.begin("rollback_restart_old", run_id="run-1", phase=ROLLBACK_PHASE)
        journal.finish("rollback_restart_old", {"pid": 7})
    if outcome:
        journal.close(outcome, run_id="run-1", report="/archive/orders/x/report")
    return journal


@pytest.mark.parametrize(("outcome", "steps", "rerun"), [
    ("", True, Rerun.RESUME),  # interrupted mid-way: finish it
    ("failed", True, Rerun.RESUME),  # a failure keeps the journal open
    ("rolled back", True, Rerun.ROLLED_BACK),
    ("upgraded", True, Rerun.UPGRADED),
    ("rejected", False, Rerun.NEW),  # nothing was stopped: may be triggered again
    ("refused", False, Rerun.NEW),  # the compatibility check refused it before anything was stopped
])
def test_rerun_of_a_journal(root: tuple[Any, str], outcome: str, steps: bool, rerun: Rerun) -> None:
    assert rerun_of(_closed(root, outcome, steps=steps).read()) is rerun


def test_rerun_of_no_journal_or_an_unfinished_rollback() -> None:
    assert rerun_of(None) is Rerun.NEW
    record = JournalRecord(upgrade_id="up-1", intent=INTENT, created_at="t", phase=ROLLBACK_PHASE,
                           steps={"rollback_restore": JournalStep(name="rollback_restore", state=STARTED)})
    assert rerun_of(record) is Rerun.RESUME, "a rollback that did not finish may complete"


def test_close_and_record_run_only_append_run_entries(root: tuple[Any, str]) -> None:
    journal = _closed(root, "upgraded")
    before = journal.read()
    closing = before.closing_entry()
    assert closing is not None and closing["run_id"] == "run-1" and closing["report"] == "/archive/orders/x/report"
    after = journal.record_run("run-2", "already done", first_report="/archive/orders/x/report")
    assert after.run_log[:-1] == before.run_log
    assert after.run_log[-1]["run_id"] == "run-2" and after.run_log[-1]["what"] == "already done"
    assert after.run_log[-1]["first_report"] == "/archive/orders/x/report" and after.run_log[-1]["at"]
    assert (after.steps, after.outcome, after.closed_at, after.runs) == \
           (before.steps, before.outcome, before.closed_at, before.runs), "earlier records unchanged"
    assert JournalRecord.from_json(after.to_json()) == after


def test_a_rejected_upgrade_triggered_again_keeps_its_run_log(root: tuple[Any, str]) -> None:
    journal = _closed(root, "rejected", steps=False)
    record = journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-2")
    assert record.runs == ("run-2",) and record.outcome is None
    assert [(e["run_id"], e["outcome"]) for e in record.run_log] == [("run-1", "rejected")]


def test_ckpt_journal_lists_each_run_entry(tmp_path: Path) -> None:
    import io

    from airflow_ckpt_provider.cli import main as ckpt

    root = (fsspec.filesystem("file"), str(tmp_path / "archive"))
    _closed(root, "upgraded").record_run("run-2", "already done: nothing done")
    out, err = io.StringIO(), io.StringIO()
    assert ckpt(["journal", root[1], "--name", "orders"], stdout=out, stderr=err) == 0
    assert "    run run-1 at " in out.getvalue() and ": ended upgraded\n" in out.getvalue()
    assert ": already done: nothing done\n" in out.getvalue()


# -- a damaged lock file -----------------------------------------------------------------------------

DAMAGED_LOCKS = {
    "list": (b"[1,2]", "unreadable (found stream lock JSON array; expected stream lock as a JSON object)"),
    "empty": (b"", "empty"),
    "blank": (b"  \n", "empty"),
    "not-json": (b"lock held by bob", "unreadable (found stream lock text that is not JSON"),
    "deep": (b"[" * 100_000 + b"]" * 100_000, "unreadable (found stream lock: JSON"),
    "no-upgrade-id": (b'{"run_id": "r"}', "unreadable (found stream lock without 'upgrade_id'; expected upgrade_id: "
                                         "string)"),
    "number-upgrade-id": (b'{"upgrade_id": 7}', "unreadable (found stream lock 'upgrade_id' of JSON integer (7)"),
    "newer": (b'{"format": 2, "upgrade_id": "u"}', "unreadable (found stream lock format 2 (written by a newer "
                                                  "release: upgrade the provider); expected format 1)"),
}


def test_a_lock_of_the_previous_release_names_its_holder_and_this_release_writes_its_format(
        root: tuple[Any, str]) -> None:
    from airflow_ckpt_provider.storage.journal import read_lock

    fs, _ = root
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    assert json.loads(fs.cat_file(journal.lock_path))["format"] == 1
    old = b'{"upgrade_id": "up-0123456789ab", "run_id": "manual__1", "acquired_at": "2026-11-21T19:40:00+00:00", ' \
          b'"pid": 4242}'
    fs.pipe_file(journal.lock_path, old)
    lock = read_lock(fs, journal.lock_path)
    assert lock is not None and lock.problem is None and lock.upgrade_id == "up-0123456789ab"
    assert lock.describe() == "upgrade up-0123456789ab (run manual__1, since 2026-11-21T19:40:00+00:00)"
    other = UpgradeIntent(**{**INTENT.__dict__, "new_checkpoint": "/cp/v3"})
    with pytest.raises(UpgradeInProgress, match="upgrade up-0123456789ab .run manual__1"):
        journal_for(root, other).open(other, derive_upgrade_id(other), run_id="run-2")


@pytest.mark.parametrize("name", DAMAGED_LOCKS)
def test_ckpt_journal_shows_and_releases_a_damaged_lock(tmp_path: Path, name: str) -> None:
    import io

    from airflow_ckpt_provider.cli import main as ckpt

    content, said = DAMAGED_LOCKS[name]
    root = (fsspec.filesystem("file"), str(tmp_path / "archive"))
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    Path(journal.lock_path).write_bytes(content)
    out, err = io.StringIO(), io.StringIO()
    assert ckpt(["journal", root[1], "--name", "orders"], stdout=out, stderr=err) == 0, err.getvalue()
    assert f"lock: damaged: a lock file that is {said}" in out.getvalue() and journal.lock_path in out.getvalue()
    assert os.path.exists(journal.lock_path)  # shown, not touched without --release-lock
    out = io.StringIO()
    assert ckpt(["journal", root[1], "--name", "orders", "--json"], stdout=out, stderr=err) == 0
    assert said in json.loads(out.getvalue())["lock"]["corrupt"]
    out, err = io.StringIO(), io.StringIO()
    assert ckpt(["journal", root[1], "--name", "orders", "--release-lock"], stdout=out, stderr=err) == 0
    assert f"ckpt: removed a lock file that is {said}" in err.getvalue() and len(err.getvalue()) < 600
    assert not os.path.exists(journal.lock_path)
    assert os.path.exists(journal.path)  # only the lock goes


@pytest.mark.parametrize("name", DAMAGED_LOCKS)
def test_a_damaged_lock_refuses_another_upgrade_with_a_typed_error(root: tuple[Any, str], name: str) -> None:
    content, said = DAMAGED_LOCKS[name]
    fs, _ = root
    journal = journal_for(root)
    fs.makedirs(os.path.dirname(journal.lock_path), exist_ok=True)
    fs.pipe_file(journal.lock_path, content)
    with pytest.raises(UpgradeInProgress) as refused:  # an empty lock may be one being created: held
        journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    assert f"a lock file that is {said}" in refused.value.found and "--release-lock" in str(refused.value)
    assert fs.cat_file(journal.lock_path) == content


@pytest.mark.parametrize("name", DAMAGED_LOCKS)
def test_closing_an_upgrade_leaves_a_lock_it_cannot_read_as_its_own(root: tuple[Any, str], name: str) -> None:
    content, _ = DAMAGED_LOCKS[name]
    fs, _ = root
    journal = journal_for(root)
    journal.open(INTENT, derive_upgrade_id(INTENT), run_id="run-1")
    fs.pipe_file(journal.lock_path, content)
    journal.close("upgraded")  # no AttributeError on [1,2]
    assert fs.cat_file(journal.lock_path) == content
