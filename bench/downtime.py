"""Benchmark: downtime of a switchover, a standby upgrade and a cold upgrade vs. a bare restart, in one run.

On the embedded local stack (KRaft Kafka, local Spark, SQLite Airflow home), with a producer
running, each scenario starts version 1 of the demo job on a fresh topic, then:

* ``bare``: stops it gracefully with ``ckpt stop`` (the DAG's quiet period) and starts version 1
  again on its own checkpoint — the floor any restart pays;
* ``cold``: upgrades it to version 2 with ``stream_upgrade_cold`` (stop, handover, archive, then
  spark-submit of version 2);
* ``standby``: upgrades it with ``stream_upgrade`` (version 2 started before the stop, released
  at the handover);
* ``switchover``: the switchover step, no scheduler. Version 2 is launched as a standby
  (``StreamLaunchOperator(standby=True)``, as the reference DAG's ``start_standby``), then
  ``StandbySwitchoverOperator`` runs directly in this process (execute; if it defers, its trigger
  runs to its event and ``execute_complete`` gets it) with the reference DAG's stop settings: the
  standby takes over inside the drivers the moment the old query acknowledges its stop. The step is
  not in the reference DAG yet, so no Airflow scheduler, task or DAG run is involved.

Scenarios alternate (``--rounds`` rounds, each in a rotated order), so a slow minute of the
machine does not land on one scenario only; ``--scenarios`` picks some of them (``bare``, the
baseline, is always one). Downtime is read from the checkpoints' commit files: the old version's
last commit before the stop -> the first commit after it. Every scenario ends with its sink audit:
every Kafka (partition, offset) exactly once, across both versions. Prints each run's downtime
and where it went (the upgrade report's share of the downtime per step; for the switchover, the
step's own ``DowntimeSplit``), the median per scenario and the ratios to the bare restart: ``downtime
ratio cold/bare``, ``downtime ratio switchover/bare`` and, last, ``downtime ratio standby/bare: X``
(``-`` when the standby upgrade was not run).

    python bench/downtime.py [--rounds 1] [--scenarios bare,cold,standby,switchover] [--rate 100] [--target 0.3]

Work dir ``.work/bench-downtime``, Airflow home ``.airflow/bench``; every process it started is
stopped at the end. Exit status 1 if a scenario did not upgrade (or restart), a sink audit fails,
or the standby ratio is above ``--target`` (when the standby upgrade ran).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import sys
import time
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
SCENARIOS = ("bare", "cold", "standby", "switchover")
DAG_IDS = {"cold": "stream_upgrade_cold", "standby": "stream_upgrade"}
TITLES = {"bare": "bare restart", "cold": "cold upgrade", "standby": "standby upgrade",
          "switchover": "switchover (switchover step, no scheduler)"}
NO_SCHEDULER = "switchover step, no scheduler"


def _scenarios(text: str) -> tuple[str, ...]:
    """``--scenarios``: names from SCENARIOS, comma-separated, ``bare`` (the baseline) among them; in
    SCENARIOS order."""
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(SCENARIOS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown scenario(s) {', '.join(unknown)}: "
                                         f"choose from {', '.join(SCENARIOS)}")
    if "bare" not in names:
        raise argparse.ArgumentTypeError("the ratios are against the bare restart measured in the same run: "
                                         "include bare")
    return tuple(name for name in SCENARIOS if name in names)


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


def bare_restart(demo: Any, v1: Any) -> tuple[float, dict[str, float | None]]:
    """Stop version 1 gracefully and start it again on its own checkpoint; (downtime, parts)."""
    from airflow_ckpt_provider.cli import main as ckpt
    from tests.harness.upgrade_demo import V1

    demo.wait_for_batch(demo.old_cp, _committed(demo.old_cp)[-1].batch_id + 3, 120, v1)  # steady state
    code = ckpt(["stop", str(demo.old_cp), "--timeout", "120", "--quiet-period", f"{DAG_QUIET_PERIOD_S:g}",
                 "--acknowledged-quiet-period", f"{DAG_ACKNOWLEDGED_QUIET_PERIOD_S:g}", "--pid", str(v1.pid)])
    stopped = time.time()
    if code != 0:
        raise RuntimeError(f"ckpt stop exited {code}")
    last = _committed(demo.old_cp)[-1]
    handle = demo.launch(V1, demo.old_cp, starting_offsets=None)
    demo.wait_for_batch(demo.old_cp, last.batch_id + 1, 600, handle)
    first = min((b for b in _committed(demo.old_cp) if b.batch_id > last.batch_id), key=lambda b: b.committed_at)
    parts: dict[str, float | None] = {"ckpt stop (ack, quiet check)": round(stopped - last.committed_at, 3),
                                      "spark-submit to first commit": round(first.committed_at - stopped, 3)}
    return first.committed_at - last.committed_at, parts


def dag_upgrade(demo: Any, v1: Any, dag_id: str) -> tuple[float, dict[str, float | None]]:
    """Upgrade version 1 to version 2 with the reference DAG ``dag_id``; (downtime, parts)."""
    from airflow_ckpt_provider.checkpoint.report import UpgradeReport, downtime_seconds
    from tests.harness.upgrade_demo import read_dag_report

    demo.wait_for_batch(demo.old_cp, _committed(demo.old_cp)[-1].batch_id + 3, 120, v1)  # steady state
    run = demo.upgrade_with_dag(v1, dag_id=dag_id)
    stored = read_dag_report(demo.archive_root)
    if stored is None or stored.get("outcome") != "upgraded":
        raise RuntimeError(f"{dag_id} did not upgrade: run {run.state}, outcome "
                           f"{(stored or {}).get('outcome', 'no report')}")
    report = UpgradeReport.from_json(stored)
    downtime = downtime_seconds(_committed(demo.old_cp), _committed(demo.new_cp))
    if downtime is None:
        raise RuntimeError("no commits to measure the downtime from")
    return downtime, dict(report.downtime_by_step())


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
    from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit, SwitchoverResult, epoch_seconds
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
        task_id="start_standby", standby=True, standby_timeout=DAG_STANDBY_TIMEOUT_S, **version_2)))
    demo.handles.append(standby)  # stopped with the demo, and the pid the sink audit's stop uses
    waiting = time.time()
    step = StandbySwitchoverOperator(
        task_id="switchover", standby_handle=standby.to_dict(), stop_timeout=DAG_STOP_TIMEOUT_S,
        quiet_period=DAG_QUIET_PERIOD_S, acknowledged_quiet_period=DAG_ACKNOWLEDGED_QUIET_PERIOD_S, **version_2)
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


def measure(scenario: str, round_: int, work: Path, kafka: Any, rate: float) -> Run:
    from tests.harness.upgrade_demo import UpgradeDemo

    run = Run(scenario, round_)
    folder = work / f"{scenario}-{round_}"
    shutil.rmtree(folder, ignore_errors=True)
    demo = UpgradeDemo(folder, kafka=kafka, rate=rate)
    try:
        v1 = demo.start()
        if scenario == "bare":
            run.downtime_s, run.parts = bare_restart(demo, v1)
            run.audit = demo.finish(demo.old_cp)
        elif scenario == "switchover":
            run.downtime_s, run.parts, run.note = switchover(demo, v1)
            run.audit = demo.finish(demo.new_cp)
        else:
            run.downtime_s, run.parts = dag_upgrade(demo, v1, DAG_IDS[scenario])
            run.audit = demo.finish(demo.new_cp)
    except Exception as exc:  # noqa: BLE001 - a failed scenario is reported, the others still run
        run.problem = f"{type(exc).__name__}: {exc}"
    finally:
        _kill_jobs_under(folder)
        demo.close()
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the chosen scenarios (default 1)")
    parser.add_argument("--scenarios", type=_scenarios, default=SCENARIOS,
                        help=f"comma-separated scenarios to run, bare among them (default {','.join(SCENARIOS)})")
    parser.add_argument("--rate", type=float, default=100.0, help="records per second produced (default 100)")
    parser.add_argument("--target", type=float, default=0.3, help="max standby / bare ratio (default 0.3)")
    parser.add_argument("--work", type=Path, default=REPO / ".work" / "bench-downtime")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    # Airflow reads its environment at import: point it at the benchmark's SQLite home first.
    from tests.harness.airflow_home import airflow_env, prepare_airflow_home

    home = REPO / ".airflow" / "bench"
    os.environ.update(airflow_env(home, REPO / "dags"))
    prepare_airflow_home(home, REPO / "dags")
    from airflow_ckpt_provider.local.kafka import LocalKafka

    started, load_before = time.monotonic(), os.getloadavg()
    shutil.rmtree(args.work, ignore_errors=True)
    kafka = LocalKafka(args.work / "kafka").start()
    runs: list[Run] = []
    chosen: tuple[str, ...] = args.scenarios
    try:
        for round_ in range(args.rounds):
            turn = round_ % len(chosen)
            for scenario in chosen[turn:] + chosen[:turn]:
                run = measure(scenario, round_, args.work, kafka, args.rate)
                runs.append(run)
                print(f"round {round_} {scenario:<10} downtime "
                      f"{'-' if run.downtime_s is None else f'{run.downtime_s:.1f} s'}"
                      f"{'  ' + run.problem if run.problem else ''}", flush=True)
    finally:
        kafka.stop()
    load_after = os.getloadavg()

    print()
    print(f"downtime: {', '.join(TITLES[s] for s in chosen)} ({args.rate:g} records/s, 1 s trigger, "
          f"{args.rounds} round(s), load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} CPUs)")
    for run in runs:
        audit = run.audit
        verdict = (f"sink: produced {audit.produced}, lost {audit.lost}, duplicated {audit.duplicated}"
                   if audit is not None else run.problem)
        print(f"\n{run.scenario} (round {run.round}{', ' + NO_SCHEDULER if run.scenario == 'switchover' else ''}): "
              f"downtime {'-' if run.downtime_s is None else f'{run.downtime_s:.1f} s'}; {verdict}")
        if run.note:
            print(f"  the step's DowntimeSplit: {run.note}")
        for label, seconds in run.parts.items():
            print(f"  {'     -' if seconds is None else f'{seconds:6.1f}'} s  {label}")
    medians = {s: statistics.median(r.downtime_s for r in runs if r.scenario == s and r.downtime_s is not None)
               for s in chosen if any(r.scenario == s and r.downtime_s is not None for r in runs)}
    print()
    for scenario, value in medians.items():
        print(f"median downtime {scenario:<10} {value:6.1f} s"
              f"{'  (' + NO_SCHEDULER + ')' if scenario == 'switchover' else ''}")
    ok = all(run.ok for run in runs) and set(chosen) <= set(medians)
    ratios = {s: medians[s] / medians["bare"] for s in medians if s != "bare" and "bare" in medians}
    if "cold" in ratios:
        print(f"downtime ratio cold/bare: {ratios['cold']:.2f}")
    if "standby" in chosen:
        met = "standby" in ratios and ratios["standby"] <= args.target
        target = f"target standby <= {args.target:g}x bare: {'met' if met else 'NOT met'}"
    else:
        met, target = True, "target standby/bare: not measured (standby not run)"
    print(f"total {time.monotonic() - started:.0f} s; every sink audit {'passed' if ok else 'did NOT pass'}; {target}")
    if "switchover" in ratios:
        print(f"downtime ratio switchover/bare: {ratios['switchover']:.2f}")
    elif "switchover" in chosen:
        print("downtime ratio switchover/bare: -")
    standby = f"{ratios['standby']:.2f}" if "standby" in ratios else "-"
    print(f"downtime ratio standby/bare: {standby}")
    return 0 if ok and met else 1


if __name__ == "__main__":
    sys.exit(main())
