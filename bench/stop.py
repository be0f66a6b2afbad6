"""Benchmark: how long a graceful stop takes, relative to the trigger interval and the batch time.

Starts the embedded local stack (KRaft Kafka, local Spark), keeps a producer running, and runs
two cases, each ``--stops`` times (restarting the query on the same checkpoint in between):

* relaxed: a Kafka -> Parquet query with a processing-time trigger, stopped at a batch boundary;
* busy: Spark's DEFAULT trigger (no ``.trigger``), ``maxOffsetsPerTrigger`` below the producer's
  rate so batches run back to back, a ``foreachBatch`` sink behind ``foreach_batch``: the stop
  holds the next batch at the sink gate instead of waiting for a gap.

It prints the time from writing the request to the acknowledgement as a ratio to the median
batch duration (``durationMs.triggerExecution`` of the query progress) measured in the same run
(and, relaxed, to the trigger interval). The last line is ``busy stop / median batch: X``; the
target is X <= 1.5 (one batch plus the driver's stop). Exits 1 if any stop was not acknowledged,
was cut (``interrupted``), or the busy ratio is above the target.

    python bench/stop.py [--trigger-interval 2] [--stops 5] [--rate 200] [--busy-rate 1500]
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

# the record producer is the test harness of the checkout (tests/harness/), not part of the package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_ckpt_provider.local.kafka import LocalKafka
from airflow_ckpt_provider.local.spark import local_spark_session
from airflow_ckpt_provider.spark.gate import foreach_batch
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop
from airflow_ckpt_provider.storage.stop import ControlFiles
from tests.harness.records import ContinuousProducer

#: The busy case's cap per batch, below its producer's rate: there is always a next batch.
BUSY_MAX_OFFSETS = 600
TARGET_BUSY_RATIO = 1.5


def start_query(spark, bootstrap: str, topic: str, cp: Path, sink: Path, interval: float):  # noqa: ANN001, ANN201
    """interval > 0: processing-time trigger, file sink; 0: the default trigger, busy, behind the gate."""
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if interval <= 0:
        reader = reader.option("maxOffsetsPerTrigger", BUSY_MAX_OFFSETS)
    frame = reader.load().selectExpr("topic", "partition", "offset", "value")
    if interval > 0:
        return (frame.writeStream.format("parquet").option("path", str(sink)).option("checkpointLocation", str(cp))
                .trigger(processingTime=f"{int(interval * 1000)} milliseconds").start())

    def append(batch, batch_id: int) -> None:  # noqa: ANN001
        batch.write.mode("append").parquet(str(sink))

    return frame.writeStream.foreachBatch(foreach_batch(append, str(cp))).option("checkpointLocation", str(cp)).start()


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
    parser.add_argument("--rate", type=float, default=200.0, help="records per second produced (relaxed case)")
    parser.add_argument("--busy-rate", type=float, default=1500.0, help="records per second produced (busy case)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    started = time.monotonic()
    results: dict[str, tuple[list[tuple[int, float, str]], float]] = {}
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-stop-") as tmp:
        base = Path(tmp)
        with LocalKafka(base / "kafka") as kafka:
            spark = local_spark_session("bench-stop")
            try:
                for case, interval, rate in (("relaxed", args.trigger_interval, args.rate),
                                             ("busy", 0.0, args.busy_rate)):
                    topic = f"bench-stop-{case}"
                    kafka.create_topic(topic, 3)
                    producer = ContinuousProducer(kafka.bootstrap_servers, topic, rate=rate).start()
                    rows: list[tuple[int, float, str]] = []
                    batch_durations: list[float] = []
                    try:
                        for number in range(1, args.stops + 1):
                            elapsed, outcome, durations = one_stop(
                                spark, kafka.bootstrap_servers, topic, base / case / "cp", base / case / "sink",
                                interval, args.warm_batches)
                            batch_durations += durations
                            rows.append((number, elapsed, outcome))
                    finally:
                        producer.stop()
                    results[case] = (rows, statistics.median(batch_durations))
            finally:
                spark.stop()

    for case, (rows, median_batch) in results.items():
        trigger = f"trigger interval {args.trigger_interval:g} s" if case == "relaxed" else "default trigger"
        print(f"graceful stop, {case} ({trigger}): median batch duration {median_batch:.3f} s, {args.stops} stops")
        print(f"{'stop':>4}  {'request->ack s':>14}  {'/ median batch':>14}  outcome")
        for number, elapsed, outcome in rows:
            print(f"{number:>4}  {elapsed:>14.3f}  {elapsed / median_batch:>14.2f}  {outcome}")
    relaxed, relaxed_batch = results["relaxed"]
    busy, busy_batch = results["busy"]
    relaxed_median = statistics.median(e for _, e, _ in relaxed)
    busy_ratio = statistics.median(e for _, e, _ in busy) / busy_batch
    print(f"relaxed: median request->ack {relaxed_median:.3f} s = {relaxed_median / args.trigger_interval:.2f} x "
          f"trigger interval = {relaxed_median / relaxed_batch:.2f} x median batch")
    print(f"total {time.monotonic() - started:.0f} s")
    print(f"busy stop / median batch: {busy_ratio:.2f} (target <= {TARGET_BUSY_RATIO})")
    acknowledged = all(outcome in ("clean", "held") for _, _, outcome in relaxed + busy)
    return 0 if acknowledged and busy_ratio <= TARGET_BUSY_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
