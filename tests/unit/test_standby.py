"""Standby launch without Spark: the control records, LaunchTrigger(wait_for="standby"), the
driver-side wait (:func:`await_handover`), StandbyReleaseOperator and StreamLaunchOperator(standby=True).

The SparkSession and Hadoop's FileSystem are replaced at their boundary (a recording session, a
local-disk ``HadoopFiles``); the launcher hook is faked at its boundary; checkpoints and control
files are real files. The real path runs in tests/integration/test_standby.py.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fsspec
import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_ckpt_provider.checkpoint.errors import (
    FirstCommitTimeout,
    LaunchFailed,
    QueryStillRunning,
    StandbyNotHonoured,
)
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.operators.launch import HANDLE_XCOM_KEY, StandbyReleaseOperator, StreamLaunchOperator
from airflow_ckpt_provider.records.control import (
    CONF_CHECKPOINT_LOCATION,
    CONF_HANDOVER_JSON,
    CONF_STANDBY,
    CONF_STANDBY_REHEARSAL,
    CONF_STANDBY_TIMEOUT_S,
    CONF_STARTING_OFFSETS,
    DRIVER,
    HEARTBEAT,
    LIVE_STATES,
    STANDBY_RELEASE,
    STOP_ACK,
    STOP_REQUEST,
    DriverRecord,
    Heartbeat,
    HeartbeatState,
    InvalidControlRecord,
    ProcessScope,
    StandbyRelease,
    StopAck,
    StopRequest,
)
from airflow_ckpt_provider.spark import graceful_stop, standby
from airflow_ckpt_provider.spark.standby import EXIT_STANDBY_TIMEOUT, await_handover, standby_run_id
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.triggers.launch import LaunchEvent, LaunchTrigger, LaunchWait
from airflow_ckpt_provider.upgrade.record import UpgradeIntent
from airflow_ckpt_provider.upgrade.steps import PATHS
from airflow_ckpt_provider.upgrade.steps import Path as Path_
from tests.unit.conftest import write_checkpoint
from tests.unit.test_launch_operators import (
    TI,
    FakeLauncher,
    dead_pid,
    first_event,
    handover_xcom,
    launch_operator,
    running_pid,
)

OFFSETS = '{"events":{"0":5,"1":7}}'


def now() -> datetime:
    return datetime.now(timezone.utc)


def iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds")


def heartbeat(state: str = "standby", *, started: datetime | None = None, updated: datetime | None = None,
              run_id: str = "standby-run", interval: float = 1.0, query_id: str = "") -> Heartbeat:
    started = started or now()
    return Heartbeat(query_id=query_id, run_id=run_id, state=state, started_at=iso(started),
                     updated_at=iso(updated or now()), interval_s=interval, host="driver-host", pid=777)


def put(cp: Path, rel: str, text: str) -> None:
    path = cp / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def elsewhere_handle(cp: Path, started: datetime, **fields: Any) -> LaunchHandle:
    """A local handle recorded in another process scope: its job kind cannot tell its state from
    here (UNKNOWN), so only the checkpoint's records decide."""
    return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=str(cp), app_name="v2-standby", started_at=iso(started),
                        pid=4242, log_path=str(cp.parent / "v2.log"), host="another-worker", boot_id="b",
                        pid_namespace="pid:[1]", **fields)


# -- control records -------------------------------------------------------------------------------


def test_standby_release_round_trip_and_spark_conf() -> None:
    release = StandbyRelease(release_id="rel-1", released_at="2026-11-23T12:00:00.000+00:00",
                             starting_offsets=OFFSETS, handover_json='{"batch_id": 7}',
                             conf={"spark.ckpt.extra": "x", "spark.ckpt.n": 3},  # type: ignore[dict-item]
                             requested_by="dag.release", standby_run_id="run-a")
    again = StandbyRelease.from_json(release.to_json())
    assert again == release
    assert StandbyRelease.from_json(release.to_json().encode()) == release
    assert again.spark_conf() == {CONF_STARTING_OFFSETS: OFFSETS, CONF_HANDOVER_JSON: '{"batch_id": 7}',
                                  "spark.ckpt.extra": "x", "spark.ckpt.n": "3"}
    bare = StandbyRelease(release_id="rel-2", released_at="t", starting_offsets=OFFSETS)
    assert bare.spark_conf() == {CONF_STARTING_OFFSETS: OFFSETS}, "no handoverJson key when none was handed over"


def test_standby_release_from_json_ignores_unknown_keys_and_refuses_non_objects() -> None:
    raw = {"release_id": "rel-1", "released_at": "t", "starting_offsets": OFFSETS, "standby_run_id": "run-a",
           "written_by_a_later_version": {"x": 1}}
    release = StandbyRelease.from_json(json.dumps(raw))
    assert (release.release_id, release.standby_run_id, release.conf, release.handover_json) == \
        ("rel-1", "run-a", {}, "")
    with pytest.raises(ValueError, match="JSON object"):
        StandbyRelease.from_json("[1, 2]")
    with pytest.raises(InvalidControlRecord, match="without 'released_at'"):
        StandbyRelease.from_json('{"release_id": "only"}')


@pytest.mark.parametrize(("state", "age", "interval", "alive", "is_standby"), [
    pytest.param("standby", 0.0, 1.0, True, True, id="fresh-standby"),
    pytest.param("standby", 10.0, 1.0, False, True, id="stale-standby"),
    pytest.param("stopped", 0.0, 1.0, False, False, id="stopped"),
    pytest.param("running", 0.0, 1.0, True, False, id="fresh-running"),
    pytest.param("standby", 25.0, 10.0, True, True, id="slow-beats-within-three-intervals"),
])
def test_heartbeat_liveness_counts_a_standby_as_live(state: str, age: float, interval: float, alive: bool,
                                                     is_standby: bool) -> None:
    moment = datetime(2026, 11, 23, 12, 0, 0, tzinfo=timezone.utc)
    beat = heartbeat(state, started=moment - timedelta(seconds=60), updated=moment - timedelta(seconds=age),
                     interval=interval)
    assert beat.is_alive(moment) is alive
    assert beat.is_standby is is_standby
    assert Heartbeat.from_json(beat.to_json()).is_standby is is_standby
    assert {str(s) for s in LIVE_STATES} == {"running", "standby"} and HeartbeatState.STOPPED not in LIVE_STATES


# -- LaunchTrigger(wait_for="standby") -------------------------------------------------------------


@pytest.fixture
def new_cp(tmp_path: Path) -> Path:
    cp = tmp_path / "v2"
    (cp / "_ckpt").mkdir(parents=True)
    return cp


def standby_trigger(cp: Path, handle: LaunchHandle | None, deadline_in: float = 60.0) -> LaunchTrigger:
    return LaunchTrigger(str(cp), deadline=time.time() + deadline_in, handle=handle.to_dict() if handle else None,
                         poll_interval=0.02, wait_for="standby")


def poll(trigger: LaunchTrigger) -> dict[str, Any] | None:
    event = trigger._poll(trigger._control())
    return None if event is None else event.to_dict()


def test_standby_trigger_fires_on_the_launch_own_standby_heartbeat(new_cp: Path) -> None:
    launched = now() - timedelta(seconds=30)
    put(new_cp, HEARTBEAT, heartbeat(started=launched + timedelta(seconds=8), run_id="r-new").to_json())
    trigger = standby_trigger(new_cp, elsewhere_handle(new_cp, launched))
    assert trigger.wait_for is LaunchWait.STANDBY
    event = first_event(trigger)
    assert event["reason"] == LaunchEvent.STANDBY.value and event["batch"] is None
    assert "r-new" in event["evidence"] and event["handle"] == trigger.handle


def test_standby_trigger_allows_the_clock_skew_but_ignores_an_earlier_standby(new_cp: Path) -> None:
    launched = now() - timedelta(seconds=30)
    handle = elsewhere_handle(new_cp, launched)
    put(new_cp, HEARTBEAT, heartbeat(started=launched - timedelta(seconds=3)).to_json())  # within 5 s of skew
    assert poll(standby_trigger(new_cp, handle))["reason"] == LaunchEvent.STANDBY.value  # type: ignore[index]
    put(new_cp, HEARTBEAT, heartbeat(started=launched - timedelta(seconds=20), run_id="r-earlier").to_json())
    assert poll(standby_trigger(new_cp, handle)) is None, "a standby that started before this launch is not its own"
    late = poll(standby_trigger(new_cp, handle, deadline_in=-1))
    assert late is not None and late["reason"] == LaunchEvent.TIMEOUT.value and late["state"] == "unknown"


def test_standby_trigger_not_standby_on_a_commit(new_cp: Path) -> None:
    launched = now() - timedelta(seconds=30)
    write_checkpoint(str(new_cp), batches=range(1))  # commits/0: the job did not wait for its release
    put(new_cp, HEARTBEAT, heartbeat(started=launched + timedelta(seconds=1)).to_json())  # even with a standby beat
    event = first_event(standby_trigger(new_cp, elsewhere_handle(new_cp, launched)))
    assert event["reason"] == LaunchEvent.NOT_STANDBY.value and event["batch"] == 0
    assert "commits/0" in event["evidence"]


def test_standby_trigger_not_standby_on_a_running_query(new_cp: Path) -> None:
    launched = now() - timedelta(seconds=30)
    put(new_cp, HEARTBEAT, heartbeat("running", started=launched + timedelta(seconds=5), query_id="q-7").to_json())
    event = first_event(standby_trigger(new_cp, elsewhere_handle(new_cp, launched)))
    assert event["reason"] == LaunchEvent.NOT_STANDBY.value and event["batch"] is None and "q-7" in event["evidence"]


def test_standby_trigger_waits_without_a_heartbeat_then_times_out(new_cp: Path) -> None:
    handle = elsewhere_handle(new_cp, now() - timedelta(seconds=30))
    assert poll(standby_trigger(new_cp, handle)) is None
    event = first_event(standby_trigger(new_cp, handle, deadline_in=0.2))
    assert event["reason"] == LaunchEvent.TIMEOUT.value and event["batch"] is None and event["state"] == "unknown"


def test_standby_trigger_a_stale_standby_of_this_launch_died(new_cp: Path) -> None:
    launched = now() - timedelta(seconds=60)
    put(new_cp, HEARTBEAT, heartbeat(started=launched + timedelta(seconds=5),
                                     updated=now() - timedelta(seconds=30)).to_json())
    event = first_event(standby_trigger(new_cp, elsewhere_handle(new_cp, launched)))
    assert event["reason"] == LaunchEvent.DIED.value and "went stale" in event["evidence"]


def test_a_commit_wait_ignores_a_standby_heartbeat(new_cp: Path) -> None:
    launched = now() - timedelta(seconds=30)
    put(new_cp, HEARTBEAT, heartbeat(started=launched + timedelta(seconds=5)).to_json())
    trigger = LaunchTrigger(str(new_cp), deadline=time.time() + 60, handle=elsewhere_handle(new_cp, launched).to_dict(),
                            poll_interval=0.02)
    assert trigger.wait_for is LaunchWait.COMMIT and poll(trigger) is None  # a waiting standby is alive, not committed
    assert "wait_for" not in trigger.serialize()[1]


# -- the driver side: await_handover --------------------------------------------------------------


class DiskFiles:
    """A local-disk stand-in for graceful_stop.HadoopFiles (the methods the standby uses); it
    records every write and what each read returned."""

    made: list[DiskFiles] = []

    def __init__(self, spark: Any, root: str) -> None:
        self.root = root.rstrip("/")
        self.fs = SimpleNamespace(mkdirs=lambda path: Path(path).mkdir(parents=True, exist_ok=True))
        self.writes: list[tuple[str, bytes]] = []
        self.served: list[tuple[str, bytes | None]] = []
        self.lock = threading.Lock()
        self.session_events_before = list(spark.events)  # what the session had done before any file
        DiskFiles.made.append(self)

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    def read(self, rel: str) -> bytes | None:
        path = Path(self.path(rel))
        data = path.read_bytes() if path.exists() else None
        with self.lock:
            self.served.append((rel, data))
        return data

    def write(self, rel: str, data: bytes) -> None:
        path = Path(self.path(rel))
        tmp = path.with_name(f".{path.name}.tmp-{threading.get_ident()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        with self.lock:
            self.writes.append((rel, data))

    def heartbeats(self) -> list[Heartbeat]:
        with self.lock:
            return [Heartbeat.from_json(d) for rel, d in self.writes if rel == HEARTBEAT]


class Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = dict(values)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        assert isinstance(value, str), f"{key}={value!r}: Spark conf values are strings"
        self.values[key] = value


class Frame:
    def __init__(self, spark: FakeSpark) -> None:
        self.spark = spark

    def selectExpr(self, *exprs: str) -> Frame:  # noqa: N802 - pyspark's name
        return self

    def collect(self) -> list[Any]:
        self.spark.events.append("warm-up job")
        return []


class NoKafkaJvm:
    """py4j's view of a JVM without the Kafka connector: any attribute, and the call fails."""

    def __getattr__(self, name: str) -> NoKafkaJvm:
        return self

    def __call__(self, *args: Any) -> Any:
        raise RuntimeError("java.lang.ClassNotFoundException: org.apache.spark.sql.kafka010.KafkaSourceProvider")


class FakeSpark:
    def __init__(self, conf: dict[str, str]) -> None:
        self.conf = Conf(conf)
        self.events: list[str] = []
        self.stops = 0
        self.sparkContext = SimpleNamespace(applicationId="local-1763900000")
        self._jvm = NoKafkaJvm()

    def range(self, n: int) -> Frame:
        return Frame(self)

    def stop(self) -> None:
        self.stops += 1


@pytest.fixture
def files(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[DiskFiles]]:
    """HadoopFiles replaced by DiskFiles; the module's taken release reset around each test."""
    monkeypatch.setattr("airflow_ckpt_provider.spark.graceful_stop.HadoopFiles", DiskFiles)
    DiskFiles.made = []
    standby._taken.update(release=None, run_id="")
    yield DiskFiles.made
    standby._taken.update(release=None, run_id="")


def standby_spark(cp: Path, **conf: str) -> FakeSpark:
    return FakeSpark({CONF_STANDBY: "true", CONF_CHECKPOINT_LOCATION: str(cp), **conf})


def wait_until(predicate: Any, timeout: float = 10.0) -> Any:  # noqa: ANN401
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)
    return value


def standby_beat_on(cp: Path) -> Heartbeat:
    """The standby heartbeat, once the waiting driver wrote it."""
    def read() -> Heartbeat | None:
        path = cp / HEARTBEAT
        return Heartbeat.from_json(path.read_bytes()) if path.exists() else None

    return wait_until(read)


class Background:
    """Run ``action`` in a thread (what the provider does while the driver waits); re-raise its failure."""

    def __init__(self, action: Any) -> None:
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(action,), daemon=True)
        self.thread.start()

    def _run(self, action: Any) -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            self.error = exc

    def join(self) -> None:
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()
        if self.error is not None:
            raise self.error


def release_for(run_id: str, release_id: str, offsets: str = OFFSETS, **fields: Any) -> StandbyRelease:
    return StandbyRelease(release_id=release_id, released_at=iso(now()), starting_offsets=offsets,
                          standby_run_id=run_id, **fields)


def a_request(request_id: str, expires_in: float | None = 60.0) -> StopRequest:
    return StopRequest(request_id=request_id, requested_at=iso(now()), requested_by="dag.abort", reason="aborted",
                       expires_at=iso(now() + timedelta(seconds=expires_in)) if expires_in is not None else "")


def test_not_a_standby_returns_at_once_and_writes_nothing(tmp_path: Path, files: list[DiskFiles]) -> None:
    for conf in ({}, {CONF_STANDBY: "false"}, {CONF_STANDBY: "no"}):
        spark = FakeSpark({CONF_CHECKPOINT_LOCATION: str(tmp_path / "v2"), **conf})
        assert await_handover(spark, poll_interval=0.01, timeout_s=0.05) is None
        assert spark.events == [] and spark.stops == 0  # no warm-up, session untouched
    assert files == [] and not (tmp_path / "v2").exists() and standby_run_id() == ""


def test_a_standby_without_checkpoint_location_is_refused(files: list[DiskFiles]) -> None:
    spark = FakeSpark({CONF_STANDBY: "TRUE "})
    with pytest.raises(ValueError, match=CONF_CHECKPOINT_LOCATION):
        await_handover(spark, timeout_s=0.05)
    assert files == [] and spark.events == []


def test_the_release_naming_this_run_is_taken_and_its_keys_set(tmp_path: Path, files: list[DiskFiles]) -> None:
    cp = tmp_path / "v2"
    spark = standby_spark(cp)
    handed = '{"format": 1, "batch_id": 41}'

    def provider() -> None:
        run_id = standby_beat_on(cp).run_id
        for other in ("an-earlier-standby", ""):  # another run's release, and one naming no run
            decoy = release_for(other, f"decoy-{other}", offsets='{"events":{"0":1}}').to_json().encode()
            put(cp, STANDBY_RELEASE, decoy.decode())
            wait_until(lambda d=decoy: any(rel == STANDBY_RELEASE and data == d for rel, data in list(files[0].served)))
        put(cp, STANDBY_RELEASE, release_for(run_id, "mine", handover_json=handed,
                                             conf={"spark.ckpt.sinkMode": "append"}).to_json())

    feeder = Background(provider)
    release = await_handover(spark, poll_interval=0.005, heartbeat_interval=0.05, timeout_s=30)
    feeder.join()
    assert release is not None and release.release_id == "mine"
    beats = files[0].heartbeats()
    assert release.standby_run_id == beats[0].run_id == standby_run_id()
    assert spark.conf.values[CONF_STARTING_OFFSETS] == OFFSETS
    assert spark.conf.values[CONF_HANDOVER_JSON] == handed and spark.conf.values["spark.ckpt.sinkMode"] == "append"
    assert all(b.state == "standby" for b in beats) and spark.stops == 0
    first = beats[0]
    assert (first.pid, first.app_id, first.query_id) == (os.getpid(), "local-1763900000", "")
    assert spark.events == ["warm-up job"], "warmed up once (no Kafka connector on the classpath: no failure)"
    assert files[0].session_events_before == ["warm-up job"], "the warm-up ran before the standby heartbeat"
    assert {rel for rel, _ in files[0].writes} == {HEARTBEAT}, "a standby writes nothing but its heartbeat"

    written = len(files[0].writes)
    assert await_handover(spark, poll_interval=0.005, timeout_s=0.01) is release  # taken once per driver
    assert len(files) == 1 and len(files[0].writes) == written and spark.events == ["warm-up job"]


@pytest.mark.parametrize("when", ["during-the-wait", "before-the-wait"])
def test_a_stop_request_ends_the_standby_with_an_ack_and_no_checkpoint_file(
        tmp_path: Path, files: list[DiskFiles], when: str) -> None:
    cp = tmp_path / "v2"
    spark = standby_spark(cp)
    if when == "before-the-wait":  # sent (abort) before the driver got to its heartbeat
        put(cp, STOP_REQUEST, a_request("abort-1").to_json())
        feeder = None
    else:
        feeder = Background(lambda: (standby_beat_on(cp), put(cp, STOP_REQUEST, a_request("abort-1").to_json())))
    with pytest.raises(SystemExit) as ended:
        await_handover(spark, poll_interval=0.005, heartbeat_interval=0.01, timeout_s=30)
    if feeder is not None:
        feeder.join()
    assert ended.value.code == 0
    beats = files[0].heartbeats()
    ack = StopAck.from_json((cp / STOP_ACK).read_bytes())
    assert (ack.request_id, ack.run_id, ack.outcome) == ("abort-1", beats[0].run_id, "clean")
    assert ack.last_committed_batch is None and ack.last_planned_batch is None
    assert beats[-1].state == "stopped" and beats[-1].run_id == beats[0].run_id
    assert Heartbeat.from_json((cp / HEARTBEAT).read_bytes()).state == "stopped", "no standby beat after the stop"
    assert spark.stops == 1
    assert sorted(p.relative_to(cp).as_posix() for p in cp.rglob("*") if p.is_file()) == \
        sorted({HEARTBEAT, STOP_ACK, STOP_REQUEST}), "only _ckpt/: never a checkpoint file"
    assert spark.conf.values.get(CONF_STARTING_OFFSETS) is None


@pytest.mark.parametrize("history", ["expired", "acknowledged"])
def test_an_old_stop_request_at_start_is_history(tmp_path: Path, files: list[DiskFiles], history: str) -> None:
    cp = tmp_path / "v2"
    spark = standby_spark(cp)
    if history == "expired":
        put(cp, STOP_REQUEST, a_request("old", expires_in=-5).to_json())
    else:  # answered by an earlier driver on this checkpoint (an aborted standby)
        put(cp, STOP_REQUEST, a_request("old").to_json())
        put(cp, STOP_ACK, StopAck(request_id="old", query_id="", run_id="an-earlier-run", outcome="clean",
                                  last_committed_batch=None, last_planned_batch=None,
                                  stopped_at=iso(now())).to_json())
    ack_before = (cp / STOP_ACK).read_bytes() if (cp / STOP_ACK).exists() else None

    def provider() -> None:
        run_id = standby_beat_on(cp).run_id
        wait_until(lambda: sum(rel == STOP_REQUEST for rel, _ in list(files[0].served)) >= 3)  # looked, went on
        put(cp, STANDBY_RELEASE, release_for(run_id, "go").to_json())

    feeder = Background(provider)
    release = await_handover(spark, poll_interval=0.005, heartbeat_interval=0.05, timeout_s=30)
    feeder.join()
    assert release is not None and release.release_id == "go" and spark.stops == 0
    ack_after = (cp / STOP_ACK).read_bytes() if (cp / STOP_ACK).exists() else None
    assert ack_after == ack_before, "an old request is not acknowledged again"


def test_no_release_in_time_ends_the_standby(tmp_path: Path, files: list[DiskFiles]) -> None:
    cp = tmp_path / "v2"
    spark = standby_spark(cp, **{CONF_STANDBY_TIMEOUT_S: "0.2"})  # the launcher's conf key sets the timeout
    with pytest.raises(SystemExit) as ended:
        await_handover(spark, poll_interval=0.01, heartbeat_interval=0.01)
    assert ended.value.code == EXIT_STANDBY_TIMEOUT != 0
    beats = files[0].heartbeats()
    assert beats[0].state == "standby" and beats[-1].state == "stopped"
    assert Heartbeat.from_json((cp / HEARTBEAT).read_bytes()).state == "stopped", "no standby beat after the stop"
    assert not (cp / STOP_ACK).exists() and spark.stops == 1
    assert {rel for rel, _ in files[0].writes} == {HEARTBEAT}



class LateWake:
    """``threading.Event`` for the standby's heartbeat thread, with one scheduling made certain:
    the thread woke for its next beat just as the wait ended (it reports a timeout, not the end,
    once the end is on disk). Every other wait is the real one."""

    def __init__(self, ended: Any) -> None:
        self._event = threading.Event()
        self._ended = ended
        self.late = False

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        fired = self._event.wait(timeout)
        if fired and not self.late and threading.current_thread().name == "ckpt-standby-heartbeat":
            self.late = True
            wait_until(self._ended)
            return False
        return fired


@pytest.mark.parametrize("ending", ["stop-request", "timeout"])
def test_a_beat_due_as_the_standby_ends_never_overwrites_its_stopped_heartbeat(
        tmp_path: Path, files: list[DiskFiles], monkeypatch: pytest.MonkeyPatch, ending: str) -> None:
    cp = tmp_path / "v2"
    events: list[LateWake] = []

    def stopped_on_disk() -> bool:
        return (cp / HEARTBEAT).exists() and Heartbeat.from_json((cp / HEARTBEAT).read_bytes()).state == "stopped"

    def event() -> LateWake:
        events.append(LateWake(stopped_on_disk))
        return events[-1]

    monkeypatch.setattr(graceful_stop, "threading", SimpleNamespace(Event=event, Lock=threading.Lock,
                                                              Thread=threading.Thread))
    if ending == "stop-request":
        put(cp, STOP_REQUEST, a_request("abort-2").to_json())
    with pytest.raises(SystemExit):
        await_handover(standby_spark(cp), poll_interval=0.005, heartbeat_interval=0.01,
                       timeout_s=30 if ending == "stop-request" else 0.05)
    assert [e.late for e in events] == [True], "the heartbeat thread was due to beat as the wait ended"
    states = [b.state for b in files[0].heartbeats()]
    assert states[-1] == "stopped", f"a standby beat came after the stopped one: {states[-3:]}"
    assert Heartbeat.from_json((cp / HEARTBEAT).read_bytes()).state == "stopped"

# -- StandbyReleaseOperator ------------------------------------------------------------------------


def release_operator(tmp_path: Path, standby_handle: LaunchHandle | None,
                     **kwargs: Any) -> tuple[StandbyReleaseOperator, FakeLauncher]:
    defaults: dict[str, Any] = {"task_id": "release", "application": "job.py", "checkpoint_uri": str(tmp_path / "v2"),
                                "starting_offsets": '{"events":{"1":7,"0":5}}', "master": "local[1]",
                                "first_commit_timeout": 60,
                                "standby_handle": standby_handle.to_dict() if standby_handle else None}
    operator = StandbyReleaseOperator(**{**defaults, **kwargs})
    fake = FakeLauncher(running_pid(), tmp_path / "cold.log")
    operator.__dict__["launcher_hook"] = fake
    return operator, fake


def waiting_standby(cp: Path) -> tuple[LaunchHandle, Heartbeat]:
    launched = now() - timedelta(seconds=40)
    beat = heartbeat(started=launched + timedelta(seconds=10), run_id="standby-run-1")
    put(cp, HEARTBEAT, beat.to_json())
    return elsewhere_handle(cp, launched), beat


def read_release(cp: Path) -> StandbyRelease | None:
    path = cp / STANDBY_RELEASE
    return StandbyRelease.from_json(path.read_bytes()) if path.exists() else None


def test_release_names_the_waiting_run_and_waits_for_batch_0(tmp_path: Path) -> None:
    cp = tmp_path / "v2"
    handle, beat = waiting_standby(cp)
    given = handover_xcom(tmp_path)
    operator, fake = release_operator(tmp_path, handle, starting_offsets=None, handover=given)
    ti = TI()
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti})
    release = read_release(cp)
    assert release is not None and release.standby_run_id == beat.run_id
    assert json.loads(release.starting_offsets) == json.loads(given["starting_offsets"])
    assert json.loads(release.handover_json)["batch_id"] == given["handover"]["batch_id"]
    assert release.requested_by.endswith(".release")
    assert fake.launches == [] and ti.xcom[HANDLE_XCOM_KEY] == handle.to_dict()
    trigger = deferred.value.trigger
    assert isinstance(trigger, LaunchTrigger) and trigger.wait_for is LaunchWait.COMMIT and trigger.min_batch == 0
    assert trigger.handle == handle.to_dict() and trigger.checkpoint_uri == str(cp)
    # what the trigger then waits for: the released job's first commit
    assert poll(LaunchTrigger(**{**trigger.serialize()[1], "poll_interval": 0.02})) is None
    write_checkpoint(str(cp), batches=range(1))
    assert poll(LaunchTrigger(**trigger.serialize()[1]))["reason"] == LaunchEvent.COMMITTED.value  # type: ignore[index]


@pytest.mark.parametrize("gone", ["no-heartbeat", "stale", "stopped", "running", "no-handle"])
def test_release_launches_cold_when_the_standby_is_not_waiting(tmp_path: Path, gone: str) -> None:
    cp = tmp_path / "v2"
    handle, beat = waiting_standby(cp)
    if gone == "no-heartbeat":
        (cp / HEARTBEAT).unlink()
    elif gone in ("stale", "no-handle"):
        put(cp, HEARTBEAT, heartbeat(started=now() - timedelta(seconds=30),
                                     updated=now() - timedelta(seconds=20)).to_json())
    elif gone == "stopped":
        put(cp, HEARTBEAT, heartbeat("stopped", started=now() - timedelta(seconds=30)).to_json())
    elif gone == "running":  # not a standby (and stale, or the cold launch would refuse a live query)
        put(cp, HEARTBEAT, heartbeat("running", started=now() - timedelta(seconds=30), query_id="q",
                                     updated=now() - timedelta(seconds=20)).to_json())
    operator, fake = release_operator(tmp_path, None if gone == "no-handle" else handle)
    ti = TI()
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti})
    assert read_release(cp) is None
    assert len(fake.launches) == 1
    launched = fake.launches[0]
    assert CONF_STANDBY not in launched["conf"] and CONF_STANDBY_TIMEOUT_S not in launched["conf"]
    assert launched["starting_offsets"] == OFFSETS and launched["checkpoint_uri"] == str(cp)
    assert ti.xcom[HANDLE_XCOM_KEY]["pid"] == fake.pid  # the cold launch's handle, not the standby's
    assert deferred.value.trigger.wait_for is LaunchWait.COMMIT
    assert deferred.value.trigger.handle["pid"] == fake.pid


def test_release_does_not_start_a_second_driver_beside_a_live_heartbeat(tmp_path: Path) -> None:
    cp = tmp_path / "v2"
    waiting_standby(cp)  # a fresh standby beat, but the standby launch's own process group is gone
    scope = ProcessScope.current()
    ended = LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=str(cp), app_name="v2-standby",
                         started_at=iso(now() - timedelta(seconds=40)), pid=dead_pid(),
                         log_path=str(tmp_path / "standby.log"), host=scope.host, boot_id=scope.boot_id,
                         pid_namespace=scope.pid_namespace)
    operator, fake = release_operator(tmp_path, ended)
    with pytest.raises(QueryStillRunning):  # not released (its launch ended) and no cold launch beside it
        operator.execute({"ti": TI()})
    assert read_release(cp) is None and fake.launches == []


def test_release_refuses_a_standby_that_wrote_batches(tmp_path: Path) -> None:
    cp = tmp_path / "v2"
    write_checkpoint(str(cp), batches=range(1), committed=[])  # offsets/0: it planned a batch on its own
    handle, _ = waiting_standby(cp)
    operator, fake = release_operator(tmp_path, handle)
    ti = TI()
    with pytest.raises(StandbyNotHonoured, match="last planned 0"):
        operator.execute({"ti": ti})
    assert read_release(cp) is None and fake.launches == [] and ti.xcom == {}


@pytest.fixture
def journal(tmp_path: Path) -> UpgradeJournal:
    fs = fsspec.filesystem("file")
    path = UpgradeJournal.location(str(tmp_path / "archive"), "orders", "up-1")
    journal = UpgradeJournal(fs, path)
    journal.open(UpgradeIntent(stream_name="orders", old_checkpoint=str(tmp_path / "v1"),
                               new_checkpoint=str(tmp_path / "v2")), "up-1", run_id="run-1")
    return planned_up_to(journal, Path_.STANDBY, "relaunch")


def planned_up_to(journal: UpgradeJournal, path: Path_, step: str) -> UpgradeJournal:
    """``journal`` planned for ``path`` and approved, with every step of that path before ``step`` done
    (what the planner asks before ``step`` runs)."""
    journal.record_planning("preflight", run_id="run-1", result={"relaunch_mode": path.value})
    journal.record_planning("approve", run_id="run-1", result={"chosen": "Approve"})
    steps = PATHS[path].steps
    for before in steps[:steps.index(step)]:
        journal.begin(before, run_id="run-1")
        journal.finish(before, None)
    return journal


def context(run_id: str, ti: TI) -> dict[str, Any]:
    return {"run_id": run_id, "ti": ti, "dag": SimpleNamespace(dag_id="upgrade"),
            "dag_run": SimpleNamespace(triggering_user_name="alice")}


def test_a_rerun_after_the_release_never_releases_twice(tmp_path: Path, journal: UpgradeJournal) -> None:
    cp = tmp_path / "v2"
    handle, beat = waiting_standby(cp)
    operator, fake = release_operator(tmp_path, handle, journal=journal.path)
    with pytest.raises(TaskDeferred):
        operator.execute(context("run-1", TI()))  # released, then the worker died while deferred
    first = read_release(cp)
    assert first is not None
    step = journal.step("release")
    assert step is not None and step.notes["released"] == first.release_id and step.notes["handle"] == handle.to_dict()

    put(cp, HEARTBEAT, heartbeat(started=now(), run_id="a-later-standby").to_json())  # still looks waiting
    again, fake_again = release_operator(tmp_path, handle, journal=journal.path)
    ti = TI()
    with pytest.raises(TaskDeferred) as deferred:
        again.execute(context("run-2", ti))
    assert read_release(cp) == first, "no second release"
    assert fake.launches == fake_again.launches == []
    assert ti.xcom[HANDLE_XCOM_KEY] == handle.to_dict()
    assert deferred.value.trigger.handle == handle.to_dict() and deferred.value.trigger.min_batch == 0
    assert deferred.value.trigger.wait_for is LaunchWait.COMMIT


def test_a_rerun_after_the_release_finishes_without_deferring_once_the_job_committed(
        tmp_path: Path, journal: UpgradeJournal) -> None:
    """The retry after a deferral that raced the executor (the trigger fired at once and Airflow
    failed the deferring attempt) finds the released job already committed: it finishes in place,
    and does not defer into the same race again."""
    cp = tmp_path / "v2"
    handle, _ = waiting_standby(cp)
    operator, _ = release_operator(tmp_path, handle, journal=journal.path)
    with pytest.raises(TaskDeferred):
        operator.execute(context("run-1", TI()))
    first = read_release(cp)
    write_checkpoint(str(cp), batches=range(1))  # the released job committed batch 0 meanwhile

    again, fake_again = release_operator(tmp_path, handle, journal=journal.path)
    ti = TI()
    result = again.execute(context("run-1", ti))  # no TaskDeferred
    assert LaunchHandle.from_json(result).app_name == handle.app_name
    assert read_release(cp) == first and fake_again.launches == []
    step = journal.step("release")
    assert step is not None and step.state == "done"


def test_release_operator_does_not_launch_standbys() -> None:
    with pytest.raises(ValueError, match="standby"):
        StandbyReleaseOperator(task_id="r", application="a.py", checkpoint_uri="/c", standby_handle=None,
                               standby=True)


# -- StreamLaunchOperator(standby=True) ------------------------------------------------------------


def test_standby_launch_passes_standby_conf_and_no_offsets(tmp_path: Path) -> None:
    operator, fake = launch_operator(tmp_path, standby=True, standby_timeout=900, handover=handover_xcom(tmp_path),
                                     conf={"spark.ui.enabled": "false"})
    ti = TI()
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": ti})
    launched = fake.launches[0]
    assert launched["conf"] == {"spark.ui.enabled": "false", CONF_STANDBY: "true", CONF_STANDBY_TIMEOUT_S: "900"}
    assert launched["starting_offsets"] is None and launched["handover_json"] is None
    trigger = deferred.value.trigger
    assert trigger.wait_for is LaunchWait.STANDBY and trigger.handle == ti.xcom[HANDLE_XCOM_KEY]
    assert trigger.serialize()[1]["wait_for"] == "standby"  # survives the triggerer's round trip
    # the spark-submit the real hook builds from those arguments
    kwargs = {k: launched[k] for k in ("application_args", "conf", "name", "checkpoint_uri", "starting_offsets",
                                       "handover_json")}
    _, command, _ = SparkLauncherHook(master="local[1]").build_command(launched["application"], **kwargs)
    confs = [command[i + 1] for i, arg in enumerate(command) if arg == "--conf"]
    assert f"{CONF_STANDBY}=true" in confs and f"{CONF_STANDBY_TIMEOUT_S}=900" in confs
    assert f"{CONF_CHECKPOINT_LOCATION}={tmp_path / 'new-cp'}" in confs
    assert not any(c.startswith((CONF_STARTING_OFFSETS, CONF_HANDOVER_JSON)) for c in confs)


def test_a_cold_launch_passes_no_standby_conf(tmp_path: Path) -> None:
    operator, fake = launch_operator(tmp_path)
    with pytest.raises(TaskDeferred) as deferred:
        operator.execute({"ti": TI()})
    assert CONF_STANDBY not in fake.launches[0]["conf"] and fake.launches[0]["starting_offsets"] == OFFSETS
    assert deferred.value.trigger.wait_for is LaunchWait.COMMIT


def standby_event(reason: LaunchEvent, handle: LaunchHandle, **extra: Any) -> dict[str, Any]:
    return {"reason": reason.value, "batch": None, "state": "running", "log_tail": "", "handle": handle.to_dict(),
            "waited_s": 4.0, "evidence": "standby heartbeat of run r1", **extra}


def test_standby_launch_succeeds_on_its_standby_heartbeat(tmp_path: Path) -> None:
    operator, fake = launch_operator(tmp_path, standby=True)
    handle = elsewhere_handle(tmp_path / "new-cp", now())
    result = operator.execute_complete({"ti": TI()}, standby_event(LaunchEvent.STANDBY, handle))
    assert LaunchHandle.from_json(result) == handle and fake.kills == []


def test_a_launch_that_does_not_wait_as_standby_is_killed(tmp_path: Path) -> None:
    operator, fake = launch_operator(tmp_path, standby=True)
    handle = elsewhere_handle(tmp_path / "new-cp", now())
    with pytest.raises(StandbyNotHonoured) as refused:
        operator.execute_complete({"ti": TI()}, standby_event(LaunchEvent.NOT_STANDBY, handle, batch=0,
                                                              evidence="commits/0 appeared"))
    assert fake.kills == [handle] and "commits/0 appeared" in str(refused.value)


def test_standby_launch_timeout_and_death_name_the_standby_heartbeat(tmp_path: Path) -> None:
    operator, fake = launch_operator(tmp_path, standby=True)
    handle = elsewhere_handle(tmp_path / "new-cp", now())
    with pytest.raises(FirstCommitTimeout) as timed_out:
        operator.execute_complete({"ti": TI()}, standby_event(LaunchEvent.TIMEOUT, handle, state="unknown",
                                                              evidence="nothing known"))
    assert "standby heartbeat" in str(timed_out.value) and "commits/N" not in str(timed_out.value)
    assert fake.kills == [handle]
    with pytest.raises(LaunchFailed) as died:
        operator.execute_complete({"ti": TI()}, standby_event(LaunchEvent.DIED, handle, state="failed",
                                                              log_tail="ValueError: no session"))
    assert "waiting as a standby" in str(died.value) and "ValueError: no session" in str(died.value)


def test_a_cold_launch_timeout_names_the_commit(tmp_path: Path) -> None:
    operator, _ = launch_operator(tmp_path)
    handle = elsewhere_handle(tmp_path / "new-cp", now())
    with pytest.raises(FirstCommitTimeout) as timed_out:
        operator.execute_complete({"ti": TI()}, standby_event(LaunchEvent.TIMEOUT, handle, evidence="no record"))
    assert "standby" not in str(timed_out.value) and "commits" in str(timed_out.value)


def test_standby_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="standby_timeout"):
        StreamLaunchOperator(task_id="t", application="a.py", checkpoint_uri="/c", standby=True, standby_timeout=0)


def driver_record(cp: Path, launch_id: str, state: str = "running", exit_code: int | None = None) -> None:
    at = iso(now())
    put(cp, DRIVER, DriverRecord(launch_id=launch_id, state=state, pid=4242, started_at=iso(now() - timedelta(seconds=40)),
                                 updated_at=at, interval_s=5.0, host="another-worker", exit_code=exit_code,
                                 ended_at=at if state == "exited" else "").to_json())


def test_a_standby_whose_beat_is_late_but_whose_driver_lives_is_still_released(tmp_path: Path) -> None:
    """A loaded machine delays the standby's beats past three intervals; its supervisor's driver
    record says the driver lives: it is released, not replaced by a cold launch."""
    cp = tmp_path / "v2"
    launched = now() - timedelta(seconds=40)
    handle = elsewhere_handle(cp, launched, launch_id="l-1")
    put(cp, HEARTBEAT, heartbeat(started=launched + timedelta(seconds=10), updated=now() - timedelta(seconds=8),
                                 run_id="late-run").to_json())
    driver_record(cp, "l-1")
    operator, fake = release_operator(tmp_path, handle)
    with pytest.raises(TaskDeferred):
        operator.execute({"ti": TI()})
    release = read_release(cp)
    assert release is not None and release.standby_run_id == "late-run" and fake.launches == []


def test_a_standby_that_ended_its_wait_is_given_time_to_exit_before_the_cold_launch(tmp_path: Path) -> None:
    cp = tmp_path / "v2"
    launched = now() - timedelta(seconds=40)
    handle = elsewhere_handle(cp, launched, launch_id="l-2")
    put(cp, HEARTBEAT, heartbeat("stopped", started=launched + timedelta(seconds=10)).to_json())
    driver_record(cp, "l-2")  # the driver still runs: it is stopping its session
    operator, fake = release_operator(tmp_path, handle, poll_interval=0.05)
    exited = threading.Timer(0.5, lambda: driver_record(cp, "l-2", "exited", 3))
    exited.start()
    try:
        with pytest.raises(TaskDeferred):
            operator.execute({"ti": TI()})
    finally:
        exited.cancel()
    assert read_release(cp) is None and len(fake.launches) == 1  # cold, once the standby's driver had exited


def test_a_standby_that_never_exits_is_not_launched_beside(tmp_path: Path) -> None:
    cp = tmp_path / "v2"
    launched = now() - timedelta(seconds=40)
    handle = elsewhere_handle(cp, launched, launch_id="l-3")
    put(cp, HEARTBEAT, heartbeat("stopped", started=launched + timedelta(seconds=10)).to_json())
    driver_record(cp, "l-3")
    operator, fake = release_operator(tmp_path, handle, poll_interval=0.05, adopt_grace_s=0.3)
    with pytest.raises(QueryStillRunning, match="still running"):
        operator.execute({"ti": TI()})
    assert read_release(cp) is None and fake.launches == []


def test_the_rehearsal_is_on_unless_the_conf_says_false() -> None:
    from airflow_ckpt_provider.spark.rehearsal import rehearsal_enabled

    assert rehearsal_enabled(FakeSpark({}))
    assert rehearsal_enabled(FakeSpark({CONF_STANDBY_REHEARSAL: "true"}))
    assert not rehearsal_enabled(FakeSpark({CONF_STANDBY_REHEARSAL: " False "}))


def test_a_failed_rehearsal_is_logged_never_raised_and_leaves_no_scratch_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A source that cannot be built (no connector, a bad option) fails the rehearsal only: the
    standby goes on to wait, and the scratch folder it made is removed."""
    from airflow_ckpt_provider.spark import rehearsal

    monkeypatch.setattr(rehearsal.tempfile, "tempdir", str(tmp_path))

    def no_source() -> Any:  # noqa: ANN401
        raise RuntimeError('Failed to find data source: kafka (PlainLoginModule required username="u" password="hunter2";)')

    with caplog.at_level(logging.WARNING, logger=rehearsal.__name__):
        rehearsal.rehearse_query(FakeSpark({"spark.master": "local[2]"}), no_source)  # a temporary folder
    (line,) = [r.getMessage() for r in caplog.records if r.name == rehearsal.__name__]
    assert "standby rehearsal in" in line and "failed after" in line and "Failed to find data source: kafka" in line
    assert "hunter2" not in line, "a credential in Spark's error never reaches the driver log"
    assert list(tmp_path.iterdir()) == []
