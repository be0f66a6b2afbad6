"""What a step takes from the upgrade record instead of from another step's XCom. Pure: the record
in, a value out.

A DAG passes :class:`FromRecord` (``FromRecord(RecordInput.HANDOVER)``) as an operator argument;
the journaled step replaces it with :func:`resolve` over the journal's record once the planner
said the step runs and its own templates rendered (so a recorded value is never rendered as a
template). Each :class:`RecordInput` reads one recorded step result, or what the preflight recorded
in the journal's planning, by the step names of the step table
(:mod:`airflow_ckpt_provider.upgrade.steps`), through the step's row
(:func:`~airflow_ckpt_provider.upgrade.table.recorded`): a typed value, passed on as its JSON object;
:class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult` for a recorded result or note
that is not its row's type (nothing is guessed from it).

Where the record does not hold an input, :func:`resolve` returns the empty value the reference
DAG's templates gave (None or ""), which each operator already reads as "not given"; the two
inputs with no safe empty value, a forward rollback's fresh checkpoint and its starting offsets,
raise :class:`~airflow_ckpt_provider.checkpoint.errors.RecordInputMissing` instead, as does any
input asked of no record (a step without a journal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import RecordInputMissing
from airflow_ckpt_provider.checkpoint.rollback import RollbackHandover
from airflow_ckpt_provider.checkpoint.switchover import SwitchoverResult
from airflow_ckpt_provider.upgrade.record import JournalRecord
from airflow_ckpt_provider.upgrade.results import ArchiveResult, PreflightPlanning
from airflow_ckpt_provider.upgrade.steps import (
    COMPATIBILITY_CHECK,
    PATHS,
    PREFLIGHT,
    FromRecord,
    Path,
    PathSteps,
    RecordInput,
)
from airflow_ckpt_provider.upgrade.table import handle_of, handover_of, recorded

_MIGRATION, _STANDBY, _IN_PLACE = PATHS[Path.COLD], PATHS[Path.STANDBY], PATHS[Path.IN_PLACE]
_SWITCHOVER = PATHS[Path.SWITCHOVER]
_START_STANDBY = next(step for step in _STANDBY.new if step != _STANDBY.launch)
#: No safe empty value: the input is required.
REQUIRED = object()


@dataclass(frozen=True)
class InputSource:
    """Where the record holds one input: ``what`` it is and ``where`` it is recorded (in words), the
    steps whose records it reads (``steps``: their state explains a missing input), how it is
    ``read`` (None: not held) and the ``empty`` value when it is not (:data:`REQUIRED`: none)."""

    what: str
    where: str
    steps: tuple[str, ...]
    read: Callable[[JournalRecord], Any]
    empty: Any = None


def _text(value: str | None) -> str | None:
    """A non-empty text, else None (not held)."""
    return value if value and value.strip() else None


def _result(step: str) -> Callable[[JournalRecord], Any]:
    """The result ``step`` recorded when done, read through its row's type, as that type's JSON
    object (None when not done)."""
    def read(record: JournalRecord) -> dict[str, Any] | None:
        value = recorded(record, step)
        return _json(value) if value is not None else None

    return read


def _json(value: object) -> dict[str, Any]:
    to_dict: Callable[[], dict[str, Any]] | None = getattr(value, "to_dict", None)
    if to_dict is None:  # every row's type writes its JSON object: a reader of a row without one is a bug
        raise TypeError(f"{type(value).__name__} has no to_dict")
    return to_dict()


def _planned(name: str) -> Callable[[JournalRecord], Any]:
    """One location the preflight recorded in the journal's planning
    (:class:`~airflow_ckpt_provider.upgrade.results.PreflightPlanning`; None when not recorded, or empty)."""
    def read(record: JournalRecord) -> str | None:
        planning = recorded(record, PREFLIGHT, as_type=PreflightPlanning)
        return _text(getattr(planning, name)) if planning is not None else None

    return read


def _archive_location(step: str) -> Callable[[JournalRecord], Any]:
    """Where the archive ``step`` archived the old checkpoint (its ArchiveResult's location; None when not done)."""
    def read(record: JournalRecord) -> str | None:
        archived = recorded(record, step, as_type=ArchiveResult)
        return _text(archived.location) if archived is not None else None

    return read


def _rollback_offsets(step: str) -> Callable[[JournalRecord], Any]:
    """The ``startingOffsets`` of the forward rollback ``step`` recorded when done, read through its
    row (:func:`~airflow_ckpt_provider.checkpoint.rollback.rollback_result`; None when not done, or
    for a restore rollback: it has none)."""
    def read(record: JournalRecord) -> str | None:
        result = recorded(record, step)
        return _text(result.starting_offsets) if isinstance(result, RollbackHandover) else None

    return read


def _handover(*paths: PathSteps) -> Callable[[JournalRecord], Any]:
    """The handover result of the first of ``paths`` whose step holding it is done (the handover
    step's result, or the handover in a switchover's result), as its JSON object."""
    def read(record: JournalRecord) -> dict[str, Any] | None:
        for path in paths:
            result = handover_of(record, path)
            if result is not None:
                return result.to_dict()
        return None

    return read


def _seeded(path: PathSteps) -> Callable[[JournalRecord], Any]:
    """Where the standby of ``path``'s switchover seeded the state
    (:attr:`~airflow_ckpt_provider.checkpoint.switchover.SwitchoverResult.seeded_state`; None when
    not done, or when it seeded none)."""
    def read(record: JournalRecord) -> str | None:
        switched = recorded(record, str(path.switchover), as_type=SwitchoverResult)
        return _text(switched.seeded_state) if switched is not None else None

    return read


def _handle(*steps: str) -> Callable[[JournalRecord], Any]:
    """The LaunchHandle of the first of ``steps`` that has one
    (:func:`~airflow_ckpt_provider.upgrade.table.handle_of`: its result when done, a switchover's
    handle in it, else the handle it noted right after launching), as its JSON object, as the
    launch pushed it to XCom before deferring."""
    def read(record: JournalRecord) -> dict[str, Any] | None:
        for step in steps:
            handle = handle_of(record, step)
            if handle is not None:
                return handle.to_dict()
        return None

    return read


INPUTS: dict[RecordInput, InputSource] = {
    RecordInput.COMPATIBILITY_VERDICT: InputSource(
        "the compatibility check's verdict", f"in the {COMPATIBILITY_CHECK}'s planning (a verdict, or skipped)",
        (COMPATIBILITY_CHECK,), _result(COMPATIBILITY_CHECK)),
    RecordInput.HANDOVER: InputSource(
        "the handover", f"as the result of {_MIGRATION.handover}, else in the result of {_SWITCHOVER.handover}",
        (_MIGRATION.handover, _SWITCHOVER.handover), _handover(_MIGRATION, _SWITCHOVER)),
    RecordInput.IN_PLACE_HANDOVER: InputSource(
        "the in-place handover", f"as the result of {_IN_PLACE.handover}", (_IN_PLACE.handover,),
        _result(_IN_PLACE.handover)),
    RecordInput.STATE_EXPORT_LOCATION: InputSource(
        "the state export location", f"in the {PREFLIGHT}'s planning (state_export)", (PREFLIGHT,),
        _planned("state_export"), ""),
    RecordInput.STATE_EXPORT: InputSource(
        "the state export", f"as the result of {_MIGRATION.state_export}", (str(_MIGRATION.state_export),),
        _result(str(_MIGRATION.state_export))),
    RecordInput.SEEDED_STATE: InputSource(
        "the state the standby seeded", f"in the result of {_SWITCHOVER.switchover} (used.state_path)",
        (str(_SWITCHOVER.switchover),), _seeded(_SWITCHOVER), ""),
    RecordInput.STANDBY_HANDLE: InputSource(
        "the standby's launch handle", f"as the result of {_START_STANDBY}", (_START_STANDBY,),
        _handle(_START_STANDBY)),
    RecordInput.NEW_HANDLE: InputSource(
        "the new version's launch handle",
        f"by {_MIGRATION.launch}, else by {_SWITCHOVER.launch}, else by {_START_STANDBY}",
        (_MIGRATION.launch, _SWITCHOVER.launch, _START_STANDBY),
        _handle(_MIGRATION.launch, _SWITCHOVER.launch, _START_STANDBY), ""),
    RecordInput.IN_PLACE_HANDLE: InputSource(
        "the in-place restart's launch handle", f"by {_IN_PLACE.launch}", (_IN_PLACE.launch,),
        _handle(_IN_PLACE.launch), ""),
    RecordInput.ARCHIVE_LOCATION: InputSource(
        "the archive location", f"in the result of {_MIGRATION.archive} (location)", (_MIGRATION.archive,),
        _archive_location(_MIGRATION.archive), ""),
    RecordInput.UPGRADE_ID: InputSource("the upgrade id", "as the record's upgrade_id", (), lambda r: r.upgrade_id),
    RecordInput.ROLLBACK_CHECKPOINT: InputSource(
        "the forward rollback's fresh checkpoint", f"in the {PREFLIGHT}'s planning (rollback_checkpoint)",
        (PREFLIGHT,), _planned("rollback_checkpoint"), REQUIRED),
    RecordInput.ROLLBACK_STARTING_OFFSETS: InputSource(
        "the forward rollback's starting offsets",
        f"in the result of {_MIGRATION.rollback_handover} (starting_offsets)", (str(_MIGRATION.rollback_handover),),
        _rollback_offsets(str(_MIGRATION.rollback_handover)), REQUIRED),
}


def _states(record: JournalRecord, steps: tuple[str, ...]) -> str:
    """How ``steps`` stand in ``record``, in words (``rollback_handover failed``)."""
    def state(step: str) -> str:
        entry = record.entry(step)
        return "not run" if entry is None else str(entry.state)

    return ", ".join(f"{step} {state(step)}" for step in steps) or "nothing recorded"


def resolve(record: JournalRecord | None, input: RecordInput, *, argument: str = "") -> Any:  # noqa: ANN401
    """``input``'s value in ``record`` (see :data:`INPUTS`); where the record does not hold it, its
    empty value (None or ""). :class:`RecordInputMissing` for a required input the record does not
    hold, and for any input without a record (``argument`` names what asked for it, in the error)."""
    source = INPUTS[RecordInput(input)]
    asked = f"{argument}=FromRecord({RecordInput(input).value})" if argument else f"FromRecord({input})"
    if record is None:
        raise RecordInputMissing(found=f"{asked} on a step without an upgrade journal",
                                 expected=f"the upgrade journal to read {source.what} from, or the value itself")
    value = source.read(record)
    if value is not None:
        return value
    if source.empty is REQUIRED:
        raise RecordInputMissing(
            found=f"{asked}, and the record of upgrade {record.upgrade_id} does not hold {source.what} "
                  f"({_states(record, source.steps)})",
            expected=f"{source.what} recorded {source.where} before this step runs")
    return source.empty


__all__ = ["INPUTS", "FromRecord", "InputSource", "RecordInput", "resolve"]
