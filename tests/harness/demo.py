"""``make demo``: the reference upgrade end to end on the embedded local stack, with its proof.

A KRaft broker on 127.0.0.1, a 3-partition topic and a producer that keeps running; version 1
of the demo job reads it into a Parquet sink. The reference DAG's switchover
(``stream_upgrade_switchover`` of ``dags/stream_upgrade.py``, ``dag.test()`` on SQLite, approval
answered automatically) starts v2 as a warm standby, asks v1 to stop between batches, and the
standby starts itself at v1's last committed batch the moment v1 acknowledges; the provider
checks the handover, verifies v2's start and archives v1's checkpoint. The producer keeps going,
then stops; v2 catches up; every Kafka (partition, offset) in the sink is counted.

Then the stateful stream: purchases keyed by customer into a running ``sum(amount)`` and
``count`` per customer (``dags/jobs/purchases_v1.py``, HDFS-backed state store). The same
switchover upgrades it to ``purchases_v2.py`` — a changed aggregation, which needs a new
checkpoint — with the old state seeded by the standby in its own warm session at the switch, the
producer running throughout; the state export after the switch (outside the downtime) is the
verified copy of that seed. After it, every customer's total and count in v2's output is compared
with the sums over all purchases in the topic, read from Kafka itself. The negative control runs
the same upgrade with ``carry_state`` off: the same check must fail. Prints the upgrade report
and writes ``demo-report.json`` (with a ``stateful`` section: ``customers``, ``mismatched``,
``control_mismatched``, the downtime and the part of it the state seed took). Everything lives
under ``.work/demo/`` (recreated on each run).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.local.airflow_home import airflow_env, prepare_airflow_home

log = logging.getLogger("ckpt.demo")
REPO = Path(__file__).resolve().parents[2]
#: The reference DAG's best path: the switchover inside the drivers (the README recommends it).
SWITCHOVER_DAG = "stream_upgrade_switchover"


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

    from airflow_ckpt_provider.local.errors import LocalStackError
    from tests.harness.demo_output import demo_ok, proof_lines, verdict
    from tests.harness.upgrade_demo import DemoResult, UpgradeDemo, read_dag_report

    started = time.monotonic()
    try:
        with UpgradeDemo(work, rate=args.rate) as demo:
            v1 = demo.start()
            run = demo.upgrade_with_dag(v1, dag_id=SWITCHOVER_DAG)
            sink_audit = demo.finish(demo.new_cp)
        stateful = stateful_demo(work / "stateful", rate=args.rate)
    except LocalStackError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 2
    report = read_dag_report(demo.archive_root) or {}
    result = DemoResult(
        mode="reference DAG", outcome=report.get("outcome", "no report"), audit=sink_audit,
        downtime_s=report.get("downtime_s"), dag_state=str(run.state),
        steps={s["name"]: s["seconds"] for s in report.get("steps", []) if s["state"] != "not run"},
        extra={"handover_batch": (report.get("handover") or {}).get("batch_id"),
               "archive": report.get("archive"), "total_s": round(time.monotonic() - started, 1),
               "stateful": stateful},
    )
    recorded = result.to_dict()
    args.report.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    md = sorted((demo.archive_root / "demo-events").glob("*/report/upgrade-report.md"))
    print()
    print(md[-1].read_text() if md else "(the DAG stored no report)")
    print("\n".join(proof_lines(recorded)))
    print(f"- written: {args.report}")
    ok = demo_ok(recorded)
    print("\n" + verdict(ok))
    return 0 if ok else 1


def stateful_demo(work: Path, *, rate: float) -> dict[str, Any]:
    """The stateful stream's upgrade with its state, then the same upgrade without it (the
    negative control), on one broker; returns the ``stateful`` section of the demo report."""
    import shutil

    from airflow_ckpt_provider.local.kafka import LocalKafka
    from tests.harness.records import purchase
    from tests.harness.state_audit import compare_totals, kafka_totals, sink_totals
    from tests.harness.upgrade_demo import DAGS, UpgradeDemo, read_dag_report

    shutil.rmtree(work, ignore_errors=True)
    kafka = LocalKafka(work / "kafka")
    kafka.start()
    results: dict[str, Any] = {}
    try:
        for name, carry in (("purchases", True), ("purchases-control", False)):
            with UpgradeDemo(work / name, kafka=kafka, rate=rate, v1=DAGS / "jobs" / "purchases_v1.py",
                             v2=DAGS / "jobs" / "purchases_v2.py", record=purchase, topic=name, stream=name) as demo:
                v1 = demo.start(min_batches=3)
                run = demo.upgrade_with_dag(v1, carry_state=carry, dag_id=SWITCHOVER_DAG)
                demo.drain(demo.new_cp)
                truth = kafka_totals(kafka.bootstrap_servers, demo.topic)
                check = compare_totals(truth, sink_totals(demo.sink, "v2"))
                report = read_dag_report(demo.archive_root, name) or {}
                results[name] = {"run": str(run.state), "outcome": report.get("outcome", "no report"),
                                 "check": check, "purchases": sum(n for _, n in truth.values()),
                                 "export": report.get("state_export") or {}, "downtime_s": report.get("downtime_s"),
                                 "state_wait_s": (report.get("switchover") or {}).get("state_wait_s")}
                log.info("%s: customers %d, mismatched %d", name, check.customers, check.mismatched)
    finally:
        kafka.stop()
    upgraded, control = results["purchases"], results["purchases-control"]
    return {"customers": upgraded["check"].customers, "mismatched": upgraded["check"].mismatched,
            "control_mismatched": control["check"].mismatched, "purchases": upgraded["purchases"],
            "outcome": upgraded["outcome"], "downtime_s": upgraded["downtime_s"], "export": upgraded["export"],
            "state_wait_s": upgraded["state_wait_s"],
            "examples": upgraded["check"].to_dict()["examples"],
            "control_examples": control["check"].to_dict()["examples"]}


if __name__ == "__main__":
    sys.exit(main())
