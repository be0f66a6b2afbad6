"""The typed results of the upgrade's steps, as they travel (XCom) and as the journal keeps them,
each decoded by one strict codec (:mod:`airflow_ckpt_provider.records.codec`): unknown keys and
other formats are refused with :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidStepResult`,
never guessed at. Pure: no Airflow, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult
from airflow_ckpt_provider.records.codec import Codec, Field


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


__all__ = ["PreflightResult"]
