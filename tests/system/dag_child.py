"""Run the reference DAG once with ``dag.test()`` in a process of its own: the unit the fault tests kill.

    python -m tests.system.dag_child REQUEST.json        # one run in this process
    python -m tests.system.dag_child --serve DAG_ID      # one forked process per request

REQUEST holds ``{"conf": <run conf>, "kafka_connection": <AIRFLOW_CONN_KAFKA_DEFAULT value>,
"result": <path>}`` and optionally ``"dag_id"`` (default ``stream_upgrade``). The Airflow
environment comes from the parent (tests/conftest.py sets it). Writes ``{"state": ..., "tasks":
{task_id: state}}`` to ``result`` and exits 0 when the run succeeded, 1 otherwise; a fault point
(``CKPT_FAULT_POINT``) kills it with SIGKILL instead.

``--serve`` imports Airflow, the provider and the DAG once, then reads one JSON line per run from
stdin (``{"request": path, "log": path, "env": {name: value}}``), forks a process that sets
``env``, sends its output to ``log`` and runs the request as above, and answers one JSON line
``{"pid": N}`` once it forked and one ``{"returncode": N}`` (negative: killed by signal -N) once
that process ended. A chain of runs then pays once, not once per run, for importing Airflow and the
DAG and for the first request through the in-process execution API (its lifespan, middleware and
routing): a run that fails in its first tasks took 25 s as a new process and 5 s forked, on 2 cores
at a load average of 8; each run is still its own process, which a fault point kills. Airflow
disposes of its database connections in a forked process (``airflow.settings``: SQLAlchemy's
pools are not shared across a fork).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO

DEFAULT_DAG_ID = "stream_upgrade"
#: What a DAG run imports on its first task (dag.test's scheduling loop, the in-process execution
#: API, serialization): imported once by ``--serve`` before it forks.
WARM_MODULES = (
    "airflow.api_fastapi.execution_api.app",
    "airflow.dag_processing.bundles.manager",
    "airflow.dag_processing.dagbag",
    "airflow.jobs.scheduler_job_runner",
    "airflow.models.dagrun",
    "airflow.sdk.execution_time.supervisor",
    "airflow.sdk.execution_time.task_runner",
    "airflow.serialization.serialized_objects",
    "a2wsgi",
    "httpx",
)
#: The DAGs ``--serve`` loaded before forking, by id.
_LOADED: dict[str, object] = {}


def main(request_path: str) -> int:
    request = json.loads(Path(request_path).read_text())
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = request["kafka_connection"]
    from tests.harness.upgrade_demo import load_reference_dag

    dag_id = request.get("dag_id", DEFAULT_DAG_ID)
    dag = _LOADED.get(dag_id) or load_reference_dag(dag_id)
    run = dag.test(run_conf=request["conf"], mark_success_pattern="approve")
    tasks = {ti.task_id: ti.state for ti in run.get_task_instances()}
    Path(request["result"]).write_text(json.dumps({"state": run.state, "run_id": run.run_id, "tasks": tasks}))
    return 0 if run.state == "success" else 1


def _run_forked(line: str, answers: IO[str]) -> int:
    """Fork, answer the child's pid, run the request of ``line`` in the child, and return its exit
    code (negative: the signal that killed it)."""
    order = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the run's own process: its output to its log, never into the server's pipes
        code = 1
        try:
            answers.close()
            os.environ.update(order.get("env", {}))
            log = os.open(order["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            stdin = os.open(os.devnull, os.O_RDONLY)
            os.dup2(stdin, 0)
            os.close(stdin)
            code = main(order["request"])
        except BaseException:  # noqa: BLE001 - the child reports every failure as its exit code
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    answers.write(json.dumps({"pid": pid}) + "\n")
    answers.flush()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _warm_execution_api() -> None:
    """One request through the in-process execution API (its lifespan, middleware and routing do
    their first-use work here, once), then its event loop and thread stopped: a fork copies no
    running thread, and each run's process starts its own."""
    import gc
    import threading

    import httpx
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    api = in_process_api_server()
    client = httpx.Client(transport=api.transport, base_url="http://in-process")
    client.get("/execution/health")
    client.close()
    del client
    delattr(api, "transport")  # its finalizer closes the lifespan and joins the loop's thread
    gc.collect()
    running = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    if running:
        raise RuntimeError(f"threads still running before the first fork: {running}")


def serve(dag_id: str) -> int:
    """Import once, then one forked run per stdin line (see the module docstring)."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever Airflow logs goes to stderr: nothing but answers on the answer pipe
    import importlib

    from tests.harness.upgrade_demo import load_reference_dag

    _LOADED[dag_id] = load_reference_dag(dag_id)
    for name in WARM_MODULES:
        importlib.import_module(name)
    # the in-process execution API every dag.test() task talks to: its app (routes of every API
    # version) is built once here; its transport (a thread and an event loop) in each run's process
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    in_process_api_server().app  # noqa: B018 - built for the forked runs
    _warm_execution_api()
    for line in sys.stdin:
        if line.strip():
            answers.write(json.dumps({"returncode": _run_forked(line, answers)}) + "\n")
            answers.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        sys.exit(serve(sys.argv[2] if len(sys.argv) > 2 else DEFAULT_DAG_ID))
    sys.exit(main(sys.argv[1]))
