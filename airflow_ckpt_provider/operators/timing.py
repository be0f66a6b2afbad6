"""Step timing for the upgrade report, recorded by the steps themselves through XCom.

Task code cannot read other task instances from the metadata database in Airflow 3, so each
step records its own start, end and outcome: pass :data:`STEP_CALLBACKS` as ``default_args``
(or per task). ``pre_execute`` runs again when a deferred task resumes; the first start is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from airflow_ckpt_provider.checkpoint.report import StepTiming

STARTED = "ckpt_step_started"
ENDED = "ckpt_step_ended"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def step_started(context: Any) -> None:
    ti = context["ti"]
    if ti.xcom_pull(task_ids=ti.task_id, key=STARTED) is None:
        ti.xcom_push(key=STARTED, value=_now())


def step_succeeded(context: Any, result: Any = None) -> None:
    context["ti"].xcom_push(key=ENDED, value={"state": "success", "at": _now()})


def _shorten(text: str, head: int = 400, tail: int = 1600) -> str:
    """Keep the start (what failed) and the end (a log tail's last lines) of a long message."""
    return text if len(text) <= head + tail else f"{text[:head]} […] {text[-tail:]}"


def step_failed(context: Any) -> None:
    error = context.get("exception")
    context["ti"].xcom_push(
        key=ENDED, value={"state": "failed", "at": _now(), "error": _shorten(str(error)) if error else ""}
    )


STEP_CALLBACKS: dict[str, Any] = {
    "pre_execute": step_started,
    "post_execute": step_succeeded,
    "on_failure_callback": step_failed,
}


def step_timings(ti: Any, task_ids: Iterable[str]) -> list[StepTiming]:
    """What each of ``task_ids`` recorded, read once they are done: a step that never started is
    ``not run``; one that started and recorded no successful end is ``failed`` (failure callbacks
    may run outside the task's process, so their record is not relied on)."""
    timings = []
    for task_id in task_ids:
        started = ti.xcom_pull(task_ids=task_id, key=STARTED)
        ended = ti.xcom_pull(task_ids=task_id, key=ENDED) or {}
        seconds = None
        if started and ended.get("at"):
            seconds = (datetime.fromisoformat(ended["at"]) - datetime.fromisoformat(started)).total_seconds()
        state = ended.get("state") or ("failed" if started else "not run")
        timings.append(StepTiming(task_id, state, seconds, started, ended.get("at")))
    return timings


def step_error(ti: Any, task_id: str) -> str:
    """The error message a failed step recorded, or ''."""
    return (ti.xcom_pull(task_ids=task_id, key=ENDED) or {}).get("error", "")
