"""The notes a step writes in its journal record mid-way (``JournalStep.notes``), one typed value per
kind of step, each decoded by a strict codec (:mod:`airflow_ckpt_provider.records.codec`): a key no
step of that kind writes, or a value of another type, is refused with
:class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult`, never guessed at. Pure: no
Airflow, no I/O.

The step table (:mod:`airflow_ckpt_provider.upgrade.table`) names each row's notes type; the planner,
the report and the record inputs read a step's notes through it
(:func:`~airflow_ckpt_provider.upgrade.table.noted`). The notes are written as the JSON objects
they always were (no format number): a step adds keys to them as it goes
(:meth:`~airflow_ckpt_provider.storage.journal.UpgradeJournal.note`), so every field is optional
and :meth:`to_dict` writes only the keys that were set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.records.codec import Codec, Field

#: The note in which a decision records what it says to the approver (Markdown).
SUMMARY_NOTE = "summary_md"
#: The note in which a decision that failed records why, in one line for people (a typed error's
#: summary and what it found): a refusal's reason.
REFUSAL_NOTE = "refusal"
#: The note in which a switchover step records, when it fails, whether the old query acknowledged
#: its stop request (it then stopped: the rollback restarts it).
OLD_STOPPED_NOTE = "old_stopped"
#: The note in which a switchover step records the provider's own release of the standby after the
#: standby refused (the release, the stop, the handover, the refusal and their times).
FALLBACK_NOTE = "fallback"
#: The note in which a launch (a standby's, a release's, a switchover's) records the job's LaunchHandle.
HANDLE_NOTE = "handle"

N = TypeVar("N", bound="_Notes")


def _handle(value: Any) -> LaunchHandle:  # noqa: ANN401 - a checked JSON object
    return LaunchHandle.from_json(value)


_TEXT = Field((str,), required=False)
_FLAG = Field((bool,), required=False)
_HANDLE = Field((dict,), required=False, decode=_handle, expected="a LaunchHandle object")


@dataclass(frozen=True)
class _Notes:
    """A step's notes: each field None when the step did not note it."""

    CODEC: ClassVar[Codec]

    @classmethod
    def codec(cls) -> Codec:
        """The codec of these notes (written without a format number, as every release wrote them)."""
        return cls.CODEC

    @classmethod
    def from_json(cls: type[N], data: str | bytes | Mapping[str, Any]) -> N:
        """Decode (strict: :class:`InvalidStepResult` for a key the step does not write or a value of another type)."""
        return cls(**cls.codec().decode(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of the keys noted (a handle as its ``to_dict``)."""
        values: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if value is not None:
                values[item.name] = value.to_dict() if isinstance(value, LaunchHandle) else \
                    dict(value) if isinstance(value, Mapping) else value
        return self.codec().encode(values)


@dataclass(frozen=True)
class NoNotes(_Notes):
    """The notes of a step that writes none: an empty object."""

    CODEC: ClassVar[Codec] = Codec("notes of a step that writes none", InvalidStepResult, {}, version=None)


@dataclass(frozen=True)
class DecisionNotes(_Notes):
    """The notes of a decision before any side effect (the preflight, the compatibility check, the
    path choice): ``summary_md``, what it says to the approver (Markdown), when it finished;
    ``refusal``, why it refused the upgrade in one line for people, when it failed."""

    CODEC: ClassVar[Codec] = Codec("decision notes", InvalidStepResult, {
        SUMMARY_NOTE: _TEXT, REFUSAL_NOTE: _TEXT}, version=None)

    summary_md: str | None = None
    refusal: str | None = None


@dataclass(frozen=True)
class LaunchNotes(_Notes):
    """The notes of a launch (a standby's start, a cold launch, a restart, a standby's release):
    ``launching`` with the ``min_batch`` it waits for and its ``launch_id``, noted before the job
    starts; the job's ``handle`` once it runs (or the standby's, once released); ``released``, the
    release id of the standby it released; ``standby_lost``, why it launched cold instead."""

    CODEC: ClassVar[Codec] = Codec("launch notes", InvalidStepResult, {
        "launching": _FLAG, "min_batch": Field((int,), required=False), "launch_id": _TEXT, HANDLE_NOTE: _HANDLE,
        "released": _TEXT, "standby_lost": _TEXT}, version=None)

    launching: bool | None = None
    min_batch: int | None = None
    launch_id: str | None = None
    handle: LaunchHandle | None = None
    released: str | None = None
    standby_lost: str | None = None


def _fallback(value: Any) -> Mapping[str, Any]:  # noqa: ANN401 - a checked JSON object
    missing = sorted({"release", "stop", "handover", "refusal"} - set(value))
    if missing:
        raise ValueError(f"a fallback release without {', '.join(missing)}")
    return dict(value)


@dataclass(frozen=True)
class SwitchoverNotes(_Notes):
    """The notes of a switchover: ``released`` (its release id), ``stop_request`` (the old query's
    stop request id) and the standby's ``handle``, noted before it writes them; ``fallback``, the
    provider's own release after the standby refused; ``old_stopped``, when it failed, whether the
    old query acknowledged its stop (it then stopped: the rollback restarts it)."""

    CODEC: ClassVar[Codec] = Codec("switchover notes", InvalidStepResult, {
        "released": _TEXT, "stop_request": _TEXT, HANDLE_NOTE: _HANDLE, OLD_STOPPED_NOTE: _FLAG,
        FALLBACK_NOTE: Field((dict,), required=False, decode=_fallback,
                             expected="the provider's release (release, stop, handover, refusal and their times)")},
        version=None)

    released: str | None = None
    stop_request: str | None = None
    handle: LaunchHandle | None = None
    old_stopped: bool | None = None
    fallback: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class StateExportNotes(_Notes):
    """The notes of a state export: the ``job`` that exports (its LaunchHandle), noted once it started."""

    CODEC: ClassVar[Codec] = Codec("state export notes", InvalidStepResult, {"job": _HANDLE}, version=None)

    job: LaunchHandle | None = None


@dataclass(frozen=True)
class RestoreNotes(_Notes):
    """The notes of a restore: ``restoring`` from the ``archive``, noted before its first file."""

    CODEC: ClassVar[Codec] = Codec("restore notes", InvalidStepResult, {"restoring": _FLAG, "archive": _TEXT},
                                   version=None)

    restoring: bool | None = None
    archive: str | None = None


#: A row's notes type: the ``from_json`` of one of the types above.
StepNotes = NoNotes | DecisionNotes | LaunchNotes | SwitchoverNotes | StateExportNotes | RestoreNotes


__all__ = ["FALLBACK_NOTE", "HANDLE_NOTE", "OLD_STOPPED_NOTE", "REFUSAL_NOTE", "SUMMARY_NOTE", "DecisionNotes",
           "LaunchNotes", "NoNotes", "RestoreNotes", "StateExportNotes", "StepNotes", "SwitchoverNotes"]
