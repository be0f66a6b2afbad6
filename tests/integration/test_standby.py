"""The standby protocol with a real Spark driver and a real Kafka broker.

A job launched with ``spark.ckpt.standby=true`` builds its session, heartbeats ``standby`` and
writes no checkpoint file until the provider releases it; released, it starts exactly at the
released offsets; asked to stop (or left waiting past its timeout) it exits without a checkpoint
file. The job is the same one the cold launch tests use (``jobs/kafka_to_parquet.py``, built on
``read_kafka``/``checkpoint_location``): it needs no change to run as a standby.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint import LaunchHandle
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.hooks.kafka_admin import KafkaBroker
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.local.spark import delta_spark_conf, local_spark_conf
from airflow_ckpt_provider.records.control import (
    CONF_STANDBY,
    CONF_STANDBY_REHEARSAL,
    CONF_STANDBY_TIMEOUT_S,
    STANDBY_RELEASE,
    DriverStatus,
    StandbyRelease,
)
from airflow_ckpt_provider.spark.standby import EXIT_STANDBY_TIMEOUT
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.stop import ControlFiles
from tests.harness.records import produce_records
from tests.integration.streams import sink_records

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "kafka_to_parquet.py"
#: A JVM and a session start on a loaded 2-core machine: generous, never a timing assertion.
START_TIMEOUT_S = 300.0


@pytest.fixture
def hook(tmp_path: Path) -> Iterator[tuple[SparkLauncherHook, list[LaunchHandle]]]:
    hook = SparkLauncherHook(master="local[2]", deploy_mode="client", log_dir=str(tmp_path / "logs"))
    handles: list[LaunchHandle] = []
    yield hook, handles
    for handle in handles:
        try:
            hook.kill(handle)
        except Exception as exc:  # noqa: BLE001 - cleanup tries every handle
            print(f"cleanup: could not kill {handle.app_name}: {exc}")


def launch_standby(hook: SparkLauncherHook, handles: list[LaunchHandle], checkpoint: Path, topic: str,
                   bootstrap: str, sink: Path, timeout_s: float = 600.0, args: Sequence[str] = (),
                   rehearsal: bool = False) -> LaunchHandle:
    """jobs/kafka_to_parquet.py as a standby on ``checkpoint`` with ``args`` (``--delta``: into a Delta
    table, with Delta's jars); its rehearsal only when ``rehearsal`` (the tests that measure no
    downtime skip it: a few seconds per launch)."""
    conf = local_spark_conf("standby-test", extra=delta_spark_conf() if "--delta" in args else None)
    conf.pop("spark.app.name"), conf.pop("spark.master")
    conf["spark.pyspark.python"] = conf["spark.pyspark.driver.python"] = sys.executable
    conf.update({CONF_STANDBY: "true", CONF_STANDBY_TIMEOUT_S: f"{timeout_s:g}",
                 CONF_STANDBY_REHEARSAL: str(rehearsal).lower()})
    handle = hook.launch(str(JOB), checkpoint_uri=str(checkpoint), application_args=[bootstrap, topic, str(sink), *args],
                         conf=conf, name=f"standby-{checkpoint.name}", launch_id=uuid.uuid4().hex)
    handles.append(handle)
    return handle


def control(checkpoint: Path) -> ControlFiles:
    return ControlFiles(fsspec.filesystem("file"), str(checkpoint))


def wait_for(predicate, timeout: float, what: str, handle: LaunchHandle | None = None,  # noqa: ANN001
             hook: SparkLauncherHook | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            tail = hook.log_tail(handle, 40) if hook and handle else ""
            raise AssertionError(f"{what}: not within {timeout:.0f} s\n{tail}")
        time.sleep(0.5)


def spark_files(checkpoint: Path) -> list[str]:
    """Everything Spark would have written: any path under the checkpoint outside ``_ckpt/``."""
    return sorted(str(p.relative_to(checkpoint)) for p in checkpoint.rglob("*")
                  if p.relative_to(checkpoint).parts[0] != "_ckpt")


def wait_standby(checkpoint: Path, handle: LaunchHandle, hook: SparkLauncherHook) -> str:
    def waiting() -> bool:
        beat = control(checkpoint).heartbeat()
        return beat is not None and beat.is_standby and beat.is_alive()

    wait_for(waiting, START_TIMEOUT_S, "standby heartbeat", handle, hook)
    beat = control(checkpoint).heartbeat()
    assert beat is not None
    return beat.run_id


def rehearsal_scratch(hook: SparkLauncherHook, handle: LaunchHandle, outcome: str) -> str:
    """The scratch folder the standby's rehearsal line names in its driver log; that line says
    ``outcome``."""
    lines = [line for line in hook.log_tail(handle, 50_000).splitlines() if "standby rehearsal in " in line]
    assert len(lines) == 1 and outcome in lines[0], lines
    return lines[0].split("standby rehearsal in ", 1)[1].split(": ", 1)[0]


def standby_beats(checkpoint: Path, beats: int, handle: LaunchHandle, hook: SparkLauncherHook) -> None:
    """Until the standby has written ``beats`` heartbeats after now and is still a standby: it kept
    waiting that long by its own clock (its wait loop looks for a release every 0.2 s beside the
    heartbeat thread), however loaded the machine. A fixed sleep may end before the driver ran."""
    since, seen = utc_iso(timespec="milliseconds"), set()

    def beaten() -> bool:
        beat = control(checkpoint).heartbeat()
        assert beat is not None and beat.is_standby, f"no longer a waiting standby: {beat}"
        if beat.updated_at > since:
            seen.add(beat.updated_at)
        return len(seen) >= beats

    wait_for(beaten, START_TIMEOUT_S, f"{beats} more standby heartbeats", handle, hook)


def driver_exit(checkpoint: Path, handle: LaunchHandle, hook: SparkLauncherHook) -> int | None:
    def exited() -> bool:
        record = control(checkpoint).driver()
        return record is not None and record.state == DriverStatus.EXITED

    wait_for(exited, 120, "the standby driver's exit", handle, hook)
    record = control(checkpoint).driver()
    assert record is not None
    return record.exit_code


def test_standby_waits_writes_nothing_then_starts_exactly_at_the_release(kafka, new_topic, spark, hook,  # noqa: ANN001
                                                                        tmp_path: Path) -> None:
    launcher, handles = hook
    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 60)
    checkpoint, sink = tmp_path / "cp", tmp_path / "sink"
    handle = launch_standby(launcher, handles, checkpoint, topic, kafka.bootstrap_servers, sink, rehearsal=True)
    run_id = wait_standby(checkpoint, handle, launcher)
    # its rehearsal ran a stateful query on the recent records and read its state, in a scratch
    # folder that is gone: nothing of it under the checkpoint or in the sink. A local master and a
    # local checkpoint: the driver's temporary folder, not the checkpoint's _ckpt/rehearsal/
    scratch = rehearsal_scratch(launcher, handle, "state reader read")
    assert Path(scratch).is_absolute() and "ckpt-standby-rehearsal-" in scratch, scratch
    assert not Path(scratch).exists() and not (checkpoint / "_ckpt" / "rehearsal").exists()

    # waiting: not a file of Spark's, however long records keep arriving
    produce_records(kafka.bootstrap_servers, topic, 40, start=60)
    standby_beats(checkpoint, 3, handle, launcher)
    assert spark_files(checkpoint) == []
    assert not sink.exists()

    # a release for another standby run (left over from an earlier upgrade) is not taken
    ctl = control(checkpoint)
    stale = StandbyRelease(release_id="stale", released_at=utc_iso(), starting_offsets=json.dumps({topic: {"0": 0, "1": 0}}),
                           standby_run_id="an-earlier-standby")
    ctl.write_record(STANDBY_RELEASE, stale.to_json().encode())
    standby_beats(checkpoint, 2, handle, launcher)
    assert spark_files(checkpoint) == []

    start = {"0": 17, "1": 23}
    release = StandbyRelease(release_id=uuid.uuid4().hex, released_at=utc_iso(),
                             starting_offsets=json.dumps({topic: start}), standby_run_id=run_id)
    ctl.write_record(STANDBY_RELEASE, release.to_json().encode())
    wait_for(lambda: bool(ctl.batch_state().last_committed_batch is not None), START_TIMEOUT_S,
             "the released query's first commit", handle, launcher)

    (initial,) = CheckpointReader(str(checkpoint)).snapshot(include_initial=True).initial_sources
    assert initial.kafka is not None
    assert {p: initial.kafka.get(topic, p) for p in (0, 1)} == {0: 17, 1: 23}
    beat = ctl.heartbeat()  # the released query keeps the standby's run (a stop request reaches it)
    assert beat is not None and beat.run_id == run_id

    # the sink gets every record from the released offsets on, once
    ends = {p: latest for p, (_, latest) in KafkaBroker(kafka.bootstrap_servers).view([topic]).partitions(topic).items()}
    assert min(ends.values()) > 23, ends
    expected = {(topic, p, o) for p, first in ((0, 17), (1, 23)) for o in range(first, ends[p])}
    wait_for(lambda: set(sink_records(spark, sink)) >= expected, START_TIMEOUT_S, "the sink to catch up")
    seen = sink_records(spark, sink)
    assert set(seen) == expected and max(seen.values()) == 1


def test_standby_asked_to_stop_exits_without_a_checkpoint_file(kafka, new_topic, hook, tmp_path: Path) -> None:  # noqa: ANN001
    launcher, handles = hook
    topic = new_topic(1)
    checkpoint, sink = tmp_path / "cp", tmp_path / "sink"
    handle = launch_standby(launcher, handles, checkpoint, topic, kafka.bootstrap_servers, sink)
    run_id = wait_standby(checkpoint, handle, launcher)

    request, _ = control(checkpoint).request_stop("test", "upgrade aborted", 120)
    assert driver_exit(checkpoint, handle, launcher) == 0
    ack = control(checkpoint).ack()
    assert ack is not None and ack.request_id == request.request_id and ack.run_id == run_id
    assert ack.last_committed_batch is None and ack.outcome == "clean"
    assert spark_files(checkpoint) == [] and not sink.exists()


def test_standby_never_released_exits_at_its_timeout(kafka, new_topic, hook, tmp_path: Path) -> None:  # noqa: ANN001
    launcher, handles = hook
    topic = new_topic(1)
    checkpoint, sink = tmp_path / "cp", tmp_path / "sink"
    handle = launch_standby(launcher, handles, checkpoint, topic, kafka.bootstrap_servers, sink, timeout_s=4,
                            rehearsal=True)
    assert driver_exit(checkpoint, handle, launcher) == EXIT_STANDBY_TIMEOUT
    # an idle topic: the rehearsal's first batch had no Kafka record, only its file stream's row:
    # one row in each of its two stateful operators' state (deduplication, aggregation)
    assert not Path(rehearsal_scratch(launcher, handle, "to batch 0, state reader read 2 rows")).exists()
    beat = control(checkpoint).heartbeat()
    assert beat is not None and beat.state == "stopped"
    assert spark_files(checkpoint) == [] and not sink.exists()
