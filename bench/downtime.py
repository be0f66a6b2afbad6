"""Benchmark: downtime of the upgrades vs. a bare restart, under a real scheduler and under ``dag.test()``, in one run.

On the embedded local stack (KRaft Kafka, local Spark, SQLite Airflow homes), with a producer
running, each scenario starts version 1 of a demo job on a fresh topic, then:

* ``bare``: stops it gracefully with ``ckpt stop`` (the DAG's quiet period) and starts version 1
  again on its own checkpoint — the floor any restart pays, and the baseline of every ratio
  (no scheduler involved);
* ``sched-cold``, ``sched-standby``, ``sched-switchover``: upgrade it to version 2 with
  ``stream_upgrade_cold`` (stop, handover, archive, then spark-submit of version 2),
  ``stream_upgrade`` (classic standby: version 2 started before the stop, released at the
  handover) or ``stream_upgrade_switchover`` (the standby takes over inside the drivers) under a
  REAL scheduler: one ``airflow standalone`` (LocalExecutor, SQLite; tests/harness/airflow_server.py),
  started once per bench run and shared by these scenarios, each DAG triggered through the REST
  API with ``require_approval`` off and waited for until its run ends;
* ``cold``, ``standby``, ``switchover-dag``: the same three DAGs run by ``dag.test()`` in this
  process, for comparison;
* ``switchover``: the switchover step, no scheduler. Version 2 is launched as a standby
  (``StreamLaunchOperator(standby=True)``, as the reference DAG's ``start_standby``), then
  ``StandbySwitchoverOperator`` runs directly in this process (execute; if it defers, its trigger
  runs to its event and ``execute_complete`` gets it) with the reference DAG's stop settings;
* ``stateful-bare`` and ``sched-stateful``: the stateful demo job (running totals per customer,
  ``dags/jobs/purchases_v1.py`` -> ``purchases_v2.py``): a bare restart, and the upgrade under
  the real scheduler with its state carried: the switchover DAG, whose standby seeds the state
  in its own session (no export job inside the downtime; the export runs after the switch).

The switchover DAG scenarios run when a DAG ``stream_upgrade_switchover`` exists in ``dags/``;
otherwise they are reported "not available". Scenarios alternate (``--rounds`` rounds, each in a
rotated order), so a slow minute of the machine does not land on one scenario only;
``--scenarios`` picks some of them (``bare``, the baseline, is always one; ``sched-stateful``
needs ``stateful-bare``). Downtime is read from the checkpoints' commit files: the old version's
last commit before the stop -> the first commit after it; where it went comes from the upgrade
report (``downtime_by_step``) read the same way for ``dag.test()`` and scheduled runs. Every
scenario ends with its sink audit: for the stateless job every Kafka (partition, offset) exactly
once across both versions; for the stateful job every customer's total and count equal to Kafka's
(the count's shortfall is records lost, its excess records duplicated).

The output ends with the ratios of the medians to the bare restarts of the same run; the last
two lines are ``downtime ratio standby/bare (real scheduler): X`` (the switchover DAG when it
exists, else the classic standby; the line before the last two says which) and ``downtime ratio
stateful standby/bare (real scheduler): Y`` (``-`` when not measured).

    python bench/downtime.py [--rounds 1] [--scenarios bare,sched-standby,...] [--rate 100] [--target 0.2]
                             [--work DIR] [--airflow-home DIR]

Work dir ``.work/bench-downtime``, Airflow homes under ``.airflow/bench`` (``dag-test/`` and
``standalone/``); every process it started is stopped at the end. Exit status 1 if a scenario
did not upgrade (or restart), a sink audit is not exact, or the real-scheduler standby ratio is
above ``--target`` (when measured).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# the upgrade demo is the test harness of the checkout (tests/harness/), not part of the package
sys.path.insert(0, str(REPO))
#: The reference DAG's stop settings (build_stream_upgrade_dag defaults): the bare restart and the
#: switchover step stop alike.
DAG_QUIET_PERIOD_S = 5.0
DAG_ACKNOWLEDGED_QUIET_PERIOD_S = 1.0
DAG_STOP_TIMEOUT_S = 300.0
#: The reference DAG's launch settings (build_stream_upgrade_dag defaults), for the switchover's standby.
DAG_POLL_INTERVAL_S = 0.5
DAG_FIRST_COMMIT_TIMEOUT_S = 600.0
DAG_STANDBY_TIMEOUT_S = 3600.0
#: One DAG run under the scheduler on a loaded 2-core machine: minutes, not seconds.
RUN_TIMEOUT_S = 1800.0
AIRFLOW_STARTUP_TIMEOUT_S = 600.0
SWITCHOVER_DAG_ID = "stream_upgrade_switchover"
SCENARIOS = ("bare", "cold", "standby", "switchover-dag", "switchover",
             "sched-cold", "sched-standby", "sched-switchover", "stateful-bare", "sched-stateful")
DAG_IDS = {"cold": "stream_upgrade_cold", "standby": "stream_upgrade", "switchover-dag": SWITCHOVER_DAG_ID,
           "sched-cold": "stream_upgrade_cold", "sched-standby": "stream_upgrade",
           "sched-switchover": SWITCHOVER_DAG_ID, "sched-stateful": SWITCHOVER_DAG_ID}
#: Run by the shared ``airflow standalone``.
SCHEDULED = frozenset({"sched-cold", "sched-standby", "sched-switchover", "sched-stateful"})
#: On the stateful demo job (purchases); the others run the stateless one (demo events).
STATEFUL = frozenset({"stateful-bare", "sched-stateful"})
BARE = frozenset({"bare", "stateful-bare"})
#: Need a DAG ``stream_upgrade_switchover`` in dags/.
NEEDS_SWITCHOVER_DAG = frozenset({"switchover-dag", "sched-switchover", "sched-stateful"})
TITLES = {"bare": "bare restart", "cold": "cold upgrade (dag.test)", "standby": "classic standby upgrade (dag.test)",
          "switchover-dag": "switchover upgrade (dag.test)", "switchover": "switchover step (no scheduler)",
          "sched-cold": "cold upgrade (real scheduler)", "sched-standby": "classic standby upgrade (real scheduler)",
          "sched-switchover": "switchover upgrade (real scheduler)", "stateful-bare": "stateful bare restart",
          "sched-stateful": "stateful switchover upgrade, state seeded (real scheduler)"}
SPLIT_LABEL = "the step's DowntimeSplit: "
STATEFUL_PATH = "stateful upgrade path: switchover, the state seeded in the standby's session"


def _scenarios(text: str) -> tuple[str, ...]:
    """``--scenarios``: names from SCENARIOS, comma-separated, ``bare`` (the baseline) among them
    and ``stateful-bare`` with ``sched-stateful``; in SCENARIOS order."""
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(SCENARIOS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown scenario(s) {', '.join(unknown)}: "
                                         f"choose from {', '.join(SCENARIOS)}")
    if "bare" not in names:
        raise argparse.ArgumentTypeError("the ratios are against the bare restart measured in the same run: "
                                         "include bare")
    if "sched-stateful" in names and "stateful-bare" not in names:
        raise argparse.ArgumentTypeError("the stateful ratio is against the stateful bare restart measured in "
                                         "the same run: include stateful-bare")
    return tuple(name for name in SCENARIOS if name in names)


def available(chosen: Sequence[str], switchover_dag: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the scenarios that can run, those that cannot: the switchover DAG's without that DAG)."""
    missing = () if switchover_dag else tuple(s for s in chosen if s in NEEDS_SWITCHOVER_DAG)
    return tuple(s for s in chosen if s not in missing), missing


@dataclass(frozen=True)
class StateSinkAudit:
    """The stateful job's sink audit: each customer's (total, count) in the sink against Kafka's.
    ``lost`` / ``duplicated`` are the records missing from / counted twice in the customers'
    counts; ``mismatched`` the customers whose total or count differs (or who are missing)."""

    produced: int
    customers: int
    mismatched: int
    lost: int
    duplicated: int

    @property
    def ok(self) -> bool:
        return self.customers > 0 and self.mismatched == 0 and self.lost == 0 and self.duplicated == 0


def state_sink_audit(truth: Mapping[int, tuple[int, int]], seen: Mapping[int, tuple[int, int]]) -> StateSinkAudit:
    """Compare every customer's (total, count) in ``seen`` (the sink) with ``truth`` (Kafka);
    a customer the sink has but Kafka does not counts as duplicated records."""
    lost = duplicated = mismatched = 0
    for customer in set(truth) | set(seen):
        expected, found = truth.get(customer, (0, 0)), seen.get(customer, (0, 0))
        mismatched += customer not in seen or expected != found
        lost += max(0, expected[1] - found[1])
        duplicated += max(0, found[1] - expected[1])
    return StateSinkAudit(produced=sum(n for _, n in truth.values()), customers=len(truth),
                          mismatched=mismatched, lost=lost, duplicated=duplicated)


def verdict(audit: Any) -> str:  # noqa: ANN401 - a SinkAudit or a StateSinkAudit
    """The audit in one line."""
    line = f"sink: produced {audit.produced}, lost {audit.lost}, duplicated {audit.duplicated}"
    if isinstance(audit, StateSinkAudit):
        line += f"; customers {audit.customers}, totals differing {audit.mismatched}"
    return line


@dataclass
class Run:
    """One measured scenario: its downtime, where it went, and its sink audit."""

    scenario: str
    round: int
    downtime_s: float | None = None
    parts: dict[str, float | None] = field(default_factory=dict)
    audit: Any = None
    problem: str = ""
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem and self.audit is not None and self.audit.ok and self.downtime_s is not None


def _committed(checkpoint: Path) -> list[Any]:
    """The checkpoint's retained committed batches, oldest first (BatchRecord)."""
    import fsspec

    from airflow_ckpt_provider.storage.history import batch_history

    return [b for b in batch_history(*fsspec.core.url_to_fs(str(checkpoint))) if b.committed_at is not None]


def _kill_jobs_under(root: Path) -> None:
    """Kill the process groups of the Spark jobs running on checkpoints under ``root`` (the
    versions the DAG launched are not in UpgradeDemo.handles)."""
    from airflow_ckpt_provider.jobs.local import group_members, kill_group

    needle = str(root).encode()
    groups = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and needle in (entry / "cmdline").read_bytes():
                groups.add(os.getpgid(int(entry.name)))
        except OSError:
            continue
    for group in groups - {os.getpgrp()}:
        if group_members(group):
            kill_group(group)


def find_dag_file(dags: Path, dag_id: str) -> Path | None:
    """The file in ``dags`` (top level, as the DAG processor's bundle) that defines ``dag_id``, or
    None: files that name it are imported and asked for it."""
    from airflow_ckpt_provider.local.errors import DagNotFound
    from tests.harness.upgrade_demo import load_reference_dag

    for path in sorted(dags.glob("*.py")):
        if dag_id not in path.read_text(errors="replace"):
            continue
        try:
            load_reference_dag(dag_id, path)
        except DagNotFound:
            continue
        return path
    return None


def bare_restart(demo: Any, v1: Any) -> tuple[float, dict[str, float | None]]:
    """Stop version 1 gracefully and start it again on its own checkpoint; (downtime, parts)."""
    from airflow_ckpt_provider.cli import main as ckpt

    demo.wait_for_batch(demo.old_cp, _committed(demo.old_cp)[-1].batch_id + 3, 120, v1)  # steady state
    code = ckpt(["stop", str(demo.old_cp), "--timeout", "120", "--quiet-period", f"{DAG_QUIET_PERIOD_S:g}",
                 "--acknowledged-quiet-period", f"{DAG_ACKNOWLEDGED_QUIET_PERIOD_S:g}", "--pid", str(v1.pid)])
    stopped = time.time()
    if code != 0:
        raise RuntimeError(f"ckpt stop exited {code}")
    last = _committed(demo.old_cp)[-1]
    handle = demo.launch(demo.v1, demo.old_cp, starting_offsets=None)
    demo.wait_for_batch(demo.old_cp, last.batch_id + 1, 600, handle)
    first = min((b for b in _committed(demo.old_cp) if b.batch_id > last.batch_id), key=lambda b: b.committed_at)
    parts: dict[str, float | None] = {"ckpt stop (ack, quiet check)": round(stopped - last.committed_at, 3),
                                      "spark-submit to first commit": round(first.committed_at - stopped, 3)}
    return first.committed_at - last.committed_at, parts


def report_parts(stored: Mapping[str, Any] | None, dag_id: str, run_state: str) -> dict[str, float | None]:
    """Where the downtime went, from the upgrade report ``stored`` (``upgrade-report.json``) of a
    run of ``dag_id`` that ended ``run_state``: its ``downtime_by_step``. ``RuntimeError`` unless
    the report says the stream was upgraded."""
    from airflow_ckpt_provider.checkpoint.report import UpgradeReport

    if stored is None or stored.get("outcome") != "upgraded":
        raise RuntimeError(f"{dag_id} did not upgrade: run {run_state}, outcome "
                           f"{(stored or {}).get('outcome', 'no report')}")
    return dict(UpgradeReport.from_json(stored).downtime_by_step())


def report_split(stored: Mapping[str, Any] | None) -> str:
    """The switchover's DowntimeSplit in words, from the report ``stored`` of a switchover upgrade
    (empty for the other paths)."""
    from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit

    split = (stored or {}).get("switchover")
    return DowntimeSplit.from_json(split).describe() if split else ""


def measured_upgrade(demo: Any, dag_id: str, run_state: str) -> tuple[float, dict[str, float | None], str]:
    """After a run of ``dag_id``: (downtime from the two checkpoints' commits, the report's parts,
    the report's switchover split in words or "")."""
    from airflow_ckpt_provider.checkpoint.report import downtime_seconds
    from tests.harness.upgrade_demo import read_dag_report

    stored = read_dag_report(demo.archive_root, demo.stream)
    parts = report_parts(stored, dag_id, run_state)
    downtime = downtime_seconds(_committed(demo.old_cp), _committed(demo.new_cp))
    if downtime is None:
        raise RuntimeError("no commits to measure the downtime from")
    return downtime, parts, report_split(stored)


def dag_upgrade(demo: Any, v1: Any, dag_id: str, dag_file: Path) -> tuple[float, dict[str, float | None], str]:
    """Upgrade version 1 to version 2 with ``dag_id`` run by ``dag.test()``; (downtime, parts, the
    switchover split in words or "")."""
    demo.wait_for_batch(demo.old_cp, _committed(demo.old_cp)[-1].batch_id + 3, 120, v1)  # steady state
    run = demo.upgrade_with_dag(v1, dag_id=dag_id, dag_file=dag_file)
    downtime, parts, split = measured_upgrade(demo, dag_id, str(run.state))
    return downtime, parts, f"the report's switchover split: {split}" if split else ""


def scheduled_upgrade(demo: Any, v1: Any, dag_id: str, airflow: Any,
                      **overrides: Any) -> tuple[float, dict[str, float | None], str]:
    """Upgrade version 1 to version 2 with ``dag_id`` under the real scheduler: triggered through
    ``airflow``'s REST API (approval off, the demo's conf and ``overrides``), waited for until its
    run ends; (downtime, parts, the run in words)."""
    demo.wait_for_batch(demo.old_cp, _committed(demo.old_cp)[-1].batch_id + 3, 120, v1)  # steady state
    triggered = time.monotonic()
    run_id = airflow.trigger(dag_id, demo.dag_conf(v1, require_approval=False, **overrides), timeout=600)
    state = airflow.wait_for_run(dag_id, run_id, timeout=RUN_TIMEOUT_S)
    downtime, parts, split = measured_upgrade(demo, dag_id, f"{run_id} {state}")
    note = f"run {run_id}: {state} after {time.monotonic() - triggered:.0f} s"
    return downtime, parts, note + (f"; the report's switchover split: {split}" if split else "")


class _TaskInstance:
    """The task instance an operator's execute() sees without a scheduler: only XCom pushes are used."""

    def __init__(self) -> None:
        self.xcom: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:  # noqa: ANN401 - any JSON value
        self.xcom[key] = value


def run_without_scheduler(operator: Any) -> Any:  # noqa: ANN401 - an operator and its JSON result
    """``operator.execute``; if it defers, its trigger to its first event and the method it named
    (``execute_complete``), as the triggerer would: the step without a scheduler."""
    from airflow.sdk.exceptions import TaskDeferred

    context: dict[str, Any] = {"ti": _TaskInstance()}
    try:
        return operator.execute(context)
    except TaskDeferred as raised:
        deferred = raised

    async def first_event() -> Any:  # noqa: ANN401 - the event's payload
        async for event in deferred.trigger.run():
            return event.payload
        return None

    payload = asyncio.run(first_event())
    return getattr(operator, deferred.method_name)(context, payload, **(deferred.kwargs or {}))


def switchover(demo: Any, v1: Any) -> tuple[float, dict[str, float | None], str]:
    """Version 2 as a standby, then the switchover step run directly (no scheduler); (downtime, parts,
    the step's DowntimeSplit in words): parts are the step's own DowntimeSplit and what lies around it."""
    from airflow_ckpt_provider.checkpoint import LaunchHandle
    from airflow_ckpt_provider.checkpoint.report import downtime_seconds
    from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit, SwitchoverResult
    from airflow_ckpt_provider.clock import epoch_seconds
    from airflow_ckpt_provider.operators.launch import StreamLaunchOperator
    from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator

    # what the reference DAG's start_standby and relaunch get for version 2 (the demo's conf)
    version_2: dict[str, Any] = dict(
        application=str(demo.v2), application_args=demo.job_args(demo.v2), conf=demo.spark_conf(demo.new_spark),
        master="local[2]", deploy_mode="client", log_dir=str(demo.logs), checkpoint_uri=str(demo.new_cp),
        old_checkpoint_uri=str(demo.old_cp), first_commit_timeout=DAG_FIRST_COMMIT_TIMEOUT_S,
        poll_interval=DAG_POLL_INTERVAL_S)
    demo.wait_for_batch(demo.old_cp, _committed(demo.old_cp)[-1].batch_id + 3, 120, v1)  # steady state
    launched = time.time()
    standby = LaunchHandle.from_json(run_without_scheduler(StreamLaunchOperator(
        task_id="start_standby", step="start_standby", standby=True, standby_timeout=DAG_STANDBY_TIMEOUT_S,
        **version_2)))
    demo.handles.append(standby)  # stopped with the demo, and the pid the sink audit's stop uses
    waiting = time.time()
    step = StandbySwitchoverOperator(
        task_id="switchover", standby_handle=standby.to_dict(), stop_timeout=DAG_STOP_TIMEOUT_S,
        quiet_period=DAG_QUIET_PERIOD_S, acknowledged_quiet_period=DAG_ACKNOWLEDGED_QUIET_PERIOD_S,
        # as the reference DAG with the demo's carry_state off: version 1's deduplication state is not
        # version 2's (it deduplicates on other columns), so version 2 starts with empty state
        accept_empty_state=True, **version_2)
    began = time.time()
    result = SwitchoverResult.from_json(run_without_scheduler(step))
    ended = time.time()
    old, new = _committed(demo.old_cp), _committed(demo.new_cp)
    downtime = downtime_seconds(old, new)
    if downtime is None:
        raise RuntimeError("no commits to measure the downtime from")
    split = DowntimeSplit.from_json(result.downtime)
    acknowledged = epoch_seconds(str(result.used.get("stop_acknowledged_at", "")))
    last_old = max(b.committed_at for b in old)
    parts: dict[str, float | None] = {
        "standby launch to its heartbeat (before the stop, not downtime)": round(waiting - launched, 3),
        "step, start to result (incl. the quiet check after the first commit)": round(ended - began, 3),
        "old query: last commit -> stop acknowledged (in the downtime)":
            None if acknowledged is None else round(acknowledged - last_old, 3),
        "split: stop request -> acknowledged (stop_s)": split.stop_s,
        "split: acknowledged -> standby saw it (notice_s)": split.notice_s,
        "split: standby reads the old last commit (handover_read_s)": split.handover_read_s,
        "split: state wait (state_wait_s)": split.state_wait_s,
        "split: handover read -> query released (query_start_s)": split.query_start_s,
        "split: released -> first commit (first_batch_s)": split.first_batch_s,
        "split: acknowledged -> first commit (downtime_s)": split.downtime_s,
    }
    return downtime, parts, split.describe()


def stateful_job() -> dict[str, Any]:
    """UpgradeDemo arguments of the stateful demo job (the one the demo and the stateful system
    test upgrade), both versions on this interpreter's Spark."""
    from tests.harness.records import purchase
    from tests.harness.upgrade_demo import DAGS

    return {"v1": DAGS / "jobs" / "purchases_v1.py", "v2": DAGS / "jobs" / "purchases_v2.py",
            "record": purchase, "topic": "purchases", "stream": "purchases"}


def stateful_audit(demo: Any, checkpoint: Path, version: str) -> StateSinkAudit:
    """Drain ``checkpoint``'s query (version ``version`` of the purchases job) and compare each
    customer's total in the sink with Kafka's."""
    from tests.harness.state_audit import kafka_totals, sink_totals

    demo.drain(checkpoint)
    truth = kafka_totals(demo.kafka.bootstrap_servers, demo.topic)
    return state_sink_audit(truth, sink_totals(demo.sink, version))


def measure(scenario: str, round_: int, work: Path, kafka: Any, rate: float, *, airflow: Any = None,
            dag_files: Mapping[str, Path] | None = None) -> Run:
    """One scenario on a fresh topic and checkpoints; ``airflow`` runs the scheduled ones,
    ``dag_files`` (DAG id -> file) are for ``dag.test()``."""
    from tests.harness.upgrade_demo import UpgradeDemo

    run = Run(scenario, round_)
    folder = work / f"{scenario}-{round_}"
    shutil.rmtree(folder, ignore_errors=True)
    stateful = scenario in STATEFUL
    demo = UpgradeDemo(folder, kafka=kafka, rate=rate, **(stateful_job() if stateful else {}))
    try:
        v1 = demo.start(min_batches=3 if stateful else 2, timeout=600)
        if scenario in BARE:
            run.downtime_s, run.parts = bare_restart(demo, v1)
            checkpoint, version = demo.old_cp, "v1"
        elif scenario == "switchover":
            run.downtime_s, run.parts, run.note = switchover(demo, v1)
            checkpoint, version = demo.new_cp, "v2"
        elif scenario in SCHEDULED:
            overrides = {"carry_state": True} if stateful else {}
            run.downtime_s, run.parts, run.note = scheduled_upgrade(demo, v1, DAG_IDS[scenario], airflow, **overrides)
            checkpoint, version = demo.new_cp, "v2"
        else:
            dag_id = DAG_IDS[scenario]
            run.downtime_s, run.parts, run.note = dag_upgrade(demo, v1, dag_id, (dag_files or {})[dag_id])
            checkpoint, version = demo.new_cp, "v2"
        run.audit = stateful_audit(demo, checkpoint, version) if stateful else demo.finish(checkpoint)
    except Exception as exc:  # noqa: BLE001 - a failed scenario is reported, the others still run
        run.problem = f"{type(exc).__name__}: {exc}"
    finally:
        _kill_jobs_under(folder)
        demo.close()
    return run


def medians(runs: Sequence[Run]) -> dict[str, float]:
    """The median downtime per scenario, over the runs that measured one."""
    by_scenario: dict[str, list[float]] = {}
    for run in runs:
        if run.downtime_s is not None:
            by_scenario.setdefault(run.scenario, []).append(run.downtime_s)
    return {scenario: statistics.median(values) for scenario, values in by_scenario.items()}


def ratio(median: Mapping[str, float], scenario: str, baseline: str = "bare") -> float | None:
    """``scenario``'s median over ``baseline``'s, None when either was not measured."""
    if scenario not in median or not median.get(baseline):
        return None
    return median[scenario] / median[baseline]


def standby_scenario(switchover_dag: bool) -> str:
    """The real-scheduler standby upgrade the headline ratio takes: the switchover DAG when it
    exists, else the classic standby."""
    return "sched-switchover" if switchover_dag else "sched-standby"


def ratio_lines(median: Mapping[str, float], chosen: Sequence[str], switchover_dag: bool) -> list[str]:
    """The summary's ratio lines, against the bare restarts of the same run; the last two are the
    headline: ``downtime ratio standby/bare (real scheduler): X`` and ``downtime ratio stateful
    standby/bare (real scheduler): Y`` (``-`` when not measured), the two lines before them say
    which upgrade paths those are."""
    def shown(scenario: str, baseline: str = "bare") -> str:
        if scenario in NEEDS_SWITCHOVER_DAG and not switchover_dag:
            return f"not available (no DAG {SWITCHOVER_DAG_ID} in dags/)"
        value = ratio(median, scenario, baseline)
        return "-" if value is None else f"{value:.2f}"

    lines = [f"downtime ratio {label}/bare ({how}): {shown(scenario)}"
             for scenario, label, how in (
                 ("cold", "cold", "dag.test"), ("standby", "classic standby", "dag.test"),
                 ("switchover-dag", "switchover", "dag.test"), ("switchover", "switchover step", "no scheduler"),
                 ("sched-cold", "cold", "real scheduler"), ("sched-standby", "classic standby", "real scheduler"),
                 ("sched-switchover", "switchover", "real scheduler"))
             if scenario in chosen or (scenario in NEEDS_SWITCHOVER_DAG and not switchover_dag)]
    path = (f"switchover ({SWITCHOVER_DAG_ID})" if switchover_dag
            else f"classic standby (stream_upgrade; no DAG {SWITCHOVER_DAG_ID} in dags/)")
    stateful = STATEFUL_PATH if switchover_dag else f"stateful upgrade path: none (no DAG {SWITCHOVER_DAG_ID} in dags/)"
    lines += [f"standby upgrade path (real scheduler): {path}", stateful,
              f"downtime ratio standby/bare (real scheduler): {shown(standby_scenario(switchover_dag))}",
              f"downtime ratio stateful standby/bare (real scheduler): {shown('sched-stateful', 'stateful-bare')}"]
    return lines


def outcome(runs: Sequence[Run]) -> str:
    """The runs' audits and failures in words: ``every sink audit exact`` only when every run
    audited its sink and found nothing lost or duplicated."""
    inexact = [f"{r.scenario} (round {r.round})" for r in runs if r.audit is not None and not r.audit.ok]
    failed = [f"{r.scenario} (round {r.round})" for r in runs if r.problem or r.downtime_s is None]
    words = [f"sink audit NOT exact: {', '.join(inexact)}" if inexact else
             "every sink audit exact" if all(r.audit is not None for r in runs) else "every sink audit made was exact"]
    if failed:
        words.append(f"FAILED: {', '.join(failed)}")
    return "; ".join(words)


def start_airflow(home: Path, kafka: Any) -> Any:  # noqa: ANN401 - a running LocalAirflow
    """One ``airflow standalone`` (LocalExecutor, SQLite in ``home``) on this checkout's dags/,
    its ``kafka_default`` the bench's broker: the real scheduler the scheduled scenarios share."""
    from tests.harness.airflow_server import LocalAirflow
    from tests.harness.upgrade_demo import DAGS, kafka_connection

    env = {"AIRFLOW_CONN_KAFKA_DEFAULT": kafka_connection(kafka.bootstrap_servers)}
    return LocalAirflow(home, DAGS, env=env, startup_timeout=AIRFLOW_STARTUP_TIMEOUT_S).start()


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the chosen scenarios (default 1)")
    parser.add_argument("--scenarios", type=_scenarios, default=SCENARIOS,
                        help=f"comma-separated scenarios to run, bare among them (default {','.join(SCENARIOS)})")
    parser.add_argument("--rate", type=float, default=100.0, help="records per second produced (default 100)")
    parser.add_argument("--target", type=float, default=0.2,
                        help="max standby / bare ratio under the real scheduler (default 0.2)")
    parser.add_argument("--work", type=Path, default=REPO / ".work" / "bench-downtime")
    parser.add_argument("--airflow-home", type=Path, default=REPO / ".airflow" / "bench",
                        help="Airflow homes: DIR/dag-test for dag.test(), DIR/standalone for the scheduler")
    args = parser.parse_args(argv)
    # a SIGTERM (or a SIGINT a background shell ignores) unwinds like an exception: every scenario's
    # and the run's clean-up stops the jobs, the standalone Airflow and the broker it started (while
    # a dag.test() task runs, its task runner handles SIGTERM itself: the signal ends that task)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    signal.signal(signal.SIGINT, _exit_on_signal)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    # Airflow reads its environment at import: point it at the dag.test() SQLite home first.
    from airflow_ckpt_provider.local.airflow_home import airflow_env, prepare_airflow_home
    from tests.harness.upgrade_demo import DAGS

    home = args.airflow_home.resolve() / "dag-test"
    os.environ.update(airflow_env(home, DAGS))
    prepare_airflow_home(home, DAGS)
    from airflow_ckpt_provider.local.kafka import LocalKafka

    switchover_file = find_dag_file(DAGS, SWITCHOVER_DAG_ID)
    dag_files = {dag_id: DAGS / "stream_upgrade.py" for dag_id in ("stream_upgrade", "stream_upgrade_cold")}
    if switchover_file is not None:
        dag_files[SWITCHOVER_DAG_ID] = switchover_file
    chosen, missing = available(args.scenarios, switchover_file is not None)
    if missing:
        print(f"not available (no DAG {SWITCHOVER_DAG_ID} in {DAGS}): {', '.join(missing)}", flush=True)

    started, load_before = time.monotonic(), os.getloadavg()
    shutil.rmtree(args.work, ignore_errors=True)
    kafka = LocalKafka(args.work / "kafka").start()
    airflow, airflow_note = None, "no scheduled scenario"
    runs: list[Run] = []
    try:
        if SCHEDULED & set(chosen):
            began = time.monotonic()
            airflow = start_airflow(args.airflow_home.resolve() / "standalone", kafka)
            airflow_note = (f"airflow standalone (LocalExecutor, SQLite) on {airflow.url}, healthy after "
                            f"{time.monotonic() - began:.0f} s, home {airflow.home}")
            print(airflow_note, flush=True)
        for round_ in range(args.rounds):
            turn = round_ % len(chosen)
            for scenario in chosen[turn:] + chosen[:turn]:
                run = measure(scenario, round_, args.work, kafka, args.rate, airflow=airflow, dag_files=dag_files)
                runs.append(run)
                print(f"round {round_} {scenario:<16} downtime "
                      f"{'-' if run.downtime_s is None else f'{run.downtime_s:.1f} s'}"
                      f"{'  ' + run.problem if run.problem else ''}", flush=True)
    finally:
        if airflow is not None:
            airflow.stop()
        kafka.stop()
    load_after = os.getloadavg()

    print()
    print(f"downtime: {', '.join(TITLES[s] for s in chosen)} ({args.rate:g} records/s, 1 s trigger, "
          f"{args.rounds} round(s), load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} CPUs)")
    print(f"real scheduler: {airflow_note}{'; every scenario ran while it was up' if airflow is not None else ''}")
    for run in runs:
        verdict_line = verdict(run.audit) if run.audit is not None else run.problem
        print(f"\n{run.scenario} ({TITLES[run.scenario]}, round {run.round}): "
              f"downtime {'-' if run.downtime_s is None else f'{run.downtime_s:.1f} s'}; {verdict_line}")
        if run.note:
            print(f"  {SPLIT_LABEL if run.scenario == 'switchover' else ''}{run.note}")
        for label, seconds in run.parts.items():
            print(f"  {'     -' if seconds is None else f'{seconds:6.1f}'} s  {label}")
    median = medians(runs)
    print()
    for scenario in chosen:
        if scenario in median:
            print(f"median downtime {scenario:<16} {median[scenario]:6.1f} s  ({TITLES[scenario]})")
    ok = all(run.ok for run in runs) and set(chosen) <= set(median)
    headline = ratio(median, standby_scenario(switchover_file is not None))
    if headline is None:
        met, target = True, "target standby/bare (real scheduler): not measured"
    else:
        met = headline <= args.target
        target = f"target standby <= {args.target:g}x bare (real scheduler): {'met' if met else 'NOT met'}"
    print(f"total {time.monotonic() - started:.0f} s; {outcome(runs)}; {target}")
    for line in ratio_lines(median, chosen, switchover_file is not None):
        print(line)
    return 0 if ok and met else 1


if __name__ == "__main__":
    sys.exit(main())
