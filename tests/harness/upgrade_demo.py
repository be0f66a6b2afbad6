"""The reference upgrade on the embedded stack, with the proof: ``make demo`` and the system tests.

:class:`UpgradeDemo` starts a KRaft broker and a 3-partition topic, keeps a producer running,
launches version 1 of the demo job (``dags/jobs/stream_v1.py``, detached spark-submit in local
mode), then upgrades it to version 2 either with the reference DAG (``dags/stream_upgrade.py``,
run by ``dag.test()`` on a SQLite Airflow home; or another DAG whose params are named like the
reference DAG's, such as the example DAG ``dags/stream_upgrade_example.py``) or with a naive
relaunch (the negative control). It keeps producing through the upgrade, stops the producer,
waits until the running version has read everything, stops it and counts every Kafka
(partition, offset) in the sink.
``old_spark`` / ``new_spark`` run the versions on different Sparks (a major Spark upgrade); by
default both run on this interpreter's pyspark; ``conf`` is Spark conf of both versions (the state
store and its checkpoint format, for example). ``new_source_name`` makes version 2 name its Kafka
source with Spark's source evolution on (Spark 4.2+: offset log v2, a change Spark refuses on the
old checkpoint).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.checkpoint import CheckpointError, LaunchHandle
from airflow_ckpt_provider.hooks.kafka_admin import broker_ranges
from airflow_ckpt_provider.local.airflow_home import load_dag
from airflow_ckpt_provider.local.audit import SinkAudit, audit, read_sink_records
from airflow_ckpt_provider.local.kafka import LocalKafka
from airflow_ckpt_provider.local.spark import SparkInstall, local_spark_conf
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.reports import latest_report
from tests.harness.records import ContinuousProducer

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
V1, V2 = DAGS / "jobs" / "stream_v1.py", DAGS / "jobs" / "stream_v2.py"
TOPIC = "demo-events"
STREAM = "demo-events"
DAG_ID = "stream_upgrade"
REFERENCE_DAG = DAGS / "stream_upgrade.py"


@dataclass
class DemoResult:
    """What the run proved. ``lost`` and ``duplicated`` come from the sink, not from the DAG."""

    mode: str
    outcome: str
    audit: SinkAudit
    downtime_s: float | None = None
    steps: dict[str, float | None] = field(default_factory=dict)
    report_md: str = ""
    dag_state: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode, "outcome": self.outcome, "dag_state": self.dag_state,
            "produced": self.audit.produced, "in_sink": self.audit.in_sink,
            "lost": self.audit.lost, "duplicated": self.audit.duplicated,
            "unexpected": self.audit.unexpected, "downtime_s": self.downtime_s,
            "steps": self.steps, "audit": self.audit.to_dict(), **self.extra,
        }


class UpgradeDemo:
    """One topic, one sink, old and new checkpoints under ``work``; close() stops everything."""

    def __init__(self, work: Path, *, partitions: int = 3, rate: float = 100.0, trigger: str = "1 second",
                 kafka: LocalKafka | None = None, old_spark: SparkInstall | None = None,
                 new_spark: SparkInstall | None = None, v1: Path = V1, v2: Path = V2,
                 record: Callable[[int], tuple[bytes, bytes]] | None = None, topic: str = TOPIC,
                 stream: str = STREAM, bursts: tuple[float, float] | None = None,
                 new_source_name: str | None = None, conf: Mapping[str, str] | None = None) -> None:
        self.work = work.resolve()
        self.v1, self.v2, self.record, self.stream = v1, v2, record, stream
        self.old_spark, self.new_spark = old_spark, new_spark
        self.new_source_name = new_source_name
        self.conf = dict(conf or {})
        self.partitions = partitions
        self.rate = rate
        self.trigger = trigger
        self.bursts = bursts
        self.old_cp, self.new_cp = self.work / "checkpoints" / "v1", self.work / "checkpoints" / "v2"
        self.archive_root, self.sink = self.work / "archive", self.work / "sink"
        self.logs = self.work / "logs"
        self._own_kafka = kafka is None
        self.kafka = kafka or LocalKafka(self.work / "kafka")
        self.topic = topic if kafka is None else f"{topic}-{os.urandom(4).hex()}"
        self.producer: ContinuousProducer | None = None
        self.produced_acked = 0
        self.handles: list[LaunchHandle] = []

    # -- set-up -----------------------------------------------------------------------------------

    def start(self, *, min_batches: int = 2, timeout: float = 240.0, application: Path | None = None) -> LaunchHandle:
        """Kafka, topic, producer, then version 1 (``application``) until it committed
        ``min_batches`` batches."""
        if self.work.exists() and self._own_kafka:
            shutil.rmtree(self.work)
        self.logs.mkdir(parents=True, exist_ok=True)
        self.kafka.start()
        self.kafka.create_topic(self.topic, self.partitions)
        self.producer = ContinuousProducer(self.kafka.bootstrap_servers, self.topic, rate=self.rate,
                                           record=self.record, bursts=self.bursts).start()
        handle = self.launch(application or self.v1, self.old_cp, starting_offsets="earliest", spark=self.old_spark)
        self.wait_for_batch(self.old_cp, min_batches - 1, timeout, handle)  # batch ids start at 0
        log.info("version 1 running on %s (%d batches committed)", self.old_cp, min_batches)
        return handle

    def spark_conf(self, spark: SparkInstall | None = None) -> dict[str, str]:
        """The jobs' conf (with ``conf``); on ``spark``, with its connector jars and Python."""
        conf = local_spark_conf("demo")
        conf.pop("spark.app.name")
        conf.pop("spark.master")
        # the jobs import this package: run their Python in this virtualenv
        conf["spark.pyspark.python"] = conf["spark.pyspark.driver.python"] = sys.executable
        conf.update(self.conf)
        conf.update(spark.job_conf() if spark is not None else {})
        return conf

    def job_args(self, application: Path | None = None) -> list[str]:
        """The arguments of ``application`` (default version 1): version 2 (``self.v2``) also gets
        ``--source-name`` when ``new_source_name`` is set."""
        args = ["--bootstrap-servers", self.kafka.bootstrap_servers, "--topic", self.topic,
                "--sink", str(self.sink), "--trigger", self.trigger]
        if application == self.v2 and self.new_source_name:
            args += ["--source-name", self.new_source_name]
        return args

    def launch(self, application: Path, checkpoint: Path, *, starting_offsets: str | None,
               spark: SparkInstall | None = None) -> LaunchHandle:
        """Launch ``application`` detached on ``checkpoint`` (on ``spark``, default this interpreter's)."""
        from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook

        hook = SparkLauncherHook(master="local[2]", deploy_mode="client", log_dir=str(self.logs),
                                 spark_home=str(spark.spark_home) if spark is not None else None)
        handle = hook.launch(str(application), checkpoint_uri=str(checkpoint),
                             application_args=self.job_args(application), conf=self.spark_conf(spark),
                             name=application.stem, starting_offsets=starting_offsets)
        self.handles.append(handle)
        return handle

    def wait_for_batch(self, checkpoint: Path, batch_id: int, timeout: float,
                       handle: LaunchHandle | None = None) -> int:
        """Wait until ``checkpoint``'s last committed batch id is >= ``batch_id`` and return it.

        Compares batch ids, never a count of commit files: Spark keeps only the last
        ``minBatchesToRetain`` (default 100) of them. ``RuntimeError`` if ``handle``'s job exits
        first, ``TimeoutError`` after ``timeout`` seconds.
        """
        from fsspec.implementations.local import LocalFileSystem

        from airflow_ckpt_provider.storage.listing import list_batch_ids

        deadline = time.monotonic() + timeout
        fs, last = LocalFileSystem(), None
        while time.monotonic() < deadline:
            last = max(list_batch_ids(fs, str(checkpoint / "commits")), default=None)
            if last is not None and last >= batch_id:
                return last
            if handle is not None and handle.pid and not _alive(handle.pid):
                raise RuntimeError(f"{handle.app_name} exited; see {handle.log_path}")
            time.sleep(0.5)
        raise TimeoutError(f"{checkpoint}: last committed batch {last} after {timeout:.0f} s, "
                           f"not yet {batch_id}")

    # -- the upgrade --------------------------------------------------------------------------------

    def dag_conf(self, v1: LaunchHandle, **overrides: Any) -> dict[str, Any]:
        conf = {
            "stream_name": self.stream, "old_checkpoint": str(self.old_cp), "new_checkpoint": str(self.new_cp),
            "archive_root": str(self.archive_root), "kafka_conn_id": "kafka_default",
            "spark_master": "local[2]", "spark_deploy_mode": "client", "spark_conf": self.spark_conf(),
            "old_application": str(self.v1), "old_application_args": self.job_args(),
            "new_application": str(self.v2), "new_application_args": self.job_args(self.v2),
            "old_launch_handle": v1.to_json(), "require_approval": True,
            # v2 deduplicates on other columns than v1: v1's state is not v2's, and exporting it would
            # only lengthen the downtime (the stateful demo stream carries its state)
            "carry_state": False,
            # the demo's and the tests' upgrades skip the trial runs (two more Spark start-ups per run);
            # tests/system/test_upgrade_dag.py switches them on where the check is what it proves
            "check_compatibility": False,
            # the demo jobs write Parquet through the provider's foreach_batch wrapper
            "sink": {"kind": "foreach_batch"},
        }
        for name, spark in (("old_spark", self.old_spark), ("new_spark", self.new_spark)):
            if spark is not None:
                conf[name] = spark.dag_settings()
        conf.update(overrides)
        return conf

    def kafka_connection(self) -> str:
        """``AIRFLOW_CONN_KAFKA_DEFAULT`` value for this broker."""
        return kafka_connection(self.kafka.bootstrap_servers)

    def upgrade_with_dag(self, v1: LaunchHandle, *, auto_approve: bool = True, dag_id: str = DAG_ID,
                         dag_file: Path = REFERENCE_DAG, **overrides: Any) -> Any:
        """Run the DAG ``dag_id`` of ``dag_file`` (default the reference DAG, standby;
        ``stream_upgrade_cold`` for a cold relaunch) in this process with ``dag.test()``; returns
        the DAG run. Its conf is :meth:`dag_conf` for the params the DAG has, and ``overrides``.

        With ``auto_approve`` the approval task is marked successful without waiting (demo mode).
        The caller has pointed Airflow at a migrated home before ``airflow`` was first imported
        (:func:`airflow_ckpt_provider.local.airflow_home.prepare_airflow_home`).
        """
        os.environ["AIRFLOW_CONN_KAFKA_DEFAULT"] = self.kafka_connection()
        dag = load_reference_dag(dag_id, dag_file)
        conf = {name: value for name, value in self.dag_conf(v1).items() if name in dag.params}
        run = dag.test(run_conf={**conf, **overrides}, mark_success_pattern="approve" if auto_approve else None)
        for ti in run.get_task_instances():
            log.info("task %-22s %s", ti.task_id, ti.state)
        return run

    def naive_upgrade(self, v1: LaunchHandle, starting_offsets: str) -> LaunchHandle:
        """The negative control: stop v1, start v2 on a new checkpoint from ``latest``/``earliest``."""
        from airflow_ckpt_provider.cli import main as ckpt

        code = ckpt(["stop", str(self.old_cp), "--timeout", "120", "--pid", str(v1.pid)])
        if code != 0:
            raise RuntimeError(f"ckpt stop exited {code}")
        return self.launch(self.v2, self.new_cp, starting_offsets=starting_offsets, spark=self.new_spark)

    # -- the proof -------------------------------------------------------------------------------

    def finish(self, checkpoint: Path, *, produce_after_s: float = 8.0, timeout: float = 300.0,
               stop_timeout: float = 60.0) -> SinkAudit:
        """Produce a while longer, stop the producer, wait until ``checkpoint``'s query read
        everything, stop it (killed after ``stop_timeout`` if it cannot acknowledge), and audit
        the sink."""
        ranges = self.drain(checkpoint, produce_after_s=produce_after_s, timeout=timeout, stop_timeout=stop_timeout)
        return audit(read_sink_records(self.sink), ranges)

    def drain(self, checkpoint: Path, *, produce_after_s: float = 8.0, timeout: float = 300.0,
              stop_timeout: float = 60.0) -> dict[tuple[str, int], tuple[int, int]]:
        """Produce a while longer, stop the producer, wait until ``checkpoint``'s query read
        everything and stop it; returns the topic's (earliest, log end) per partition."""
        from airflow_ckpt_provider.cli import main as ckpt

        time.sleep(produce_after_s)
        assert self.producer is not None
        self.produced_acked = self.producer.stop()
        ranges = broker_ranges(self.kafka.bootstrap_servers, [self.topic])
        log.info("producer stopped: %d records acknowledged; waiting for %s to catch up",
                 self.produced_acked, checkpoint)
        ends = {key: end for key, (_, end) in ranges.items()}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                offsets = CheckpointReader(str(checkpoint)).handover().kafka_offsets()
                if all(offsets.get(t, p) == end for (t, p), end in ends.items()):
                    break
            except CheckpointError:
                pass
            time.sleep(1)
        else:
            log.warning("%s did not catch up within %.0f s; auditing what is there", checkpoint, timeout)
        running = [h for h in self.handles if h.pid and _alive(h.pid) and Path(h.checkpoint_uri) == checkpoint]
        ckpt(["stop", str(checkpoint), "--timeout", f"{stop_timeout:g}",
              *(["--pid", str(running[-1].pid)] if running else [])])
        return ranges

    def close(self) -> None:
        from airflow_ckpt_provider.jobs.local import kill_group

        if self.producer is not None:
            self.producer.stop()
        for handle in self.handles:
            if handle.pid and _alive(handle.pid):
                kill_group(handle.pid)
        if self._own_kafka:
            self.kafka.stop()

    def __enter__(self) -> UpgradeDemo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def kafka_connection(bootstrap_servers: str) -> str:
    """``AIRFLOW_CONN_KAFKA_DEFAULT`` value for the broker at ``bootstrap_servers`` (the DAGs'
    ``kafka_default``): for an Airflow started beside demos that share one broker."""
    return json.dumps({"conn_type": "ckpt_kafka", "extra": {"bootstrap.servers": bootstrap_servers}})


def _alive(pid: int) -> bool:
    """Whether the process group ``pid`` (a job this demo launched, in this process's scope) lives."""
    from airflow_ckpt_provider.jobs.local import group_members

    return bool(group_members(pid))


def load_reference_dag(dag_id: str = DAG_ID, dag_file: Path = REFERENCE_DAG) -> Any:
    """The DAG ``dag_id`` of ``dag_file`` (default ``dags/stream_upgrade.py``), imported as Airflow's
    DAG processor would (:func:`airflow_ckpt_provider.local.airflow_home.load_dag`)."""
    return load_dag(dag_file, dag_id)


def read_dag_report(archive_root: Path, stream: str = STREAM) -> Mapping[str, Any] | None:
    """The JSON of the newest report the DAG stored for ``stream`` (default the demo's)
    (:func:`airflow_ckpt_provider.storage.reports.latest_report`); None when there is none."""
    report = latest_report(archive_root, stream)
    return report.data if report else None


def stop_jobs_under(*roots: Path) -> None:
    """Kill the process groups of Spark jobs still running on these paths: the versions Airflow
    launched are not in :attr:`UpgradeDemo.handles`, and a failed assertion must not leave them
    running."""
    from airflow_ckpt_provider.jobs.local import kill_group

    needles = [str(root).encode() for root in roots]
    groups = set()
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
            group = os.getpgid(int(entry.name)) if any(n in cmdline for n in needles) else None
        except (OSError, ValueError):
            continue
        if group is not None and group != os.getpgrp():
            groups.add(group)
    for group in groups:
        kill_group(group)
