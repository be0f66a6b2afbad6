"""The upgrade's steps by kind, per path: what the reference DAG runs, what the journal records
each step as, and what the planner (:mod:`airflow_ckpt_provider.upgrade.planner`) decides over.
A step's kind is its name here and its task id in the reference DAG; the journal keys a step by its
task id and records its kind beside it, so an operator reused under another task id is read and
planned as the step it is."""

from __future__ import annotations

from dataclasses import dataclass

from airflow_ckpt_provider.checkpoint.errors import UnknownStepKind
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.enums import StrEnum

#: The approval's name in the journal's ``planning`` and the answer that stops the upgrade.
APPROVAL = "approve"
REJECT = "Reject"
APPROVE = "Approve"


@dataclass(frozen=True)
class PathSteps:
    """The steps of one path through an upgrade, by their names in the journal: ``steps`` in the
    order they run (all done: upgraded); the graceful ``stop`` of the old version, the
    ``handover``, the state export (``state_export``, None: the path exports none), the
    ``archive``, the ``launch`` that makes the new version run, and the ``verify`` that ends what
    a failure rolls back; the steps that start the new version (``new``: a standby, a release, a
    launch); the rollback's ``rollback_handover`` (what the new version processed), its
    ``restore`` of the old checkpoint and its ``restarts`` of the old version (one done is a
    rollback)."""

    steps: tuple[str, ...]
    stop: str
    handover: str
    archive: str
    launch: str
    verify: str
    state_export: str | None = None
    new: tuple[str, ...] = ()
    rollback_handover: str | None = None
    restore: tuple[str, ...] = ()
    restarts: tuple[str, ...] = ()
    switchover: str | None = None

    def __post_init__(self) -> None:
        for name in ("steps", "new", "restore", "restarts"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        named = [self.stop, self.handover, self.archive, self.launch, self.verify, *self.new]
        missing = [s for s in (*named, self.state_export, self.switchover) if s is not None and s not in self.steps]
        if missing:
            raise ValueError(f"PathSteps names steps outside its path: {', '.join(missing)}")
        if self.switchover is not None and {self.stop, self.handover, self.launch} != {self.switchover}:
            raise ValueError(f"the switchover step {self.switchover} is the path's stop, handover and launch")


#: The decisions before any side effect, in the order they run (the journal's ``planning``): the
#: preflight (it records the relaunch and rollback modes), the compatibility check, the path, the approval.
PREFLIGHT, COMPATIBILITY_CHECK, PATH_CHOICE = "preflight", "compatibility_check", "choose_path"
PLANNING = (PREFLIGHT, COMPATIBILITY_CHECK, PATH_CHOICE, APPROVAL)
#: The decisions whose failure refuses the upgrade: before any side effect, so it ends ``refused``
#: (the journal closed, the stream unlocked), never left open. The preflight records its refusal
#: in a journal it opens and closes for it.
REFUSING = (PREFLIGHT, COMPATIBILITY_CHECK, PATH_CHOICE)


class Path(StrEnum):
    """The paths through an upgrade: the migration with a standby, a cold launch or a switchover
    inside the drivers, or the restart in place."""

    STANDBY = "standby"
    COLD = "cold"
    SWITCHOVER = "switchover"
    IN_PLACE = "in_place"


#: The rollback of the migration: stop the new version, what it processed, the old checkpoint
#: restored, and the old version restarted on it or (forward) on a fresh one.
ROLLBACK = ("rollback_stop_new", "rollback_handover", "rollback_restore", "rollback_restart_old",
            "rollback_restart_forward")
#: The rollback of the in-place restart: stop the new version, restart the old one on the same checkpoint.
IN_PLACE_ROLLBACK = ("in_place_rollback_stop", "in_place_rollback_restart")
#: The order the rollback's steps run in, per path (the migration's, keyed by cold, serves both
#: migrations) and rollback mode: each runs only after the one before it is done.
ROLLBACK_SEQUENCE: dict[Path, dict[RollbackMode, tuple[str, ...]]] = {
    Path.COLD: {RollbackMode.RESTORE: ("rollback_stop_new", "rollback_handover", "rollback_restore",
                                       "rollback_restart_old"),
                RollbackMode.FORWARD: ("rollback_stop_new", "rollback_handover", "rollback_restart_forward")},
    Path.IN_PLACE: {mode: IN_PLACE_ROLLBACK for mode in RollbackMode},
}


#: The step of the switchover path that stops the old query, takes the handover and starts the new one.
SWITCHOVER = "switchover"


def _migration(steps: tuple[str, ...], new: tuple[str, ...], *, switchover: bool = False) -> PathSteps:
    """A path to a new checkpoint: its own order of ``steps``, the steps that start the new version;
    with ``switchover``, one step is the stop, the handover and the launch (its standby seeds the
    state itself; the state export after it is the verified copy and the check of that seed)."""
    one = SWITCHOVER if switchover else None
    return PathSteps(steps=steps, stop=one or "graceful_stop", handover=one or "extract_handover",
                     state_export="export_state", archive="archive",
                     launch=one or "relaunch", verify="verify", new=new, switchover=one,
                     rollback_handover="rollback_handover", restore=("rollback_restore",),
                     restarts=("rollback_restart_old", "rollback_restart_forward"))


PATHS: dict[Path, PathSteps] = {
    Path.STANDBY: _migration(("start_standby", "graceful_stop", "extract_handover", "export_state", "relaunch",
                              "verify", "archive"), new=("start_standby", "relaunch")),
    Path.COLD: _migration(("graceful_stop", "extract_handover", "export_state", "archive", "relaunch", "verify"),
                          new=("relaunch",)),
    Path.SWITCHOVER: _migration(("start_standby", SWITCHOVER, "export_state", "verify", "archive"),
                                new=("start_standby", SWITCHOVER), switchover=True),
    Path.IN_PLACE: PathSteps(
        steps=("in_place_stop", "in_place_handover", "in_place_archive", "in_place_restart", "in_place_verify"),
        stop="in_place_stop", handover="in_place_handover", archive="in_place_archive", launch="in_place_restart",
        verify="in_place_verify", new=("in_place_restart",), restarts=("in_place_rollback_restart",)),
}


#: Every step kind of the upgrade, in order: the decisions, every path's steps, the rollbacks. A step's
#: kind is its name in this table; the planner plans a journaled operator by the kind it is
#: (:attr:`~airflow_ckpt_provider.operators.journaled.JournaledStep.step_kind`), never by its task id.
KINDS: tuple[str, ...] = tuple(dict.fromkeys(
    (*PLANNING, *(step for path in Path for step in PATHS[path].steps), *ROLLBACK, *IN_PLACE_ROLLBACK)))


def refuse_unknown_kind(step: str) -> None:
    """:class:`~airflow_ckpt_provider.checkpoint.errors.UnknownStepKind` unless ``step`` is a kind of
    the step table (:data:`KINDS`)."""
    if step not in KINDS:
        raise UnknownStepKind(found=f"step kind {step!r}",
                              expected=f"one of the step table's kinds: {', '.join(KINDS)}")


#: What a step takes from the upgrade record instead of from another step's XCom: declared here, below
#: the step table that names each row's inputs; read by :mod:`~airflow_ckpt_provider.upgrade.inputs`.
class RecordInput(StrEnum):
    """What a step can take from the upgrade record (see
    :data:`~airflow_ckpt_provider.upgrade.inputs.INPUTS` for where each is read)."""

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
    """An operator argument read from the upgrade record when the step runs (see
    :mod:`~airflow_ckpt_provider.upgrade.inputs`). Only for template fields of a journaled step."""

    input: RecordInput

    def __post_init__(self) -> None:
        object.__setattr__(self, "input", RecordInput(self.input))

    def __str__(self) -> str:  # what Airflow shows for the field before the step runs
        return f"FromRecord({self.input.value})"


def all_steps(path: Path) -> tuple[str, ...]:
    """Every step a DAG of ``path`` (standby, cold or switchover, with the in-place path beside it) may run,
    in order: the decisions, the path's steps, the in-place steps, the rollbacks."""
    main = PATHS[path].steps
    in_place = PATHS[Path.IN_PLACE].steps if path is not Path.IN_PLACE else ()
    return (*PLANNING, *main, *in_place, *ROLLBACK, *IN_PLACE_ROLLBACK)


__all__ = ["APPROVAL", "APPROVE", "COMPATIBILITY_CHECK", "IN_PLACE_ROLLBACK", "KINDS",
           "PATHS", "PATH_CHOICE", "PLANNING",
           "PREFLIGHT", "REFUSING", "REJECT", "ROLLBACK", "ROLLBACK_SEQUENCE", "SWITCHOVER", "FromRecord", "Path",
           "PathSteps", "RecordInput", "all_steps", "refuse_unknown_kind"]
