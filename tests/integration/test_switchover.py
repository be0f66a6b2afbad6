"""Driver-to-driver handover with real drivers and a real Kafka broker: a standby released for a
switchover starts by itself the moment the old query stopped clean, at the old checkpoint's last
committed batch end offsets, and the two versions' sinks hold every Kafka record exactly once.

The old version is ``jobs/stop_job.py`` (Kafka -> Parquet under GracefulStop, a producer
running); the new one is the standby of tests/integration/test_standby.py
(``jobs/kafka_to_parquet.py``). The provider's side is the switchover step itself
(:class:`StandbySwitchoverOperator`): it writes the switchover release in the new checkpoint, then
the stop request in the old one, and nothing else before the standby started; its result (the
handover it re-derived, the stop, the downtime split) is checked against the test's own reading.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint.errors import CheckpointError
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit, SwitchoverResult
from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator
from airflow_ckpt_provider.spark.control import STOP_ACK, SWITCHOVER_HANDOVER, SWITCHOVER_RELEASE, StopAck
from airflow_ckpt_provider.spark.switchover import SwitchoverHandover, SwitchoverRelease
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.audit import audit, broker_ranges, read_sink_records
from tests.integration.test_graceful_stop import start_job  # noqa: F401 - the old version's fixture
from tests.integration.test_launch_real import _TI as TI
from tests.integration.test_launch_real import run_operator
from tests.integration.test_standby import (  # noqa: F401 - hook is a fixture
    START_TIMEOUT_S,
    control,
    hook,
    launch_standby,
    wait_for,
    wait_standby,
)

pytestmark = pytest.mark.integration


def _without_time(handover: Handover) -> dict[str, object]:
    return {k: v for k, v in handover.to_dict().items() if k != "taken_at"}


def test_a_standby_released_for_a_switchover_starts_at_the_old_last_commit_exactly_once(
        kafka, start_job, hook, tmp_path: Path) -> None:  # noqa: ANN001, F811
    launcher, handles = hook
    old = start_job("graceful", rate=100, partitions=2)  # Kafka -> Parquet on a 1 s trigger, producer running
    old.wait_for_batches(2, heartbeat=True)
    new_cp, new_sink = tmp_path / "v2-cp", tmp_path / "v2-sink"
    standby = launch_standby(launcher, handles, new_cp, old.topic, kafka.bootstrap_servers, new_sink)
    run_id = wait_standby(new_cp, standby, launcher)

    # the provider's switchover step: the release (naming the stop request it sends next), then the stop request;
    # it waits for the new query's first commit, re-derives the handover and checks the old checkpoint's quiet
    step = StandbySwitchoverOperator(
        task_id="switchover", application="unused: the standby runs", checkpoint_uri=str(new_cp),
        old_checkpoint_uri=str(old.checkpoint), standby_handle=standby.to_dict(), stop_timeout=180,
        first_commit_timeout=START_TIMEOUT_S, poll_interval=0.5, quiet_period=2)
    step.__dict__["launcher_hook"] = launcher
    ti = TI()

    def logs() -> str:
        return f"{old.log.read_text()[-3000:]}\n--- standby ---\n{launcher.log_tail(standby, 60)}"

    try:
        result = SwitchoverResult.from_json(run_operator(step, {"ti": ti}))
    except Exception as exc:
        raise AssertionError(logs()) from exc
    release = SwitchoverRelease.from_json((new_cp / SWITCHOVER_RELEASE).read_bytes())
    assert old.proc.wait(timeout=180) == 0, logs()
    ack = StopAck.from_json((old.checkpoint / STOP_ACK).read_bytes())
    assert (ack.request_id, ack.outcome) == (release.stop_request_id, "clean"), ack
    assert (new_cp / "commits" / "0").exists() and ti.xcom["launch_handle"] == standby.to_dict()

    # re-derived independently: the provider's reader on the old checkpoint, after the stop
    expected = CheckpointReader(str(old.checkpoint)).handover()
    assert expected.batch_id == ack.last_committed_batch is not None and expected.in_flight_batch is None
    start = expected.kafka_offsets()
    assert start.total() > 0, "the old version processed records before the switchover"
    (initial,) = CheckpointReader(str(new_cp)).snapshot(include_initial=True).initial_sources
    assert initial.kafka == start, f"the standby started at {initial.kafka}, not the old last commit's end {start}"

    used = SwitchoverHandover.from_json((new_cp / SWITCHOVER_HANDOVER).read_bytes())
    assert (used.release_id, used.standby_run_id, used.stop_request_id) == (release.release_id, run_id,
                                                                            release.stop_request_id)
    assert used.starting_offsets == start.to_json() and (used.start_mode, used.ack_outcome) == ("resume", "clean")
    assert _without_time(used.handover()) == _without_time(expected)
    assert used.stop_acknowledged_at == ack.stopped_at
    assert used.stop_acknowledged_at <= used.ack_seen_at <= used.handover_read_at <= used.released_at, used

    # the step's result: the provider's own handover (what later steps take), the stop, the downtime split
    taken = HandoverResult.from_json(result.handover)
    assert _without_time(taken.handover) == _without_time(expected) and taken.offsets() == start
    stop = StopResult.from_json(result.stop)
    assert (stop.outcome.value, stop.last_committed_batch, stop.interrupted_batch) == (
        "graceful", expected.batch_id, None)
    split = DowntimeSplit.from_json(result.downtime)
    assert split.downtime_s is not None and split.downtime_s > 0 and split.first_batch_s is not None, split
    assert split.notice_s is not None and split.handover_read_s is not None and split.query_start_s is not None

    # every record once across both versions: the producer stops, the new version catches up
    old.producer.stop()  # type: ignore[union-attr]
    ranges = broker_ranges(kafka.bootstrap_servers, [old.topic])

    ends = {(old.topic, p): end for (_, p), (_, end) in ranges.items()}

    def caught_up() -> bool:  # the new version committed a batch ending at the log end: it has no more to write
        try:
            done = CheckpointReader(str(new_cp)).handover()
        except CheckpointError:  # a batch file being written as we read
            return False
        return done.in_flight_batch is None and {(t, p): o for t, p, o in done.kafka_offsets().items()} == ends

    wait_for(caught_up, START_TIMEOUT_S, "the new version to commit the log end", standby, launcher)
    result = audit(read_sink_records(old.sink, new_sink), ranges)
    assert result.ok and result.produced > 0, result.to_dict()
    old_only = audit(read_sink_records(old.sink), ranges)
    assert 0 < old_only.distinct < result.produced, "both versions wrote part of the stream"
