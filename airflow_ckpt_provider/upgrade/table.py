"""The step table: the upgrade's typed schema, one row per step. Pure: no Airflow, no I/O.

A row (:class:`StepRow`) names its step ``kind`` (its name in
:mod:`~airflow_ckpt_provider.upgrade.steps`, its task id in the reference DAG), the operator class
it builds and the factory of that operator's own arguments (both by dotted path ``module:name``:
the Airflow ring binds them, ``upgrade/`` imports no Airflow), its ``inputs`` from the upgrade
record (operator argument -> :class:`~airflow_ckpt_provider.upgrade.inputs.RecordInput`, passed
as ``FromRecord``), the type its recorded ``result`` decodes to, its retries and its timeout (the
task's ``execution_timeout``: a fixed budget plus the DAG's own waits it covers).

The reference DAG is generated from the rows (:mod:`airflow_ckpt_provider.dags.stream_upgrade`):
one operator per row, the in-place path from the same factories as the migration. The planner and
the report read a step's result through its row (:func:`recorded`): a typed value, or
:class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult` for a recorded result that is
not what the row says (never guessed at).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from airflow_ckpt_provider.checkpoint.compat import compatibility_result
from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult, ProviderError
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.path import PathChoice
from airflow_ckpt_provider.checkpoint.report import UpgradeReport
from airflow_ckpt_provider.checkpoint.rollback import rollback_result
from airflow_ckpt_provider.checkpoint.state import StateExport
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.checkpoint.switchover import SwitchoverResult
from airflow_ckpt_provider.checkpoint.verify import VerifyResult
from airflow_ckpt_provider.upgrade.notes import (
    DecisionNotes,
    LaunchNotes,
    NoNotes,
    RestoreNotes,
    StateExportNotes,
    SwitchoverNotes,
)
from airflow_ckpt_provider.upgrade.record import DONE, ROLLBACK_PHASE, UPGRADE_PHASE, JournalRecord, JournalStep
from airflow_ckpt_provider.upgrade.results import ApprovalAnswer, ArchiveResult, PreflightPlanning, RestoreResult
from airflow_ckpt_provider.upgrade.steps import (
    IN_PLACE_ROLLBACK,
    KINDS,
    PATHS,
    ROLLBACK,
    Path,
    PathSteps,
    RecordInput,
    all_steps,
    refuse_unknown_kind,
)

#: The DAG's own waits a timeout may cover (:class:`Timeout`), by the name of its builder's argument.
WAITS = frozenset({"stop_timeout", "first_commit_timeout", "standby_timeout", "progress_window_s"})
#: The step that is no kind of the planner: the report, which reads the journal after every path ended.
REPORT = "report"


@dataclass(frozen=True)
class Timeout:
    """A task's ``execution_timeout``: ``fixed_s`` seconds for its own work plus each of the DAG's
    ``waits`` it covers (a stop's ``stop_timeout``, a launch's ``first_commit_timeout``, ...), so a
    longer wait set on the DAG never outlasts its task."""

    fixed_s: float
    waits: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "waits", tuple(self.waits))
        unknown = sorted(set(self.waits) - WAITS)
        if self.fixed_s <= 0 or unknown:
            raise ValueError(f"a timeout needs fixed_s > 0 ({self.fixed_s}) and waits among {sorted(WAITS)} "
                             f"(not {unknown})")

    def seconds(self, waits: Mapping[str, float]) -> float:
        """The timeout in seconds given the DAG's ``waits`` (each name in :attr:`waits` must be there)."""
        return self.fixed_s + sum(float(waits[name]) for name in self.waits)


#: How a row's recorded result is decoded: a typed value's strict ``from_json`` (or a function that
#: picks one of several); it raises the value's own error for anything else.
Decoder = Callable[[Any], object]
#: How a row's notes are decoded: a notes type's strict ``from_json`` (:mod:`~airflow_ckpt_provider.upgrade.notes`).
NotesDecoder = Callable[[Any], object]


@dataclass(frozen=True)
class StepRow:
    """One step of the upgrade (see the module docstring). ``result``: the decoder of its recorded
    result; ``notes``: the decoder of the notes it writes mid-way (none by default). ``paths``: the
    DAGs whose path has a step of this kind build this row (None: every DAG that has the kind; two
    rows of one kind differ by path, like the cold launch and the standby's release)."""

    kind: str
    operator: str
    factory: str
    result: Decoder | None = None
    inputs: Mapping[str, RecordInput] = field(default_factory=dict)
    retries: int = 0
    retry_delay_s: float = 5.0
    timeout: Timeout = Timeout(600.0)
    paths: frozenset[Path] | None = None
    notes: NotesDecoder = NoNotes.from_json

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", {name: RecordInput(value) for name, value in self.inputs.items()})
        if self.kind not in KINDS and self.kind != REPORT:
            raise ValueError(f"step row {self.kind!r}: not a kind of the step table ({', '.join(KINDS)})")
        for what, dotted in (("operator", self.operator), ("factory", self.factory)):
            module, _, name = dotted.partition(":")
            if not module or not name:
                raise ValueError(f"step row {self.kind}: {what} {dotted!r} is not 'module:name'")
        if self.retries < 0 or self.retry_delay_s < 0:
            raise ValueError(f"step row {self.kind}: retries and retry_delay_s must be >= 0")
        if self.result is None:
            raise ValueError(f"step row {self.kind}: no result type (every step's result is a typed value)")

    @property
    def phase(self) -> str:
        """The journal phase it records in: a rollback step's is ``rollback``."""
        return ROLLBACK_PHASE if self.kind in (*ROLLBACK, *IN_PLACE_ROLLBACK) else UPGRADE_PHASE

    @property
    def in_place(self) -> bool:
        """A step of the restart in place (or its rollback): it works on the old checkpoint."""
        return self.kind in PATHS[Path.IN_PLACE].steps or self.kind in IN_PLACE_ROLLBACK


_OPS = "airflow_ckpt_provider.operators"
_MAKE = "airflow_ckpt_provider.dags.steps"
_STOP, _LAUNCH = f"{_OPS}.stop:GracefulStopOperator", f"{_OPS}.launch:StreamLaunchOperator"
_HANDOVER, _VERIFY = f"{_OPS}.handover:CheckpointHandoverOperator", f"{_OPS}.launch:HandoverVerifyOperator"
_ARCHIVE = f"{_OPS}.archive:CheckpointArchiveOperator"
#: The steps whose deferral can race Airflow's LocalExecutor retry once (journaled: no second side effect).
_RETRY: dict[str, Any] = {"retries": 1, "retry_delay_s": 5.0}
_STOPPING = Timeout(600.0, ("stop_timeout",))
_LAUNCHING = Timeout(600.0, ("first_commit_timeout",))
_VERIFYING = Timeout(600.0, ("progress_window_s",))
#: Copying a checkpoint (the archive, the restore) takes as long as its size: hours for a large state.
_COPYING = Timeout(6 * 3600.0)
_HANDOVER_IN = RecordInput.HANDOVER
_ID = RecordInput.UPGRADE_ID
_EXPORT = f"{_OPS}.state:StateExportOperator"
_EXPORT_IN = {"export_uri": RecordInput.STATE_EXPORT_LOCATION, "handover": _HANDOVER_IN, "upgrade_id": _ID}
_DECISION, _LAUNCH_NOTES, _EXPORT_NOTES = DecisionNotes.from_json, LaunchNotes.from_json, StateExportNotes.from_json


def _state_export(value: Any) -> StateExport:  # noqa: ANN401 - a recorded JSON value
    """The state export's recorded result: its object (never the bare location text its XCom may be)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"a JSON {type(value).__name__}, not a StateExport object")
    export = StateExport.from_json(value)
    if export is None:
        raise TypeError("an empty StateExport")
    return export


#: The rows, in the order of :func:`~airflow_ckpt_provider.upgrade.steps.all_steps` (each DAG takes its own).
TABLE: tuple[StepRow, ...] = (
    # the decisions record in the journal's planning (their results there, not their XComs)
    StepRow("preflight", f"{_OPS}.preflight:UpgradePreflightOperator", f"{_MAKE}:preflight",
            PreflightPlanning.from_json, timeout=Timeout(1800.0), notes=_DECISION),
    StepRow("compatibility_check", f"{_OPS}.compat:CompatibilityCheckOperator", f"{_MAKE}:compatibility_check",
            compatibility_result, timeout=Timeout(3600.0), notes=_DECISION),
    StepRow("choose_path", f"{_OPS}.compat:UpgradePathOperator", f"{_MAKE}:choose_path", PathChoice.from_json,
            inputs={"verdict": RecordInput.COMPATIBILITY_VERDICT}, notes=_DECISION),
    # a person's answer: its own response timeout (12 hours) and the time to record it
    StepRow("approve", f"{_OPS}.approval:UpgradeApprovalOperator", f"{_MAKE}:approve", ApprovalAnswer.from_json,
            timeout=Timeout(13 * 3600.0)),
    StepRow("start_standby", _LAUNCH, f"{_MAKE}:start_standby", LaunchHandle.from_json,
            timeout=_LAUNCHING, notes=_LAUNCH_NOTES),
    StepRow("graceful_stop", _STOP, f"{_MAKE}:stop_old", StopResult.from_json, timeout=_STOPPING,
            **_RETRY),
    StepRow("extract_handover", _HANDOVER, f"{_MAKE}:handover", HandoverResult.from_json),
    StepRow("export_state", _EXPORT, f"{_MAKE}:export_state", _state_export, inputs=_EXPORT_IN,
            timeout=_COPYING, paths=frozenset({Path.STANDBY, Path.COLD}), notes=_EXPORT_NOTES),
    # after a switchover: the verified copy of the state the standby seeded, and its check
    StepRow("export_state", _EXPORT, f"{_MAKE}:export_state", _state_export,
            inputs={**_EXPORT_IN, "seeded_state": RecordInput.SEEDED_STATE}, timeout=_COPYING,
            paths=frozenset({Path.SWITCHOVER}), notes=_EXPORT_NOTES),
    StepRow("relaunch", _LAUNCH, f"{_MAKE}:relaunch", LaunchHandle.from_json,
            inputs={"handover": _HANDOVER_IN, "initial_state": RecordInput.STATE_EXPORT}, timeout=_LAUNCHING,
            paths=frozenset({Path.COLD}), notes=_LAUNCH_NOTES, **_RETRY),
    StepRow("relaunch", f"{_OPS}.launch:StandbyReleaseOperator", f"{_MAKE}:relaunch", LaunchHandle.from_json,
            inputs={"handover": _HANDOVER_IN, "initial_state": RecordInput.STATE_EXPORT,
                    "standby_handle": RecordInput.STANDBY_HANDLE},
            timeout=_LAUNCHING, paths=frozenset({Path.STANDBY}), notes=_LAUNCH_NOTES, **_RETRY),
    StepRow("verify", _VERIFY, f"{_MAKE}:verify", VerifyResult.from_json, inputs={"handover": _HANDOVER_IN},
            timeout=_VERIFYING, **_RETRY),
    StepRow("archive", _ARCHIVE, f"{_MAKE}:archive", ArchiveResult.from_json,
            inputs={"handover": _HANDOVER_IN, "upgrade_id": _ID}, timeout=_COPYING),
    StepRow("switchover", f"{_OPS}.switchover:StandbySwitchoverOperator", f"{_MAKE}:switchover",
            SwitchoverResult.from_json, inputs={"standby_handle": RecordInput.STANDBY_HANDLE},
            timeout=Timeout(600.0, ("stop_timeout", "first_commit_timeout")), notes=SwitchoverNotes.from_json,
            **_RETRY),
    # the restart in place: the migration's factories, on the old checkpoint
    StepRow("in_place_stop", _STOP, f"{_MAKE}:stop_old", StopResult.from_json, timeout=_STOPPING,
            **_RETRY),
    StepRow("in_place_handover", _HANDOVER, f"{_MAKE}:handover", HandoverResult.from_json),
    StepRow("in_place_archive", _ARCHIVE, f"{_MAKE}:archive", ArchiveResult.from_json,
            inputs={"handover": RecordInput.IN_PLACE_HANDOVER, "upgrade_id": _ID}, timeout=_COPYING),
    StepRow("in_place_restart", _LAUNCH, f"{_MAKE}:restart_in_place", LaunchHandle.from_json,
            timeout=_LAUNCHING, notes=_LAUNCH_NOTES, **_RETRY),
    StepRow("in_place_verify", _VERIFY, f"{_MAKE}:verify", VerifyResult.from_json,
            inputs={"handover": RecordInput.IN_PLACE_HANDOVER}, timeout=_VERIFYING, **_RETRY),
    # the rollbacks: stop the new version, what it processed, the old checkpoint back, the old version again
    StepRow("rollback_stop_new", _STOP, f"{_MAKE}:stop_new", StopResult.from_json,
            inputs={"launch_handle": RecordInput.NEW_HANDLE}, timeout=Timeout(660.0), **_RETRY),
    StepRow("rollback_handover", f"{_OPS}.handover:RollbackHandoverOperator", f"{_MAKE}:rollback_handover",
            rollback_result, inputs={"handover": _HANDOVER_IN,
                                     "rollback_checkpoint_uri": RecordInput.ROLLBACK_CHECKPOINT}),
    StepRow("rollback_restore", f"{_OPS}.archive:CheckpointRestoreOperator", f"{_MAKE}:restore",
            RestoreResult.from_json, inputs={"archive_uri": RecordInput.ARCHIVE_LOCATION}, timeout=_COPYING,
            notes=RestoreNotes.from_json),
    StepRow("rollback_restart_old", _LAUNCH, f"{_MAKE}:restart_old", LaunchHandle.from_json,
            timeout=_LAUNCHING, notes=_LAUNCH_NOTES),
    StepRow("rollback_restart_forward", _LAUNCH, f"{_MAKE}:restart_forward", LaunchHandle.from_json,
            inputs={"checkpoint_uri": RecordInput.ROLLBACK_CHECKPOINT,
                    "starting_offsets": RecordInput.ROLLBACK_STARTING_OFFSETS}, timeout=_LAUNCHING,
            notes=_LAUNCH_NOTES),
    StepRow("in_place_rollback_stop", _STOP, f"{_MAKE}:stop_new", StopResult.from_json,
            inputs={"launch_handle": RecordInput.IN_PLACE_HANDLE}, timeout=Timeout(660.0), **_RETRY),
    StepRow("in_place_rollback_restart", _LAUNCH, f"{_MAKE}:restart_old", LaunchHandle.from_json,
            timeout=_LAUNCHING, notes=_LAUNCH_NOTES),
    # the report is not journaled: its result is the report it stores
    StepRow(REPORT, f"{_OPS}.report:UpgradeReportOperator", f"{_MAKE}:report", UpgradeReport.from_json,
            timeout=Timeout(1800.0)),
)


def rows(path: Path) -> tuple[StepRow, ...]:
    """The rows a DAG of ``path`` (standby, cold or switchover; the in-place path beside it) builds,
    in order (:func:`~airflow_ckpt_provider.upgrade.steps.all_steps`), the report last: one per step."""
    chosen = []
    for kind in (*all_steps(path), REPORT):
        found = [row for row in TABLE if row.kind == kind and (row.paths is None or path in row.paths)]
        if len(found) != 1:
            raise ValueError(f"the step table has {len(found)} rows of {kind} for the {path.value} path, not one")
        chosen.append(found[0])
    return tuple(chosen)


def row_of(kind: str, path: Path = Path.COLD) -> StepRow:
    """The row of ``kind`` (on ``path``, where rows of one kind differ by path);
    :class:`~airflow_ckpt_provider.checkpoint.errors.UnknownStepKind` for a kind the table does not name."""
    refuse_unknown_kind(kind)
    return next(row for row in TABLE if row.kind == kind and (row.paths is None or path in row.paths))


T = TypeVar("T")
#: What to do about a recorded result or notes that are not their row's type.
_EDITED = ("Nothing was changed. The upgrade journal holds a record this release's step does not write (edited by "
           "hand, or written by another release): restore the journal's step record as the step wrote it, or "
           "finish the upgrade with the release that wrote it.")


def _decode(decoder: Callable[[Any], object], value: Any, kind: str, what: str,  # noqa: ANN401 - recorded JSON
            as_type: type | None) -> object:
    """``value`` through ``decoder``; :class:`InvalidStepResult` for anything it refuses, or (a
    reader's mistake) a type other than ``as_type``."""
    try:
        decoded = decoder(value)
    except (ProviderError, ValueError, TypeError, KeyError) as exc:
        reads = getattr(decoder, "__qualname__", repr(decoder))
        raise InvalidStepResult(found=f"the {what} {kind} recorded ({type(exc).__name__}: {exc})",
                                expected=f"the {what} its row reads ({reads})", action=_EDITED) from None
    if as_type is not None and not isinstance(decoded, as_type):
        raise InvalidStepResult(found=f"the {what} {kind} recorded, read as {type(decoded).__name__}",
                                expected=f"a {as_type.__name__}", action=_EDITED)
    return decoded


#: The steps that are the stop, the handover and the launch at once (their result holds the new query's handle).
_SWITCHOVERS = frozenset(path.switchover for path in PATHS.values() if path.switchover)


def _refuse_untyped(value: Any) -> object:  # noqa: ANN401 - never returns
    raise TypeError("its row names no result type")


def _entry(record: JournalRecord | None, kind: str) -> JournalStep | None:
    return record.entry(kind) if record is not None else None


@overload
def recorded(record: JournalRecord | None, kind: str, path: Path = ..., *, as_type: type[T]) -> T | None: ...


@overload
def recorded(record: JournalRecord | None, kind: str, path: Path = ..., *, as_type: None = None) -> object: ...


def recorded(record: JournalRecord | None, kind: str, path: Path = Path.COLD, *,
             as_type: type | None = None) -> object:
    """The result the step of ``kind`` recorded when done (whatever task id it ran under; a
    decision's in the journal's planning), decoded through its row's type; None when it is not
    done. :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult` when the recorded
    result is not that type's (a hand-edited journal, another release's shape), or not ``as_type``
    (the type the reader expects); :class:`~airflow_ckpt_provider.checkpoint.errors.UnknownStepKind`
    for a kind the table does not name."""
    row = row_of(kind, path)
    entry = _entry(record, kind)
    if entry is None or entry.state != DONE:
        return None
    if entry.result is None:
        raise InvalidStepResult(found=f"{kind} recorded done without a result", expected="the result its step returned",
                                action=_EDITED)
    decoder = row.result if row.result is not None else _refuse_untyped
    return _decode(decoder, entry.result, kind, "result", as_type)


@overload
def noted(record: JournalRecord | None, kind: str, path: Path = ..., *, as_type: type[T]) -> T | None: ...


@overload
def noted(record: JournalRecord | None, kind: str, path: Path = ..., *, as_type: None = None) -> object: ...


def noted(record: JournalRecord | None, kind: str, path: Path = Path.COLD, *, as_type: type | None = None) -> object:
    """The notes the step of ``kind`` wrote (in any state: a failed or interrupted attempt's too),
    decoded through its row's notes type; None when it has no record. Errors as :func:`recorded`."""
    row = row_of(kind, path)
    entry = _entry(record, kind)
    return None if entry is None else _decode(row.notes, dict(entry.notes), kind, "notes", as_type)


def stop_of(record: JournalRecord | None, path: PathSteps) -> StopResult | None:
    """The old query's stop ``path`` recorded: its stop step's result, or the stop in a switchover's
    result; None until the step that holds it is done."""
    if path.switchover is not None and path.stop == path.switchover:
        switched = recorded(record, path.switchover, as_type=SwitchoverResult)
        return switched.stop_result if switched is not None else None
    return recorded(record, path.stop, as_type=StopResult)


def handover_of(record: JournalRecord | None, path: PathSteps) -> HandoverResult | None:
    """The handover ``path`` recorded: its handover step's result, or the handover the switchover
    re-derived; None until the step that holds it is done."""
    if path.switchover is not None and path.handover == path.switchover:
        switched = recorded(record, path.switchover, as_type=SwitchoverResult)
        return switched.handover_result if switched is not None else None
    return recorded(record, path.handover, as_type=HandoverResult)


def handle_of(record: JournalRecord | None, kind: str) -> LaunchHandle | None:
    """The launch handle the step of ``kind`` holds: its result when done (a switchover's: the new
    query's handle in it), else the handle it noted right after launching (an attempt that then
    failed, or was interrupted, while it waited for its job); None when it has neither."""
    if kind in _SWITCHOVERS:
        switched = recorded(record, kind, as_type=SwitchoverResult)
        if switched is not None:
            return switched.launch_handle
    else:
        done = recorded(record, kind, as_type=LaunchHandle)
        if done is not None:
            return done
    notes = noted(record, kind)
    return notes.handle if isinstance(notes, (LaunchNotes, SwitchoverNotes)) else None


__all__ = ["REPORT", "TABLE", "WAITS", "Decoder", "NotesDecoder", "StepRow", "Timeout", "handle_of", "handover_of",
           "noted", "recorded", "row_of", "rows", "stop_of"]
