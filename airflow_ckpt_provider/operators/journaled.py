"""Journal support for the upgrade's step operators (:mod:`airflow_ckpt_provider.storage.journal`).

A step operator given ``journal`` (the journal's URI, from the preflight's XCom) records itself
under its task id, as the step kind it is (:attr:`JournaledStep.step_kind`), and first asks the
planner what to do for that kind
(:func:`~airflow_ckpt_provider.upgrade.planner.next_action`, from the journal's record alone): a
step already done returns its recorded result without acting again; a step the record does not
call for (a rejected upgrade, another path, an earlier step not done, a rollback step the rollback
does not need) skips itself, saying why, and records nothing; otherwise it records ``started``,
acts, and records ``done`` with its result or ``failed`` with its error. An interrupted one is
told so (:class:`StepStart.interrupted`) and resumes safely. Without ``journal`` the operators
behave exactly as on their own.

An argument given as :class:`~airflow_ckpt_provider.upgrade.inputs.FromRecord` (a template field
only) is read from the journal's record (:func:`~airflow_ckpt_provider.upgrade.inputs.resolve`)
once the planner said ``run`` and the step's own templates rendered, so a recorded value is never
rendered as a template; each value read is logged with its locations' credentials masked. A step
without a journal, or a record without a required input, raises :class:`RecordInputMissing`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, ClassVar, Protocol, TypeVar

from airflow.sdk import Context

from airflow_ckpt_provider.checkpoint.errors import ProviderError, UnknownStepKind, shorten
from airflow_ckpt_provider.checkpoint.secrets import redact_location
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.faults import fault_point
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade import planner
from airflow_ckpt_provider.upgrade.inputs import INPUTS, FromRecord, resolve
from airflow_ckpt_provider.upgrade.notes import DecisionNotes
from airflow_ckpt_provider.upgrade.record import FAILED, ROLLBACK_PHASE, UPGRADE_PHASE, JournalRecord, StepStart

JOURNAL_FIELDS = ("journal", "journal_conn_id")
#: How long a deferring step waits in its worker before it defers (seconds, by default): a wait that
#: ends within it (a busy stream's next batch or stop acknowledgement, a warm standby's first batch)
#: ends in the task, without the trigger's round trip through the scheduler.
WAIT_IN_TASK_S = 10.0


def control_flow() -> tuple[type[BaseException], ...]:
    """Airflow's exceptions that steer a task instead of failing it (a deferral, a wait for a
    person's answer, skipping the tasks after it): a step that raises one has not failed."""
    from airflow.sdk.exceptions import AirflowSkipException, DownstreamTasksSkipped, TaskDeferred

    return (TaskDeferred, DownstreamTasksSkipped, AirflowSkipException)


def skip(reason: str) -> BaseException:
    """Airflow's exception that marks a task skipped, with ``reason`` (its log and the UI say why)."""
    from airflow.sdk.exceptions import AirflowSkipException

    return AirflowSkipException(reason)


T = TypeVar("T")
#: The longest value read from the record that the log shows (its middle is cut).
LOGGED_INPUT_CHARS = 400


class LookingTrigger(Protocol):
    """A trigger that can take its first look synchronously: ``check_now`` returns the event it
    would fire now (its JSON dict) when the wait is already over, else None."""

    def check_now(self) -> Mapping[str, Any] | None: ...


def step_kind_of(cls: type, step: str | None = None) -> str:
    """The step kind an operator of ``cls`` is: ``step`` when given, else the first of its class's
    ``STEP_KINDS``; :class:`UnknownStepKind` when ``step`` is not a kind of the step table or not one
    the class serves (a stop cannot be planned as a launch)."""
    kinds: tuple[str, ...] = getattr(cls, "STEP_KINDS", ())
    if step is None:
        if not kinds:
            raise UnknownStepKind(found=f"{cls.__name__}, which names no step kinds",
                                  expected="an operator class that names the step kinds it serves (STEP_KINDS)")
        return kinds[0]
    planner.refuse_unknown_kind(step)
    if step not in kinds:
        raise UnknownStepKind(found=f"step={step!r} for a {cls.__name__}",
                              expected=f"one of the kinds a {cls.__name__} serves: {', '.join(kinds)}")
    return step


def given(value: T | FromRecord) -> T:
    """An operator argument that may be :class:`FromRecord`, typed as the value it stands for: the
    journaled step replaces the marker before it runs (:meth:`JournaledStep.read_record_inputs`)."""
    return value  # type: ignore[return-value]


def journal_at(uri: str | None, conn_id: str | None = None) -> UpgradeJournal | None:
    """The journal at ``uri`` (a rendered template: empty, "None" or "null" mean none)."""
    text = (uri or "").strip()
    if text in ("", "None", "null"):
        return None
    fs, path = CheckpointStorageHook(storage_conn_id=conn_id or None).filesystem(text)
    return UpgradeJournal(fs, path, uri=text)


class JournaledStep:
    """Mixin: ``journal`` / ``journal_conn_id`` / ``journal_phase``, the step kind and the run helpers.

    A journaled operator is planned as the step KIND it is (:attr:`step_kind`, a kind of the step
    table: :data:`~airflow_ckpt_provider.upgrade.steps.KINDS`), never by its task id: its class
    names the kinds it can be (:attr:`STEP_KINDS`, the first is the one it is unless ``step``
    declares another), so the operator reused in another DAG under any task id is planned as that
    step, and a Reject skips it too. The journal keys its record by the task id and records the
    kind beside it (:meth:`~airflow_ckpt_provider.storage.journal.UpgradeJournal.begin`)."""

    #: The step kinds this operator class serves; the first is the kind it is unless ``step`` declares another.
    STEP_KINDS: ClassVar[tuple[str, ...]] = ()
    journal: str | None
    journal_conn_id: str | None
    journal_phase: str
    require_journal: bool
    step_kind: str
    task_id: str
    log: Any

    def __init__(self, *args: Any, require_journal: bool = False, wait_in_task_s: float | None = None,
                 step: str | None = None, **kwargs: Any) -> None:
        """``require_journal``: a step of an upgrade, never run without its journal (it skips itself
        when the journal is missing: the preflight that opens it failed or was refused).
        ``wait_in_task_s``: how long a deferring step looks in its worker before it defers
        (:meth:`defer_unless_over`; None: :data:`WAIT_IN_TASK_S`, 0: one look). ``step``: the kind
        this operator is, one of its class's :attr:`STEP_KINDS` (None: the first);
        :class:`~airflow_ckpt_provider.checkpoint.errors.UnknownStepKind` for any other."""
        if wait_in_task_s is not None and wait_in_task_s < 0:
            raise ValueError(f"wait_in_task_s must be >= 0, not {wait_in_task_s}")
        self.step_kind = step_kind_of(type(self), step)
        self.require_journal = require_journal
        self.wait_in_task_s = wait_in_task_s
        super().__init__(*args, **kwargs)

    def init_journal(self, journal: str | None, journal_conn_id: str | None, journal_phase: str) -> None:
        if journal_phase not in (UPGRADE_PHASE, ROLLBACK_PHASE):
            raise ValueError(f"journal_phase must be {UPGRADE_PHASE!r} or {ROLLBACK_PHASE!r}, not {journal_phase!r}")
        self.journal = journal
        self.journal_conn_id = journal_conn_id
        self.journal_phase = journal_phase

    def open_journal(self) -> UpgradeJournal | None:
        return journal_at(self.journal, self.journal_conn_id)

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:  # noqa: ANN401
        """Decide before rendering: a step the journal does not call for skips itself before its
        other templates are rendered and before its inputs (other steps' results, which a step not
        called for may not have) are read. Only ``journal`` and ``journal_conn_id`` are rendered
        for the decision; then the templates, then, for a step that runs, its :class:`FromRecord`
        arguments (:meth:`read_record_inputs`). The step decides again when it runs (:meth:`run_step`)."""
        journal = journal_at(*(str(self.render_template(value, context, jinja_env) or "")  # type: ignore[attr-defined]
                               for value in (self.journal, self.journal_conn_id)))
        record, decision = self.skip_unless_called_for(journal)
        super().render_template_fields(context, jinja_env)  # type: ignore[misc]
        if decision.act is planner.Act.RUN:
            self.read_record_inputs(record, journal)
        # the same attempt runs next: run_step takes this decision instead of reading the journal again
        self._decided = (journal.uri if journal is not None else None, record, decision)

    def skip_unless_called_for(
            self, journal: UpgradeJournal | None) -> tuple[JournalRecord | None, planner.NextAction]:
        """The journal's record (None without a journal) and the planner's decision
        (:func:`~airflow_ckpt_provider.upgrade.planner.next_action`: run or reuse); Airflow's skip
        when the step must not run: ``require_journal`` without a journal, or the planner's ``skip``."""
        if journal is None:
            if self.require_journal:
                reason = "no upgrade journal (the preflight that opens it did not run to its end): nothing was changed"
                self.log.info("step %s skipped: %s", self.task_id, reason)
                raise skip(f"{self.task_id}: {reason}")
            return None, planner.next_action(None, self.step_kind)
        record = journal.read()
        decision = planner.next_action(record, self.step_kind)
        if decision.act is planner.Act.SKIP:
            self.log.info("step %s skipped: %s", self.task_id, decision.reason)
            raise skip(f"{self.task_id}: {decision.reason}")
        return record, decision

    def read_record_inputs(self, record: JournalRecord | None, journal: UpgradeJournal | None) -> None:
        """Replace each template field holding :class:`FromRecord` with its value in ``record``
        (:func:`~airflow_ckpt_provider.upgrade.inputs.resolve`), logged with locations masked; call
        it once the step runs and its templates rendered. :class:`RecordInputMissing` without a
        record, or for a required input the record does not hold."""
        template_fields: tuple[str, ...] = tuple(getattr(self, "template_fields", ()))
        for name in template_fields:
            marker = getattr(self, name, None)
            if not isinstance(marker, FromRecord):
                continue
            value = resolve(record, marker.input, argument=name)
            setattr(self, name, value)
            shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
            self.log.info("%s: %s, read from the upgrade record %s: %s", name, INPUTS[marker.input].what,
                          redact_location(journal.uri) if journal is not None else "",
                          shorten(redact_location(shown), LOGGED_INPUT_CHARS) if shown != "" else "(empty)")

    def run_step(self, context: Context, action: Callable[[StepStart | None, UpgradeJournal | None], Any],
                 on_reuse: Callable[[Any], None] | None = None) -> Any:
        """``action(start, journal)`` journaled under the task id (see the module docstring). The
        decision taken when the templates rendered (same attempt, same journal) is not taken
        again; ``journal.begin`` reads the record once more as it records the start."""
        journal = self.open_journal()
        rendered = self.__dict__.pop("_decided", None)
        if rendered is not None and rendered[0] == (journal.uri if journal is not None else None):
            record, decision = rendered[1], rendered[2]
        else:
            record, decision = self.skip_unless_called_for(journal)
        if decision.act is planner.Act.RUN:
            self.read_record_inputs(record, journal)  # those not read yet (a step run without rendering)
        if journal is None:
            return action(None, None)
        start = journal.begin(self.task_id, run_id=str(context.get("run_id") or ""), phase=self.journal_phase,
                              kind=self.step_kind)
        if start.done:
            if on_reuse is not None:
                on_reuse(start.result)
            return start.result
        fault_point(f"{self.task_id}:recorded")  # between "started" recorded and the side effect
        return self.complete_step(lambda: action(start, journal), journal)

    def defer_unless_over(self, trigger: LookingTrigger, *, finish: Callable[[dict[str, Any]], T],
                          timeout: timedelta, poll_interval: float, kwargs: Mapping[str, Any] | None = None,
                          method_name: str = "execute_complete") -> T:
        """Wait for ``trigger``'s event: look now (its first poll, :meth:`LookingTrigger.check_now`)
        and again every ``poll_interval`` for ``wait_in_task_s``; when the wait is over,
        ``finish(event)`` in place and return its result; else defer on ``trigger``
        (``method_name`` gets the event, with ``kwargs``; ``timeout`` bounds the deferral).

        Every deferring step waits through here. A deferral whose trigger fires within seconds can
        race the executor's report of the deferring attempt, and Airflow then fails the task
        ("finished with state success, but the task instance's state attribute is queued"); a wait
        that ends within seconds (a busy stream's next batch or stop acknowledgement, a warm
        standby's first batch, a released job that committed before a retry) ends in the task
        instead, which also spares it a round trip through the scheduler."""
        budget = WAIT_IN_TASK_S if self.wait_in_task_s is None else self.wait_in_task_s
        looked_from = time.monotonic()
        while True:
            event = trigger.check_now()
            if event is not None:
                self.log.info("%s: the wait is over after %.1f s in the task (%s): finishing without deferring",
                              self.task_id, time.monotonic() - looked_from, event.get("reason", "done"))
                return finish(dict(event))
            left = budget - (time.monotonic() - looked_from)
            if left <= 0:
                break
            time.sleep(min(max(poll_interval, 0.05), left))
        self.defer(trigger=trigger, method_name=method_name,  # type: ignore[attr-defined]
                   kwargs=dict(kwargs) if kwargs is not None else None, timeout=timeout)
        raise AssertionError("BaseOperator.defer returned")  # pragma: no cover - defer always raises

    def complete_step(self, action: Callable[[], Any], journal: UpgradeJournal | None = None) -> Any:
        """Run ``action``; record its result as the step's (``done``) or its error (``failed``).
        A deferral (or another of Airflow's :func:`control_flow` exceptions) records nothing: the
        step is still running, or chose to skip."""
        journal = journal if journal is not None else self.open_journal()

        def finished(result: Any) -> None:  # noqa: ANN401 - the step's JSON result
            fault_point(f"{self.task_id}:done")
            if journal is not None:
                journal.finish(self.task_id, result)

        return recorded(action, failed=lambda exc: journal.fail(self.task_id, exc) if journal is not None else None,
                        finished=finished)


def recorded(action: Callable[[], T], *, failed: Callable[[Exception], None], finished: Callable[[T], None]) -> T:
    """Run ``action``: its error goes to ``failed`` (then re-raised), its result to ``finished``;
    Airflow's :func:`control_flow` exceptions go up untouched (the step is not over, or skips)."""
    try:
        result = action()
    except control_flow():
        raise
    except Exception as exc:
        failed(exc)
        raise
    finished(result)
    return result


def decided(journal: UpgradeJournal | None, name: str, context: Context, action: Callable[[], T],
            summary: Callable[[T], Any] = lambda _: None, said: Callable[[T], str] = lambda _: "") -> T:
    """Run the decision ``action`` (a step before any side effect: the compatibility check, the
    path) and record it in the journal's ``planning`` under ``name``: ``done`` with ``summary``
    of its result and what it ``said`` to the approver (Markdown, its
    :class:`~airflow_ckpt_provider.upgrade.notes.DecisionNotes` ``summary_md``), or ``failed`` with
    its error and why in one line (:func:`refusal_reason`, its notes' ``refusal``), then re-raised: the planner reads
    that failure as the upgrade's refusal (:func:`~airflow_ckpt_provider.upgrade.planner.refusal`).
    Without a journal it only runs."""
    run_id, started_at = str(context.get("run_id") or ""), utc_iso(timespec="milliseconds")
    if journal is None:
        return action()
    return recorded(
        action,
        failed=lambda exc: journal.record_planning(
            name, run_id=run_id, started_at=started_at, state=FAILED, error=exc,
            notes=DecisionNotes(refusal=refusal_reason(exc)).to_dict()),
        finished=lambda result: journal.record_planning(name, run_id=run_id, started_at=started_at,
                                                        result=summary(result),
                                                        notes=DecisionNotes(summary_md=said(result)).to_dict()))


def refusal_reason(error: BaseException) -> str:
    """Why a decision failed, in one line for people: a typed error's summary and what it found
    (:meth:`~airflow_ckpt_provider.checkpoint.errors.ProviderError.reason`), else the error's type
    and the first line of its message."""
    if isinstance(error, ProviderError):
        return error.reason()
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    return shorten(f"{type(error).__name__}: {first}" if first else type(error).__name__)


__all__ = ["JOURNAL_FIELDS", "WAIT_IN_TASK_S", "JournaledStep", "LookingTrigger", "control_flow", "decided", "given",
           "journal_at", "recorded", "refusal_reason", "step_kind_of"]
