"""The upgrade journal: the upgrade's record (:mod:`airflow_ckpt_provider.upgrade.record`) kept
next to the archive, and the stream's lock. Reads and writes through an fsspec filesystem.

Layout, per stream, beside its archives::

    <archive_root>/<stream>/_upgrades/<upgrade id>.json   one journal per upgrade
    <archive_root>/<stream>/_upgrades/LOCK.json           the upgrade holding the stream

The intent (old and new checkpoint, old and new application, the handover seen at planning) is
written before anything is stopped; every step then records ``started`` before its side effect
and ``done`` with its result after it (or ``failed`` with the error). A retried task or a
re-triggered DAG run with the same intent gets the same upgrade id
(:func:`~airflow_ckpt_provider.upgrade.record.derive_upgrade_id`) and finds the journal: finished
steps return their recorded result instead of acting again, and a step found ``started`` knows it
was interrupted and resumes (see each operator).

Once a rollback step starts, the journal's phase is ``rollback`` and the upgrade steps refuse to
run again (:class:`UpgradeRolledBack`): a re-run must never relaunch the new version next to the
restarted old one.

A journal only grows in meaning: every run adds an entry to its ``run_log`` (what it did or
why it was refused; the run that closes it names its stored report), and nothing rewrites an
earlier step's record. A re-run of a closed upgrade is decided by
:func:`~airflow_ckpt_provider.upgrade.record.rerun_of`: a rolled-back one is refused in the
preflight (:class:`UpgradeRolledBack`, naming the ``upgrade_id`` to change), a finished one is
already done (nothing runs again, nothing is closed again), a rejected or refused one (nothing was
stopped) starts afresh, keeping its ``run_log``.

The lock makes one upgrade per stream at a time: :class:`UpgradeInProgress` names the holder.
It is re-entrant for the same upgrade id and is released when the journal is closed with a
final outcome (upgraded, rejected, refused, rolled back), or with any outcome while no step with
a side effect began (nothing was stopped: a failure before a side effect never leaves the stream
locked). A lock whose journal is already closed is
stale (a crash between closing and unlocking) and is taken over.

Writes go through a temporary name and a rename on local disks (with fsync), and as one object
write on object stores, so a reader sees the old or the new journal, never half of one. On
object stores that cannot create an object only if absent, the lock is checked then written,
which leaves a small race between two upgrades started at the same moment (logged).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    InvalidLockFile,
    JournalCorrupt,
    UpgradeInProgress,
    UpgradeRolledBack,
    shorten,
)
from airflow_ckpt_provider.checkpoint.manifest import check_name
from airflow_ckpt_provider.clock import utc_now
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field
from airflow_ckpt_provider.storage.files import create_exclusive, read_file, write_atomic
from airflow_ckpt_provider.storage.listing import list_names
from airflow_ckpt_provider.upgrade.record import (
    DONE,
    FAILED,
    FINAL_OUTCOMES,
    ROLLBACK_PHASE,
    STARTED,
    UPGRADE_PHASE,
    JournalRecord,
    JournalStep,
    StepStart,
    UpgradeIntent,
)

log = logging.getLogger(__name__)

JOURNAL_DIR = "_upgrades"
LOCK = "LOCK.json"


#: the format of a stream's ``LOCK.json`` (:class:`StreamLock`); the previous release wrote it without one (format 0)
LOCK_FORMAT = 1


@dataclass(frozen=True)
class StreamLock:
    """A stream's ``LOCK.json``: the upgrade that holds the stream, its run, since when, and the
    process that took it (format :data:`LOCK_FORMAT`; a lock without a format number is the
    previous release's, read as format 0). Written once, when taken."""

    upgrade_id: str
    run_id: str
    acquired_at: str
    pid: int

    def to_dict(self) -> dict[str, Any]:
        return _STREAM_LOCK.encode({"upgrade_id": self.upgrade_id, "run_id": self.run_id,
                                    "acquired_at": self.acquired_at, "pid": self.pid})

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, data: str | bytes) -> StreamLock:
        """Decode a lock through its codec; :class:`InvalidLockFile` when it is not one."""
        return cls(**_STREAM_LOCK.decode(data))


_STREAM_LOCK = Codec("stream lock", InvalidLockFile, {
    "upgrade_id": Field((str,)), "run_id": Field((str,)), "acquired_at": Field((str,)), "pid": Field((int,)),
}, version=LOCK_FORMAT, versions=(UNVERSIONED,))


@dataclass(frozen=True)
class LockFile:
    """What a stream's ``LOCK.json`` holds: its :class:`StreamLock`, or, when the file is not one
    (empty, not JSON, ``[1,2]``, a key missing, beyond the input limits), ``problem`` saying what
    was found instead and what was expected."""

    path: str
    lock: StreamLock | None
    problem: str | None = None

    @property
    def holder(self) -> Mapping[str, Any]:
        """The lock's JSON object ({} when it is unreadable)."""
        return self.lock.to_dict() if self.lock is not None else {}

    @property
    def upgrade_id(self) -> str | None:
        return self.lock.upgrade_id if self.lock is not None else None

    def describe(self) -> str:
        """One line for people: who holds the lock, or what the corrupt file holds."""
        if self.lock is None:
            return f"a lock file that is {self.problem or 'unreadable'}"
        upgrade, run, since = (shorten(text, 200) for text in (self.lock.upgrade_id, self.lock.run_id,
                                                               self.lock.acquired_at))
        return f"upgrade {upgrade} (run {run}, since {since})"


def read_lock(fs: AbstractFileSystem, path: str) -> LockFile | None:
    """The lock at ``path``, None when there is none. Never raises for its content: a lock that is
    not a :class:`StreamLock` is a :class:`LockFile` with the ``problem`` its codec found (a lock
    being created can be empty for a moment)."""
    try:
        data = read_file(fs, path)
    except FileNotFoundError:
        return None
    if not data.strip():
        return LockFile(path, None, "empty")
    try:
        return LockFile(path, StreamLock.from_json(data))
    except InvalidLockFile as exc:
        return LockFile(path, None, f"unreadable (found {exc.found}; expected {exc.expected})")


class UpgradeJournal:
    """The journal of one upgrade on ``fs`` (see the module docstring). Not thread-safe: one
    upgrade's steps run one after the other, and the lock keeps other upgrades out."""

    def __init__(self, fs: AbstractFileSystem, path: str, *, uri: str | None = None,
                 clock: Callable[[], datetime] = utc_now) -> None:
        self.fs, self.path = fs, path
        self.uri = uri or path
        self.clock = clock

    # -- locations ----------------------------------------------------------------------------

    @staticmethod
    def folder(archive_root: str, stream_name: str) -> str:
        return posixpath.join(archive_root.rstrip("/"), check_name(stream_name), JOURNAL_DIR)

    @classmethod
    def location(cls, archive_root: str, stream_name: str, upgrade_id: str) -> str:
        return posixpath.join(cls.folder(archive_root, stream_name), f"{check_name(upgrade_id, 'upgrade id')}.json")

    @property
    def lock_path(self) -> str:
        return posixpath.join(posixpath.dirname(self.path), LOCK)

    # -- reading ------------------------------------------------------------------------------

    def exists(self) -> bool:
        self.fs.invalidate_cache(posixpath.dirname(self.path))
        return self.fs.exists(self.path)

    def read(self) -> JournalRecord:
        """The journal; FileNotFoundError if there is none, :class:`JournalCorrupt` if unreadable."""
        return JournalRecord.from_json(read_file(self.fs, self.path), path=self.uri)

    def step(self, name: str) -> JournalStep | None:
        return self.read().steps.get(name)

    # -- planning -----------------------------------------------------------------------------

    def open(self, intent: UpgradeIntent, upgrade_id: str, *, run_id: str,
             planned_handover: Mapping[str, Any] | None = None) -> JournalRecord:
        """Take the stream's lock and create the journal, or resume it.

        An existing journal with the same intent is resumed (this run is added to its runs);
        one where no step with a side effect started (a rejection, or a run that ended before its
        stop) is started afresh, its planning with it: the checks and the approval run again. Raises
        :class:`UpgradeInProgress` if another upgrade holds the stream, :class:`JournalCorrupt`
        if the journal belongs to another intent or cannot be read.
        """
        created = self._lock(upgrade_id, run_id)
        try:
            existing = self.read() if self.exists() else None
            if existing is not None and existing.intent.key() != intent.key():
                raise JournalCorrupt(found=f"journal {upgrade_id} of another upgrade ({existing.intent.key()})",
                                     expected=f"the journal of {intent.key()}", path=self.uri,
                                     action="Give this upgrade another upgrade_id; nothing was changed.")
            if existing is None or not existing.started_side_effects:
                record = JournalRecord(upgrade_id=upgrade_id, intent=intent, created_at=self.clock().isoformat(),
                                       runs=(run_id,), planned_handover=planned_handover,
                                       run_log=existing.run_log if existing is not None else ())
                log.info("upgrade %s of stream %s: journal %s created, lock taken", upgrade_id,
                         intent.stream_name, self.uri)
            else:
                runs = existing.runs if run_id in existing.runs else (*existing.runs, run_id)
                record = replace(existing, runs=runs)
                done = [name for name, step in existing.steps.items() if step.done]
                log.info("upgrade %s of stream %s: resuming its journal %s (runs %s; steps done: %s)",
                         upgrade_id, intent.stream_name, self.uri, ", ".join(runs), ", ".join(done) or "none")
            self._write(record)
            return record
        except BaseException:
            if created:
                self._unlock(upgrade_id)
            raise

    # -- steps --------------------------------------------------------------------------------

    def begin(self, name: str, *, run_id: str, phase: str = UPGRADE_PHASE, kind: str = "") -> StepStart:
        """Before a step's side effect, keyed by its task id ``name`` and recorded as the step of
        ``kind`` (its name when ""). Done already -> ``StepStart(done=True, result)`` and
        nothing is written. Otherwise records ``started`` (attempt n+1) and returns the earlier
        record, if any. An upgrade step in a journal already rolling back raises
        :class:`UpgradeRolledBack`; a rollback step switches the journal to the rollback phase."""
        record = self.read()
        previous = record.steps.get(name)
        if previous is not None and previous.done:
            log.info("step %s of upgrade %s was done in run %s at %s: reusing its result, not repeating it",
                     name, record.upgrade_id, previous.run_id, previous.finished_at)
            return StepStart(done=True, result=previous.result, previous=previous)
        if phase == UPGRADE_PHASE and record.phase == ROLLBACK_PHASE:
            raise UpgradeRolledBack(
                found=f"upgrade {record.upgrade_id} rolling back since run {record.runs[-1] if record.runs else '?'}",
                expected=f"an upgrade still going forward before running step {name}", path=self.uri)
        if previous is not None:
            log.warning("step %s of upgrade %s: earlier attempt %s (run %s) %s; resuming", name, record.upgrade_id,
                        previous.attempts, previous.run_id,
                        "was interrupted" if previous.state == STARTED else f"failed: {previous.error}")
        # a retry within the same run keeps the first attempt's start (the step's time in the report)
        same_run = previous is not None and previous.run_id == run_id and previous.started_at
        step = JournalStep(name=name, state=STARTED, run_id=run_id,
                           attempts=(previous.attempts + 1) if previous else 1,
                           started_at=previous.started_at if same_run and previous else self.clock().isoformat(),
                           notes=dict(previous.notes) if previous else {}, kind=kind if kind != name else "")
        self._write(replace(record, phase=ROLLBACK_PHASE if phase == ROLLBACK_PHASE else record.phase,
                            steps={**record.steps, name: step}))
        return StepStart(done=False, previous=previous)

    def note(self, name: str, **notes: Any) -> None:
        """Record what a running step did so far (merged into its ``notes``)."""
        record = self.read()
        step = record.steps[name]
        self._write(replace(record, steps={**record.steps, name: replace(step, notes={**step.notes, **notes})}))

    def finish(self, name: str, result: Any) -> None:
        """The step's side effect is complete; ``result`` (JSON-serialisable) is what a re-run gets."""
        record = self.read()
        step = record.steps.get(name) or JournalStep(name=name, state=STARTED)
        self._write(replace(record, steps={**record.steps, name: replace(
            step, state=DONE, result=result, error="", finished_at=self.clock().isoformat())}))

    def fail(self, name: str, error: BaseException | str) -> None:
        record = self.read()
        step = record.steps.get(name) or JournalStep(name=name, state=STARTED)
        self._write(replace(record, steps={**record.steps, name: replace(
            step, state=FAILED, error=str(error)[:2000], finished_at=self.clock().isoformat())}))

    def record_planning(self, name: str, *, run_id: str, started_at: str = "", state: str = DONE,
                        result: Any = None, error: BaseException | str = "",
                        notes: Mapping[str, Any] | None = None) -> None:
        """Record a decision before any side effect (``planning``): the preflight, the
        compatibility check, the path, the approval (``state`` started while it waits for a
        person). A later record of the same name replaces the earlier one (a retry decides
        again); without ``started_at`` it keeps the start of the same run's ``started`` record.
        ``notes``: what the decision says to the approver (``summary_md``), beside its result."""
        if state not in (STARTED, DONE, FAILED):
            raise ValueError(f"a planning state is started, done or failed, not {state!r}")
        record = self.read()
        previous = record.planning.get(name)
        if not started_at:
            started_at = previous.started_at if previous is not None and previous.run_id == run_id \
                and previous.state == STARTED else self.clock().isoformat()
        finished = "" if state == STARTED else self.clock().isoformat()
        step = JournalStep(name=name, state=state, run_id=run_id, started_at=started_at, finished_at=finished,
                           result=result, error=str(error)[:2000], notes=dict(notes or {}))
        self._write(replace(record, planning={**record.planning, name: step}))

    def record_run(self, run_id: str, what: str, **details: Any) -> JournalRecord:
        """Add a ``run_log`` entry: what run ``run_id`` did or why it was refused (``details``
        JSON-serialisable). Nothing else in the journal changes."""
        record = self.read()
        entry = {"run_id": run_id, "at": self.clock().isoformat(), "what": what, **details}
        record = replace(record, run_log=(*record.run_log, entry))
        self._write(record)
        return record

    def close(self, outcome: str, *, run_id: str = "", report: str = "", reason: str = "") -> JournalRecord:
        """Record the outcome, with a ``run_log`` entry naming the run, its stored ``report`` and,
        when given, the ``reason`` in the user's words (a refusal's); a final one
        (:data:`~airflow_ckpt_provider.upgrade.record.FINAL_OUTCOMES`) releases the stream's lock,
        and so does any outcome while no step with a side effect began (a failed approval, a
        compatibility check killed before it recorded anything: nothing was stopped)."""
        record = self.read()
        at = self.clock().isoformat()
        entry = {"run_id": run_id, "at": at, "what": f"ended {outcome}" + (f": {reason}" if reason else ""),
                 "outcome": outcome, "report": report, **({"reason": reason} if reason else {})}
        record = replace(record, outcome=outcome, closed_at=at, run_log=(*record.run_log, entry))
        if outcome not in FINAL_OUTCOMES and record.started_side_effects:
            record = replace(record, outcome=None)
            log.warning("upgrade %s ended %s: the journal stays open and the stream locked; re-trigger the run "
                        "to resume it", record.upgrade_id, outcome)
        elif outcome not in FINAL_OUTCOMES:
            log.warning("upgrade %s ended %s before any step with a side effect began (nothing was stopped): the "
                        "journal is closed and the stream unlocked; a new run starts afresh", record.upgrade_id,
                        outcome)
        self._write(record)
        if record.closed:
            self._unlock(record.upgrade_id)
            log.info("upgrade %s closed (%s); stream %s unlocked", record.upgrade_id, outcome,
                     record.intent.stream_name)
        return record

    # -- the lock -----------------------------------------------------------------------------

    def _lock(self, upgrade_id: str, run_id: str) -> bool:
        """Take the lock (re-entrant for ``upgrade_id``); whether this call created it."""
        holder = StreamLock(upgrade_id=upgrade_id, run_id=run_id, acquired_at=self.clock().isoformat(),
                            pid=os.getpid())
        for _ in range(3):
            if create_exclusive(self.fs, self.lock_path, holder.to_json().encode()):
                return True
            lock = read_lock(self.fs, self.lock_path)
            if lock is None:
                continue  # released meanwhile
            if lock.upgrade_id == upgrade_id:
                return False
            if lock.upgrade_id is not None and self._stale(lock.upgrade_id):
                log.warning("lock of stream held by upgrade %s whose journal is closed: taking it over",
                            lock.upgrade_id)
                self.fs.rm_file(self.lock_path)
                continue
            # a lock being created is empty for a moment: unreadable content counts as held (the
            # action says how to release a lock that is damaged rather than held)
            raise UpgradeInProgress(
                found=f"{lock.describe()} holding {self.lock_path}",
                expected=f"no other upgrade of this stream in progress before starting {upgrade_id}",
                path=posixpath.dirname(self.uri))
        raise UpgradeInProgress(found=f"a lock at {self.lock_path} that keeps changing",
                                expected="one upgrade at a time", path=posixpath.dirname(self.uri))

    def _stale(self, other: str) -> bool:
        """Whether the journal of upgrade ``other`` (a lock's holder) is closed."""
        path = posixpath.join(posixpath.dirname(self.path), f"{other}.json")
        try:
            return JournalRecord.from_json(read_file(self.fs, path), path=path).closed
        except (FileNotFoundError, CheckpointError):
            return False

    def _unlock(self, upgrade_id: str) -> None:
        lock = read_lock(self.fs, self.lock_path)
        if lock is not None and lock.upgrade_id == upgrade_id:  # never a lock this upgrade cannot read as its own
            self.fs.rm_file(self.lock_path)

    def release_lock(self) -> None:
        """Remove the stream's lock whoever holds it (the ``ckpt journal --release-lock`` escape
        hatch for an abandoned upgrade, after a person checked both checkpoints)."""
        try:
            self.fs.rm_file(self.lock_path)
        except FileNotFoundError:
            pass

    def _write(self, record: JournalRecord) -> None:
        write_atomic(self.fs, self.path, record.to_json().encode())


def list_journals(fs: AbstractFileSystem, archive_root: str, stream_name: str) -> list[JournalRecord]:
    """Every journal of a stream, oldest first (unreadable ones are skipped with a warning)."""
    folder = UpgradeJournal.folder(archive_root, stream_name)
    try:
        names = sorted(list_names(fs, folder))
    except FileNotFoundError:
        return []
    records = []
    for name in names:
        base = posixpath.basename(str(name).rstrip("/"))
        if not base.endswith(".json") or base == LOCK or base.startswith("."):
            continue
        try:
            records.append(JournalRecord.from_json(read_file(fs, name), path=str(name)))
        except CheckpointError as exc:
            log.warning("skipping %s: %s", name, exc)
    return sorted(records, key=lambda r: r.created_at)


__all__ = ["JOURNAL_DIR", "LOCK", "LockFile", "UpgradeJournal", "list_journals", "read_lock"]
