"""Fault injection: the upgrade survives its Airflow process being killed (SIGKILL) at every step.

Each DAG run executes in a child process (``tests/system/dag_child.py``) with a fault point armed
(:mod:`airflow_ckpt_provider.faults`): the process dies at that point, mid-step or right after a
step's side effect and before the journal records it, like a worker lost at 3 a.m. The next run
is a re-triggered DAG run with the same params (so the same upgrade journal), which must resume
instead of repeating a side effect. Producers run throughout. At the end the upgrade must have
converged: the run succeeds (or, for the rollback chain, ends rolled back), exactly one query
runs on exactly one checkpoint, there is one archive, and the sink holds every Kafka
(partition, offset) exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.faults import ENV, LOG_ENV
from airflow_ckpt_provider.storage.journal import list_journals
from airflow_ckpt_provider.storage.state import read_manifest
from airflow_ckpt_provider.storage.stop import ControlFiles
from tests.harness.upgrade_demo import STREAM, V1, V2, UpgradeDemo

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
CRASHING_V2 = Path(__file__).parent / "jobs" / "crash_after_release.py"
#: The Kafka connection of these runs carries a secret (its SASL password; the local broker speaks
#: PLAINTEXT and never uses it): it must not show up in any log, XCom, journal, manifest or report.
SECRET = f"s3cr3t-{uuid.uuid4().hex}"

#: Faults in the order the steps run; each kills one DAG run. Every step is killed once between
#: its "started" record in the journal and its side effect (``<step>:recorded``), and once within
#: or right after its side effect, before the journal records it.
UPGRADE_FAULTS = [
    "start_standby:recorded",   # recorded, nothing launched yet
    "start_standby:launched",   # v2 started as a standby, the worker dies before waiting for it
    "graceful_stop:recorded",   # recorded, no stop request written yet
    "graceful_stop:requested",  # stop requested, the worker dies while waiting for the ack
    "extract_handover:recorded",
    "extract_handover:done",    # handover taken, not yet recorded
    "export_state:recorded",    # recorded, no export job started yet
    "export_state:exporting",   # the state export job started, the worker dies while it writes
    "relaunch:recorded",        # recorded, the standby not released yet
    "relaunch:released",        # the standby released, the worker dies before waiting for its commit
    "verify:recorded",
    "verify:done",              # verified, not yet recorded
    "archive:recorded",         # recorded, nothing copied yet
    "archive:copying",          # a few files copied, no manifest
    "report:stored",            # report written, journal not closed (stream still locked)
]
#: The hang guard of a whole chain of runs (16 DAG runs for the upgrade): the suite's 900 s per
#: test fits one run on a loaded machine, not the chain (about 8 minutes on a quiet 2-core machine,
#: 15 under a load average of 20); each run keeps its own 900 s guard.
RUNS_TIMEOUT_S = 3600
#: With a new version that crashes once released, the rollback's steps.
ROLLBACK_FAULTS = [
    "rollback_stop_new:recorded",     # recorded, the crashed v2 not looked at yet
    "rollback_stop_new:done",         # the crashed v2 found stopped, not yet recorded
    "rollback_handover:recorded",
    "rollback_restart_old:recorded",  # recorded, v1 not restarted yet
    "rollback_restart_old:launched",  # v1 restarted, the worker dies before its first commit
]


@dataclass
class ChildRun:
    fault: str | None
    returncode: int
    result: dict[str, Any] | None
    log: Path

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def run_dag(demo: UpgradeDemo, conf: dict[str, Any], work: Path, index: int, fault: str | None) -> ChildRun:
    request, result = work / f"request-{index}.json", work / f"result-{index}.json"
    connection = {**json.loads(demo.kafka_connection()), "login": "ckpt", "password": SECRET}
    request.write_text(json.dumps({"conf": conf, "kafka_connection": json.dumps(connection), "result": str(result)}))
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env[LOG_ENV] = str(work / "faults.log")
    if fault:
        env[ENV] = fault
    log = work / f"run-{index}.log"
    with open(log, "wb") as out:
        code = subprocess.run([sys.executable, "-m", "tests.system.dag_child", str(request)], cwd=REPO, env=env,
                              stdout=out, stderr=subprocess.STDOUT, timeout=900).returncode
    return ChildRun(fault, code, json.loads(result.read_text()) if result.exists() else None, log)


def spark_jobs(application: Path, under: Path) -> list[int]:
    """Live spark-submit jobs running ``application`` with an argument under ``under`` (this
    test's demo: its checkpoints), one per launch: the process groups (a detached launch has its
    own) of the processes submitting it. Jobs of other tests running at the same time, from the
    same application file, are not counted."""
    groups: set[int] = set()
    needle = str(under).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.deploy.SparkSubmit" in argv and str(application).encode() in argv \
                and any(needle in arg for arg in argv):
            try:
                groups.add(os.getpgid(int(entry.name)))
            except ProcessLookupError:
                continue
    return sorted(groups)


def alive_on(checkpoint: Path) -> bool:
    import fsspec

    beat = ControlFiles(fsspec.filesystem("file"), str(checkpoint)).heartbeat()
    return beat is not None and beat.is_alive()


def secret_leaks(*roots: Path, database: Path | None = None) -> list[str]:
    """Files under ``roots`` (logs, journals, manifests, reports) and Airflow tables (XCom,
    rendered fields, task instances) that contain :data:`SECRET`."""
    needle = SECRET.encode()
    files = [p for root in roots for p in ([root] if root.is_file() else root.rglob("*") if root.exists() else [])]
    found = [str(p) for p in files if p.is_file() and needle in p.read_bytes()]
    if database is not None and database.exists():
        import sqlite3

        with sqlite3.connect(database) as db:
            for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
                columns = [row[1] for row in db.execute(f"PRAGMA table_info('{table}')")]
                for column in columns:
                    hits = db.execute(f"SELECT count(*) FROM '{table}' WHERE CAST(\"{column}\" AS TEXT) "
                                      f"LIKE ?", (f"%{SECRET}%",)).fetchone()[0]
                    if hits:
                        found.append(f"{table}.{column}")
    return found


def wait_until(predicate: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(1)
    return predicate()


def kill_chain(demo: UpgradeDemo, conf: dict[str, Any], work: Path, faults: list[str],
               new_application: Path) -> tuple[list[ChildRun], ChildRun]:
    """One killed run per fault, then a clean run; never two copies of a version at once."""
    killed = []
    for index, fault in enumerate(faults):
        run = run_dag(demo, conf, work, index, fault)
        assert run.returncode == -9, f"{fault}: expected SIGKILL, got {run.returncode}\n{run.tail()}"
        fired = (work / "faults.log").read_text().split("\n")
        assert any(line.split(" ")[1:2] == [fault] for line in fired if line), f"{fault} did not fire"
        assert len(spark_jobs(new_application, demo.work)) <= 1 and len(spark_jobs(V1, demo.work)) <= 1, \
            f"two copies after {fault}"
        killed.append(run)
    return killed, run_dag(demo, conf, work, len(faults), None)


@pytest.fixture(autouse=True)
def no_job_left_behind(demo: UpgradeDemo) -> Any:
    """Kill whatever job this test's DAG runs started, however the test ended."""
    yield
    import signal

    for group in spark_jobs(V1, demo.work) + spark_jobs(V2, demo.work) + spark_jobs(CRASHING_V2, demo.work):
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.timeout(RUNS_TIMEOUT_S)
def test_upgrade_converges_after_a_kill_at_every_step(airflow_home, demo: UpgradeDemo, tmp_path: Path) -> None:  # noqa: ANN001
    v1 = demo.start()
    conf = demo.dag_conf(v1, carry_state=True)  # the export runs, and is killed once
    killed, final = kill_chain(demo, conf, tmp_path, UPGRADE_FAULTS, V2)

    assert final.returncode == 0, final.tail()
    assert final.result is not None and final.result["state"] == "success", final.result
    # exactly one query, the new version, on the new checkpoint
    assert alive_on(demo.new_cp) and not alive_on(demo.old_cp)
    assert len(spark_jobs(V2, demo.work)) == 1 and spark_jobs(V1, demo.work) == []
    # one archive, one journal that saw every run, closed, the stream unlocked
    archives = [p for p in (demo.archive_root / STREAM).iterdir() if not p.name.startswith("_")]
    assert len(archives) == 1, archives
    (journal,) = list_journals(__import__("fsspec").filesystem("file"), str(demo.archive_root), STREAM)
    assert journal.outcome == "upgraded" and len(journal.runs) == len(UPGRADE_FAULTS) + 1
    assert not (demo.archive_root / STREAM / "_upgrades" / "LOCK.json").exists()
    # each step killed twice (once recorded, once in or after its side effect) ran three times
    assert journal.steps["start_standby"].attempts == 3 and journal.steps["relaunch"].attempts == 3
    assert journal.steps["archive"].attempts == 3
    # the export killed while its job wrote: the re-run stopped that job and exported again, verified
    assert journal.steps["export_state"].attempts == 3
    export = journal.steps["export_state"].result
    assert export["location"] and export["rows"] > 0, export
    manifest = read_manifest(__import__("fsspec").filesystem("file"), export["location"])
    assert manifest is not None and manifest.rows == export["rows"]
    # the secret of the connection the runs used is nowhere: run logs (every task's log), Airflow's
    # log folder, the archive (manifest, journal, report), the checkpoints, the XCom table
    assert SECRET.encode() in (tmp_path / "request-0.json").read_bytes()  # it was really used
    assert secret_leaks(*(tmp_path.glob("run-*.log")), demo.archive_root, demo.old_cp, demo.new_cp,
                        airflow_home / "logs", database=airflow_home / "airflow.db") == []
    planted = tmp_path / "planted" / "leak.txt"  # the scan itself can fail
    planted.parent.mkdir()
    planted.write_text(f"password={SECRET}")
    assert secret_leaks(tmp_path / "planted") == [str(planted)]

    audit = demo.finish(demo.new_cp)
    print(f"faults injected {len(killed)}, survived {len(killed)}; produced {audit.produced}, "
          f"lost {audit.lost}, duplicated {audit.duplicated}")
    assert audit.produced > 1000
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples


@pytest.mark.timeout(RUNS_TIMEOUT_S)
def test_rollback_converges_after_a_kill_at_its_steps(airflow_home, demo: UpgradeDemo, tmp_path: Path) -> None:  # noqa: ANN001
    v1 = demo.start()
    conf = demo.dag_conf(v1, new_application=str(CRASHING_V2))
    killed, final = kill_chain(demo, conf, tmp_path, ROLLBACK_FAULTS, CRASHING_V2)

    assert final.returncode == 1 and final.result is not None, final.tail()
    assert final.result["tasks"]["report"] == "failed"  # a rolled-back upgrade fails the run loudly
    assert final.result["tasks"]["relaunch"] == "failed"  # refused: never launched again during a rollback
    (journal,) = list_journals(__import__("fsspec").filesystem("file"), str(demo.archive_root), STREAM)
    assert journal.outcome == "rolled back", journal
    assert journal.steps["rollback_restart_old"].attempts == 3  # killed once recorded, once launched
    # exactly one query: the old version, on the old checkpoint
    assert wait_until(lambda: alive_on(demo.old_cp), 60)
    assert len(spark_jobs(V1, demo.work)) == 1 and spark_jobs(CRASHING_V2, demo.work) == [] \
        and not alive_on(demo.new_cp)

    audit = demo.finish(demo.old_cp)
    print(f"faults injected {len(killed)}, survived {len(killed)}; produced {audit.produced}, "
          f"lost {audit.lost}, duplicated {audit.duplicated}")
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
