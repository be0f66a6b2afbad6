"""``make demo``: the reference upgrade end to end on the embedded local stack, with its proof.

A KRaft broker on 127.0.0.1, a 3-partition topic and a producer that keeps running; version 1
of the demo job reads it into a Parquet sink. The reference DAG (``dags/stream_upgrade.py``,
``dag.test()`` on SQLite, approval answered automatically) stops v1 between batches, hands its
offsets over, archives its checkpoint, starts v2 on a new checkpoint and verifies the start.
The producer keeps going, then stops; v2 catches up; every Kafka (partition, offset) in the
sink is counted. Prints the upgrade report and writes ``demo-report.json``.
Everything lives under ``.work/demo/`` (recreated on each run).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from airflow_ckpt_provider.local.airflow_home import airflow_env, prepare_airflow_home

log = logging.getLogger("ckpt.demo")
REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=REPO / ".work" / "demo")
    parser.add_argument("--rate", type=float, default=100.0, help="records per second")
    parser.add_argument("--report", type=Path, default=REPO / "demo-report.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    work = args.work.resolve()
    # Airflow reads its environment at import: point it at the demo's SQLite home first.
    home = REPO / ".airflow" / "demo"
    os.environ.update(airflow_env(home, REPO / "dags"))
    prepare_airflow_home(home, REPO / "dags")

    from airflow_ckpt_provider.checkpoint.errors import LocalStackError
    from airflow_ckpt_provider.local.upgrade_demo import DemoResult, UpgradeDemo, read_dag_report

    started = time.monotonic()
    try:
        with UpgradeDemo(work, rate=args.rate) as demo:
            v1 = demo.start()
            run = demo.upgrade_with_dag(v1)
            sink_audit = demo.finish(demo.new_cp)
    except LocalStackError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 2
    report = read_dag_report(demo.archive_root) or {}
    result = DemoResult(
        mode="reference DAG", outcome=report.get("outcome", "no report"), audit=sink_audit,
        downtime_s=report.get("downtime_s"), dag_state=str(run.state),
        steps={s["name"]: s["seconds"] for s in report.get("steps", []) if s["state"] != "not run"},
        extra={"handover_batch": (report.get("handover") or {}).get("batch_id"),
               "archive": report.get("archive"), "total_s": round(time.monotonic() - started, 1)},
    )
    args.report.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n")
    md = sorted((demo.archive_root / "demo-events").glob("*/report/upgrade-report.md"))
    print()
    print(md[-1].read_text() if md else "(the DAG stored no report)")
    print("## Proof from the sink")
    print()
    for key in ("produced", "in_sink", "lost", "duplicated", "unexpected"):
        print(f"- {key}: {getattr(sink_audit, key)}")
    print(f"- DAG run: {run.state}; outcome: {result.outcome}; downtime: {result.downtime_s} s")
    print(f"- written: {args.report}")
    ok = sink_audit.ok and result.outcome == "upgraded"
    print("\nOK: every record reached the sink exactly once" if ok else "\nFAILED: see above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
