"""Step timing for the upgrade report, recorded by the steps themselves through XCom.

Task code cannot read other task instances from the metadata database in Airflow 3, so each
step records its own start, end and outcome: pass :data:`STEP_CALLBACKS` as ``default_args``
(or per task). ``pre_execute`` runs again when a deferred task resumes; the first start is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from airflow_ckpt_provider.checkpoint.outcome import TaskState
from airflow_ckpt_provider.checkpoint.report import StepTiming
from airflow_ckpt_provider.clock import utc_iso

STARTED = "ckpt_step_started"
ENDED = "ckpt_step_ended"


def step_started(context: Any) -> None:
    ti = context["ti"]
    if ti.xcom_pull(task_ids=ti.task_id, key=STARTED) is None:
        ti.xcom_push(key=STARTED, value=utc_iso(timespec="milliseconds"))


def step_succeeded(context: Any, result: Any = None) -> None:
    context["ti"].xcom_push(key=ENDED, value={"state": TaskState.SUCCESS.value, "at": utc_iso(timespec="milliseconds")})


def _shorten(text: str, head: int = 400, tail: int = 1600) -> str:
    """Keep the start (what failed) and the end (a log tail's last lines) of a long message."""
    return text if len(text) <= head + tail else f"{text[:head]} […] {text[-tail:]}"


def step_failed(context: Any) -> None:
    error = context.get("exception")
    context["ti"].xcom_push(
        key=ENDED,
        value={"state": TaskState.FAILED.value, "at": utc_iso(timespec="milliseconds"),
               "error": _shorten(str(error)) if error else ""},
    )


STEP_CALLBACKS: dict[str, Any] = {
    "pre_execute": step_started,
    "post_execute": step_succeeded,
    "on_failure_callback": step_failed,
}


def task_states(ti: Any, task_ids: Iterable[str]) -> dict[str, str]:
    """The states Airflow holds for ``task_ids`` in this DAG run (``success``, ``failed``,
    ``skipped``, ``upstream_failed``, ...); empty when the runtime cannot say."""
    ids = list(task_ids)
    try:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        found = RuntimeTaskInstance.get_task_states(dag_id=ti.dag_id, task_ids=ids, run_ids=[ti.run_id])
    except Exception:  # noqa: BLE001 - an older runtime or a test double: fall back to the XComs
        return {}
    states = (found or {}).get(ti.run_id) or {}
    return {task_id: str(getattr(state, "value", state)) for task_id, state in states.items()
            if task_id in ids and state is not None}


def step_timings(ti: Any, task_ids: Iterable[str], states: dict[str, str] | None = None) -> list[StepTiming]:
    """What each of ``task_ids`` recorded, read once they are done. The state is Airflow's
    (``states``, from :func:`task_states`) when known; else a step that never started is ``not
    run`` and one that started without recording a successful end is ``failed``."""
    states = states or {}
    timings = []
    for task_id in task_ids:
        started = ti.xcom_pull(task_ids=task_id, key=STARTED)
        ended = ti.xcom_pull(task_ids=task_id, key=ENDED) or {}
        seconds = None
        if started and ended.get("at"):
            seconds = (datetime.fromisoformat(ended["at"]) - datetime.fromisoformat(started)).total_seconds()
        state = states.get(task_id) or ended.get("state") or (TaskState.FAILED if started else TaskState.NOT_RUN)
        timings.append(StepTiming(task_id, state, seconds, started, ended.get("at")))
    return timings


def step_error(ti: Any, task_id: str) -> str:
    """The error message a failed step recorded, or ''."""
    return (ti.xcom_pull(task_ids=task_id, key=ENDED) or {}).get("error", "")
