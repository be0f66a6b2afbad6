"""Benchmark: downtime of the reference upgrade DAG vs. a bare restart, measured in the same run.

On the embedded local stack (KRaft Kafka, local Spark, SQLite Airflow home) with a producer
running: start version 1 of the demo job, upgrade it to version 2 with the reference DAG
(``dags/stream_upgrade.py`` through ``dag.test()``, approval answered automatically), then, as
the baseline, stop version 2 gracefully with ``ckpt stop`` (the DAG's quiet period, 5 s) and
start it again on its own checkpoint. Downtime is read from the checkpoints' commit files:

* upgrade: version 1's last commit -> version 2's first commit;
* bare restart: the last commit before the stop -> the first commit after the restart.

Prints each DAG step's seconds (from the report the DAG stored in the archive), where each
downtime went, both downtimes and their ratio (target: upgrade <= 1.2x the bare restart), then
audits the sink (every Kafka record exactly once across both). Work dir ``.work/bench-downtime``,
Airflow home ``.airflow/bench``; every process it started is stopped at the end.

    python bench/downtime.py [--rate 100] [--target 1.2]

Exit status 1 if the DAG did not upgrade, the sink audit fails, or the ratio is above --target.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAG_QUIET_PERIOD_S = 5.0  # build_stream_upgrade_dag(quiet_period=5.0), the reference DAG's default


def _epoch(iso: str | None) -> float | None:
    return datetime.fromisoformat(iso).timestamp() if iso else None


def _history(checkpoint: Path) -> list:  # noqa: ANN401 - list[BatchRecord]
    """The checkpoint's retained batches (id, planned time, commit time, input rows), oldest first."""
    import fsspec

    from airflow_ckpt_provider.checkpoint.history import batch_history

    return batch_history(*fsspec.core.url_to_fs(str(checkpoint)))


def _committed(checkpoint: Path) -> list:  # noqa: ANN401 - list[BatchRecord]
    return [b for b in _history(checkpoint) if b.committed_at is not None]


def _heartbeat_group(checkpoint: Path) -> int | None:
    """Process group of the driver heartbeating on ``checkpoint`` (the launcher starts each job
    in its own session), None when there is none or it is gone."""
    import fsspec

    from airflow_ckpt_provider.checkpoint.stop import ControlFiles

    beat = ControlFiles(*fsspec.core.url_to_fs(str(checkpoint))).heartbeat()
    if beat is None or not beat.pid or not beat.is_alive():  # a stopped driver's pid may be reused
        return None
    try:
        group = os.getpgid(beat.pid)
    except ProcessLookupError:
        return None
    return group if group != os.getpgrp() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100.0, help="records per second produced (default 100)")
    parser.add_argument("--target", type=float, default=1.2, help="max upgrade / bare restart ratio (default 1.2)")
    parser.add_argument("--work", type=Path, default=REPO / ".work" / "bench-downtime")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    # Airflow reads its environment at import: point it at the benchmark's SQLite home first.
    from airflow_ckpt_provider.local.airflow_home import airflow_env, prepare_airflow_home

    home = REPO / ".airflow" / "bench"
    os.environ.update(airflow_env(home, REPO / "dags"))
    prepare_airflow_home(home, REPO / "dags")

    from airflow_ckpt_provider.checkpoint.report import downtime_seconds
    from airflow_ckpt_provider.cli import main as ckpt
    from airflow_ckpt_provider.local.upgrade_demo import V2, UpgradeDemo, read_dag_report

    started = time.monotonic()
    load_before = os.getloadavg()
    demo = UpgradeDemo(args.work, rate=args.rate)
    pgid: int | None = None  # the version 2 job the DAG launched: not one of demo.handles
    try:
        # -- the upgrade, with the reference DAG ---------------------------------------------------
        v1 = demo.start()
        run = demo.upgrade_with_dag(v1)
        report = read_dag_report(demo.archive_root) or {}
        if report.get("outcome") != "upgraded":
            print(f"the DAG did not upgrade: run {run.state}, outcome {report.get('outcome', 'no report')}")
            return 1
        old_hist, new_hist = _history(demo.old_cp), _history(demo.new_cp)
        upgrade_s = downtime_seconds(old_hist, new_hist)
        v1_last = max(b.committed_at for b in old_hist if b.committed_at is not None)
        v2_first = min((b for b in new_hist if b.committed_at is not None), key=lambda b: b.committed_at)
        steps = {s["name"]: s for s in report.get("steps", [])}

        # -- the baseline: stop version 2 gracefully and start it again on its own checkpoint -----
        pgid = _heartbeat_group(demo.new_cp)
        demo.wait_for_batch(demo.new_cp, _committed(demo.new_cp)[-1].batch_id + 3, 120)  # steady state
        stop_args = ["stop", str(demo.new_cp), "--timeout", "120", "--quiet-period", f"{DAG_QUIET_PERIOD_S:g}"]
        asked = time.time()
        code = ckpt([*stop_args, *(["--pid", str(pgid)] if pgid else [])])
        stopped = time.time()
        if code != 0:
            print(f"ckpt stop exited {code}")
            return 1
        before = _committed(demo.new_cp)
        last_before = before[-1]
        launched = time.time()
        handle = demo.launch(V2, demo.new_cp, starting_offsets=None)
        demo.wait_for_batch(demo.new_cp, last_before.batch_id + 1, 300, handle)
        first_after = min((b for b in _committed(demo.new_cp) if b.batch_id > last_before.batch_id),
                          key=lambda b: b.committed_at)
        bare_s = first_after.committed_at - last_before.committed_at

        # -- proof: every record in the sink exactly once, across the upgrade and the restart -----
        audit = demo.finish(demo.new_cp)
    finally:
        from airflow_ckpt_provider.jobs.local import group_members, kill_group

        pgid = pgid or _heartbeat_group(demo.new_cp)
        if pgid and group_members(pgid):
            kill_group(pgid)
        demo.close()
    load_after = os.getloadavg()

    print()
    print(f"downtime: reference DAG upgrade vs. bare restart ({args.rate:g} records/s, 1 s trigger, "
          f"load average {load_before[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} CPUs)")
    print()
    print("DAG steps (from the stored upgrade report)")
    for name, step in steps.items():
        seconds = "-" if step["seconds"] is None else f"{step['seconds']:7.1f}"
        print(f"  {name:<22} {step['state']:<8} {seconds:>7} s")
    print()
    stop_end, launch_start = _epoch(steps["graceful_stop"]["ended_at"]), _epoch(steps["relaunch"]["started_at"])

    def start(record, since: float) -> list[tuple[str, float]]:  # noqa: ANN001
        planned = record.planned_at_ms / 1000 if record.planned_at_ms else None
        if planned is None:
            return [("-> first commit (spark-submit, query start, first batch)", record.committed_at - since)]
        return [("-> first batch planned (spark-submit, JVM, session, query start)", planned - since),
                (f"-> first batch committed ({record.input_rows} rows read)", record.committed_at - planned)]

    rows = [
        ("upgrade (DAG)", upgrade_s, [
            ("v1 last commit -> graceful_stop done (ack, quiet check)", stop_end - v1_last),
            ("-> relaunch task started (handover, archive, scheduling)", launch_start - stop_end),
            *start(v2_first, launch_start),
        ]),
        ("bare restart", bare_s, [
            ("last commit -> ckpt stop returned (ack, quiet check)", stopped - last_before.committed_at),
            ("-> relaunched", launched - stopped),
            *start(first_after, launched),
        ]),
    ]
    for title, total, parts in rows:
        print(f"{title}: downtime {total:.1f} s")
        for label, seconds in parts:
            print(f"  {seconds:6.1f} s  {label}")
    print(f"  (ckpt stop took {stopped - asked:.1f} s from the request to its return)")
    print()
    print(f"  report's downtime_s    {report.get('downtime_s', float('nan')):.1f} s (same measure, by the DAG)")
    ratio = upgrade_s / bare_s
    verdict = "met" if ratio <= args.target else "NOT met"
    print(f"ratio upgrade / bare restart = {upgrade_s:.1f} / {bare_s:.1f} = {ratio:.2f}x "
          f"(target <= {args.target:g}x: {verdict})")
    if ratio > args.target:
        extra = [("the stop (ack + quiet check)", (stop_end - v1_last) - (stopped - last_before.committed_at)),
                 ("handover, archive and task scheduling", (launch_start - stop_end) - (launched - stopped)),
                 ("the start of v2 (spark-submit to first commit)",
                  (v2_first.committed_at - launch_start) - (first_after.committed_at - launched))]
        label, seconds = max(extra, key=lambda item: item[1])
        print(f"  the upgrade's extra {upgrade_s - bare_s:.1f} s: "
              + ", ".join(f"{name} {s:+.1f} s" for name, s in extra) + f"; dominated by {label}")
    print(f"sink audit: produced {audit.produced}, in sink {audit.in_sink}, lost {audit.lost}, "
          f"duplicated {audit.duplicated}, unexpected {audit.unexpected}")
    print(f"total {time.monotonic() - started:.0f} s")
    return 0 if audit.ok and ratio <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
