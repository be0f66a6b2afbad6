"""The switchover step without Spark: StandbySwitchoverOperator's checks before it writes anything,
the release and stop request it writes, the deferral on LaunchTrigger(switchover_release=...), the
result once the standby committed (its handover compared with the provider's own reading of the old
checkpoint), a refusal, a re-run after the release; the trigger's refusal wait; the downtime split and
the result's codecs.

The launcher hook is faked at its boundary; the standby's side (its ack wait, its handover record, its
first commit) is simulated by writing the files it writes; checkpoints and control files are real files.
The real path runs in tests/integration/test_switchover.py.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import fsspec
import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_ckpt_provider.checkpoint import BrokerView
from airflow_ckpt_provider.checkpoint.errors import (
    InvalidStepResult,
    QueryNotRunning,
    StandbyNotWaiting,
    SwitchoverMismatch,
    SwitchoverNotTaken,
    SwitchoverStandbyDied,
    SwitchoverUnsupported,
)
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit, SwitchoverResult, TakenBy, downtime_split
from airflow_ckpt_provider.operators.launch import HANDLE_XCOM_KEY
from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator
from airflow_ckpt_provider.records.control import (
    HEARTBEAT,
    STANDBY_RELEASE,
    STOP_ACK,
    STOP_REQUEST,
    STOP_WITHDRAWAL,
    SWITCHOVER_HANDOVER,
    SWITCHOVER_REFUSAL,
    SWITCHOVER_RELEASE,
    ProcessScope,
    StandbyRelease,
    StopAck,
    StopRequest,
)
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop
from airflow_ckpt_provider.spark.switchover import SwitchoverHandover, SwitchoverRefusal, SwitchoverRelease
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.triggers.launch import LaunchEvent, LaunchTrigger, LaunchWait
from airflow_ckpt_provider.upgrade.planner import OLD_STOPPED_NOTE, rollback_plan
from airflow_ckpt_provider.upgrade.record import UpgradeIntent
from airflow_ckpt_provider.upgrade.steps import PATHS
from airflow_ckpt_provider.upgrade.steps import Path as StepPath
from tests.unit.conftest import Built, write_checkpoint
from tests.unit.test_launch_operators import FakeLauncher, dead_pid, first_event, running_pid
from tests.unit.test_rollback import FakeKafkaHook
from tests.unit.test_standby import (
    TI,
    context,
    heartbeat,
    iso,
    now,
    planned_up_to,
    poll,
    put,
    read_release,
    waiting_standby,
)
from tests.unit.test_withdrawal_race import (  # noqa: F401 - paused is a fixture
    FakeQuery,
    InThread,
    LocalFiles,
    OldDriver,
    paused,
    until,
)

# -- the world: an old query running on v1 (3 committed batches), a standby waiting on v2 ----------


@pytest.fixture
def journal(tmp_path: Path) -> UpgradeJournal:
    """The journal of a switchover upgrade, planned and approved, its standby started."""
    journal = UpgradeJournal(fsspec.filesystem("file"), UpgradeJournal.location(str(tmp_path / "archive"), "orders",
                                                                                "up-1"))
    journal.open(UpgradeIntent(stream_name="orders", old_checkpoint=str(tmp_path / "v1"),
                               new_checkpoint=str(tmp_path / "v2")), "up-1", run_id="run-1")
    return planned_up_to(journal, StepPath.SWITCHOVER, "switchover")


def running_old(tmp_path: Path) -> tuple[Path, Built]:
    old = tmp_path / "v1"
    built = write_checkpoint(str(old), batches=range(3))  # last committed batch 2
    put(old, HEARTBEAT, heartbeat("running", started=now() - timedelta(minutes=5), run_id="old-run",
                                  query_id="q-old").to_json())
    return old, built


def switchover_operator(tmp_path: Path, standby_handle: LaunchHandle | None,
                        **kwargs: Any) -> tuple[StandbySwitchoverOperator, FakeLauncher]:
    defaults: dict[str, Any] = {"task_id": "switchover", "application": "job.py",
                                "checkpoint_uri": str(tmp_path / "v2"), "old_checkpoint_uri": str(tmp_path / "v1"),
                                "master": "local[1]", "first_commit_timeout": 60, "stop_timeout": 120,
                                "quiet_period": 0, "poll_interval": 0.05,
                                "standby_handle": standby_handle.to_dict() if standby_handle else None}
    operator = StandbySwitchoverOperator(**{**defaults, **kwargs})
    fake = FakeLauncher(running_pid(), tmp_path / "cold.log")
    operator.__dict__["launcher_hook"] = fake
    return operator, fake


def read_switchover_release(cp: Path) -> SwitchoverRelease | None:
    path = cp / SWITCHOVER_RELEASE
    return SwitchoverRelease.from_json(path.read_bytes()) if path.exists() else None


def read_request(cp: Path) -> StopRequest | None:
    path = cp / STOP_REQUEST
    return StopRequest.from_json(path.read_bytes()) if path.exists() else None


def nothing_written(new: Path, old: Path) -> None:
    assert read_switchover_release(new) is None, "no switchover release in the new checkpoint"
    assert read_request(old) is None, "no stop request in the old checkpoint"


def released(tmp_path: Path, **kwargs: Any) -> tuple[StandbySwitchoverOperator, TaskDeferred, LaunchHandle, Built]:
    """The step run on a waiting standby and a running old query, up to its deferral."""
    new = tmp_path / "v2"
    _, built = running_old(tmp_path)
    handle, _ = waiting_standby(new)
    operator, fake = switchover_operator(tmp_path, handle, **kwargs)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": TI()})
    assert fake.launches == [], "a switchover never launches cold"
    return operator, deferred.value, handle, built


def at(moment: datetime, seconds: float) -> str:
    return iso(moment + timedelta(seconds=seconds))


def standby_took_over(tmp_path: Path, built: Built, *, starting_offsets: str | None = None,
                      t0: datetime | None = None) -> SwitchoverHandover:
    """What the standby and the old query write once the old query stopped clean: the ack and a stopped
    heartbeat on v1, the switchover handover and batch 0 on v2. The standby reads the old checkpoint's
    handover as the driver does (the provider's reader stands in for its Hadoop one)."""
    new, old = tmp_path / "v2", tmp_path / "v1"
    release = read_switchover_release(new)
    request = read_request(old)
    assert release is not None and request is not None
    t0 = t0 or now() - timedelta(seconds=10)
    last = built.last_committed
    put(old, STOP_ACK, StopAck(request_id=request.request_id, query_id="q-old", run_id="old-run", outcome="clean",
                               last_committed_batch=last, last_planned_batch=last, stopped_at=iso(t0)).to_json())
    put(old, HEARTBEAT, heartbeat("stopped", started=now() - timedelta(minutes=5), run_id="old-run",
                                  query_id="q-old").to_json())
    handover = CheckpointReader(str(old)).handover()
    used = SwitchoverHandover(
        release_id=release.release_id, standby_run_id=release.standby_run_id, old_checkpoint=str(old),
        stop_request_id=request.request_id, ack_outcome="clean", handover_json=handover.to_json(),
        starting_offsets=starting_offsets or handover.kafka_offsets().to_json(), start_mode="resume", start_value="",
        release_written_at=release.released_at, stop_requested_at=request.requested_at,
        stop_acknowledged_at=iso(t0), ack_seen_at=at(t0, 0.2), handover_read_at=at(t0, 0.5), released_at=at(t0, 0.9))
    put(new, SWITCHOVER_HANDOVER, used.to_json())
    write_checkpoint(str(new), batches=range(1))  # the new query's batch 0
    return used


def committed(handle: LaunchHandle, batch: int = 0) -> dict[str, Any]:
    return {"reason": LaunchEvent.COMMITTED.value, "batch": batch, "state": "running", "log_tail": "",
            "handle": handle.to_dict(), "waited_s": 3.0, "evidence": ""}


def without_time(handover: Handover) -> dict[str, Any]:
    return {k: v for k, v in handover.to_dict().items() if k != "taken_at"}


# -- before anything is written --------------------------------------------------------------------


@pytest.mark.parametrize("gone", ["no-heartbeat", "stopped", "launch-ended", "no-handle"])
def test_a_standby_that_does_not_wait_is_refused_before_anything_is_written(tmp_path: Path, gone: str) -> None:
    new = tmp_path / "v2"
    old, _ = running_old(tmp_path)
    handle: LaunchHandle | None
    handle, _ = waiting_standby(new)
    if gone == "no-heartbeat":
        (new / HEARTBEAT).unlink()
    elif gone == "stopped":
        put(new, HEARTBEAT, heartbeat("stopped", started=now() - timedelta(seconds=30)).to_json())
    elif gone == "launch-ended":  # its beat is fresh, but its process group is gone
        scope = ProcessScope.current()
        handle = LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=str(new), app_name="v2-standby",
                              started_at=iso(now() - timedelta(seconds=40)), pid=dead_pid(),
                              log_path=str(tmp_path / "standby.log"), host=scope.host, boot_id=scope.boot_id,
                              pid_namespace=scope.pid_namespace)
    else:
        handle = None
    operator, fake = switchover_operator(tmp_path, handle, adopt_grace_s=0.2)
    ti = TI()
    with pytest.raises(StandbyNotWaiting) as refused:
        operator.execute({"ti": ti})
    assert str(new) in str(refused.value)
    nothing_written(new, old)
    assert fake.launches == [] and ti.xcom == {}, "no cold launch, nothing pushed"


@pytest.mark.parametrize("beat", ["none", "stale", "stopped"])
def test_an_old_query_without_a_live_heartbeat_is_refused_before_anything_is_written(
        tmp_path: Path, beat: str) -> None:
    new = tmp_path / "v2"
    old, _ = running_old(tmp_path)
    handle, _ = waiting_standby(new)
    if beat == "none":
        (old / HEARTBEAT).unlink()
    elif beat == "stale":
        put(old, HEARTBEAT, heartbeat("running", started=now() - timedelta(minutes=5), updated=now()
                                      - timedelta(seconds=60), query_id="q-old").to_json())
    else:
        put(old, HEARTBEAT, heartbeat("stopped", started=now() - timedelta(minutes=5), query_id="q-old").to_json())
    operator, _ = switchover_operator(tmp_path, handle)
    with pytest.raises(QueryNotRunning) as refused:
        operator.execute({"ti": TI()})
    assert "old checkpoint" in refused.value.found and str(old) in str(refused.value)
    assert ("no heartbeat" in refused.value.found) is (beat == "none")
    nothing_written(new, old)


@pytest.mark.parametrize("given", ["handover", "initial_state", "starting_offsets", "handover_json"])
def test_a_handover_or_state_given_to_the_step_is_refused(tmp_path: Path, given: str) -> None:
    handle, _ = waiting_standby(tmp_path / "v2")
    with pytest.raises(ValueError, match=f"takes no {given}"):
        switchover_operator(tmp_path, handle, **{given: "{}"})


def stateful_old(tmp_path: Path) -> Path:
    old = tmp_path / "v1"
    write_checkpoint(str(old), batches=range(3), state_operators=(0,))
    put(old, HEARTBEAT, heartbeat("running", started=now() - timedelta(minutes=5), run_id="old-run",
                                  query_id="q-old").to_json())
    return old


def test_a_stateful_old_query_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    new = tmp_path / "v2"
    old = stateful_old(tmp_path)
    handle, _ = waiting_standby(new)
    operator, _ = switchover_operator(tmp_path, handle)
    with pytest.raises(SwitchoverUnsupported, match="EMPTY state"):
        operator.execute({"ti": TI()})
    nothing_written(new, old)


def test_a_stateful_old_query_switches_with_consent_to_empty_state(tmp_path: Path) -> None:
    new = tmp_path / "v2"
    stateful_old(tmp_path)
    handle, _ = waiting_standby(new)
    operator, _ = switchover_operator(tmp_path, handle, accept_empty_state="True")
    with pytest.raises(TaskDeferred):
        operator.execute({"ti": TI()})
    assert read_switchover_release(new) is not None


@pytest.mark.parametrize(("empty", "seed"), [("False", True), ("True", False)], ids=["carried", "not-carried"])
def test_a_stateful_old_query_switches_with_its_state_seeded_when_carried(tmp_path: Path, empty: str,
                                                                          seed: bool) -> None:
    new = tmp_path / "v2"
    stateful_old(tmp_path)
    handle, _ = waiting_standby(new)
    operator, _ = switchover_operator(tmp_path, handle, carry_state="True" if seed else "False",
                                      accept_empty_state=empty)
    with pytest.raises(TaskDeferred):
        operator.execute({"ti": TI()})
    release = read_switchover_release(new)
    assert release is not None and release.seed_state is seed


def test_a_switchover_needs_the_old_checkpoint(tmp_path: Path) -> None:
    handle, _ = waiting_standby(tmp_path / "v2")
    operator, _ = switchover_operator(tmp_path, handle, old_checkpoint_uri=None)
    with pytest.raises(ValueError, match="old_checkpoint_uri"):
        operator.execute({"ti": TI()})
    assert read_switchover_release(tmp_path / "v2") is None


# -- the release, the deferral, the result ---------------------------------------------------------


def test_the_step_releases_the_standby_asks_the_old_query_to_stop_and_defers(tmp_path: Path) -> None:
    new, old = tmp_path / "v2", tmp_path / "v1"
    running_old(tmp_path)
    handle, beat = waiting_standby(new)
    operator, _ = switchover_operator(tmp_path, handle)
    ti = TI()
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti})
    release, request = read_switchover_release(new), read_request(old)
    assert release is not None and request is not None
    assert release.standby_run_id == beat.run_id and release.old_checkpoint == str(old)
    assert release.stop_request_id == request.request_id, "the release names the stop request sent to the old query"
    assert (release.start_mode, release.start_value, release.expected_starting_offsets) == ("resume", "", "")
    assert release.requested_by.endswith(".switchover") and request.reason == "switchover"
    assert ti.xcom[HANDLE_XCOM_KEY] == handle.to_dict()
    trigger = deferred.value.trigger
    assert isinstance(trigger, LaunchTrigger) and deferred.value.method_name == "execute_complete"
    assert trigger.switchover_release == release.release_id and trigger.min_batch == 0
    assert trigger.wait_for is LaunchWait.COMMIT and trigger.handle == handle.to_dict()
    assert trigger.checkpoint_uri == str(new)
    assert trigger.deadline == pytest.approx(time.time() + 120 + 60, abs=30)  # stop_timeout + first_commit_timeout
    assert LaunchTrigger(**trigger.serialize()[1]).switchover_release == release.release_id


def test_a_pending_stop_request_on_the_old_checkpoint_is_joined(tmp_path: Path) -> None:
    new, old = tmp_path / "v2", tmp_path / "v1"
    running_old(tmp_path)
    pending = StopRequest(request_id="asked-earlier", requested_at=iso(now()), requested_by="someone",
                          reason="upgrade", expires_at=iso(now() + timedelta(minutes=5)))
    put(old, STOP_REQUEST, pending.to_json())
    handle, _ = waiting_standby(new)
    operator, _ = switchover_operator(tmp_path, handle)
    with pytest.raises(TaskDeferred):
        operator.execute({"ti": TI()})
    release = read_switchover_release(new)
    assert release is not None and release.stop_request_id == "asked-earlier"
    assert read_request(old) == pending, "the pending request is not replaced"


def test_the_result_once_the_standby_committed(tmp_path: Path) -> None:
    operator, deferred, handle, built = released(tmp_path)
    new, old = tmp_path / "v2", tmp_path / "v1"
    release = read_switchover_release(new)
    assert release is not None and deferred.trigger.switchover_release == release.release_id
    t0 = now() - timedelta(seconds=10)
    used = standby_took_over(tmp_path, built, t0=t0)
    ours = CheckpointReader(str(old)).handover()
    assert ours.batch_id == 2 and ours.kafka_offsets() == built.kafka(2), "the test checkpoint's truth"

    raw = operator.execute_complete({"ti": TI()}, committed(handle))
    result = SwitchoverResult.from_json(raw)  # strict: the step's result decodes
    assert LaunchHandle.from_json(result.handle).app_name == handle.app_name
    taken = HandoverResult.from_json(result.handover)
    assert without_time(taken.handover) == without_time(ours) and taken.offsets() == built.kafka(2)
    assert taken.start_plan is None, "a plain resume"
    stop = StopResult.from_json(result.stop)
    assert (stop.outcome.value, stop.request_id, stop.last_committed_batch, stop.interrupted_batch) == (
        "graceful", release.stop_request_id, 2, None)
    assert stop.checkpoint_uri == str(old)
    assert result.used == json.loads(used.to_json())
    split = DowntimeSplit.from_json(result.downtime)
    commit_at = (new / "commits" / "0").stat().st_mtime
    assert (split.notice_s, split.handover_read_s, split.query_start_s, split.state_wait_s) == (0.2, 0.3, 0.4, None)
    assert split.downtime_s == pytest.approx(commit_at - t0.timestamp(), abs=0.01)
    assert split.first_batch_s == pytest.approx(commit_at - t0.timestamp() - 0.9, abs=0.01)
    assert split.stop_s is not None and split.stop_s >= 0


def test_a_standby_that_started_elsewhere_than_the_old_last_commit_is_a_mismatch(tmp_path: Path) -> None:
    operator, _, handle, built = released(tmp_path)
    elsewhere = built.kafka(1).to_json()  # batch 1's end: batch 2 would be processed again
    ours = built.kafka(2).to_json()
    standby_took_over(tmp_path, built, starting_offsets=elsewhere)
    with pytest.raises(SwitchoverMismatch) as mismatch:
        operator.execute_complete({"ti": TI()}, committed(handle))
    assert f"starting offsets {elsewhere}" in mismatch.value.found
    assert f"starting offsets {ours}" in mismatch.value.expected


def test_a_standby_handover_of_another_release_is_a_mismatch(tmp_path: Path) -> None:
    operator, _, handle, built = released(tmp_path)
    used = standby_took_over(tmp_path, built)
    put(tmp_path / "v2", SWITCHOVER_HANDOVER, json.dumps({**json.loads(used.to_json()), "release_id": "another"}))
    with pytest.raises(SwitchoverMismatch, match=SWITCHOVER_HANDOVER):
        operator.execute_complete({"ti": TI()}, committed(handle))


def test_a_refusal_by_the_standby_is_switchover_not_taken(tmp_path: Path) -> None:
    operator, _, handle, _ = released(tmp_path)
    event = {**committed(handle), "reason": LaunchEvent.REFUSED.value, "batch": None,
             "evidence": "stop_not_clean: found the old query stopped interrupted; expected a stop acknowledged clean"}
    with pytest.raises(SwitchoverNotTaken) as refused:
        operator.execute_complete({"ti": TI()}, event)
    assert "stop_not_clean" in refused.value.found and "stopped interrupted" in str(refused.value)
    assert not (tmp_path / "v2" / "commits").exists()


def test_a_rerun_after_the_release_waits_for_the_same_release(
        tmp_path: Path, journal: UpgradeJournal) -> None:  # noqa: F811 - the fixture
    new, old = tmp_path / "v2", tmp_path / "v1"
    running_old(tmp_path)
    handle, _ = waiting_standby(new)
    operator, _ = switchover_operator(tmp_path, handle, journal=journal.path)
    with pytest.raises(TaskDeferred) as first:
        operator.execute(context("run-1", TI()))  # released and asked, then the worker died while deferred
    release_bytes, request_bytes = (new / SWITCHOVER_RELEASE).read_bytes(), (old / STOP_REQUEST).read_bytes()
    release = SwitchoverRelease.from_json(release_bytes)
    step = journal.step("switchover")
    assert step is not None and step.notes["released"] == release.release_id
    assert step.notes["stop_request"] == release.stop_request_id and step.notes["handle"] == handle.to_dict()
    assert first.value.trigger.switchover_release == release.release_id

    put(new, HEARTBEAT, heartbeat(started=now(), run_id="a-later-standby").to_json())  # still looks waiting
    again, fake = switchover_operator(tmp_path, handle, journal=journal.path)
    ti = TI()
    with pytest.raises(TaskDeferred) as deferred:
        again.execute(context("run-2", ti))
    assert (new / SWITCHOVER_RELEASE).read_bytes() == release_bytes, "no second release"
    assert (old / STOP_REQUEST).read_bytes() == request_bytes, "no second stop request"
    trigger = deferred.value.trigger
    assert trigger.switchover_release == release.release_id and trigger.handle == handle.to_dict()
    assert trigger.min_batch == 0 and ti.xcom[HANDLE_XCOM_KEY] == handle.to_dict() and fake.launches == []


# -- LaunchTrigger(switchover_release=...) -----------------------------------------------------------


def refusal(release_id: str, reason: str = "plan_changed") -> str:
    return SwitchoverRefusal(release_id=release_id, standby_run_id="standby-run-1", reason=reason,
                             found="handover from batch 2", expected="the approved plan: handover from batch 1",
                             refused_at=iso(now())).to_json()


def switchover_trigger(cp: Path, release_id: str = "sw-1", **kwargs: Any) -> LaunchTrigger:
    return LaunchTrigger(str(cp), deadline=time.time() + 60, poll_interval=0.02, switchover_release=release_id,
                         **kwargs)


def test_the_trigger_fires_refused_on_a_refusal_of_its_release(tmp_path: Path) -> None:
    cp = tmp_path / "v2"
    put(cp, SWITCHOVER_REFUSAL, refusal("sw-1"))
    event = first_event(switchover_trigger(cp))
    assert event["reason"] == LaunchEvent.REFUSED.value and event["batch"] is None
    assert event["evidence"] == ("plan_changed: found handover from batch 2; expected the approved plan: handover "
                                 "from batch 1")


def test_the_trigger_ignores_a_refusal_of_another_release(tmp_path: Path) -> None:
    cp = tmp_path / "v2"
    put(cp, SWITCHOVER_REFUSAL, refusal("an-earlier-release"))
    assert poll(switchover_trigger(cp)) is None
    assert poll(LaunchTrigger(str(cp), deadline=time.time() + 60)) is None, "a trigger of no switchover ignores it"
    write_checkpoint(str(cp), batches=range(1))
    assert poll(switchover_trigger(cp))["reason"] == LaunchEvent.COMMITTED.value  # type: ignore[index]


def test_a_commit_wins_over_a_refusal_file(tmp_path: Path) -> None:
    cp = tmp_path / "v2"
    put(cp, SWITCHOVER_REFUSAL, refusal("sw-1"))
    write_checkpoint(str(cp), batches=range(1))
    assert poll(switchover_trigger(cp))["reason"] == LaunchEvent.COMMITTED.value  # type: ignore[index]


def test_the_trigger_serializes_switchover_release_only_when_set(tmp_path: Path) -> None:
    cp = tmp_path / "v2"
    trigger = switchover_trigger(cp, "sw-9", handle={"mode": "local"}, started_at=100.0)
    path, kwargs = trigger.serialize()
    assert path == "airflow_ckpt_provider.triggers.launch.LaunchTrigger" and kwargs["switchover_release"] == "sw-9"
    again = LaunchTrigger(**kwargs)
    assert again.serialize() == trigger.serialize() and again.switchover_release == "sw-9"
    plain = LaunchTrigger(str(cp), deadline=1.0)
    assert "switchover_release" not in plain.serialize()[1] and plain.switchover_release == ""
    assert LaunchTrigger(**plain.serialize()[1]).switchover_release == ""


# -- the downtime split and the result's codecs ----------------------------------------------------

T0 = datetime(2026, 11, 28, 10, 0, 0, tzinfo=timezone.utc)


def test_downtime_split_from_iso_times() -> None:
    split = downtime_split(stop_requested_at=at(T0, -1.5), stop_acknowledged_at="2026-11-28T10:00:00Z",
                           ack_seen_at=at(T0, 0.25), handover_read_at=at(T0, 0.75), released_at=at(T0, 1.0),
                           first_commit_at=T0.timestamp() + 3.5)
    assert split == DowntimeSplit(stop_s=1.5, notice_s=0.25, handover_read_s=0.5, state_wait_s=None,
                                  query_start_s=0.25, first_batch_s=2.5, downtime_s=3.5)
    assert split.describe() == ("downtime 3.5 s: notice 0.2 s, handover read 0.5 s, query start 0.2 s, first batch "
                                "2.5 s (the old query took 1.5 s to stop)")
    other_zone = downtime_split(stop_requested_at="2026-11-28T11:59:59+02:00", stop_acknowledged_at=at(T0, 0),
                                ack_seen_at=at(T0, 0), handover_read_at=at(T0, 0), released_at=at(T0, 0.7),
                                state_seeded_at="2026-11-28T12:00:00.7+02:00", first_commit_at=T0.timestamp() - 5)
    assert (other_zone.stop_s, other_zone.first_batch_s, other_zone.downtime_s, other_zone.state_wait_s) == (
        1.0, 0.0, 0.0, 0.7), "zones are honoured; a clock skew never gives a negative duration"
    assert other_zone.query_start_s == 0.0, "the query starts after the state is seeded, not after the handover read"


def test_downtime_split_with_the_state_seeded() -> None:
    split = downtime_split(stop_requested_at=at(T0, -1.0), stop_acknowledged_at=at(T0, 0), ack_seen_at=at(T0, 0.25),
                           handover_read_at=at(T0, 0.5), state_seeded_at=at(T0, 2.5), released_at=at(T0, 2.75),
                           first_commit_at=T0.timestamp() + 4.0)
    assert (split.handover_read_s, split.state_wait_s, split.query_start_s, split.first_batch_s, split.downtime_s) \
        == (0.25, 2.0, 0.25, 1.25, 4.0)
    assert "state wait 2.0 s" in split.describe()


def test_downtime_split_with_times_missing() -> None:
    split = downtime_split(stop_requested_at="", stop_acknowledged_at=at(T0, 0), ack_seen_at="not a time",
                           handover_read_at="2026-11-28 10:00:01 UTC", released_at=at(T0, 2), first_commit_at=None)
    assert split == DowntimeSplit(stop_s=None, notice_s=None, handover_read_s=None, state_wait_s=None,
                                  query_start_s=None, first_batch_s=None, downtime_s=None)
    assert split.describe() == "downtime unknown"
    partial = downtime_split(stop_requested_at="", stop_acknowledged_at=at(T0, 0), ack_seen_at=at(T0, 1),
                             handover_read_at="", released_at=at(T0, 2), first_commit_at=None)
    assert (partial.notice_s, partial.handover_read_s, partial.downtime_s) == (1.0, None, None)
    assert partial.describe() == "downtime unknown: notice 1.0 s"


@pytest.fixture
def a_result(tmp_path: Path) -> SwitchoverResult:
    """A valid result: its handover and stop as the provider writes them for a checkpoint on disk."""
    cp = tmp_path / "v1"
    write_checkpoint(str(cp), batches=range(3))
    handover = CheckpointReader(str(cp)).handover()
    stop = StopResult(checkpoint_uri=str(cp), outcome="graceful", last_committed_batch=2,  # type: ignore[arg-type]
                      interrupted_batch=None, waited_s=1.5, last_planned_batch=2, request_id="stop-1")
    handle = LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri="/ck/v2", app_name="v2", started_at=at(T0, -60),
                          pid=4242, log_path="/logs/v2.log", host="h", boot_id="b", pid_namespace="pid:[1]")
    return SwitchoverResult(handle=handle.to_dict(), stop=stop.to_dict(),
                            handover=HandoverResult(handover, starting_offsets=handover.kafka_offsets()).to_dict(),
                            used={"release_id": "sw-1"},
                            downtime=DowntimeSplit(1.5, 0.2, 0.3, None, 0.4, 2.0, 2.9).to_dict())


def test_switchover_result_round_trips(a_result: SwitchoverResult) -> None:
    result = a_result
    raw = result.to_dict()
    assert SwitchoverResult.from_json(raw) == result
    assert SwitchoverResult.from_json(json.dumps(raw)) == result
    split = DowntimeSplit.from_json(result.downtime)
    assert DowntimeSplit.from_json(json.dumps(split.to_dict())) == split and split.downtime_s == 2.9


@pytest.mark.parametrize(("change", "found"), [
    pytest.param(lambda raw: {**raw, "written_later": 1}, "written_later", id="unknown-key"),
    pytest.param(lambda raw: {k: v for k, v in raw.items() if k != "stop"}, "stop", id="missing-key"),
    pytest.param(lambda raw: {**raw, "stop": {**raw["stop"], "outcome": "vanished"}}, "outcome", id="bad-stop"),
    pytest.param(lambda raw: {**raw, "handover": {**raw["handover"], "surprise": True}}, "surprise",
                 id="bad-handover"),
    pytest.param(lambda raw: {**raw, "downtime": {**raw["downtime"], "downtime_s": "long"}}, "downtime_s",
                 id="bad-downtime"),
    pytest.param(lambda raw: {**raw, "handle": "not a dict"}, "handle", id="handle-not-a-dict"),
])
def test_switchover_result_decoding_is_strict(a_result: SwitchoverResult, change: Any, found: str) -> None:
    with pytest.raises(InvalidStepResult) as refused:
        SwitchoverResult.from_json(change(a_result.to_dict()))
    assert found in str(refused.value)


def test_downtime_split_decoding_is_strict() -> None:
    raw = DowntimeSplit(1.0, None, None, None, None, None, None).to_dict()
    with pytest.raises(InvalidStepResult, match="later_field"):
        DowntimeSplit.from_json({**raw, "later_field": 1.0})
    with pytest.raises(InvalidStepResult, match="notice_s"):
        DowntimeSplit.from_json({k: v for k, v in raw.items() if k != "notice_s"})


def test_a_standby_that_did_not_see_the_stop_request_still_gives_a_result(tmp_path: Path) -> None:
    """The old query's ack answers the named request, but the request file was gone (or replaced) when
    the standby read it: the standby starts and records no request time; the step still returns its
    result (the stop timed from the release), with the stop's share of the downtime unknown."""
    operator, _, handle, built = released(tmp_path)
    used = standby_took_over(tmp_path, built)
    put(tmp_path / "v2", SWITCHOVER_HANDOVER, json.dumps({**json.loads(used.to_json()), "stop_requested_at": ""}))
    (tmp_path / "v1" / STOP_REQUEST).unlink()
    result = SwitchoverResult.from_json(operator.execute_complete({"ti": TI()}, committed(handle)))
    assert StopResult.from_json(result.stop).outcome.value == "graceful"
    split = DowntimeSplit.from_json(result.downtime)
    assert split.stop_s is None and split.notice_s == 0.2 and split.downtime_s is not None


def test_a_release_noted_but_never_written_is_released_afresh(tmp_path: Path,
                                                               journal: UpgradeJournal) -> None:  # noqa: F811
    """An attempt that died between noting its release and writing it released nothing and asked
    nothing: the next one does both, once, instead of waiting for a release no standby can see."""
    new, old = tmp_path / "v2", tmp_path / "v1"
    running_old(tmp_path)
    handle, beat = waiting_standby(new)
    journal.begin("switchover", run_id="run-1")
    journal.note("switchover", released="never-written", stop_request="never-asked", handle=handle.to_dict())
    operator, _ = switchover_operator(tmp_path, handle, journal=journal.path)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute(context("run-2", TI()))
    release = SwitchoverRelease.from_json((new / SWITCHOVER_RELEASE).read_bytes())
    assert release.release_id != "never-written" and release.standby_run_id == beat.run_id
    assert deferred.value.trigger.switchover_release == release.release_id
    assert StopRequest.from_json((old / STOP_REQUEST).read_bytes()).request_id == release.stop_request_id


def test_a_release_written_without_its_stop_request_asks_the_old_query_on_the_rerun(
        tmp_path: Path, journal: UpgradeJournal) -> None:  # noqa: F811 - the fixture
    """An attempt that died between the release and the stop request: the standby waits for exactly
    the request its release names, so the next attempt writes that one (and no second release)."""
    new, old = tmp_path / "v2", tmp_path / "v1"
    running_old(tmp_path)
    handle, _ = waiting_standby(new)
    operator, _ = switchover_operator(tmp_path, handle, journal=journal.path)
    with pytest.raises(TaskDeferred):
        operator.execute(context("run-1", TI()))
    release_bytes = (new / SWITCHOVER_RELEASE).read_bytes()
    release = SwitchoverRelease.from_json(release_bytes)
    (old / STOP_REQUEST).unlink()  # as if the worker died before writing it

    again, _ = switchover_operator(tmp_path, handle, journal=journal.path)
    with pytest.raises(TaskDeferred) as deferred:
        again.execute(context("run-2", TI()))
    assert (new / SWITCHOVER_RELEASE).read_bytes() == release_bytes, "no second release"
    assert StopRequest.from_json((old / STOP_REQUEST).read_bytes()).request_id == release.stop_request_id
    assert deferred.value.trigger.switchover_release == release.release_id
    request_bytes = (old / STOP_REQUEST).read_bytes()
    with pytest.raises(TaskDeferred):
        switchover_operator(tmp_path, handle, journal=journal.path)[0].execute(context("run-3", TI()))
    assert (old / STOP_REQUEST).read_bytes() == request_bytes, "a request that is there is not written again"


# -- a failed switchover: the old query's state for the rollback ------------------------------------------


def test_a_failure_after_the_old_query_stopped_notes_it_for_the_rollback(
        tmp_path: Path, journal: UpgradeJournal) -> None:  # noqa: F811 - the fixture
    """The standby refused after the old query acknowledged: the old query stopped, the journal says so
    (the rollback restarts it), and its acknowledgement is left as it is."""
    operator, _, handle, built = released(tmp_path, journal=journal.path)
    journal.begin("switchover", run_id="run-1")
    standby_took_over(tmp_path, built)
    event = {**committed(handle), "reason": LaunchEvent.REFUSED.value, "batch": None, "evidence": "plan_changed"}
    with pytest.raises(SwitchoverNotTaken):
        operator.execute_complete(context("run-1", TI()), event)
    step = journal.step("switchover")
    assert step is not None and step.state == "failed" and step.notes[OLD_STOPPED_NOTE] is True
    assert (tmp_path / "v1" / STOP_ACK).exists()


def answering_old_driver(old: Path) -> InThread:
    """The old driver's main loop (GracefulStop's own code) answering the withdrawal once the
    provider wrote it: "withdrawn, continuing"."""
    driver = OldDriver.__new__(OldDriver)
    driver.files, driver.query = LocalFiles(old), FakeQuery(busy=True)
    stop = GracefulStop.__new__(GracefulStop)
    stop.query, stop.files, stop.run_id = driver.query, driver.files, "old-run"
    stop.poll_interval = 0.02

    def answer() -> None:
        until(lambda: (old / STOP_WITHDRAWAL).exists(), "the provider's withdrawal")
        stop._answer_unseen_withdrawal()

    return InThread(answer)


@pytest.mark.parametrize(("old_driver", "stopped"), [("runs on", False), ("died", True)])
def test_a_failure_before_the_old_query_acknowledged_withdraws_the_request(
        tmp_path: Path, journal: UpgradeJournal, old_driver: str, stopped: bool) -> None:  # noqa: F811
    """No acknowledgement (the standby died, say): the stop request is withdrawn and the step waits
    for the old driver's answer. An old driver that answers "withdrawn" goes on, and the journal says
    it did not stop (the rollback stops only the standby); one that died mid-switch (its heartbeat
    stale) counts as stopped: the rollback restarts it."""
    operator, _, handle, _ = released(tmp_path, journal=journal.path)
    journal.begin("switchover", run_id="run-1")
    assert (tmp_path / "v1" / STOP_REQUEST).exists()
    # live: a heartbeat that stays live however slow this machine is; dead: one two minutes old
    beat = heartbeat("running", started=now() - timedelta(minutes=5), run_id="old-run", query_id="q-old",
                     **({"interval": 600} if old_driver == "runs on" else {"updated": now() - timedelta(minutes=2)}))
    put(tmp_path / "v1", HEARTBEAT, beat.to_json())
    answering = answering_old_driver(tmp_path / "v1") if old_driver == "runs on" else None
    event = {**committed(handle), "reason": LaunchEvent.REFUSED.value, "batch": None, "evidence": "stop_expired"}
    with pytest.raises(SwitchoverNotTaken):
        operator.execute_complete(context("run-1", TI()), event)
    if answering is not None:
        answering.result()
    step = journal.step("switchover")
    assert step is not None and step.notes[OLD_STOPPED_NOTE] is stopped
    assert not (tmp_path / "v1" / STOP_REQUEST).exists(), "the request is withdrawn"


def test_an_old_driver_past_its_last_look_acknowledges_late_and_the_rollback_restarts_it(
        tmp_path: Path, journal: UpgradeJournal, paused: tuple[Path, Path]) -> None:  # noqa: F811
    """The withdrawal race: the old driver passed its last look at the request and is held before
    ``stop()`` when the switchover fails. The step withdraws and waits; the driver stops and
    acknowledges; the journal says the old query stopped, and the rollback restarts it."""
    held, go = paused
    operator, _, handle, _ = released(tmp_path, journal=journal.path)
    journal.begin("switchover", run_id="run-1")
    old = tmp_path / "v1"
    driver = OldDriver(old)
    request = StopRequest.from_json((old / STOP_REQUEST).read_bytes())
    carrying = InThread(lambda: driver.carry_out(request))
    until(held.exists, "the old driver held between its last look and stop()")
    failing = InThread(lambda: operator.execute_complete(context("run-1", TI()), died(handle)))
    until(lambda: not (old / STOP_REQUEST).exists(), "the request withdrawn")
    assert failing.thread.is_alive(), "the step waits for the old driver's answer"
    go.touch()
    with pytest.raises(SwitchoverStandbyDied):
        failing.result()
    assert carrying.result() is not None and driver.query.stopped
    step = journal.step("switchover")
    assert step is not None and step.notes[OLD_STOPPED_NOTE] is True
    plan = rollback_plan(journal.read(), PATHS[StepPath.SWITCHOVER])
    assert plan.restart_old and plan.stop_new


def test_an_old_driver_that_never_answers_is_not_recorded_as_running(
        tmp_path: Path, journal: UpgradeJournal, paused: tuple[Path, Path]) -> None:  # noqa: F811
    """Held before ``stop()`` past the step's ``withdraw_timeout``: no answer, the heartbeat live.
    The journal must not say the old query runs: it says stopped (the rollback's restart refuses a
    live heartbeat, so it never starts a second driver)."""
    held, _ = paused
    operator, _, handle, _ = released(tmp_path, journal=journal.path, withdraw_timeout=0.3)
    journal.begin("switchover", run_id="run-1")
    old = tmp_path / "v1"
    driver = OldDriver(old)
    carrying = InThread(lambda: driver.carry_out(StopRequest.from_json((old / STOP_REQUEST).read_bytes())))
    until(held.exists, "the old driver held between its last look and stop()")
    with pytest.raises(SwitchoverStandbyDied):
        operator.execute_complete(context("run-1", TI()), died(handle))
    step = journal.step("switchover")
    assert step is not None and step.notes[OLD_STOPPED_NOTE] is True
    assert carrying.thread.is_alive() and not driver.query.stopped, "no answer came: the driver is still held"


def died(handle: LaunchHandle) -> dict[str, Any]:
    """The trigger's event for a standby whose driver ended before its first commit."""
    return {**committed(handle), "reason": LaunchEvent.DIED.value, "batch": None, "state": "failed",
            "log_tail": "Killed", "evidence": "the driver exited with code -9"}


@pytest.mark.parametrize("when", ["after taking the handover", "before the old query stopped"])
def test_a_standby_that_died_mid_switch_fails_saying_what_it_left_and_whether_the_old_query_stopped(
        tmp_path: Path, journal: UpgradeJournal, when: str) -> None:  # noqa: F811 - the fixture
    """The new version's driver dies after the release and before its first commit. After taking the
    handover (the old query acknowledged; batch 0 planned, not committed): the error says so, the
    uncommitted batch is no handover, and the journal notes the old query stopped (the rollback
    restarts it from its own checkpoint). Before the old query stopped: nothing in the new checkpoint,
    the request is withdrawn, the old query (alive) goes on and the journal says it did not stop."""
    operator, _, handle, built = released(tmp_path, journal=journal.path)
    new, old = tmp_path / "v2", tmp_path / "v1"
    journal.begin("switchover", run_id="run-1")
    if when == "after taking the handover":
        used = standby_took_over(tmp_path, built)
        (new / "commits" / "0").unlink()  # batch 0 planned, the driver killed before its commit
    else:
        put(old, HEARTBEAT, heartbeat("running", started=now() - timedelta(minutes=5), run_id="old-run",
                                      query_id="q-old", interval=600).to_json())
    answering = answering_old_driver(old) if when == "before the old query stopped" else None
    old_files = sorted((p.relative_to(old).as_posix(), p.read_bytes()) for p in old.rglob("*")
                       if p.is_file() and p.relative_to(old).parts[0] != "_ckpt")
    with pytest.raises(SwitchoverStandbyDied) as failed:
        operator.execute_complete(context("run-1", TI()), died(handle))
    if answering is not None:
        answering.result()
    error = failed.value
    assert "code -9" in error.found and error.log_tail == "Killed" and error.path == str(new)
    step = journal.step("switchover")
    assert step is not None and step.state == "failed"
    if when == "after taking the handover":
        assert f"after the standby took the handover (starting offsets {used.starting_offsets})" in error.found
        assert "its checkpoint holds batch 0 planned and not committed" in error.found
        assert "the old query had stopped" in error.found and "at batch 2" in error.found
        assert "the rollback restarts it from" in error.action and "counts as a handover" in error.action
        assert step.notes[OLD_STOPPED_NOTE] is True
        assert (old / STOP_ACK).exists()
    else:
        assert "before the standby took the handover" in error.found and "holds no Spark file" in error.found
        assert "had not acknowledged stop request" in error.found and "withdrawn" in error.action
        assert step.notes[OLD_STOPPED_NOTE] is False
        assert not (old / STOP_REQUEST).exists(), "the request is withdrawn"
    assert old_files == sorted((p.relative_to(old).as_posix(), p.read_bytes()) for p in old.rglob("*")
                               if p.is_file() and p.relative_to(old).parts[0] != "_ckpt"), "old checkpoint untouched"


def test_a_refusal_before_the_release_notes_nothing(tmp_path: Path, journal: UpgradeJournal) -> None:  # noqa: F811
    new = tmp_path / "v2"
    running_old(tmp_path)
    handle, _ = waiting_standby(new)
    (new / HEARTBEAT).unlink()  # the standby is gone: refused before anything is written
    operator, _ = switchover_operator(tmp_path, handle, journal=journal.path)
    journal.begin("switchover", run_id="run-1")
    with pytest.raises(StandbyNotWaiting):
        operator.complete_step(lambda: operator.launch(context("run-1", TI()), None, journal), journal)
    step = journal.step("switchover")
    assert step is not None and OLD_STOPPED_NOTE not in step.notes


# -- a stop that cut a batch: the standby refuses, the provider takes over ----------------------------


def cut_world(tmp_path: Path, journal: UpgradeJournal, **kwargs: Any) -> tuple[  # noqa: F811
        StandbySwitchoverOperator, LaunchHandle, Built, dict[str, Any]]:
    """The old query planned batch 3 and its stop cut it (a built-in sink: no gate), acknowledged
    ``interrupted``; the standby refused its switchover and waits on."""
    new, old = tmp_path / "v2", tmp_path / "v1"
    built = write_checkpoint(str(old), batches=range(4), committed=range(3))
    put(old, HEARTBEAT, heartbeat("running", started=now() - timedelta(minutes=5), run_id="old-run",
                                  query_id="q-old").to_json())
    handle, _ = waiting_standby(new)
    operator, _ = switchover_operator(tmp_path, handle, journal=journal.path, kafka_conn_id="kafka_default",
                                      **kwargs)
    operator.__dict__["kafka_hook"] = FakeKafkaHook(BrokerView({"events": {p: (0, 10_000) for p in range(4)}}))
    with pytest.raises(TaskDeferred):
        operator.execute(context("run-1", TI()))
    release = read_switchover_release(new)
    request = read_request(old)
    assert release is not None and request is not None
    stopped = now() - timedelta(seconds=2)
    put(old, STOP_ACK, StopAck(request_id=request.request_id, query_id="q-old", run_id="old-run",
                               outcome="interrupted", last_committed_batch=2, last_planned_batch=3,
                               stopped_at=iso(stopped)).to_json())
    put(old, HEARTBEAT, heartbeat("stopped", started=now() - timedelta(minutes=5), run_id="old-run",
                                  query_id="q-old").to_json())
    put(new, SWITCHOVER_REFUSAL, SwitchoverRefusal(
        release_id=release.release_id, standby_run_id=release.standby_run_id, reason="stop_not_clean",
        found="the old query stopped interrupted", expected="a stop acknowledged clean or held",
        refused_at=iso(stopped + timedelta(seconds=0.2)), old_checkpoint=str(old),
        stop_request_id=request.request_id, ack_outcome="interrupted").to_json())
    event = {**committed(handle), "reason": LaunchEvent.REFUSED.value, "batch": None,
             "evidence": "stop_not_clean: the old query stopped interrupted"}
    return operator, handle, built, event


def test_a_stop_that_cut_a_batch_is_taken_over_by_the_provider_at_its_own_handover(
        tmp_path: Path, journal: UpgradeJournal) -> None:  # noqa: F811 - the fixture
    new = tmp_path / "v2"
    operator, handle, built, event = cut_world(tmp_path, journal)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute_complete(context("run-1", TI()), event)
    release = read_release(new)  # the standby's ordinary release, for the run that refused
    assert release is not None and release.standby_run_id == "standby-run-1"
    assert release.starting_offsets == built.kafka(2).to_json(), "the last committed batch's end: 3 was cut"
    assert Handover.from_json(release.handover_json).batch_id == 2
    fallback = deferred.value.kwargs["fallback"]
    assert not deferred.value.trigger.switchover_release and fallback["release"]["release_id"] == release.release_id
    step = journal.step("switchover")
    assert step is not None and step.notes["fallback"] == fallback, "noted before the release was written"
    account = HandoverResult.from_json(fallback["handover"]).sink
    assert account is not None and account["disposition"] != "none", "the sink ledger accounted for batch 3"

    put(new, "commits/0", "v1\n{}")  # the released standby committed its first batch
    result = SwitchoverResult.from_json(operator.execute_complete(context("run-1", TI()), committed(handle),
                                                                  fallback=fallback))
    assert result.taken_by is TakenBy.PROVIDER and result.used["reason"] == "stop_not_clean"
    assert HandoverResult.from_json(result.handover).offsets() == built.kafka(2)
    stop = StopResult.from_json(result.stop)
    assert stop.ack is not None and stop.ack["outcome"] == "interrupted" and stop.last_committed_batch == 2
    split = DowntimeSplit.from_json(result.downtime)
    assert split.notice_s == pytest.approx(0.2, abs=0.01) and split.downtime_s is not None


def test_a_retry_after_the_provider_took_over_writes_no_second_release(
        tmp_path: Path, journal: UpgradeJournal) -> None:  # noqa: F811 - the fixture
    new = tmp_path / "v2"
    operator, handle, _, event = cut_world(tmp_path, journal)
    with pytest.raises(TaskDeferred):
        operator.execute_complete(context("run-1", TI()), event)
    written = (new / STANDBY_RELEASE).read_bytes()
    again, _ = switchover_operator(tmp_path, handle, journal=journal.path, kafka_conn_id="kafka_default")
    with pytest.raises(TaskDeferred) as deferred:
        again.execute(context("run-2", TI()))
    assert (new / STANDBY_RELEASE).read_bytes() == written, "the same release"
    assert deferred.value.kwargs["fallback"]["release"]["release_id"] == StandbyRelease.from_json(written).release_id
    (new / STANDBY_RELEASE).unlink()  # as if the worker died between its note and its write
    with pytest.raises(TaskDeferred):
        switchover_operator(tmp_path, handle, journal=journal.path,
                            kafka_conn_id="kafka_default")[0].execute(context("run-3", TI()))
    assert (new / STANDBY_RELEASE).read_bytes() == written, "written from the note, never a new one"


@pytest.mark.parametrize("case", ["another reason", "no kafka connection", "state to seed"])
def test_other_refusals_fail_the_step(tmp_path: Path, journal: UpgradeJournal, case: str) -> None:  # noqa: F811
    new = tmp_path / "v2"
    operator, _, _, event = cut_world(tmp_path, journal)
    if case == "another reason":
        refusal = json.loads((new / SWITCHOVER_REFUSAL).read_text())
        put(new, SWITCHOVER_REFUSAL, json.dumps({**refusal, "reason": "plan_changed"}))
    elif case == "state to seed":  # the state of a batch only the sink recorded is in no checkpoint
        release = json.loads((new / SWITCHOVER_RELEASE).read_text())
        put(new, SWITCHOVER_RELEASE, json.dumps({**release, "seed_state": True}))
    else:
        operator.kafka_conn_id = ""
    with pytest.raises(SwitchoverNotTaken):
        operator.execute_complete(context("run-1", TI()), event)
    assert not (new / STANDBY_RELEASE).exists()
    step = journal.step("switchover")
    assert step is not None and step.notes[OLD_STOPPED_NOTE] is True, "it acknowledged: the rollback restarts it"


@pytest.mark.parametrize("seed", ["its folder", "outside the new checkpoint", "no manifest"])
def test_the_seed_is_read_only_where_the_release_put_it(tmp_path: Path, seed: str) -> None:
    from tests.unit.test_switchover import seeded_manifest

    operator, _, handle, built = released(tmp_path)
    new = tmp_path / "v2"
    release = read_switchover_release(new)
    assert release is not None
    put(new, SWITCHOVER_RELEASE, json.dumps({**json.loads(release.to_json()), "seed_state": True}))
    used = standby_took_over(tmp_path, built)
    folder = (tmp_path / "elsewhere") if seed == "outside the new checkpoint" else \
        new / "_ckpt" / "seed-state" / release.release_id
    if seed != "no manifest":
        put(folder, "state-manifest.json", seeded_manifest(2).to_json())
    put(new, SWITCHOVER_HANDOVER, json.dumps({**json.loads(used.to_json()), "state_path": str(folder),
                                              "state_rows": 50, "state_seeded_at": at(now(), -9.3)}))
    if seed == "its folder":
        result = SwitchoverResult.from_json(operator.execute_complete({"ti": TI()}, committed(handle)))
        assert result.used["state_path"] == str(folder)
        assert DowntimeSplit.from_json(result.downtime).state_wait_s is not None
        return
    with pytest.raises(SwitchoverMismatch) as mismatch:
        operator.execute_complete({"ti": TI()}, committed(handle))
    assert ("a seed recorded at" if seed == "outside the new checkpoint" else "no seed manifest") in \
        mismatch.value.found
