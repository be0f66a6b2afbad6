"""``make demo``: the embedded local stack end to end.

Starts a KRaft broker on 127.0.0.1, creates a 3-partition topic, keeps a producer running
while a Spark Structured Streaming query reads the topic into a Parquet sink with a checkpoint,
stops the producer, lets the query catch up, stops it between batches and prints what the
checkpoint says: the last committed batch and the ``startingOffsets`` a new checkpoint would
take over. Everything lives under ``.work/demo/`` (removed and recreated on each run).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path

from airflow_ckpt_provider.checkpoint import CheckpointError, CheckpointReader
from airflow_ckpt_provider.local.errors import LocalStackError
from airflow_ckpt_provider.local.kafka import LocalKafka
from airflow_ckpt_provider.local.records import ContinuousProducer
from airflow_ckpt_provider.local.spark import local_spark_session

log = logging.getLogger("ckpt.demo")


def run(work: Path, seconds: float, rate: float) -> dict[str, object]:
    """Run the flow in ``work`` and return its facts (also printed by :func:`main`)."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    checkpoint, sink = work / "checkpoint", work / "sink"
    topic = "demo-events"

    with LocalKafka(work / "kafka") as kafka:
        kafka.create_topic(topic, 3)
        log.info("topic %s with 3 partitions on %s", topic, kafka.bootstrap_servers)
        spark = local_spark_session("ckpt-demo")
        producer = ContinuousProducer(kafka.bootstrap_servers, topic, rate=rate).start()
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
            .writeStream.format("parquet")
            .option("path", str(sink))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="1 second")
            .queryName("demo_v1")
            .start()
        )
        log.info("query %s running; producing for %.0f s at ~%.0f records/s", query.id, seconds, rate)
        time.sleep(seconds)
        produced = producer.stop()
        log.info("producer stopped: %d records acknowledged; letting the query catch up", produced)
        query.processAllAvailable()
        query.stop()
        rows = spark.read.parquet(str(sink)).select("partition", "offset").collect()
        spark.stop()

    reader = CheckpointReader(str(checkpoint))
    handover = reader.handover()
    offsets = handover.kafka_offsets()
    return {
        "checkpoint": str(checkpoint),
        "query_id": handover.query_id,
        "last_committed_batch": handover.batch_id,
        "in_flight_batch": handover.in_flight_batch,
        "starting_offsets": json.loads(offsets.to_json()),
        "produced": produced,
        "offsets_total": offsets.total(),
        "in_sink": len(rows),
        "distinct_in_sink": len({(r.partition, r.offset) for r in rows}),
        "files_opened": reader.files_opened,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path(".work/demo"))
    parser.add_argument("--seconds", type=float, default=15.0, help="how long to produce")
    parser.add_argument("--rate", type=float, default=300.0, help="records per second")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        facts = run(args.work.resolve(), args.seconds, args.rate)
    except (LocalStackError, CheckpointError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 2
    print()
    print("Checkpoint facts")
    print(f"  checkpoint            {facts['checkpoint']}")
    print(f"  query id              {facts['query_id']}")
    print(f"  last committed batch  {facts['last_committed_batch']}")
    print(f"  in-flight batch       {facts['in_flight_batch']}")
    print(f"  startingOffsets       {json.dumps(facts['starting_offsets'])}")
    print(f"  records produced      {facts['produced']}")
    print(f"  sum of offsets        {facts['offsets_total']}")
    print(f"  rows in sink          {facts['in_sink']} ({facts['distinct_in_sink']} distinct (partition, offset))")
    print(f"  checkpoint files read {facts['files_opened']}")
    ok = facts["produced"] == facts["offsets_total"] == facts["in_sink"] == facts["distinct_in_sink"]
    print("  check                 " + ("OK: every record is in the sink once" if ok else "MISMATCH"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
