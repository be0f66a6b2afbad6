"""A major Spark upgrade on the real stack: v1 runs on Spark 3.5 (pyspark 3.5 in its own
virtualenv, `make spark35`), v2 on Spark 4.2 (the provider's own) with its Kafka source named (Spark's
source evolution: offset log v2), producer running.

The 3.5 driver runs the provider's Spark-side helpers (``read_kafka``, ``checkpoint_location``,
``GracefulStop``) with nothing but pyspark installed; the provider's reader reads the checkpoint
Spark 3.5 wrote; the graceful stop is acknowledged by the 3.5 driver; the handover taken from it
starts v2 on Spark 4.2 on a new checkpoint exactly there (read back from that checkpoint's offsets
v2 by the provider's verify), and every Kafka (partition, offset) is in the sink exactly once.

The jobs trigger every 5 s, not every second like the demo: a Spark 3.5 driver on a loaded
2-core machine takes 2-4 s per batch of this job, and a graceful stop needs a moment between two
batches (with a 1 s trigger the next batch starts as soon as the last one ends: no boundary).
"""

from __future__ import annotations

import io
import json
import subprocess
import uuid
from pathlib import Path

import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint import reconcile
from airflow_ckpt_provider.checkpoint.verify import verify_start
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker, broker_ranges
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.local.audit import audit, read_sink_records
from airflow_ckpt_provider.local.spark import SPARK35, SparkInstall, local_spark_conf
from airflow_ckpt_provider.records.control import CONF_STANDBY, STANDBY_RELEASE, StandbyRelease
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.records import produce_records
from tests.harness.upgrade_demo import V2, UpgradeDemo
from tests.integration.test_standby import START_TIMEOUT_S, control, spark_files, wait_for, wait_standby

pytestmark = pytest.mark.integration



def spark_version_of(handle_log: str | None) -> str:
    """The Spark version a driver logged ("Running Spark version X")."""
    text = Path(handle_log or "").read_text(errors="replace")
    marker = "Running Spark version "
    assert marker in text, f"no '{marker}' in the driver log {handle_log}"
    return text.split(marker, 1)[1].split()[0]


def test_the_spark35_driver_imports_the_helpers_without_airflow(spark35: SparkInstall) -> None:
    probe = ("import importlib.util, pyspark, airflow_ckpt_provider.spark as helpers; "
             "print(pyspark.__version__, importlib.util.find_spec('airflow') is None, helpers.__file__)")
    proc = subprocess.run([str(spark35.python), "-c", probe], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    version, no_airflow, helpers = proc.stdout.split()
    assert version == spark35.version and version.startswith("3.5.")
    assert no_airflow == "True", "the 3.5 driver's environment must not have Airflow"
    assert Path(helpers).resolve() == (Path(cli.__file__).parents[1] / "spark" / "__init__.py").resolve()


def test_a_standby_on_spark35_waits_then_starts_exactly_at_the_release(kafka, new_topic, tmp_path: Path,  # noqa: ANN001
                                                                       spark35: SparkInstall) -> None:
    """``await_handover`` in a 3.5 driver: no checkpoint file while waiting; released, the query
    starts at the released offsets and the sink gets every record from there on, once."""
    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 60)
    checkpoint, sink = tmp_path / "cp", tmp_path / "sink"
    conf = {k: v for k, v in local_spark_conf("standby-35", version=SPARK35).items()
            if k not in ("spark.app.name", "spark.master")}
    conf.update({**spark35.job_conf(), CONF_STANDBY: "true"})
    hook = SparkLauncherHook(master="local[2]", deploy_mode="client", log_dir=str(tmp_path / "logs"),
                             spark_home=str(spark35.spark_home))
    job = Path(__file__).parent / "jobs" / "kafka_to_parquet.py"
    handle = hook.launch(str(job), checkpoint_uri=str(checkpoint), conf=conf, name="standby-35",
                         application_args=[kafka.bootstrap_servers, topic, str(sink)])
    try:
        run_id = wait_standby(checkpoint, handle, hook)
        assert spark_version_of(handle.log_path) == spark35.version
        assert spark_files(checkpoint) == [] and not sink.exists()

        start = {"0": 17, "1": 23}
        release = StandbyRelease(release_id=uuid.uuid4().hex, released_at=utc_iso(),
                                 starting_offsets=json.dumps({topic: start}), standby_run_id=run_id)
        ctl = control(checkpoint)
        ctl.write_record(STANDBY_RELEASE, release.to_json().encode())
        wait_for(lambda: ctl.batch_state().last_committed_batch is not None, START_TIMEOUT_S,
                 "the released query's first commit", handle, hook)
        (initial,) = CheckpointReader(str(checkpoint)).snapshot(include_initial=True).initial_sources
        assert initial.kafka is not None and {p: initial.kafka.get(topic, p) for p in (0, 1)} == {0: 17, 1: 23}

        ranges = {key: (17 if key[1] == 0 else 23, end) for key, (_, end) in
                  broker_ranges(kafka.bootstrap_servers, [topic]).items()}
        wait_for(lambda: audit(read_sink_records(sink), ranges).lost == 0, START_TIMEOUT_S, "the sink to catch up",
                 handle, hook)
    finally:
        hook.kill(handle)
    checked = audit(read_sink_records(sink), ranges)
    assert checked.produced > 0 and checked.ok, checked


def test_v1_on_spark35_hands_over_to_v2_on_spark42(kafka, tmp_path: Path, spark35: SparkInstall,  # noqa: ANN001
                                                   spark42: SparkInstall) -> None:
    demo = UpgradeDemo(tmp_path / "demo", kafka=kafka, rate=80.0, trigger="5 seconds", old_spark=spark35,
                       new_spark=spark42, new_source_name="events")
    try:
        v1 = demo.start(min_batches=3, timeout=600)
        assert spark_version_of(v1.log_path) == spark35.version

        # the provider reads the checkpoint Spark 3.5 wrote
        before = CheckpointReader(str(demo.old_cp)).snapshot()
        assert before.last_committed_batch is not None and before.last_committed_batch >= 2

        # the 3.5 driver's GracefulStop acknowledges a stop between two batches
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["stop", str(demo.old_cp), "--timeout", "300", "--quiet-period", "3",
                         "--pid", str(v1.pid), "--json"], stdout=out, stderr=err)
        assert code == 0, err.getvalue()
        stopped = json.loads(out.getvalue())
        assert stopped["outcome"] == "graceful", stopped
        assert stopped["ack"]["outcome"] == "clean", stopped

        # the handover: the last committed batch of the 3.5 checkpoint, reconciled with the broker
        handover = CheckpointReader(str(demo.old_cp)).handover()
        assert handover.batch_id == stopped["last_committed_batch"]
        result = reconcile(handover.kafka_offsets(), KafkaBroker(kafka.bootstrap_servers).view([demo.topic]))
        starting = result.starting_offsets

        # v2 on Spark 4.2 with its source named, on a new checkpoint, from the handover
        v2 = demo.launch(V2, demo.new_cp, starting_offsets=starting.to_json(), spark=spark42)
        demo.wait_for_batch(demo.new_cp, 0, timeout=600, handle=v2)
        assert spark_version_of(v2.log_path) == spark42.version
        started = CheckpointReader(str(demo.new_cp)).snapshot(include_initial=True)
        assert (before.offsets_version, started.offsets_version) == (1, 2), "v2 writes offsets v2"
        assert [s.name for s in started.sources] == [s.name for s in started.initial_sources] == ["events"]
        verified = verify_start(started, starting, handover=handover)
        assert len(verified.partitions) == demo.partitions and all(p.ok for p in verified.partitions)

        audit = demo.finish(demo.new_cp)
    finally:
        demo.close()
    assert audit.produced > 500, "the producer must have run through the upgrade"
    assert audit.lost == 0, audit.lost_examples
    assert audit.duplicated == 0, audit.duplicated_examples
    assert audit.unexpected == 0
