"""Run the reference DAG once with ``dag.test()`` in this process: the unit the fault tests kill.

    python -m tests.system.dag_child REQUEST.json

REQUEST holds ``{"conf": <run conf>, "kafka_connection": <AIRFLOW_CONN_KAFKA_DEFAULT value>,
"result": <path>}``. The Airflow environment comes from the parent (tests/conftest.py sets it).
Writes ``{"state": ..., "tasks": {task_id: state}}`` to ``result`` and exits 0 when the run
succeeded, 1 otherwise; a fault point (``CKPT_FAULT_POINT``) kills it with SIGKILL instead.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(request_path: str) -> int:
    request = json.loads(Path(request_path).read_text())
    os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = request["kafka_connection"]
    from tests.harness.upgrade_demo import load_reference_dag

    run = load_reference_dag().test(run_conf=request["conf"], mark_success_pattern="approve")
    tasks = {ti.task_id: ti.state for ti in run.get_task_instances()}
    Path(request["result"]).write_text(json.dumps({"state": run.state, "run_id": run.run_id, "tasks": tasks}))
    return 0 if run.state == "success" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
