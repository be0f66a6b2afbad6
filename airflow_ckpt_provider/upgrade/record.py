"""The upgrade record: what an upgrade intends and what each step did, as the journal file holds
it. Pure: the record's values, its JSON and its rules, no I/O
(:mod:`airflow_ckpt_provider.storage.journal` reads and writes it beside the archive, and keeps
the stream's lock).

The intent (:class:`UpgradeIntent`: old and new checkpoint, old and new application, the archive
root) determines the upgrade id (:func:`derive_upgrade_id`): a retried task or a re-triggered DAG
run with the same intent gets the same id and finds the same record. Every step's record
(:class:`JournalStep`) is ``started`` before its side effect and ``done`` with its result after it
(or ``failed`` with the error); the decisions before any side effect are in ``planning``. Once a
rollback step starts, the record's phase is ``rollback``.

A record only grows in meaning: every run adds an entry to its ``run_log`` (what it did or why it
was refused; the run that closes it names its stored report), and nothing rewrites an earlier
step's record. What a re-run of an upgrade id meets is decided by :func:`rerun_of`: a rolled-back
one is refused, a finished one is already done, a rejected or refused one (nothing was stopped)
starts afresh, an unfinished one resumes.

The record names its format (:data:`FORMAT`) and the release that wrote it; a record of another
format is refused (:class:`~airflow_ckpt_provider.checkpoint.errors.JournalOfAnotherRelease`),
never read in another meaning.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_ckpt_provider import __version__
from airflow_ckpt_provider.checkpoint.errors import JournalCorrupt, JournalOfAnotherRelease, shorten
from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import FORMAT_KEY, Codec, Field, array_of

#: The journal's format. 2: each journal names the release that wrote it (``release``), and the
#: preflight's planning records the relaunch and rollback modes the steps' planner reads. A journal
#: of another format is refused (:class:`JournalOfAnotherRelease`), never read in another meaning.
FORMAT = 2


class StepState(StrEnum):
    """A step's state in the journal."""

    STARTED = "started"  # begun; an interrupted attempt stays here
    DONE = "done"
    FAILED = "failed"


STARTED, DONE, FAILED = StepState.STARTED, StepState.DONE, StepState.FAILED
UPGRADE_PHASE, ROLLBACK_PHASE = "upgrade", "rollback"
#: Outcomes that end an upgrade and free its stream for the next one.
FINAL_OUTCOMES = frozenset({"upgraded", "rejected", "refused", "rolled back"})


@dataclass(frozen=True)
class UpgradeIntent:
    """What the upgrade is for; it determines the upgrade id."""

    stream_name: str
    old_checkpoint: str
    new_checkpoint: str
    old_application: str = ""
    new_application: str = ""
    archive_root: str = ""

    def __post_init__(self) -> None:  # the intent is written to the journal: no credentials in it
        for what, uri in (("old checkpoint", self.old_checkpoint), ("new checkpoint", self.new_checkpoint),
                          ("archive root", self.archive_root)):
            refuse_credentials(uri, what)

    def key(self) -> str:
        """The fields that identify the upgrade, canonically (the archive root and the old
        application do not change which upgrade this is)."""
        return json.dumps([self.stream_name, self.old_checkpoint.rstrip("/"), self.new_checkpoint.rstrip("/"),
                           self.new_application], separators=(",", ":"))


def derive_upgrade_id(intent: UpgradeIntent) -> str:
    """``up-<12 hex>`` from the stream, both checkpoints and the new application: the same
    upgrade re-triggered gets the same id, any other upgrade another one."""
    return "up-" + hashlib.sha256(intent.key().encode()).hexdigest()[:12]


class Rerun(StrEnum):
    """What a run of an upgrade id meets in its journal (:func:`rerun_of`)."""

    NEW = "new"  # no journal, or one where no step with a side effect began (a rejection, a refusal): start afresh
    RESUME = "resume"  # steps started and the upgrade is not closed: finish it (or its rollback)
    ROLLED_BACK = "rolled back"  # closed after a rollback: never goes forward again
    UPGRADED = "upgraded"  # closed after a finished upgrade: already done


def rerun_of(record: JournalRecord | None) -> Rerun:
    """Decide what a run meets: see :class:`Rerun`. A rollback that did not finish (phase
    ``rollback``, journal still open) is resumed so it can complete."""
    if record is None or not record.started_side_effects:
        return Rerun.NEW
    if record.outcome == "rolled back":
        return Rerun.ROLLED_BACK
    if record.outcome == "upgraded":
        return Rerun.UPGRADED
    return Rerun.RESUME


@dataclass(frozen=True)
class JournalStep:
    """One step's record, keyed in the journal by its task id (``name``). ``kind`` is the step of
    the step table it is (:data:`~airflow_ckpt_provider.upgrade.steps.KINDS`; "" in journals written
    before kinds were recorded, whose steps' task ids were their kinds: :attr:`step_kind` reads the
    name then). ``notes`` hold what a step writes mid-way (e.g. a launch handle). ``result`` and
    ``notes`` are kept as the JSON the step wrote, so a journal is written back unchanged; they are
    read only through the step's row of the step table, which decodes them to its result and notes
    types (:func:`~airflow_ckpt_provider.upgrade.table.recorded`,
    :func:`~airflow_ckpt_provider.upgrade.table.noted`)."""

    name: str
    state: str
    run_id: str = ""
    attempts: int = 1
    started_at: str = ""
    finished_at: str = ""
    result: Any = None
    error: str = ""
    notes: Mapping[str, Any] = field(default_factory=dict)
    kind: str = ""

    @property
    def done(self) -> bool:
        return self.state == DONE

    @property
    def step_kind(self) -> str:
        """The step this record is of: its recorded ``kind``, else its name."""
        return self.kind or self.name


def _step_json(step: JournalStep) -> dict[str, Any]:
    """A step as the journal keeps it: without ``kind`` when none was recorded, so a journal of the
    release before kinds is written back unchanged."""
    data = asdict(step)
    if not step.kind:
        del data["kind"]
    return data


@dataclass(frozen=True)
class StepStart:
    """What :meth:`~airflow_ckpt_provider.storage.journal.UpgradeJournal.begin` found: ``done``
    (return ``result``), or the step now runs; ``previous`` is its earlier record when an earlier
    attempt was interrupted or failed."""

    done: bool
    result: Any = None
    previous: JournalStep | None = None

    @property
    def interrupted(self) -> bool:
        """An earlier attempt started and never recorded an end (its process died)."""
        return self.previous is not None and self.previous.state == STARTED


@dataclass(frozen=True)
class JournalRecord:
    """The journal file's content."""

    upgrade_id: str
    intent: UpgradeIntent
    created_at: str
    runs: tuple[str, ...] = ()
    phase: str = UPGRADE_PHASE
    steps: Mapping[str, JournalStep] = field(default_factory=dict)
    planned_handover: Mapping[str, Any] | None = None
    outcome: str | None = None
    closed_at: str = ""
    run_log: tuple[Mapping[str, Any], ...] = ()
    format: int = FORMAT
    #: the decisions before any side effect (preflight, compatibility check, path, approval), each
    #: a JournalStep with its times, result and error; not side effects (see started_side_effects)
    planning: Mapping[str, JournalStep] = field(default_factory=dict)
    #: the provider release that wrote the journal
    release: str = __version__

    @property
    def closed(self) -> bool:
        return self.outcome is not None

    def closing_entry(self) -> Mapping[str, Any] | None:
        """The ``run_log`` entry of the run that closed the journal with its outcome (None if
        open, or closed by a version that kept no run log)."""
        if not self.closed:
            return None
        return next((e for e in reversed(self.run_log) if e.get("outcome") == self.outcome), None)

    def entry(self, kind: str) -> JournalStep | None:
        """The record of the step of ``kind``, whatever task id it ran under: among the steps (the
        one that began last, should two tasks of one DAG be the same kind), else the decision of
        that name in ``planning``; None when neither holds one."""
        found = [step for step in self.steps.values() if step.step_kind == kind]
        if found:
            return max(found, key=lambda step: step.started_at)
        return self.planning.get(kind)

    @property
    def started_side_effects(self) -> bool:
        """Whether any step after planning has started (something may have been changed)."""
        return bool(self.steps)

    def to_json(self) -> str:
        data = asdict(self)
        data["runs"] = list(self.runs)
        data["run_log"] = [dict(entry) for entry in self.run_log]
        data["steps"] = {name: _step_json(step) for name, step in self.steps.items()}
        data["planning"] = {name: _step_json(step) for name, step in self.planning.items()}
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes, *, path: str = "") -> JournalRecord:
        """Decode through the journal's codec; :class:`JournalOfAnotherRelease` for a journal of
        another format (another release wrote it), :class:`JournalCorrupt` for anything that is not
        a journal (unknown keys, a missing or mistyped field, a step that is not one)."""
        try:
            data = _JOURNAL.parse(text)
            found = data.get(FORMAT_KEY)
            if isinstance(found, int) and not isinstance(found, bool) and found != FORMAT:
                writer = data.get("release")
                by = f"release {shorten(str(writer), 40)}" if writer else "an earlier release (its journals name none)"
                raise JournalOfAnotherRelease(
                    found=f"journal format {found}, written by {by}",
                    expected=f"journal format {FORMAT}, which airflow-ckpt-provider {__version__} writes", path=path)
            _JOURNAL.check_format(data)
            values = _JOURNAL.fields_of(data)
        except JournalOfAnotherRelease:
            raise
        except JournalCorrupt as exc:
            raise JournalCorrupt(found=exc.found, expected=exc.expected, path=path or exc.path) from None
        # absent or null: the field's default, as the previous decoder read it (a journal without a
        # release names none; null lists and maps are empty)
        kept = {name: value for name, value in values.items()
                if name in data and (value is not None or name in _NULL_MEANS_NONE)}
        return cls(**{**kept, "release": values["release"] or ""})


def _step(value: Any) -> JournalStep:  # noqa: ANN401 - a checked JSON object
    return JournalStep(**_STEP.present(value))


def _steps(value: Any) -> dict[str, JournalStep]:  # noqa: ANN401 - a checked JSON object
    return {str(name): _step(step) for name, step in value.items()}


def _intent(value: Any) -> UpgradeIntent:  # noqa: ANN401 - a checked JSON object
    return UpgradeIntent(**_INTENT.present(value))


# -- the journal's codec (airflow_ckpt_provider.records.codec): format FORMAT; its parts (the intent,
# each step) are covered by the journal's format number ------------------------------------------------

_INTENT = Codec("journal intent", JournalCorrupt, {
    "stream_name": Field((str,)), "old_checkpoint": Field((str,)), "new_checkpoint": Field((str,)),
    "old_application": Field((str,), required=False), "new_application": Field((str,), required=False),
    "archive_root": Field((str,), required=False),
}, version=None)
_STEP = Codec("journal step", JournalCorrupt, {
    "name": Field((str,)), "state": Field((str,)), "run_id": Field((str,), required=False),
    "attempts": Field((int,), required=False), "started_at": Field((str,), required=False),
    "finished_at": Field((str,), required=False), "result": Field(required=False),
    "error": Field((str,), required=False), "notes": Field((dict,), required=False),
    "kind": Field((str,), required=False),
}, version=None)
_JOURNAL = Codec("upgrade journal", JournalCorrupt, {
    "upgrade_id": Field((str,)),
    "intent": Field((dict,), decode=_intent),
    "created_at": Field((str,)),
    "runs": Field((list,), required=False, nullable=True, decode=array_of(str)),
    "phase": Field((str,), required=False),
    "steps": Field((dict,), required=False, nullable=True, decode=_steps),
    "planning": Field((dict,), required=False, nullable=True, decode=_steps),
    "planned_handover": Field((dict,), required=False, nullable=True),
    "outcome": Field((str,), required=False, nullable=True),
    "closed_at": Field((str,), required=False),
    "run_log": Field((list,), required=False, nullable=True, decode=array_of(dict, decode=dict)),
    "release": Field((str,), required=False, nullable=True),
}, version=FORMAT)
#: the fields whose null is a value (no handover planned, no outcome yet), not "the default"
_NULL_MEANS_NONE = frozenset({"planned_handover", "outcome"})


__all__ = ["DONE", "FAILED", "FINAL_OUTCOMES", "FORMAT", "ROLLBACK_PHASE", "STARTED", "UPGRADE_PHASE", "JournalRecord",
           "JournalStep", "Rerun", "StepStart", "StepState", "UpgradeIntent", "derive_upgrade_id", "rerun_of"]
