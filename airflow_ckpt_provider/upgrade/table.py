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
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult, ProviderError
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.rollback import rollback_result
from airflow_ckpt_provider.checkpoint.state import StateExport
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.checkpoint.switchover import SwitchoverResult
from airflow_ckpt_provider.checkpoint.verify import VerifyResult
from airflow_ckpt_provider.upgrade import planner
from airflow_ckpt_provider.upgrade.inputs import RecordInput
from airflow_ckpt_provider.upgrade.record import ROLLBACK_PHASE, UPGRADE_PHASE, JournalRecord
from airflow_ckpt_provider.upgrade.steps import IN_PLACE_ROLLBACK, KINDS, PATHS, ROLLBACK, Path, all_steps

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
#: picks one of several), None for a result that is a plain JSON object.
Decoder = Callable[[Any], object]


@dataclass(frozen=True)
class StepRow:
    """One step of the upgrade (see the module docstring). ``paths``: the DAGs whose path has a
    step of this kind build this row (None: every DAG that has the kind; two rows of one kind differ
    by path, like the cold launch and the standby's release)."""

    kind: str
    operator: str
    factory: str
    result: Decoder | None = None
    inputs: Mapping[str, RecordInput] = field(default_factory=dict)
    retries: int = 0
    retry_delay_s: float = 5.0
    timeout: Timeout = Timeout(600.0)
    paths: frozenset[Path] | None = None

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

#: The rows, in the order of :func:`~airflow_ckpt_provider.upgrade.steps.all_steps` (each DAG takes its own).
TABLE: tuple[StepRow, ...] = (
    StepRow("preflight", f"{_OPS}.preflight:UpgradePreflightOperator", f"{_MAKE}:preflight",
            timeout=Timeout(1800.0)),
    StepRow("compatibility_check", f"{_OPS}.compat:CompatibilityCheckOperator", f"{_MAKE}:compatibility_check",
            timeout=Timeout(3600.0)),
    StepRow("choose_path", f"{_OPS}.compat:UpgradePathOperator", f"{_MAKE}:choose_path",
            inputs={"verdict": RecordInput.COMPATIBILITY_VERDICT}),
    # a person's answer: its own response timeout (12 hours) and the time to record it
    StepRow("approve", f"{_OPS}.approval:UpgradeApprovalOperator", f"{_MAKE}:approve", timeout=Timeout(13 * 3600.0)),
    StepRow("start_standby", _LAUNCH, f"{_MAKE}:start_standby", LaunchHandle.from_json,
            timeout=_LAUNCHING),
    StepRow("graceful_stop", _STOP, f"{_MAKE}:stop_old", StopResult.from_json, timeout=_STOPPING,
            **_RETRY),
    StepRow("extract_handover", _HANDOVER, f"{_MAKE}:handover", HandoverResult.from_json),
    StepRow("export_state", _EXPORT, f"{_MAKE}:export_state", StateExport.from_json, inputs=_EXPORT_IN,
            timeout=_COPYING, paths=frozenset({Path.STANDBY, Path.COLD})),
    # after a switchover: the verified copy of the state the standby seeded, and its check
    StepRow("export_state", _EXPORT, f"{_MAKE}:export_state", StateExport.from_json,
            inputs={**_EXPORT_IN, "seeded_state": RecordInput.SEEDED_STATE}, timeout=_COPYING,
            paths=frozenset({Path.SWITCHOVER})),
    StepRow("relaunch", _LAUNCH, f"{_MAKE}:relaunch", LaunchHandle.from_json,
            inputs={"handover": _HANDOVER_IN, "initial_state": RecordInput.STATE_EXPORT}, timeout=_LAUNCHING,
            paths=frozenset({Path.COLD}), **_RETRY),
    StepRow("relaunch", f"{_OPS}.launch:StandbyReleaseOperator", f"{_MAKE}:relaunch", LaunchHandle.from_json,
            inputs={"handover": _HANDOVER_IN, "initial_state": RecordInput.STATE_EXPORT,
                    "standby_handle": RecordInput.STANDBY_HANDLE},
            timeout=_LAUNCHING, paths=frozenset({Path.STANDBY}), **_RETRY),
    StepRow("verify", _VERIFY, f"{_MAKE}:verify", VerifyResult.from_json, inputs={"handover": _HANDOVER_IN},
            timeout=_VERIFYING, **_RETRY),
    StepRow("archive", _ARCHIVE, f"{_MAKE}:archive", inputs={"handover": _HANDOVER_IN, "upgrade_id": _ID},
            timeout=_COPYING),
    StepRow("switchover", f"{_OPS}.switchover:StandbySwitchoverOperator", f"{_MAKE}:switchover",
            SwitchoverResult.from_json, inputs={"standby_handle": RecordInput.STANDBY_HANDLE},
            timeout=Timeout(600.0, ("stop_timeout", "first_commit_timeout")), **_RETRY),
    # the restart in place: the migration's factories, on the old checkpoint
    StepRow("in_place_stop", _STOP, f"{_MAKE}:stop_old", StopResult.from_json, timeout=_STOPPING,
            **_RETRY),
    StepRow("in_place_handover", _HANDOVER, f"{_MAKE}:handover", HandoverResult.from_json),
    StepRow("in_place_archive", _ARCHIVE, f"{_MAKE}:archive",
            inputs={"handover": RecordInput.IN_PLACE_HANDOVER, "upgrade_id": _ID}, timeout=_COPYING),
    StepRow("in_place_restart", _LAUNCH, f"{_MAKE}:restart_in_place", LaunchHandle.from_json,
            timeout=_LAUNCHING, **_RETRY),
    StepRow("in_place_verify", _VERIFY, f"{_MAKE}:verify", VerifyResult.from_json,
            inputs={"handover": RecordInput.IN_PLACE_HANDOVER}, timeout=_VERIFYING, **_RETRY),
    # the rollbacks: stop the new version, what it processed, the old checkpoint back, the old version again
    StepRow("rollback_stop_new", _STOP, f"{_MAKE}:stop_new", StopResult.from_json,
            inputs={"launch_handle": RecordInput.NEW_HANDLE}, timeout=Timeout(660.0), **_RETRY),
    StepRow("rollback_handover", f"{_OPS}.handover:RollbackHandoverOperator", f"{_MAKE}:rollback_handover",
            rollback_result, inputs={"handover": _HANDOVER_IN,
                                     "rollback_checkpoint_uri": RecordInput.ROLLBACK_CHECKPOINT}),
    StepRow("rollback_restore", f"{_OPS}.archive:CheckpointRestoreOperator", f"{_MAKE}:restore",
            inputs={"archive_uri": RecordInput.ARCHIVE_LOCATION},
            timeout=_COPYING),
    StepRow("rollback_restart_old", _LAUNCH, f"{_MAKE}:restart_old", LaunchHandle.from_json,
            timeout=_LAUNCHING),
    StepRow("rollback_restart_forward", _LAUNCH, f"{_MAKE}:restart_forward", LaunchHandle.from_json,
            inputs={"checkpoint_uri": RecordInput.ROLLBACK_CHECKPOINT,
                    "starting_offsets": RecordInput.ROLLBACK_STARTING_OFFSETS}, timeout=_LAUNCHING),
    StepRow("in_place_rollback_stop", _STOP, f"{_MAKE}:stop_new", StopResult.from_json,
            inputs={"launch_handle": RecordInput.IN_PLACE_HANDLE}, timeout=Timeout(660.0), **_RETRY),
    StepRow("in_place_rollback_restart", _LAUNCH, f"{_MAKE}:restart_old", LaunchHandle.from_json,
            timeout=_LAUNCHING),
    StepRow(REPORT, f"{_OPS}.report:UpgradeReportOperator", f"{_MAKE}:report", timeout=Timeout(1800.0)),
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
    """The row of ``kind`` (on ``path``, where rows of one kind differ by path)."""
    planner.refuse_unknown_kind(kind)
    return next(row for row in TABLE if row.kind == kind and (row.paths is None or path in row.paths))


def recorded(record: JournalRecord | None, kind: str, path: Path = Path.COLD) -> object:
    """The result the step of ``kind`` recorded when done, decoded through its row's type (its JSON
    as recorded when the row names none); None when it is not done.
    :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult` when the recorded result is
    not that type's (a hand-edited journal, another release's shape)."""
    value = planner.result_of(record, kind)
    row = row_of(kind, path)
    if value is None or row.result is None:
        return value
    try:
        return row.result(value)
    except (ProviderError, ValueError, TypeError, KeyError) as exc:
        reads = getattr(row.result, "__qualname__", repr(row.result))
        raise InvalidStepResult(found=f"the result {kind} recorded ({type(exc).__name__}: {exc})",
                                expected=f"the result its row reads ({reads})") from None


__all__ = ["REPORT", "TABLE", "WAITS", "Decoder", "StepRow", "Timeout", "recorded", "row_of", "rows"]
