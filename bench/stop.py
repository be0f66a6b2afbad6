"""Benchmark: how long a graceful stop takes, relative to the trigger interval and the batch time.

Starts the embedded local stack (KRaft Kafka, local Spark), keeps a producer running, and runs
a Kafka -> Parquet query with a processing-time trigger under GracefulStop. It then requests a
stop ``--stops`` times (restarting the query on the same checkpoint in between) and prints the
time from writing the request to the acknowledgement, as a ratio to the trigger interval and to
the median batch duration (``durationMs.triggerExecution`` of the query progress), both measured
in the same run. Exits 1 if any stop was not acknowledged or not clean.

    python bench/stop.py [--trigger-interval 2] [--stops 5] [--rate 200]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import fsspec

from airflow_ckpt_provider.checkpoint.stop import ControlFiles
from airflow_ckpt_provider.local.kafka import LocalKafka
from airflow_ckpt_provider.local.records import ContinuousProducer
from airflow_ckpt_provider.local.spark import local_spark_session
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop


def start_query(spark, bootstrap: str, topic: str, cp: Path, sink: Path, interval: float):  # noqa: ANN001, ANN201
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("topic", "partition", "offset", "value")
        .writeStream.format("parquet")
        .option("path", str(sink))
        .option("checkpointLocation", str(cp))
        .trigger(processingTime=f"{int(interval * 1000)} milliseconds")
        .start()
    )


def one_stop(spark, bootstrap: str, topic: str, cp: Path, sink: Path, interval: float,  # noqa: ANN001
             warm_batches: int) -> tuple[float, str, list[float]]:
    """Run the query until ``warm_batches`` more batches ran, request a stop, time the ack."""
    query = start_query(spark, bootstrap, topic, cp, sink, interval)
    stopper = GracefulStop(spark, query, str(cp), heartbeat_interval=1.0, poll_interval=0.1)
    acks: list[object] = []
    thread = threading.Thread(target=lambda: acks.append(stopper.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while len([p for p in query.recentProgress if p["numInputRows"] > 0]) < warm_batches:
        if time.monotonic() > deadline:
            raise SystemExit("the query made no progress within 120 s")
        time.sleep(0.1)
    fs, root = fsspec.core.url_to_fs(str(cp))
    control = ControlFiles(fs, root)
    request, _ = control.request_stop("bench", "benchmark", 120)
    asked = time.perf_counter()
    while (ack := control.ack()) is None or ack.request_id != request.request_id:
        if time.perf_counter() - asked > 120:
            raise SystemExit("no acknowledgement within 120 s")
        time.sleep(0.005)
    elapsed = time.perf_counter() - asked
    thread.join(timeout=60)
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in query.recentProgress if p["numInputRows"] > 0]
    return elapsed, ack.outcome, durations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trigger-interval", type=float, default=2.0, help="seconds (default 2)")
    parser.add_argument("--stops", type=int, default=5)
    parser.add_argument("--warm-batches", type=int, default=3, help="batches with data before each stop")
    parser.add_argument("--rate", type=float, default=200.0, help="records per second produced")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-stop-") as tmp:
        base = Path(tmp)
        with LocalKafka(base / "kafka") as kafka:
            topic = "bench-stop"
            kafka.create_topic(topic, 3)
            producer = ContinuousProducer(kafka.bootstrap_servers, topic, rate=args.rate).start()
            spark = local_spark_session("bench-stop")
            rows = []
            batch_durations: list[float] = []
            try:
                for number in range(1, args.stops + 1):
                    elapsed, outcome, durations = one_stop(
                        spark, kafka.bootstrap_servers, topic, base / "cp", base / "sink",
                        args.trigger_interval, args.warm_batches)
                    batch_durations += durations
                    rows.append((number, elapsed, outcome))
            finally:
                producer.stop()
                spark.stop()

    median_batch = statistics.median(batch_durations)
    print(f"graceful stop: trigger interval {args.trigger_interval:g} s, median batch duration "
          f"{median_batch:.3f} s over {len(batch_durations)} batches, {args.stops} stops")
    print(f"{'stop':>4}  {'request->ack s':>14}  {'/ trigger':>9}  {'/ median batch':>14}  outcome")
    for number, elapsed, outcome in rows:
        print(f"{number:>4}  {elapsed:>14.3f}  {elapsed / args.trigger_interval:>9.2f}  "
              f"{elapsed / median_batch:>14.2f}  {outcome}")
    times = [elapsed for _, elapsed, _ in rows]
    print(f"median request->ack {statistics.median(times):.3f} s = "
          f"{statistics.median(times) / args.trigger_interval:.2f} x trigger interval = "
          f"{statistics.median(times) / median_batch:.2f} x median batch; max "
          f"{max(times) / args.trigger_interval:.2f} x trigger interval")
    print(f"total {time.monotonic() - started:.0f} s")
    return 0 if all(outcome == "clean" for _, _, outcome in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
