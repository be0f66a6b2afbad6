"""Benchmark: downtime of a standby upgrade and a cold upgrade vs. a bare restart, in one run.

On the embedded local stack (KRaft Kafka, local Spark, SQLite Airflow home), with a producer
running, each scenario starts version 1 of the demo job on a fresh topic, then:

* ``bare``: stops it gracefully with ``ckpt stop`` (the DAG's quiet period) and starts version 1
  again on its own checkpoint — the floor any restart pays;
* ``cold``: upgrades it to version 2 with ``stream_upgrade_cold`` (stop, handover, archive, then
  spark-submit of version 2);
* ``standby``: upgrades it with ``stream_upgrade`` (version 2 started before the stop, released
  at the handover).

Scenarios alternate (``--rounds`` rounds, each in a rotated order), so a slow minute of the
machine does not land on one scenario only. Downtime is read from the checkpoints' commit files:
the old version's last commit before the stop -> the first commit after it. Every scenario ends
with its sink audit: every Kafka (partition, offset) exactly once. Prints each run's downtime
and where it went (the upgrade report's share of the downtime per step), the median per
scenario and the ratios to the bare restart; the last line is ``downtime ratio standby/bare: X``.

    python bench/downtime.py [--rounds 1] [--rate 100] [--target 0.3]

Work dir ``.work/bench-downtime``, Airflow home ``.airflow/bench``; every process it started is
stopped at the end. Exit status 1 if a DAG did not upgrade, a sink audit fails, or the standby
ratio is above ``--target``.
"""

from __future__ import annotations

import argparse
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
#: The reference DAG's stop settings (build_stream_upgrade_dag defaults): the bare restart stops alike.
DAG_QUIET_PERIOD_S = 5.0
DAG_ACKNOWLEDGED_QUIET_PERIOD_S = 1.0
SCENARIOS = ("bare", "cold", "standby")
DAG_IDS = {"cold": "stream_upgrade_cold", "standby": "stream_upgrade"}


@dataclass
class Run:
    """One measured scenario: its downtime, where it went, and its sink audit."""

    scenario: str
    round: int
    downtime_s: float | None = None
    parts: dict[str, float] = field(default_factory=dict)
    audit: Any = None
    problem: str = ""

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


def bare_restart(demo: Any, v1: Any) -> tuple[float, dict[str, float]]:
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
    parts = {"ckpt stop (ack, quiet check)": round(stopped - last.committed_at, 3),
             "spark-submit to first commit": round(first.committed_at - stopped, 3)}
    return first.committed_at - last.committed_at, parts


def dag_upgrade(demo: Any, v1: Any, dag_id: str) -> tuple[float, dict[str, float]]:
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
    return downtime, report.downtime_by_step()


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
    parser.add_argument("--rounds", type=int, default=1, help="rounds of the three scenarios (default 1)")
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
    try:
        for round_ in range(args.rounds):
            order = SCENARIOS[round_ % 3:] + SCENARIOS[:round_ % 3]
            for scenario in order:
                run = measure(scenario, round_, args.work, kafka, args.rate)
                runs.append(run)
                print(f"round {round_} {scenario:<8} downtime "
                      f"{'-' if run.downtime_s is None else f'{run.downtime_s:.1f} s'}"
                      f"{'  ' + run.problem if run.problem else ''}", flush=True)
    finally:
        kafka.stop()
    load_after = os.getloadavg()

    print()
    print(f"downtime: standby upgrade, cold upgrade and bare restart ({args.rate:g} records/s, 1 s trigger, "
          f"{args.rounds} round(s), load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} CPUs)")
    for run in runs:
        audit = run.audit
        verdict = (f"sink: produced {audit.produced}, lost {audit.lost}, duplicated {audit.duplicated}"
                   if audit is not None else run.problem)
        print(f"\n{run.scenario} (round {run.round}): downtime "
              f"{'-' if run.downtime_s is None else f'{run.downtime_s:.1f} s'}; {verdict}")
        for label, seconds in run.parts.items():
            print(f"  {seconds:6.1f} s  {label}")
    medians = {s: statistics.median(r.downtime_s for r in runs if r.scenario == s and r.downtime_s is not None)
               for s in SCENARIOS if any(r.scenario == s and r.downtime_s is not None for r in runs)}
    print()
    for scenario, value in medians.items():
        print(f"median downtime {scenario:<8} {value:6.1f} s")
    ok = all(run.ok for run in runs) and {"bare", "standby"} <= set(medians)
    ratio = medians["standby"] / medians["bare"] if {"bare", "standby"} <= set(medians) else float("nan")
    if {"bare", "cold"} <= set(medians):
        print(f"downtime ratio cold/bare: {medians['cold'] / medians['bare']:.2f}")
    print(f"total {time.monotonic() - started:.0f} s; every sink audit {'passed' if ok else 'did NOT pass'}; "
          f"target standby <= {args.target:g}x bare: {'met' if ratio <= args.target else 'NOT met'}")
    print(f"downtime ratio standby/bare: {ratio:.2f}")
    return 0 if ok and ratio <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
