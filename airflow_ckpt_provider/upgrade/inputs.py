"""What a step takes from the upgrade record instead of from another step's XCom. Pure: the record
in, a value out.

A DAG passes :class:`FromRecord` (``FromRecord(RecordInput.HANDOVER)``) as an operator argument;
the journaled step replaces it with :func:`resolve` over the journal's record once the planner
said the step runs and its own templates rendered (so a recorded value is never rendered as a
template). Each :class:`RecordInput` reads one recorded step result, or what the preflight recorded
in the journal's planning, by the step names of the step table
(:mod:`airflow_ckpt_provider.upgrade.steps`).

Where the record does not hold an input, :func:`resolve` returns the empty value the reference
DAG's templates gave (None or ""), which each operator already reads as "not given"; the two
inputs with no safe empty value, a forward rollback's fresh checkpoint and its starting offsets,
raise :class:`~airflow_ckpt_provider.checkpoint.errors.RecordInputMissing` instead, as does any
input asked of no record (a step without a journal).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import RecordInputMissing
from airflow_ckpt_provider.checkpoint.rollback import RollbackHandover, rollback_result
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.upgrade import planner
from airflow_ckpt_provider.upgrade.record import DONE, JournalRecord
from airflow_ckpt_provider.upgrade.steps import COMPATIBILITY_CHECK, PATHS, PREFLIGHT, Path, PathSteps


class RecordInput(StrEnum):
    """What a step can take from the upgrade record (see :data:`INPUTS` for where each is read)."""

    COMPATIBILITY_VERDICT = "compatibility_verdict"  # the compatibility check's verdict (its planning result)
    HANDOVER = "handover"  # the migration's handover (a HandoverResult dict): its step's result, or the switchover's
    IN_PLACE_HANDOVER = "in_place_handover"  # the in-place path's handover step result
    STATE_EXPORT_LOCATION = "state_export_location"  # where the state export goes (the preflight's planning)
    STATE_EXPORT = "state_export"  # the state export's result (a StateExport dict)
    SEEDED_STATE = "seeded_state"  # where a switchover's standby seeded the old query's state ("" when it seeded none)
    STANDBY_HANDLE = "standby_handle"  # the standby launch's LaunchHandle dict
    NEW_HANDLE = "new_handle"  # the new version's LaunchHandle dict: the relaunch's or switchover's, else the standby's
    IN_PLACE_HANDLE = "in_place_handle"  # the in-place restart's LaunchHandle dict
    ARCHIVE_LOCATION = "archive_location"  # where the archive step archived the old checkpoint
    UPGRADE_ID = "upgrade_id"
    ROLLBACK_CHECKPOINT = "rollback_checkpoint"  # a forward rollback's fresh checkpoint (the preflight's planning)
    ROLLBACK_STARTING_OFFSETS = "rollback_starting_offsets"  # a forward rollback's startingOffsets JSON


@dataclass(frozen=True)
class FromRecord:
    """An operator argument read from the upgrade record when the step runs (see the module
    docstring). Only for template fields of a journaled step."""

    input: RecordInput

    def __post_init__(self) -> None:
        object.__setattr__(self, "input", RecordInput(self.input))

    def __str__(self) -> str:  # what Airflow shows for the field before the step runs
        return f"FromRecord({self.input.value})"


_MIGRATION, _STANDBY, _IN_PLACE = PATHS[Path.COLD], PATHS[Path.STANDBY], PATHS[Path.IN_PLACE]
_SWITCHOVER = PATHS[Path.SWITCHOVER]
#: The steps that are the stop, the handover and the launch at once: their result holds the ``handle``.
_COMBINED = frozenset(path.switchover for path in PATHS.values() if path.switchover)
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


def _result(step: str) -> Callable[[JournalRecord], Any]:
    """The result ``step`` recorded when done (a copy of a JSON object; None when not done)."""
    def read(record: JournalRecord) -> Any:  # noqa: ANN401 - a recorded JSON value
        value = planner.result_of(record, step)
        return dict(value) if isinstance(value, Mapping) else value

    return read


def _key(step: str, key: str) -> Callable[[JournalRecord], Any]:
    """One non-empty string of the JSON object ``step`` recorded when done (None otherwise)."""
    def read(record: JournalRecord) -> str | None:
        value = planner.result_of(record, step)
        found = value.get(key) if isinstance(value, Mapping) else None
        return found if isinstance(found, str) and found.strip() else None

    return read


def _rollback_offsets(step: str) -> Callable[[JournalRecord], Any]:
    """The ``startingOffsets`` of the forward rollback ``step`` recorded when done, decoded by
    :func:`~airflow_ckpt_provider.checkpoint.rollback.rollback_result` (None when not done, or for
    a restore rollback: it has none); :class:`InvalidRollbackHandover` for a record that is not its
    result."""
    def read(record: JournalRecord) -> str | None:
        value = planner.result_of(record, step)
        if value is None:
            return None
        result = rollback_result(value)
        offsets = result.starting_offsets if isinstance(result, RollbackHandover) else ""
        return offsets or None

    return read


def _handover(*paths: PathSteps) -> Callable[[JournalRecord], Any]:
    """The handover result of the first of ``paths`` whose step holding it is done (the handover
    step's result, or the part of a switchover's result)."""
    def read(record: JournalRecord) -> Any:  # noqa: ANN401 - a recorded JSON value
        for path in paths:
            value = planner.part_of(record, path, planner.Part.HANDOVER)
            if isinstance(value, Mapping):
                return dict(value)
        return None

    return read


def _seeded(path: PathSteps) -> Callable[[JournalRecord], Any]:
    """Where the standby of ``path``'s switchover seeded the state (``used.state_path`` of its
    result; None when not done, or when it seeded none)."""
    def read(record: JournalRecord) -> str | None:
        used = planner.result_of(record, str(path.switchover))
        used = used.get("used") if isinstance(used, Mapping) else None
        found = used.get("state_path") if isinstance(used, Mapping) else None
        return found if isinstance(found, str) and found.strip() else None

    return read


def _handle(*steps: str) -> Callable[[JournalRecord], Any]:
    """The LaunchHandle dict of the first of ``steps`` that has one: its result when done (a
    switchover's: the ``handle`` in it), else the handle it noted right after launching (an attempt
    that then failed, or was interrupted, while it waited for the job), as the launch pushed it to
    XCom before deferring."""
    def read(record: JournalRecord) -> dict[str, Any] | None:
        for step in steps:
            entry = record.entry(step)
            if entry is None:
                continue
            if entry.state == DONE and isinstance(entry.result, Mapping):
                done = entry.result.get("handle") if step in _COMBINED else entry.result
                if isinstance(done, Mapping):
                    return dict(done)
            noted = entry.notes.get("handle")
            if isinstance(noted, Mapping):
                return dict(noted)
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
        _key(PREFLIGHT, "state_export"), ""),
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
        _key(_MIGRATION.archive, "location"), ""),
    RecordInput.UPGRADE_ID: InputSource("the upgrade id", "as the record's upgrade_id", (), lambda r: r.upgrade_id),
    RecordInput.ROLLBACK_CHECKPOINT: InputSource(
        "the forward rollback's fresh checkpoint", f"in the {PREFLIGHT}'s planning (rollback_checkpoint)",
        (PREFLIGHT,), _key(PREFLIGHT, "rollback_checkpoint"), REQUIRED),
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
