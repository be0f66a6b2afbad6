"""Benchmark: the downtime of adopting an un-instrumented job on YARN vs. a bare restart of it, in one run.

Starts a single-node HDFS and YARN (``tests/harness/hdfs.py``, ``tests/harness/yarn.py``: Maven's
Hadoop jars, ``make hdfs yarn``) and a KRaft Kafka broker, then runs ``--rounds`` rounds of two
legs, alternating which goes first (round 0 bare first, round 1 adoption first, ...), so a slow
minute of the machine does not land on one leg only. Each leg gets a fresh topic with a producer at
``--rate`` records/s, a fresh checkpoint and Delta table on HDFS, and version 1 =
``tests/system/jobs/plain_v1_delta.py`` (no import of the provider, Spark's default trigger)
submitted by a plain ``spark-submit --master yarn --deploy-mode cluster``; once version 1 has
committed two batches:

* ``bare``: version 1 is killed through the ResourceManager's REST API
  (``PUT /ws/v1/cluster/apps/{id}/state {"state": "KILLED"}``, then polled until KILLED), and the
  same version 1 is submitted again on the same checkpoint, as a person restarts a job: the floor
  of any restart on YARN, the baseline of the ratio;
* ``adoption``: the reference DAG ``stream_upgrade`` (standby path) runs in this process with
  ``dag.test()`` and adopts version 1 by its application id (``old_job={"kind": "yarn", ...}``,
  sink ``delta``): it starts version 2 (``tests/system/jobs/instrumented_v2.py``, GracefulStop)
  on YARN as a standby, kills version 1 through the ResourceManager (its only stop), checks the
  checkpoint stays quiet, takes the handover and releases version 2.

Downtime, both legs alike: from the kill, the ``finishedTime`` the ResourceManager recorded for
version 1's application (when it marked it KILLED), to the first commit after it, the HDFS
modification time of that commit file (the NameNode runs on this machine: one clock). For the bare
restart that is the first commit file written after the second submission began (its re-run of the
batch the kill cut counts), in the same checkpoint; for the adoption, version 2's first commit in
the new checkpoint. Commit files are polled every 0.5 s over WebHDFS, but the poll's interval does
not enter the figure: the file's own modification time does. Printed beside it, per leg, where the
time went (bare: kill request -> KILLED, KILLED -> resubmit, spark-submit, submit -> first
commit; adoption: the stop step's start -> KILLED, KILLED -> the stop step's end (the wait for the
AM container, the quiet check), the stop step's end -> first commit), and for the adoption the
upgrade report's own ``downtime_s`` (from the later of version 1's last commit and the stop step's
start; the stored ``upgrade-report.json``) and its ``downtime_by_step``. Exactness is not checked
here: ``tests/system/test_adopt_yarn.py`` audits the same adoption record by record.

The headline is the MEDIAN of the per-round ratios adoption / bare (each round's two legs ran
back to back, under the same conditions). Target (``--target``, default 1.5): the adoption starts
no JVM inside its downtime (its standby paid the YARN submit, the AM and the executors before the
kill), but it adds fixed costs a bare restart does not have: the wait for the killed AM's
container to end, the quiet check after the kill (the reference DAG's quiet period, 5 s), the
handover read and the Delta ledger's look at the batch the kill cut, task scheduling between the
steps, and the standby's release and first batch. Where a bare restart on YARN takes tens of
seconds (a loaded 2-core machine), the adoption is expected below it; 1.5 leaves room for a
cluster that restarts a job in little more than those fixed costs, and fails the run when the
adoption costs a stream more than one and a half bare restarts of downtime.

    python bench/adopt_yarn.py [--rounds 2] [--rate 60] [--target 1.5] [--work DIR] [--airflow-home DIR]

Work dir ``.work/bench-adopt-yarn`` (HDFS, YARN, Kafka data and spark-submit logs), Airflow home
``.airflow/bench-adopt-yarn`` (SQLite, migrated once). Everything it started (YARN applications,
the producer, YARN, HDFS, the broker) is stopped at the end, also after a failure or SIGTERM. Exit
status 1 if a leg failed (no restart, no upgrade), a round has no ratio, or the median ratio is
above ``--target``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# the clusters, the producer and the jobs are the test harness of the checkout (tests/), not part of the package
sys.path.insert(0, str(REPO))
JOBS = REPO / "tests" / "system" / "jobs"
PLAIN_V1_DELTA = JOBS / "plain_v1_delta.py"
INSTRUMENTED_V2 = JOBS / "instrumented_v2.py"
DAG_ID = "stream_upgrade"
STOP_STEP = "graceful_stop"
STORAGE_CONN = "ckpt_hdfs"
BARE, ADOPTION = "bare", "adoption"
LEGS = (BARE, ADOPTION)
TITLES = {BARE: "bare restart (kill, spark-submit of version 1 again)",
          ADOPTION: "adoption (stream_upgrade, standby path, version 2 on YARN)"}
DEFAULT_TARGET = 1.5
#: Version 1 commits this many batches before its kill.
COMMITS_BEFORE_KILL = 2
POLL_INTERVAL_S = 0.5
#: A submit, an AM and executors on a loaded 2-core machine: minutes, not seconds.
FIRST_COMMIT_TIMEOUT_S = 600.0
KILL_TIMEOUT_S = 120.0
FINAL_STATES = frozenset({"FINISHED", "FAILED", "KILLED"})


# -- pure parts ------------------------------------------------------------------------------------


def order(round_: int) -> tuple[str, str]:
    """The legs of round ``round_`` in the order they run: bare first in even rounds."""
    return LEGS if round_ % 2 == 0 else (LEGS[1], LEGS[0])


def killed_at(app: Mapping[str, Any]) -> float:
    """Epoch seconds the ResourceManager marked the application ``app`` (its REST description,
    ``/ws/v1/cluster/apps/{id}`` -> ``app``) KILLED: its ``finishedTime``. ``RuntimeError`` when
    it is not KILLED or has no finish time."""
    state, finished = app.get("state"), app.get("finishedTime")
    if state != "KILLED" or not isinstance(finished, int) or isinstance(finished, bool) or finished <= 0:
        raise RuntimeError(f"YARN application {app.get('id', '?')}: found state {state!r}, finishedTime "
                           f"{finished!r}; expected state 'KILLED' with a finishedTime (epoch ms): was it killed?")
    return finished / 1000


def first_commit_at(commits: Mapping[int, float], not_before: float) -> float | None:
    """The earliest commit time (epoch seconds, by batch id in ``commits``) at or after
    ``not_before``; None when there is none yet."""
    return min((at for at in commits.values() if at >= not_before), default=None)


def bare_parts(requested: float, killed: float, resubmitted: float, submitted: float,
               first_commit: float) -> dict[str, float]:
    """Where a bare restart's time went (epoch seconds in, seconds out): ``requested`` the kill's
    PUT, ``killed`` the RM's KILLED, ``resubmitted`` / ``submitted`` spark-submit's start and end,
    ``first_commit`` the restarted version's first commit."""
    return {"kill request -> KILLED (before the downtime's start)": round(killed - requested, 3),
            "KILLED -> spark-submit again": round(resubmitted - killed, 3),
            "spark-submit (until YARN accepted it)": round(submitted - resubmitted, 3),
            "accepted -> first commit (AM, driver, executors, first batch)": round(first_commit - submitted, 3)}


def adoption_parts(stop_started: float | None, stop_ended: float | None, killed: float,
                   first_commit: float) -> dict[str, float | None]:
    """Where an adoption's time went around the kill (epoch seconds in, seconds out; None where
    the journal gave no time): the stop step's start and end, the RM's KILLED, version 2's first
    commit."""
    def span(start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else round(end - start, 3)

    return {"stop step start -> KILLED (before the downtime's start)": span(stop_started, killed),
            "KILLED -> stop step end (AM container ended, quiet check)": span(killed, stop_ended),
            "stop step end -> first commit of version 2 (handover, release, first batch)":
                span(stop_ended, first_commit)}


@dataclass
class Leg:
    """One measured leg: its downtime (kill -> first commit) and where it went."""

    leg: str
    round: int
    downtime_s: float | None = None
    parts: dict[str, float | None] = field(default_factory=dict)
    report_downtime_s: float | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem and self.downtime_s is not None


def round_ratios(legs: Sequence[Leg]) -> dict[int, float]:
    """Per round with both legs measured (and a bare downtime above 0): adoption / bare."""
    by_round: dict[int, dict[str, float]] = {}
    for leg in legs:
        if leg.downtime_s is not None:
            by_round.setdefault(leg.round, {})[leg.leg] = leg.downtime_s
    return {round_: found[ADOPTION] / found[BARE] for round_, found in sorted(by_round.items())
            if found.get(BARE) and ADOPTION in found}


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def leg_lines(leg: Leg) -> list[str]:
    """One leg in words: its downtime (and the report's), its failure, where its time went."""
    head = f"round {leg.round} {leg.leg:<8} downtime {seconds(leg.downtime_s)} (kill -> first commit)"
    if leg.leg == ADOPTION:
        head += f"; the report's downtime_s {seconds(leg.report_downtime_s)}"
    if leg.problem:
        head += f"; FAILED: {leg.problem}"
    return [head] + [f"  {'     -' if value is None else f'{value:6.1f}'} s  {label}"
                     for label, value in leg.parts.items()]


def summary(legs: Sequence[Leg], target: float) -> tuple[list[str], bool]:
    """The closing lines and whether the run met its target: every leg measured, every round a
    ratio, and their median at most ``target``. The last line is ``downtime ratio adoption/bare
    (YARN, median of N rounds): X``."""
    ratios = round_ratios(legs)
    rounds = sorted({leg.round for leg in legs})
    lines = [f"round {r} ratio adoption/bare: {ratios[r]:.2f}" if r in ratios else f"round {r} ratio adoption/bare: -"
             for r in rounds]
    for name in LEGS:
        measured = [leg.downtime_s for leg in legs if leg.leg == name and leg.downtime_s is not None]
        lines.append(f"median downtime {name:<8} {seconds(statistics.median(measured) if measured else None):>8}  "
                     f"({TITLES[name]})")
    failed = [f"{leg.leg} (round {leg.round})" for leg in legs if not leg.ok]
    median = statistics.median(ratios.values()) if ratios else None
    met = bool(legs) and not failed and len(ratios) == len(rounds) and median is not None and median <= target
    words = f"FAILED: {', '.join(failed)}; " if failed else ""
    lines.append(f"{words}target adoption <= {target:g}x bare: "
                 f"{'met' if met else 'NOT met' if median is not None else 'not measured'}")
    lines.append(f"downtime ratio adoption/bare (YARN, median of {len(ratios)} rounds): "
                 f"{'-' if median is None else f'{median:.2f}'}")
    return lines, met


# -- the stack and the legs ------------------------------------------------------------------------


def commit_times(fs: Any, checkpoint: str, skip: frozenset[int] = frozenset()) -> dict[int, float]:  # noqa: ANN401
    """The commit files of ``checkpoint`` (a path of the WebHDFS filesystem ``fs``) but the batch
    ids in ``skip``, with their HDFS modification times (epoch seconds)."""
    from airflow_ckpt_provider.storage.listing import list_batch_ids

    folder = f"{checkpoint}/commits"
    return {batch: fs.info(f"{folder}/{batch}")["modificationTime"] / 1000
            for batch in list_batch_ids(fs, folder) if batch not in skip}


def wait_until(what: str, check: Any, timeout: float) -> Any:  # noqa: ANN401 - a callable and its truthy value
    """Poll ``check`` every POLL_INTERVAL_S until it returns something truthy; ``TimeoutError`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(POLL_INTERVAL_S)
    raise TimeoutError(f"{what}: not within {timeout:.0f} s")


def kill_application(yarn: Any, app_id: str) -> float:  # noqa: ANN401 - a LocalYarn
    """Kill ``app_id`` through the ResourceManager's REST API, as a person's ``yarn application
    -kill`` does, and wait until it is final; the wall time of the request."""
    requested = time.time()
    yarn.rest(f"/ws/v1/cluster/apps/{app_id}/state?user.name={yarn.user}", method="PUT", body={"state": "KILLED"})
    wait_until(f"{app_id} KILLED", lambda: yarn.application(app_id).get("state") in FINAL_STATES, KILL_TIMEOUT_S)
    return requested


class Stream:
    """One leg's stream: a fresh topic with its producer, folders on HDFS, version 1 on YARN."""

    def __init__(self, leg: str, round_: int, stack: Stack, rate: float) -> None:
        self.stack = stack
        self.name = f"bench-{leg}-{round_}-{uuid.uuid4().hex[:6]}"
        self.folder = stack.work / self.name
        self.folder.mkdir(parents=True)
        stack.kafka.create_topic(self.name, 3)
        root = f"/bench/{self.name}"
        self.old_cp, self.new_cp = f"{root}/checkpoints/v1", f"{root}/checkpoints/v2"
        self.table, self.archive = f"{root}/table", f"{root}/archive"
        self.fs = stack.hdfs.filesystem()
        self.producer = stack.producer(self.name, rate)
        self.v1_args = ["--bootstrap-servers", stack.kafka.bootstrap_servers, "--topic", self.name,
                        "--checkpoint", self.uri(self.old_cp), "--table", self.uri(self.table)]

    def uri(self, path: str) -> str:
        return f"{self.stack.hdfs.url}{path}"

    def submit_v1(self, log_name: str) -> str:
        """spark-submit of version 1 to YARN (cluster mode); its application id."""
        return str(self.stack.yarn.submit(PLAIN_V1_DELTA, self.v1_args, name=f"{self.name}-v1", conf=self.stack.conf,
                                          tags=(self.name,), log_path=self.folder / log_name))

    def start_v1(self) -> str:
        """Version 1 submitted and running, once it committed COMMITS_BEFORE_KILL batches."""
        app_id = self.submit_v1("v1-submit.log")
        wait_until(f"version 1's commit {COMMITS_BEFORE_KILL}",
                   lambda: len(commit_times(self.fs, self.old_cp)) >= COMMITS_BEFORE_KILL, FIRST_COMMIT_TIMEOUT_S)
        return app_id

    def close(self) -> None:
        self.producer.stop()
        self.stack.yarn.kill_running()  # this leg's versions: the next leg's room on the node


def bare_restart(stream: Stream) -> tuple[float, dict[str, float | None]]:
    """Kill version 1 through the RM, submit it again on its checkpoint; (downtime, parts)."""
    app_id = stream.start_v1()
    requested = kill_application(stream.stack.yarn, app_id)
    killed = killed_at(stream.stack.yarn.application(app_id))
    known = frozenset(commit_times(stream.fs, stream.old_cp))  # version 1's: not read again while polling
    resubmitted = time.time()
    stream.submit_v1("v1-resubmit.log")
    submitted = time.time()
    # a commit file of the killed driver written after the listing is older than the second submission
    first = wait_until("the restarted version 1's first commit",
                       lambda: first_commit_at(commit_times(stream.fs, stream.old_cp, known), resubmitted),
                       FIRST_COMMIT_TIMEOUT_S)
    return round(first - killed, 3), dict(bare_parts(requested, killed, resubmitted, submitted, first))


def adoption(stream: Stream) -> tuple[float, dict[str, float | None], float | None]:
    """Version 1 adopted by the reference DAG (standby path, dag.test()) and upgraded to version 2
    on YARN; (downtime: kill -> version 2's first commit, parts, the report's ``downtime_s``).
    ``RuntimeError`` when the run did not upgrade."""
    from airflow_ckpt_provider.checkpoint.report import UpgradeReport
    from airflow_ckpt_provider.clock import epoch_seconds
    from airflow_ckpt_provider.storage.journal import list_journals
    from airflow_ckpt_provider.storage.reports import stored_reports
    from tests.harness.upgrade_demo import load_reference_dag

    stack = stream.stack
    app_id = stream.start_v1()
    v2_args = ["--bootstrap-servers", stack.kafka.bootstrap_servers, "--topic", stream.name,
               "--table", stream.uri(stream.table)]
    conf = {
        "stream_name": stream.name, "old_checkpoint": stream.uri(stream.old_cp),
        "new_checkpoint": stream.uri(stream.new_cp), "archive_root": stream.uri(stream.archive),
        "kafka_conn_id": "kafka_default", "storage_conn_id": STORAGE_CONN,
        "spark_master": "yarn", "spark_deploy_mode": "cluster", "spark_conf": stack.conf,
        "new_application": str(INSTRUMENTED_V2), "new_application_args": v2_args,
        "old_application": str(PLAIN_V1_DELTA), "old_application_args": stream.v1_args,
        "old_job": {"kind": "yarn", "application_id": app_id, "resource_manager": stack.yarn.rm_url},
        "sink": {"kind": "delta", "location": stream.uri(stream.table)},
        "carry_state": False, "check_compatibility": False,
    }
    dag = load_reference_dag(DAG_ID)
    run = dag.test(run_conf={k: v for k, v in conf.items() if k in dag.params}, mark_success_pattern="approve")
    stored = stored_reports(stream.fs, stream.archive, stream.name)
    report: UpgradeReport | None = stored[-1].report if stored else None
    if run.state != "success" or report is None or report.outcome != "upgraded":
        states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
        raise RuntimeError(f"{DAG_ID} did not upgrade: run {run.state}, outcome "
                           f"{report.outcome if report else 'no report'}, tasks {json.dumps(states)}")
    killed = killed_at(stack.yarn.application(app_id))
    first = first_commit_at(commit_times(stream.fs, stream.new_cp), 0.0)
    if first is None:
        raise RuntimeError(f"version 2 committed nothing in {stream.new_cp} although the run succeeded")
    journals = [j for j in list_journals(stream.fs, stream.archive, stream.name) if j.outcome == "upgraded"]
    step = journals[-1].steps.get(STOP_STEP) if journals else None
    stop_started = epoch_seconds(step.started_at) if step is not None else None
    stop_ended = epoch_seconds(step.finished_at) if step is not None else None
    parts = {**adoption_parts(stop_started, stop_ended, killed, first),
             **{f"report: {name}": value for name, value in report.downtime_by_step().items()}}
    return round(first - killed, 3), parts, report.downtime_s


class Stack:
    """Kafka, HDFS and YARN on 127.0.0.1 for the run, and the Airflow connections to them."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.kafka: Any = None
        self.hdfs: Any = None
        self.yarn: Any = None
        self.conf: dict[str, str] = {}
        self._producers: list[Any] = []

    def start(self) -> Stack:
        from airflow_ckpt_provider.local import jvm
        from airflow_ckpt_provider.local.kafka import LocalKafka
        from tests.harness.hdfs import LocalHdfs
        from tests.harness.upgrade_demo import kafka_connection
        from tests.harness.yarn import LocalYarn

        jvm.fetch((jvm.HDFS, jvm.YARN, jvm.SPARK_KAFKA, jvm.DELTA))
        self.kafka = LocalKafka(self.work / "kafka").start()
        self.hdfs = LocalHdfs(self.work / "hdfs").start()
        self.yarn = LocalYarn(self.work / "yarn", self.hdfs).start()
        self.conf = self.yarn.kafka_delta_conf()
        os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = kafka_connection(self.kafka.bootstrap_servers)
        os.environ[f"AIRFLOW_CONN_{STORAGE_CONN.upper()}"] = json.dumps(
            {"conn_type": "ckpt_storage", "port": self.hdfs.http_port, "login": self.hdfs.user})
        os.environ.update(self.yarn.client_env())  # the launcher's spark-submit to this YARN
        return self

    def producer(self, topic: str, rate: float) -> Any:  # noqa: ANN401 - a running ContinuousProducer
        from tests.harness.records import ContinuousProducer

        producer = ContinuousProducer(self.kafka.bootstrap_servers, topic, rate=rate).start()
        self._producers.append(producer)
        return producer

    def stop(self) -> None:
        """Stop the producers, every YARN application and the servers, each even if another fails."""
        for producer in self._producers:
            producer.stop()
        for server in (self.yarn, self.hdfs, self.kafka):
            if server is not None:
                try:
                    server.stop()
                except Exception as exc:  # noqa: BLE001 - stop the others anyway
                    print(f"could not stop {type(server).__name__}: {exc}", file=sys.stderr, flush=True)


def measure(leg_name: str, round_: int, stack: Stack, rate: float) -> Leg:
    """One leg on a fresh stream; a failure is reported in the leg, the other legs still run."""
    leg, stream = Leg(leg_name, round_), None
    try:
        stream = Stream(leg_name, round_, stack, rate)
        if leg_name == BARE:
            leg.downtime_s, leg.parts = bare_restart(stream)
        else:
            leg.downtime_s, leg.parts, leg.report_downtime_s = adoption(stream)
    except Exception as exc:  # noqa: BLE001 - a failed leg is reported, the others still run
        leg.downtime_s, leg.problem = None, f"{type(exc).__name__}: {exc}"
    finally:
        if stream is not None:
            stream.close()
    return leg


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both legs, alternating (default 2)")
    parser.add_argument("--rate", type=float, default=60.0, help="records per second produced (default 60)")
    parser.add_argument("--target", type=float, default=DEFAULT_TARGET,
                        help=f"max median ratio adoption/bare (default {DEFAULT_TARGET:g})")
    parser.add_argument("--work", type=Path, default=REPO / ".work" / "bench-adopt-yarn",
                        help="HDFS, YARN and Kafka data, spark-submit logs (emptied first)")
    parser.add_argument("--airflow-home", type=Path, default=REPO / ".airflow" / "bench-adopt-yarn",
                        help="the dag.test() Airflow home (SQLite, migrated once)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds: found {args.rounds}; expected 1 or more")
    # a SIGTERM (or a SIGINT a background shell ignores) unwinds like an exception: the clean-up
    # kills the YARN applications and stops YARN, HDFS and the broker
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    # Airflow reads its environment at import: point it at the bench's SQLite home first
    from airflow_ckpt_provider.local.airflow_home import airflow_env, prepare_airflow_home

    home, dags = args.airflow_home.resolve(), REPO / "dags"
    os.environ.update(airflow_env(home, dags))
    prepare_airflow_home(home, dags)

    started, load_before = time.monotonic(), os.getloadavg()
    shutil.rmtree(args.work, ignore_errors=True)
    stack = Stack(args.work.resolve())
    legs: list[Leg] = []
    try:
        stack.start()
        for round_ in range(args.rounds):
            for leg_name in order(round_):
                leg = measure(leg_name, round_, stack, args.rate)
                legs.append(leg)
                for line in leg_lines(leg):
                    print(line, flush=True)
    finally:
        stack.stop()
    load_after = os.getloadavg()

    print()
    print(f"downtime on YARN, kill -> first commit: {TITLES[ADOPTION]} vs {TITLES[BARE]} ({args.rate:g} records/s, "
          f"default trigger, {args.rounds} round(s), load average {load_before[0]:.1f} -> {load_after[0]:.1f} on "
          f"{os.cpu_count()} CPUs, {time.monotonic() - started:.0f} s)")
    lines, met = summary(legs, args.target)
    for line in lines:
        print(line)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
