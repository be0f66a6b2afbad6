"""Fault injection: the upgrade survives its Airflow process being killed (SIGKILL) at every step.

Each DAG run executes in a process of its own (``tests/system/dag_child.py``, forked from one
process that imported Airflow and the DAG once) with a fault point armed
(:mod:`airflow_ckpt_provider.faults`): the process dies at that point, mid-step or right after a
step's side effect and before the journal records it, like a worker lost at 3 a.m. The next run
is a re-triggered DAG run with the same params (so the same upgrade journal), which must resume
instead of repeating a side effect. Producers run throughout. At the end the upgrade must have
converged: the run succeeds (or, for the rollback chain, ends rolled back), exactly one query
runs on exactly one checkpoint, there is one archive, and the sink holds every Kafka
(partition, offset) exactly once.

Three chains: the standby DAG (``stream_upgrade``) killed at its own steps, the switchover DAG
(``stream_upgrade_switchover``) killed at its own step and at the steps both paths share, and the
rollback of the standby DAG.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.checkpoint.switchover import SwitchoverResult
from airflow_ckpt_provider.faults import ENV, LOG_ENV
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.journal import list_journals
from airflow_ckpt_provider.storage.state import read_manifest
from airflow_ckpt_provider.storage.stop import ControlFiles
from tests.harness.upgrade_demo import STREAM, V1, V2, UpgradeDemo, read_dag_report

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
CRASHING_V2 = Path(__file__).parent / "jobs" / "crash_after_release.py"
STATELESS_V1 = Path(__file__).parent / "jobs" / "stateless_v1.py"
SWITCHOVER_DAG = "stream_upgrade_switchover"
#: The switchover chain's stream: records/s, on Spark's default trigger (batches back to back).
BUSY_RATE = 400.0
#: The Kafka connection of these runs carries a secret (its SASL password; the local broker speaks
#: PLAINTEXT and never uses it): it must not show up in any log, XCom, journal, manifest or report.
SECRET = f"s3cr3t-{uuid.uuid4().hex}"

#: Faults in the order the steps run; each kills one DAG run. Every step is killed once between
#: its "started" record in the journal and its side effect (``<step>:recorded``), and once within
#: or right after its side effect, before the journal records it. Where each step's faults live:
#: the standby DAG's own steps (graceful_stop, extract_handover, export_state, relaunch) here; the
#: switchover step and the steps the paths share (start_standby, verify, archive, report) in
#: SWITCHOVER_FAULTS, killed once for every path (they are the same operators and the same journal
#: code on each); the rollback's steps in ROLLBACK_FAULTS.
UPGRADE_FAULTS = [
    "graceful_stop:recorded",   # recorded, no stop request written yet
    "graceful_stop:requested",  # stop requested, the worker dies while waiting for the ack
    "extract_handover:recorded",
    "extract_handover:done",    # handover taken, not yet recorded
    "export_state:recorded",    # recorded, no export job started yet
    "export_state:exporting",   # the state export job started, the worker dies while it writes
    "relaunch:recorded",        # recorded, the standby not released yet
    "relaunch:released",        # the standby released, the worker dies before waiting for its commit
]
#: The switchover DAG's faults: its one step of stop, handover and release, and the shared steps.
#: ``switchover:released`` and ``switchover:requested`` are both on the step's first release: a
#: re-run resumes the noted release and passes neither, so one chain reaches one of them; this one
#: kills the later (the drivers switch over with no worker), and
#: tests/integration/test_switchover.py kills the earlier (the re-run writes the stop request the
#: release names). ``switchover:taken_over`` (the provider's own release after the standby refused
#: a stop that cut a batch) needs a sink without the gate under load, which the demo never cuts:
#: tests/integration/test_delta_sink.py kills a worker there on a Delta stream whose stop cuts a batch
#: and the retry converges (tests/unit/test_switchover_step.py pins the resume logic).
SWITCHOVER_FAULTS = [
    "start_standby:recorded",   # recorded, nothing launched yet
    "start_standby:launched",   # v2 started as a standby, the worker dies before waiting for it
    "switchover:recorded",      # recorded, nothing released yet
    "switchover:requested",     # release and stop request written: the drivers switch without a worker
    "switchover:done",          # switched and compared, not yet recorded
    "verify:recorded",
    "verify:done",              # verified, not yet recorded
    "archive:recorded",         # recorded, nothing copied yet
    "archive:copying",          # a few files copied, no manifest
    "report:stored",            # report written, journal not closed (stream still locked)
]
#: The hang guard of a whole chain of runs (11 DAG runs for the switchover): the suite's 900 s per
#: test fits one run on a loaded machine, not the chain (about 6 minutes on a quiet 2-core machine,
#: 12 under a load average of 20); each run keeps its own 900 s guard.
RUNS_TIMEOUT_S = 3600
#: One DAG run's hang guard.
RUN_TIMEOUT_S = 900.0
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


class DagRunner:
    """Runs a DAG once per call, each run in its own process, forked by one ``dag_child --serve``
    process that imported Airflow and the DAG once (see tests/system/dag_child.py)."""

    def __init__(self, dag_id: str, work: Path) -> None:
        self.dag_id, self.work = dag_id, work
        env = {k: v for k, v in os.environ.items() if k != ENV}
        self._log = open(work / "dag-server.log", "ab")  # noqa: SIM115 - closed in close()
        self._server = subprocess.Popen([sys.executable, "-m", "tests.system.dag_child", "--serve", dag_id],
                                        cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self._log, text=True, start_new_session=True)

    def _answer(self, deadline: float) -> dict[str, Any]:
        out = self._server.stdout
        assert out is not None
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                raise TimeoutError(f"no answer from the DAG run server within its deadline; see {self._log.name}")
            line = out.readline()
            if not line:
                raise RuntimeError(f"the DAG run server exited ({self._server.wait()}); see {self._log.name}")
            return dict(json.loads(line))

    def run(self, request: Path, log: Path, env: dict[str, str]) -> int:
        """One run of ``request`` with ``env`` set, its output in ``log``: its exit code (-9: killed)."""
        stdin: IO[str] | None = self._server.stdin
        assert stdin is not None
        stdin.write(json.dumps({"request": str(request), "log": str(log), "env": env}) + "\n")
        stdin.flush()
        deadline = time.monotonic() + RUN_TIMEOUT_S
        pid = int(self._answer(deadline)["pid"])
        try:
            return int(self._answer(deadline)["returncode"])
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            raise

    def close(self) -> None:
        if self._server.stdin is not None:
            self._server.stdin.close()
        try:
            self._server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self._server.pid, signal.SIGKILL)
            self._server.wait()
        self._log.close()


def run_dag(runner: DagRunner, demo: UpgradeDemo, conf: dict[str, Any], work: Path, index: int,
            fault: str | None) -> ChildRun:
    request, result = work / f"request-{index}.json", work / f"result-{index}.json"
    connection = {**json.loads(demo.kafka_connection()), "login": "ckpt", "password": SECRET}
    request.write_text(json.dumps({"conf": conf, "kafka_connection": json.dumps(connection), "result": str(result),
                                   "dag_id": runner.dag_id}))
    env = {LOG_ENV: str(work / "faults.log"), **({ENV: fault} if fault else {})}
    log = work / f"run-{index}.log"
    code = runner.run(request, log, env)
    return ChildRun(fault, code, json.loads(result.read_text()) if result.exists() else None, log)


@pytest.fixture
def dag_runner(tmp_path: Path) -> Iterator[Callable[[str], DagRunner]]:
    """``dag_runner(dag_id)``: a :class:`DagRunner` for this test, closed at its end."""
    runners: list[DagRunner] = []

    def make(dag_id: str) -> DagRunner:
        runners.append(DagRunner(dag_id, tmp_path))
        return runners[-1]

    yield make
    for runner in runners:
        runner.close()


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


def kill_chain(runner: DagRunner, demo: UpgradeDemo, conf: dict[str, Any], work: Path, faults: list[str],
               new_application: Path, old_application: Path = V1,
               after_kill: Callable[[str], None] | None = None) -> tuple[list[ChildRun], ChildRun]:
    """One killed run per fault, then a clean run; never two copies of a version at once;
    ``after_kill(fault)`` checks more after each killed run."""
    killed = []
    for index, fault in enumerate(faults):
        run = run_dag(runner, demo, conf, work, index, fault)
        assert run.returncode == -9, f"{fault}: expected SIGKILL, got {run.returncode}\n{run.tail()}"
        fired = (work / "faults.log").read_text().split("\n")
        assert any(line.split(" ")[1:2] == [fault] for line in fired if line), f"{fault} did not fire"
        assert len(spark_jobs(new_application, demo.work)) <= 1 and len(spark_jobs(old_application, demo.work)) <= 1, \
            f"two copies after {fault}"
        if after_kill is not None:
            after_kill(fault)
        killed.append(run)
    return killed, run_dag(runner, demo, conf, work, len(faults), None)


@pytest.fixture(autouse=True)
def no_job_left_behind(tmp_path: Path) -> Any:
    """Kill whatever job this test's DAG runs started (under its demo's folder), however the test ended."""
    yield
    for group in {group for application in (V1, V2, CRASHING_V2, STATELESS_V1)
                  for group in spark_jobs(application, tmp_path)}:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.timeout(RUNS_TIMEOUT_S)
def test_upgrade_converges_after_a_kill_at_every_step(airflow_home, demo: UpgradeDemo, tmp_path: Path,  # noqa: ANN001
                                                       dag_runner: Callable[[str], DagRunner]) -> None:
    runner = dag_runner("stream_upgrade")  # it imports Airflow while v1 starts
    v1 = demo.start()
    conf = demo.dag_conf(v1, carry_state=True)  # the export runs, and is killed once
    killed, final = kill_chain(runner, demo, conf, tmp_path, UPGRADE_FAULTS, V2)

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
    assert journal.steps["graceful_stop"].attempts == 3 and journal.steps["relaunch"].attempts == 3
    # the export killed while its job wrote: the re-run stopped that job and exported again, verified
    assert journal.steps["export_state"].attempts == 3
    export = journal.steps["export_state"].result
    assert export["location"] and export["rows"] > 0, export
    manifest = read_manifest(__import__("fsspec").filesystem("file"), export["location"])
    assert manifest is not None and manifest.rows == export["rows"]
    # the secret of the connection the runs used is nowhere: run logs (every task's log), Airflow's
    # log folder, the archive (manifest, journal, report), the checkpoints, the XCom table
    assert SECRET.encode() in (tmp_path / "request-0.json").read_bytes()  # it was really used
    assert secret_leaks(*(tmp_path.glob("run-*.log")), tmp_path / "dag-server.log", demo.archive_root, demo.old_cp, demo.new_cp,
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
def test_rollback_converges_after_a_kill_at_its_steps(airflow_home, demo: UpgradeDemo, tmp_path: Path,  # noqa: ANN001
                                                      dag_runner: Callable[[str], DagRunner]) -> None:
    runner = dag_runner("stream_upgrade")  # it imports Airflow while v1 starts
    v1 = demo.start()
    conf = demo.dag_conf(v1, new_application=str(CRASHING_V2))
    killed, final = kill_chain(runner, demo, conf, tmp_path, ROLLBACK_FAULTS, CRASHING_V2)

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


def committed_on(checkpoint: Path) -> bool:
    """Whether a query committed a batch on ``checkpoint``."""
    return any(p.name.isdigit() for p in (checkpoint / "commits").glob("*"))


@pytest.mark.timeout(RUNS_TIMEOUT_S)
def test_switchover_converges_after_a_kill_at_every_step(airflow_home, make_demo: Callable[..., UpgradeDemo],  # noqa: ANN001
                                                         tmp_path: Path,
                                                         dag_runner: Callable[[str], DagRunner]) -> None:
    """The switchover DAG on a stateless v1 under Spark's DEFAULT trigger with the producer at a
    burst's rate (batches back to back), killed at every point of its switchover step and of the
    steps all paths share. After every kill the stream has a query: v1 runs on, or (the stop
    requested before the kill) the standby took over by itself; it is never left stopped with
    nothing started. The clean run converges: the standby took over inside the drivers the moment
    v1 acknowledged its stop (held at the sink gate or clean), with no Airflow task in between; the
    provider re-derived the handover and it matched; the report splits the downtime; the sink
    holds every offset once."""
    runner = dag_runner(SWITCHOVER_DAG)  # it imports Airflow while v1 starts
    demo = make_demo(rate=BUSY_RATE, trigger="default")
    v1 = demo.start(application=STATELESS_V1)
    conf = demo.dag_conf(v1, old_application=str(STATELESS_V1))

    def a_query_runs(fault: str) -> None:
        assert wait_until(lambda: alive_on(demo.old_cp) or committed_on(demo.new_cp), 300), \
            f"after {fault}: v1 stopped and no new query committed"

    killed, final = kill_chain(runner, demo, conf, tmp_path, SWITCHOVER_FAULTS, V2,
                               old_application=STATELESS_V1, after_kill=a_query_runs)

    assert final.returncode == 0, final.tail()
    assert final.result is not None and final.result["state"] == "success", final.result
    got = final.result["tasks"]
    assert [got[name] for name in ("start_standby", "switchover", "verify", "archive")] == ["success"] * 4, got
    # exactly one query, the new version, on the new checkpoint
    assert alive_on(demo.new_cp) and not alive_on(demo.old_cp)
    assert len(spark_jobs(V2, demo.work)) == 1 and spark_jobs(STATELESS_V1, demo.work) == []
    # one archive, one journal that saw every run, closed, the stream unlocked
    archives = [p for p in (demo.archive_root / demo.stream).iterdir() if not p.name.startswith("_")]
    assert len(archives) == 1, archives
    (journal,) = list_journals(__import__("fsspec").filesystem("file"), str(demo.archive_root), demo.stream)
    assert journal.outcome == "upgraded" and len(journal.runs) == len(SWITCHOVER_FAULTS) + 1
    assert not (demo.archive_root / demo.stream / "_upgrades" / "LOCK.json").exists()
    # each shared step killed twice ran three times; the switchover, killed at three points, four times
    assert {name: journal.steps[name].attempts for name in ("start_standby", "verify", "archive")} == \
        {"start_standby": 3, "verify": 3, "archive": 3}, journal.steps
    assert journal.steps["switchover"].attempts == 4, journal.steps["switchover"]
    # one release, never a second: the standby started from the release the first attempt wrote
    switched = SwitchoverResult.from_json(journal.steps["switchover"].result)
    assert switched.taken_by.value == "standby" and switched.used["release_id"] == \
        journal.steps["switchover"].notes["released"], (switched.used, journal.steps["switchover"].notes)

    # v1's stop on the busy stream: acknowledged at a batch boundary, not escalated; the handover the
    # standby took is the provider's reading of the old checkpoint, and the report's
    report = read_dag_report(demo.archive_root, demo.stream)
    assert report is not None and report["outcome"] == "upgraded", report
    stop = StopResult.from_json(switched.stop)
    assert stop.outcome.value == "graceful" and stop.escalation is None, stop
    assert stop.ack is not None and stop.ack["outcome"] in ("held", "clean"), stop.ack
    handover = CheckpointReader(str(demo.old_cp)).handover()
    assert report["handover"]["batch_id"] == handover.batch_id == stop.last_committed_batch, (report, stop)
    assert switched.used["handover_json"] and report["starting_offsets"] == switched.used["starting_offsets"]
    split = report["switchover"]
    assert all(split[part] is not None and split[part] >= 0 for part in
               ("notice_s", "handover_read_s", "query_start_s", "first_batch_s", "downtime_s")), split
    stored = Path(report["archive"]) / "report" / "upgrade-report.md"
    assert "## The switchover inside the drivers" in stored.read_text()

    audit = demo.finish(demo.new_cp)
    print(f"faults injected {len(killed)}, survived {len(killed)}; produced {audit.produced}, "
          f"lost {audit.lost}, duplicated {audit.duplicated}")
    assert audit.produced > 2000, "the producer must have run through the upgrade"
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
    assert audit.unexpected == 0
