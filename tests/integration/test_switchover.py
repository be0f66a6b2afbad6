"""Driver-to-driver handover with real drivers and a real Kafka broker: a standby released for a
switchover starts by itself the moment the old query stopped clean, at the old checkpoint's last
committed batch end offsets, and the two versions' sinks hold every Kafka record exactly once.

The old version is ``jobs/stop_job.py`` (Kafka -> Parquet under GracefulStop, a producer
running); the new one is the standby of tests/integration/test_standby.py
(``jobs/kafka_to_parquet.py``). The test writes what the provider will write: the switchover
release in the new checkpoint, then the stop request in the old one (the provider's own writer),
and nothing else: no handover is read or written by the test before the standby started.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from airflow_ckpt_provider.checkpoint.errors import CheckpointError
from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.stop import new_request
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.spark.control import STOP_ACK, SWITCHOVER_HANDOVER, SWITCHOVER_RELEASE, StopAck
from airflow_ckpt_provider.spark.switchover import SwitchoverHandover, SwitchoverRelease
from airflow_ckpt_provider.storage import CheckpointReader
from tests.harness.audit import audit, broker_ranges, read_sink_records
from tests.integration.test_graceful_stop import start_job  # noqa: F401 - the old version's fixture
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

    # the provider's switchover: the release (naming the stop request it sends next), then the stop request
    request = new_request("test.switchover", "switchover to v2", 180)
    release = SwitchoverRelease(release_id=uuid.uuid4().hex, released_at=utc_iso(timespec="milliseconds"),
                                standby_run_id=run_id, old_checkpoint=str(old.checkpoint),
                                stop_request_id=request.request_id, requested_by="test.switchover")
    control(new_cp).write_record(SWITCHOVER_RELEASE, release.to_json().encode())
    control(old.checkpoint).write_request(request)

    def logs() -> str:
        return f"{old.log.read_text()[-3000:]}\n--- standby ---\n{launcher.log_tail(standby, 60)}"

    assert old.proc.wait(timeout=180) == 0, logs()
    ack = StopAck.from_json((old.checkpoint / STOP_ACK).read_bytes())
    assert (ack.request_id, ack.outcome) == (request.request_id, "clean"), ack
    wait_for(lambda: (new_cp / "commits" / "0").exists(), START_TIMEOUT_S, "the standby's first commit", standby,
             launcher)

    # re-derived independently: the provider's reader on the old checkpoint, after the stop
    expected = CheckpointReader(str(old.checkpoint)).handover()
    assert expected.batch_id == ack.last_committed_batch is not None and expected.in_flight_batch is None
    start = expected.kafka_offsets()
    assert start.total() > 0, "the old version processed records before the switchover"
    (initial,) = CheckpointReader(str(new_cp)).snapshot(include_initial=True).initial_sources
    assert initial.kafka == start, f"the standby started at {initial.kafka}, not the old last commit's end {start}"

    used = SwitchoverHandover.from_json((new_cp / SWITCHOVER_HANDOVER).read_bytes())
    assert (used.release_id, used.standby_run_id, used.stop_request_id) == (release.release_id, run_id,
                                                                            request.request_id)
    assert used.starting_offsets == start.to_json() and (used.start_mode, used.ack_outcome) == ("resume", "clean")
    assert _without_time(used.handover()) == _without_time(expected)
    assert used.stop_requested_at == request.requested_at and used.stop_acknowledged_at == ack.stopped_at
    assert used.stop_acknowledged_at <= used.ack_seen_at <= used.handover_read_at <= used.released_at, used

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
