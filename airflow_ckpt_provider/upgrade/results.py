"""The typed results of the upgrade's steps, as they travel (XCom) and as the journal keeps them,
each decoded by one strict codec (:mod:`airflow_ckpt_provider.records.codec`): unknown keys and
other formats are refused with :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult`,
never guessed at. Pure: no Airflow, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.launch import RelaunchMode
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.records.codec import Codec, Field, array_of, one_of
from airflow_ckpt_provider.upgrade.steps import Path


def _strings(value: Any) -> tuple[str, ...]:  # noqa: ANN401 - a checked JSON array
    if not all(isinstance(item, str) for item in value):
        raise TypeError("an array of strings expected")
    return tuple(value)


_TEXT = Field((str,), required=False, default="")
_OBJECT_OR_NULL = Field((dict,), required=False, default=None, nullable=True)

_PREFLIGHT = Codec("PreflightResult", InvalidStepResult, {
    "summary_md": Field((str,)),
    "handover": Field((dict,)),
    "starting_offsets": _TEXT,
    "reconciliation": Field((dict,), required=False, default={}),
    "old_query_running": Field((bool,), required=False, default=False),
    "upgrade_id": _TEXT,
    "journal": _TEXT,
    "resuming": Field((bool,), required=False, default=False),
    "steps_done": Field((list,), required=False, default=(), decode=_strings),
    "already_done": Field((bool,), required=False, default=False),
    "first_report": _TEXT,
    "done_by_run": _TEXT,
    "done_at": _TEXT,
    "start_plan": _OBJECT_OR_NULL,
    "sink": _OBJECT_OR_NULL,
    "state_export": _TEXT,
    "rollback_checkpoint": _TEXT,
})


@dataclass(frozen=True)
class PreflightResult:
    """What the preflight found and planned, for the approval and the steps after it.

    ``summary_md``: the approval's Markdown; ``handover``: the handover as of the preflight (a
    Handover dict; the upgrade takes it again after the stop) and ``starting_offsets`` its JSON;
    ``reconciliation``: the live partitions against it; ``old_query_running``: a live heartbeat;
    ``upgrade_id`` and ``journal`` ("" without a journal); ``resuming``: the journal shows an
    upgrade under way (``steps_done`` its finished steps), whose preflight checks were skipped;
    ``already_done``: an earlier run finished this upgrade (``first_report``, ``done_by_run``,
    ``done_at`` say where and when); ``start_plan``: a chosen start other than resume (a StartPlan
    dict) or None; ``sink``: what the sink declaration found (a SinkFinding dict) or None;
    ``state_export``: where the state export goes; ``rollback_checkpoint``: a forward rollback's
    fresh checkpoint."""

    summary_md: str
    handover: Mapping[str, Any]
    starting_offsets: str = ""
    reconciliation: Mapping[str, Any] = field(default_factory=dict)
    old_query_running: bool = False
    upgrade_id: str = ""
    journal: str = ""
    resuming: bool = False
    steps_done: tuple[str, ...] = ()
    already_done: bool = False
    first_report: str = ""
    done_by_run: str = ""
    done_at: str = ""
    start_plan: Mapping[str, Any] | None = None
    sink: Mapping[str, Any] | None = None
    state_export: str = ""
    rollback_checkpoint: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the step returns (its XCom), with the codec's format number."""
        values = asdict(self)
        values["steps_done"] = list(self.steps_done)
        return _PREFLIGHT.encode(values)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> PreflightResult:
        """Decode (strict: :class:`InvalidStepResult` for anything else)."""
        return cls(**_PREFLIGHT.decode(data))



# -- what the decisions before any side effect record in the journal's planning ---------------------
# Written without a format number (as the releases before wrote them): each key only when the step
# recorded it, so a planning entry reads and writes back unchanged.

_PLANNING = Codec("the preflight's planning", InvalidStepResult, {
    "resuming": Field((bool,), required=False),
    "old_query_running": Field((bool,), required=False),
    "relaunch_mode": Field((str,), required=False, decode=one_of("", *RelaunchMode)),
    # "" as an earlier resumed preflight copied an absent mode: none recorded (restore)
    "rollback_mode": Field((str,), required=False,
                           decode=one_of("", *RollbackMode, decode=lambda mode: RollbackMode(mode) if mode else None)),
    "state_export": Field((str,), required=False),
    "rollback_checkpoint": Field((str,), required=False),
    "accepted_undeclared_sink": Field((bool,), required=False),
}, version=None)


@dataclass(frozen=True)
class PreflightPlanning:
    """What the preflight records in the journal's planning, which the steps' planner and inputs
    read: ``resuming`` (it took up an upgrade under way), ``old_query_running`` (a live heartbeat;
    a fresh upgrade's), the ``relaunch_mode`` (standby, cold, switchover; "" outside the reference
    upgrade) and ``rollback_mode`` it checked, where the state export goes (``state_export``) and a
    forward rollback's fresh checkpoint (``rollback_checkpoint``), and ``accepted_undeclared_sink``
    when the trigger accepted a sink that is not declared. Each None when not recorded."""

    resuming: bool | None = None
    old_query_running: bool | None = None
    relaunch_mode: str | None = None
    rollback_mode: RollbackMode | None = None
    state_export: str | None = None
    rollback_checkpoint: str | None = None
    accepted_undeclared_sink: bool | None = None

    def __post_init__(self) -> None:
        if self.relaunch_mode not in (None, "", *RelaunchMode):
            raise ValueError(f"relaunch mode {self.relaunch_mode!r} is not one of {', '.join(RelaunchMode)}")
        if self.rollback_mode is not None:
            object.__setattr__(self, "rollback_mode", RollbackMode(self.rollback_mode))

    @property
    def path(self) -> Path | None:
        """The path its relaunch mode takes (standby, cold or switchover); None without one."""
        return Path(self.relaunch_mode) if self.relaunch_mode else None

    @property
    def rollback(self) -> RollbackMode:
        """The rollback mode it checked (``restore`` when it recorded none)."""
        return self.rollback_mode if self.rollback_mode is not None else RollbackMode.RESTORE

    def to_dict(self) -> dict[str, Any]:
        """The planning's JSON object: the keys recorded, as the preflight writes them."""
        values = {name: value for name, value in asdict(self).items() if value is not None}
        if self.rollback_mode is not None:
            values["rollback_mode"] = self.rollback_mode.value
        return _PLANNING.encode(values)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> PreflightPlanning:
        """Decode (strict: :class:`InvalidStepResult` for an unknown key, a value of another type, a
        relaunch or rollback mode this release does not know)."""
        return cls(**_PLANNING.decode(data))


_APPROVAL = Codec("the approval's answer", InvalidStepResult, {
    "chosen": Field((str,)),
    "responded_by": Field((str, dict), required=False, nullable=True, expected="the user who answered (or null)"),
    "responded_at": Field((str,), required=False, default=""),
}, version=None)


@dataclass(frozen=True)
class ApprovalAnswer:
    """The approval's recorded answer: ``chosen`` ("Approve", "Reject"), by whom (``responded_by``:
    Airflow's user, an object or a name; None when not known) and when (``responded_at``)."""

    chosen: str
    responded_by: str | Mapping[str, Any] | None = None
    responded_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The planning's JSON object, as the approval writes it (all three keys)."""
        by = dict(self.responded_by) if isinstance(self.responded_by, Mapping) else self.responded_by
        return _APPROVAL.encode({"chosen": self.chosen, "responded_by": by, "responded_at": self.responded_at})

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> ApprovalAnswer:
        """Decode (strict: :class:`InvalidStepResult` for anything else)."""
        return cls(**_APPROVAL.decode(data))


# -- the archive and the restore ----------------------------------------------------------------------


def _handover(value: Any) -> Mapping[str, Any]:  # noqa: ANN401 - a checked JSON object
    Handover.from_json(value)
    return dict(value)


_ARCHIVE_FIELDS = {
    "location": Field((str,)),
    "stream_name": _TEXT,
    "upgrade_id": _TEXT,
    "source_uri": _TEXT,
    "query_id": Field((str,), required=False, nullable=True),
    "last_committed_batch": Field((int,), required=False, nullable=True),
    "file_count": Field((int,), required=False, default=0),
    "total_bytes": Field((int,), required=False, default=0),
    "handover": Field((dict,), required=False, nullable=True, decode=_handover, expected="a Handover object or null"),
    "created_by": _TEXT,
    "reason": _TEXT,
    "dag_run_id": _TEXT,
    "completed_at": _TEXT,
    "removed_archives": Field((list,), required=False, nullable=True, decode=array_of(str)),
    "stale_incomplete_archives": Field((list,), required=False, nullable=True, decode=array_of(str)),
}
_ARCHIVE = Codec("ArchiveResult", InvalidStepResult, _ARCHIVE_FIELDS, version=None)


@dataclass(frozen=True)
class ArchiveResult:
    """The archive step's result: where the archive is (``location``) and what its manifest says
    (:meth:`~airflow_ckpt_provider.checkpoint.manifest.ArchiveManifest.summary`: the stream, the
    upgrade, the source checkpoint, its query and last committed batch, how many files and bytes,
    the handover it was taken for, who made it, why and when); with pruning, the archives it
    removed (``removed_archives``) and the stale incomplete ones it found
    (``stale_incomplete_archives``), None without."""

    location: str
    stream_name: str = ""
    upgrade_id: str = ""
    source_uri: str = ""
    query_id: str | None = None
    last_committed_batch: int | None = None
    file_count: int = 0
    total_bytes: int = 0
    handover: Mapping[str, Any] | None = None
    created_by: str = ""
    reason: str = ""
    dag_run_id: str = ""
    completed_at: str = ""
    removed_archives: tuple[str, ...] | None = None
    stale_incomplete_archives: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the step returns: the manifest's summary, the pruning's lists when it pruned."""
        values = asdict(self)
        for name in ("removed_archives", "stale_incomplete_archives"):
            value = getattr(self, name)
            if value is None:
                del values[name]
            else:
                values[name] = list(value)
        return _ARCHIVE.encode(values)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> ArchiveResult:
        """Decode (strict: :class:`InvalidStepResult` for anything else)."""
        return cls(**_ARCHIVE.decode(data))


_RESTORE = Codec("RestoreResult", InvalidStepResult, {
    **{name: Field(spec.types, required=False, default=spec.default, nullable=spec.nullable, decode=spec.decode,
                   expected=spec.expected) for name, spec in _ARCHIVE_FIELDS.items()},
    "restored_to": Field((str,), nullable=True),
    "target_in_place": Field((bool,), required=False, default=False),
}, version=None)


@dataclass(frozen=True)
class RestoreResult:
    """The restore step's result: ``restored_to``, where the archive (``archive``: its summary) was
    restored; or ``target_in_place``, the checkpoint was still there and nothing was restored
    (``restored_to`` None)."""

    restored_to: str | None
    archive: ArchiveResult | None = None
    target_in_place: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON object the step returns: the archive's summary plus ``restored_to``, or the target in place."""
        if self.archive is None:
            return _RESTORE.encode({"restored_to": self.restored_to, "target_in_place": self.target_in_place})
        return _RESTORE.encode({**self.archive.to_dict(), "restored_to": self.restored_to})

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> RestoreResult:
        """Decode (strict: :class:`InvalidStepResult` for anything else: a summary without its
        ``location``, a value of another type, an unknown key)."""
        raw = _RESTORE.parse(data)
        values = _RESTORE.decode(raw)
        if "location" not in raw:
            if any(name in raw for name in _ARCHIVE_FIELDS):
                raise InvalidStepResult(found="RestoreResult with an archive summary without 'location'",
                                        expected="the archive's summary with its location, or the target in place")
            return cls(values["restored_to"], target_in_place=values["target_in_place"])
        summary = {key: value for key, value in raw.items() if key in _ARCHIVE_FIELDS}
        return cls(values["restored_to"], ArchiveResult.from_json(summary), values["target_in_place"])


__all__ = ["ApprovalAnswer", "ArchiveResult", "PreflightPlanning", "PreflightResult", "RestoreResult"]
