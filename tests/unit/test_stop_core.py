"""Graceful stop core: value objects, decisions, control files, quiet check, escalation, ``ckpt stop``."""

from __future__ import annotations

import io
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointNotQuiet,
    EscalationFailed,
    QueryStillRunning,
    StopTimeout,
)
from airflow_ckpt_provider.checkpoint.launch import InvalidLaunchHandle, LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.stop import (
    BatchState,
    InvalidStopResult,
    LastCommit,
    QueryStatus,
    StopOutcome,
    StopReason,
    StopResult,
    ack_answers,
    classify_query,
    heartbeat_alive,
    new_request,
    quiet_verdict,
    wait_decision,
)
from airflow_ckpt_provider.jobs import DriverState, JobOptions, job_for
from airflow_ckpt_provider.jobs.local import group_members, kill_group
from airflow_ckpt_provider.records.control import (
    HEARTBEAT,
    STOP_ACK,
    Heartbeat,
    ProcessScope,
    StopAck,
    StopRequest,
    pending_request,
)
from airflow_ckpt_provider.storage.stop import ControlFiles, finish_stop, wait_quiet
from tests.unit.conftest import write_checkpoint

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=timezone.utc)
REPO = Path(__file__).resolve().parents[2]


def beat(state: str = "running", age: float = 0.0, run_id: str = "r1", interval: float = 1.0,
         now: datetime = NOW) -> Heartbeat:
    at = (now - timedelta(seconds=age)).isoformat(timespec="milliseconds")
    return Heartbeat(query_id="q", run_id=run_id, state=state, started_at=at, updated_at=at, interval_s=interval)


def an_ack(request_id: str = "req", run_id: str = "r1") -> StopAck:
    return StopAck(request_id=request_id, query_id="q", run_id=run_id, outcome="clean",
                   last_committed_batch=3, last_planned_batch=3, stopped_at=NOW.isoformat())


def control_at(tmp_path: Path, **kwargs: Any) -> ControlFiles:
    uri = str(tmp_path / "ck")
    write_checkpoint(uri, **kwargs)
    fs, root = fsspec.core.url_to_fs(uri)
    return ControlFiles(fs, root, uri=uri)


def put(control: ControlFiles, rel: str, text: str) -> None:
    path = Path(control.root) / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# -- value objects and pure decisions -------------------------------------------------------------


EPOCH = NOW.timestamp()


@pytest.mark.parametrize(("heartbeat", "commit_age", "new_batches", "recent_s", "status"), [
    (beat(), 1.0, False, 60.0, QueryStatus.RUNNING),  # a live heartbeat wins
    (beat("standby"), None, False, None, QueryStatus.RUNNING),
    (None, 0.5, True, None, QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP),  # batches appeared, no heartbeat
    (None, 5.0, False, 60.0, QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP),  # a recent commit, no heartbeat
    (None, 300.0, False, 60.0, QueryStatus.NO_HEARTBEAT),  # an idle topic: cannot tell
    (None, 5.0, False, None, QueryStatus.NO_HEARTBEAT),  # nobody watched, no recency asked
    (None, None, False, 60.0, QueryStatus.NO_HEARTBEAT),  # nothing committed at all
    (beat("stopped", age=100), 300.0, False, 60.0, QueryStatus.STOPPED),
    (beat("stopped", age=100), 5.0, False, 60.0, QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP),  # commits after it
    (beat("stopped", age=5), 5.5, False, 60.0, QueryStatus.STOPPED),  # the heartbeating run's own last commit
    (beat("running", age=30), 1.0, True, None, QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP),  # stale beat, new batches
    (beat("running", age=30), 40.0, False, 60.0, QueryStatus.STOPPED),  # killed: its beats went stale
])
def test_classify_query(heartbeat: Heartbeat | None, commit_age: float | None, new_batches: bool,
                        recent_s: float | None, status: QueryStatus) -> None:
    last = None if commit_age is None else LastCommit(7, EPOCH - commit_age)
    liveness = classify_query(heartbeat, last, now=EPOCH, new_batches=new_batches, recent_s=recent_s)
    assert liveness.status is status
    assert liveness.to_dict()["status"] == status.value and liveness.to_dict()["detail"] == liveness.describe()


def test_liveness_words_name_the_missing_heartbeat_and_what_to_do() -> None:
    running = classify_query(None, LastCommit(12, EPOCH - 3), now=EPOCH, recent_s=60)
    assert running.describe() == ("running without GracefulStop: last commit: batch 12, 3 s ago; "
                                  "no heartbeat was ever written under _ckpt/")
    assert "GracefulStop" in running.action() and "--pid" in running.action() and "spark-side.md" in running.action()
    idle = classify_query(None, LastCommit(12, EPOCH - 600), now=EPOCH, recent_s=60)
    assert "no heartbeat was ever written" in idle.describe() and "cannot be seen" in idle.describe()
    assert "last commit: batch 12, 10 min ago" in idle.describe() and "no query" not in idle.describe()
    assert "If none runs, there is nothing to stop" in idle.action()
    empty = classify_query(None, None, now=EPOCH)
    assert "no batch committed yet" in empty.describe()
    unknown_time = classify_query(None, LastCommit(4), now=EPOCH, recent_s=60)
    assert unknown_time.status is QueryStatus.NO_HEARTBEAT and "last commit: batch 4;" not in unknown_time.describe()
    stopped = classify_query(beat("stopped", age=100), LastCommit(3, EPOCH - 120), now=EPOCH, recent_s=60)
    assert stopped.describe().startswith("not running: the heartbeat of run r1 is stopped") and stopped.action() == ""
    later = classify_query(beat("stopped", age=100), LastCommit(3, EPOCH - 2), now=EPOCH, recent_s=60)
    assert "its last heartbeat (run r1, stopped) dates from" in later.describe()


def test_control_files_last_commit_reads_the_newest_commit_and_its_time(tmp_path: Path) -> None:
    control = control_at(tmp_path)
    last = control.last_commit()
    assert last is not None and last.batch_id == 2
    assert last.committed_at is not None and abs(last.committed_at - time.time()) < 600
    assert control.liveness(recent_s=600).status is QueryStatus.RUNNING_WITHOUT_GRACEFUL_STOP
    assert control.liveness().status is QueryStatus.NO_HEARTBEAT
    assert control_at(tmp_path / "empty", batches=range(0)).last_commit() is None


def test_stop_result_round_trip_and_validation() -> None:
    result = StopResult(checkpoint_uri="s3://b/cp", outcome=StopOutcome.GRACEFUL, last_committed_batch=7,
                        interrupted_batch=None, waited_s=1.25, last_planned_batch=7, request_id="r",
                        query_id="q", ack={"outcome": "clean"}, escalation=None)
    assert StopResult.from_json(result.to_json()) == result
    assert StopResult.from_json(result.to_dict()) == result
    assert json.loads(result.to_json())["outcome"] == "graceful" and result.clean
    with pytest.raises(InvalidStopResult):
        StopResult.from_json('{"outcome": "graceful", "surprise": 1}')
    with pytest.raises(InvalidStopResult):
        StopResult.from_json({**result.to_dict(), "outcome": "maybe"})
    with pytest.raises(InvalidStopResult):
        StopResult.from_json("[1]")


@pytest.mark.parametrize(("planned", "committed", "interrupted"),
                         [(None, None, None), (3, 3, None), (4, 3, 4), (0, None, 0)])
def test_interrupted_batch(planned: int | None, committed: int | None, interrupted: int | None) -> None:
    assert BatchState(planned, committed).interrupted_batch == interrupted


@pytest.mark.parametrize(("heartbeat", "alive"), [
    (None, False), (beat(), True), (beat(age=2.9), True), (beat(age=3.5), False),
    (beat("stopped"), False), (beat(age=25, interval=10), True),
])
def test_heartbeat_alive(heartbeat: Heartbeat | None, alive: bool) -> None:
    assert heartbeat_alive(heartbeat, NOW) is alive


def test_ack_answers_request_or_run() -> None:
    assert ack_answers(an_ack("req"), "req")
    assert ack_answers(an_ack("other", run_id="r1"), "req", "r1")
    assert not ack_answers(an_ack("other", run_id="r0"), "req", "r1")
    assert not ack_answers(an_ack("other", run_id=""), "req", "")
    assert not ack_answers(None, "req", "r1")


T = NOW.timestamp()


@pytest.mark.parametrize(("ack", "heartbeat", "run_id", "now", "expected"), [
    (an_ack(), beat(), "r1", T, StopReason.ACKNOWLEDGED),
    (an_ack(), beat(), "r1", T + 999, StopReason.ACKNOWLEDGED),  # an ack wins over the deadline
    (None, beat(), "r1", T, None),
    (None, beat(), "r1", T + 60, StopReason.NOT_RUNNING),  # heartbeat 60 s old: stale
    (None, beat("stopped"), "r1", T, StopReason.NOT_RUNNING),
    (None, beat(run_id="r2"), "r1", T, StopReason.NOT_RUNNING),
    (None, None, "r1", T, None),  # a missing file is not proof of anything
    (None, None, "", T + 10, StopReason.TIMEOUT),
    (None, beat("stopped"), "", T + 5, None),  # no heartbeat seen when asking: wait for ack or timeout
    (an_ack("old", run_id="r0"), beat(), "r1", T, None),
])
def test_wait_decision(ack: StopAck | None, heartbeat: Heartbeat | None, run_id: str, now: float,
                       expected: StopReason | None) -> None:
    assert wait_decision(ack=ack, heartbeat=heartbeat, request_id="req", run_id=run_id, now=now,
                         deadline=T + 10) is expected


@pytest.mark.parametrize(("before", "after", "alive", "quiet"), [
    (BatchState(3, 3), BatchState(3, 3), False, True),
    (BatchState(3, 3), BatchState(3, 3), True, False),
    (BatchState(3, 3), BatchState(4, 3), False, False),
    (BatchState(4, 3), BatchState(4, 4), False, True),  # a commit of the planned batch is no new batch
    (BatchState(None, None), BatchState(0, None), False, False),
])
def test_quiet_verdict(before: BatchState, after: BatchState, alive: bool, quiet: bool) -> None:
    assert (quiet_verdict(before, after, alive) is None) is quiet


@pytest.mark.parametrize(("before", "after", "watch_commits", "problem"), [
    (BatchState(4, 3), BatchState(4, 4), False, None),  # the default: a commit of the planned batch is no new batch
    (BatchState(4, 3), BatchState(4, 4), True, "commits/4 appeared after the stop (last committed batch was 3)"),
    (BatchState(0, None), BatchState(0, 0), True, "commits/0 appeared after the stop (last committed batch was None)"),
    (BatchState(4, 3), BatchState(4, 3), True, None),
    (BatchState(4, 3), BatchState(5, 3), True, "offsets/5 appeared after the stop (last planned batch was 4)"),
])
def test_quiet_verdict_after_a_kill_watches_commits(before: BatchState, after: BatchState, watch_commits: bool,
                                                    problem: str | None) -> None:
    """A killed driver can outlive its manager's KILLED and commit the batch it planned: after a
    kill a new commits/N breaks the quiet too; without the flag nothing changes."""
    assert quiet_verdict(before, after, False, watch_commits=watch_commits) == problem


def test_pending_request() -> None:
    request = new_request("me", "test", 60, now=NOW)
    assert pending_request(request, None, NOW)
    assert not pending_request(request, an_ack(request.request_id), NOW)
    assert pending_request(request, an_ack("older"), NOW)
    assert not pending_request(request, None, NOW + timedelta(seconds=61))
    assert not pending_request(None, None, NOW)


# -- control files and the quiet check ------------------------------------------------------------


def test_control_files_request_is_adopted_replaced_or_withdrawn(tmp_path: Path) -> None:
    control = control_at(tmp_path)
    assert control.request() is None and control.ack() is None and control.heartbeat() is None
    first, wrote = control.request_stop("a", "x", 60)
    assert wrote and control.request() == first
    second, wrote = control.request_stop("b", "x", 60)
    assert not wrote and second == first, "a pending request is joined, not replaced"
    put(control, STOP_ACK, an_ack(first.request_id).to_json())
    third, wrote = control.request_stop("c", "x", 60)
    assert wrote and third.request_id != first.request_id, "an acknowledged request is not reused"
    assert not control.remove_request(first.request_id) and control.request() == third
    assert control.remove_request(third.request_id) and control.request() is None
    assert control.batch_state() == BatchState(2, 2)
    assert [p.name for p in (Path(control.root) / "_ckpt").iterdir() if p.name.endswith(".tmp")] == []


def test_unreadable_control_file_reads_as_missing(tmp_path: Path) -> None:
    control = control_at(tmp_path)
    put(control, HEARTBEAT, '{"query_id": ')
    assert control.heartbeat() is None


class FakeClock:
    def __init__(self, on_sleep: Any = None) -> None:
        self.now = 0.0
        self.sleeps = 0
        self.on_sleep = on_sleep

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.sleeps += 1
        if self.on_sleep:
            self.on_sleep(self.sleeps)


def test_wait_quiet_passes_on_a_quiet_checkpoint(tmp_path: Path) -> None:
    control = control_at(tmp_path, batches=range(4), committed=range(3))
    put(control, HEARTBEAT, beat("stopped", now=datetime.now(timezone.utc)).to_json())
    clock = FakeClock()
    state = wait_quiet(control, 2.0, poll_interval=0.5, clock=clock, sleep=clock.sleep)
    assert state == BatchState(3, 2) and state.interrupted_batch == 3
    assert clock.now >= 2.0


def test_wait_quiet_fails_when_a_batch_is_planned(tmp_path: Path) -> None:
    control = control_at(tmp_path)

    def planner(sleeps: int) -> None:
        if sleeps == 2:
            put(control, "offsets/3", "v1\n{}\n" + '{"events":{"0":1}}')

    clock = FakeClock(planner)
    with pytest.raises(CheckpointNotQuiet) as error:
        wait_quiet(control, 5.0, poll_interval=0.5, clock=clock, sleep=clock.sleep)
    assert "offsets/3" in str(error.value)


@pytest.mark.parametrize("watch_commits", [False, True])
def test_wait_quiet_after_a_kill_fails_on_a_late_commit(tmp_path: Path, watch_commits: bool) -> None:
    control = control_at(tmp_path, batches=range(4), committed=range(3))

    def late_commit(sleeps: int) -> None:
        if sleeps == 2:
            put(control, "commits/3", "v1\n{}\n")

    clock = FakeClock(late_commit)
    if not watch_commits:
        assert wait_quiet(control, 2.0, poll_interval=0.5, clock=clock, sleep=clock.sleep) == BatchState(3, 3)
        return
    with pytest.raises(CheckpointNotQuiet) as error:
        wait_quiet(control, 2.0, poll_interval=0.5, clock=clock, sleep=clock.sleep, watch_commits=True)
    assert "commits/3 appeared" in str(error.value)


def test_wait_quiet_fails_while_a_heartbeat_is_refreshed(tmp_path: Path) -> None:
    control = control_at(tmp_path)

    def beater(_: int) -> None:
        put(control, HEARTBEAT, beat(now=datetime.now(timezone.utc) + timedelta(milliseconds=_)).to_json())

    beater(0)
    clock = FakeClock(beater)
    with pytest.raises(QueryStillRunning):
        wait_quiet(control, 1.0, poll_interval=0.5, clock=clock, sleep=clock.sleep)


def test_finish_stop_timeout_without_kill_withdraws_the_request(tmp_path: Path) -> None:
    control = control_at(tmp_path)
    request, _ = control.request_stop("me", "x", 60)
    with pytest.raises(StopTimeout):
        finish_stop(control, reason=StopReason.TIMEOUT, request_id=request.request_id, requested_at=time.time(),
                    ack=None, kill=None, timeout_s=60, quiet_period=0)
    assert control.request() is None


# -- escalation (real processes for the local mode) -----------------------------------------------


def start_group(script: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    deadline = time.monotonic() + 30
    while not group_members(proc.pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return proc


def local(pid: int, scope: ProcessScope | None = None) -> LaunchHandle:
    scope = scope or ProcessScope.current()
    return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri="/cp", app_name="a", started_at="t", pid=pid,
                        host=scope.host, boot_id=scope.boot_id, pid_namespace=scope.pid_namespace)


def test_kill_local_terminates_the_process_group() -> None:
    proc = start_group("import subprocess, sys, time; "
                       "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); time.sleep(120)")
    job = job_for(local(proc.pid))
    assert job.state() is DriverState.RUNNING
    action = job.kill(timeout=10)
    assert "SIGTERM" in action and "SIGKILL" not in action
    assert proc.wait(timeout=10) == -signal.SIGTERM
    assert not group_members(proc.pid), "the child in the group must be gone too"
    assert job.state().alive is False
    assert "gone already" in job.kill()


def test_kill_local_escalates_to_sigkill() -> None:
    # the child says when it ignores SIGTERM (a SIGTERM before that would end it, and no escalation)
    proc = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "print('ignoring SIGTERM', flush=True); time.sleep(120)"],
                            start_new_session=True, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        readable, _, _ = select.select([proc.stdout], [], [], 120)
        assert readable, "the child did not start within 120 s"
        assert proc.stdout.readline() == b"ignoring SIGTERM\n"
        action = kill_group(proc.pid, term_timeout=0.5)
        assert "SIGKILL" in action
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


@pytest.mark.parametrize("other", [
    pytest.param({"host": "some-other-worker.example"}, id="another-host"),
    pytest.param({"boot_id": "00000000-0000-0000-0000-000000000000"}, id="another-boot"),
    pytest.param({"pid_namespace": "pid:[1]"}, id="another-pid-namespace"),
    pytest.param({"boot_id": "", "pid_namespace": ""}, id="scope-unknown"),
])
def test_a_local_driver_from_another_scope_is_never_signalled(other: dict[str, str]) -> None:
    proc = start_group("import time; time.sleep(120)")
    try:
        here = ProcessScope.current()
        handle = local(proc.pid, ProcessScope(**{**here.__dict__, **other}))
        job = job_for(handle)
        assert job.state() is DriverState.UNKNOWN, "a pid seen from another scope names nothing here"
        with pytest.raises(EscalationFailed) as error:
            job.kill()
        assert "Nothing was signalled" in str(error.value)
        assert group_members(proc.pid), "the process must be untouched"
    finally:
        kill_group(proc.pid)


@pytest.mark.parametrize("pid", [0, 1, -5])
def test_handles_never_name_pid_0_or_1(pid: int) -> None:
    with pytest.raises(InvalidLaunchHandle):
        local(pid)
    with pytest.raises(EscalationFailed):
        kill_group(pid)


class Runner:
    def __init__(self, returncode: int = 0, stdout: str = "") -> None:
        self.commands: list[list[str]] = []
        self.returncode = returncode
        self.stdout = stdout

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert "shell" not in kwargs
        self.commands.append(command)
        return subprocess.CompletedProcess(command, self.returncode, self.stdout, "application not found")


@pytest.mark.parametrize(("report", "state"), [
    ("State : RUNNING\nFinal-State : UNDEFINED", DriverState.RUNNING),
    ("State : ACCEPTED", DriverState.SUBMITTED),
    ("State : FINISHED\nFinal-State : SUCCEEDED", DriverState.FINISHED),
    ("State : FINISHED\nFinal-State : FAILED", DriverState.FAILED),
    ("State : KILLED", DriverState.KILLED),
    ("garbled", DriverState.UNKNOWN),
])
def test_yarn_state_and_kill_commands(report: str, state: DriverState, tmp_path: Path) -> None:
    yarn = LaunchHandle(mode=LaunchMode.YARN_CLUSTER, checkpoint_uri="/cp", app_name="a", started_at="t",
                        application_id="application_1_0002")
    runner = Runner(stdout=report)
    home = tmp_path / "hadoop"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "yarn").write_text("#!/bin/sh\n")
    (home / "bin" / "yarn").chmod(0o755)
    job = job_for(yarn, JobOptions(env={"HADOOP_HOME": str(home)}, runner=runner))
    assert job.state() is state
    assert job.kill() == "yarn application -kill application_1_0002"
    assert runner.commands == [[str(home / "bin" / "yarn"), "application", "-status", "application_1_0002"],
                               [str(home / "bin" / "yarn"), "application", "-kill", "application_1_0002"]]
    with pytest.raises(EscalationFailed) as error:
        job_for(yarn, JobOptions(runner=Runner(returncode=1))).kill()
    assert "application not found" in str(error.value)


class _HadoopListing:
    """Just enough of Hadoop's FileSystem (through py4j) for HadoopFiles.last_batch."""

    def __init__(self, names: list[str] | None) -> None:
        self.names = names

    def exists(self, path: Any) -> bool:
        return self.names is not None

    def listStatus(self, path: Any) -> list[Any]:  # noqa: N802 - the Java name
        class Status:
            def __init__(self, name: str) -> None:
                self.name = name

            def getPath(self) -> Any:  # noqa: N802
                return type("P", (), {"getName": lambda _self: self.name})()

        return [Status(n) for n in self.names or []]


@pytest.mark.parametrize(
    ("names", "last"),
    [(None, None), ([], None), (["0", "1", "2", "10", ".10.crc", ".11.0d3f.tmp", "_x", "3.bak"], 10),
     ([".4.crc"], None), (["7", "0070"], 7)],
)
def test_driver_side_last_batch_uses_the_shared_name_rule(names: list[str] | None, last: int | None) -> None:
    from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles

    files = object.__new__(HadoopFiles)
    files.fs = _HadoopListing(names)
    files.path = lambda rel: rel  # type: ignore[method-assign]
    assert files.last_batch("commits") == last  # a zero-padded name is skipped here, never raised


class _HPath:
    """Hadoop's Path, as py4j hands it over: enough for HadoopFiles.write."""

    def __init__(self, parent: Any, name: str | None = None) -> None:
        self.s = str(parent) if name is None else f"{parent}/{name}"

    def __str__(self) -> str:
        return self.s

    def toString(self) -> str:  # noqa: N802 - the Java name
        return self.s

    def getParent(self) -> _HPath:  # noqa: N802
        return _HPath(self.s.rsplit("/", 1)[0])

    def getName(self) -> str:  # noqa: N802
        return self.s.rsplit("/", 1)[1]

    def toUri(self) -> Any:  # noqa: N802
        scheme = self.s.split(":", 1)[0]
        return type("URI", (), {"getScheme": lambda _self: scheme})()


def _crc(path: _HPath) -> str:
    """ChecksumFileSystem's side file of ``path``."""
    return f"{path.getParent()}/.{path.getName()}.crc"


class _HadoopRenames:
    """Hadoop's FileSystem at the py4j boundary, with the rename outcomes HadoopFiles.write meets:
    ``replace`` (POSIX), ``crc`` (ChecksumFileSystem: the data moved, its .crc did not, false),
    ``no_replace`` (false while the target exists: HDFS, Hive's ProxyLocalFileSystem) and
    ``broken`` (no_replace, and a temporary file never moves). Deletes take the .crc along."""

    def __init__(self, mode: str, files: dict[str, bytes]) -> None:
        self.mode, self.files = mode, dict(files)
        self.calls: list[tuple[str, str]] = []

    def create(self, path: _HPath, overwrite: bool) -> Any:
        fs = self

        class Out:
            def write(self, data: bytearray) -> None:
                fs.files[str(path)] = bytes(data)
                fs.files[_crc(path)] = b"crc"

            def close(self) -> None:
                pass

        return Out()

    def open(self, path: _HPath) -> Any:
        if str(path) not in self.files:
            raise RuntimeError(f"java.io.FileNotFoundException: {path}")
        return type("In", (), {"data": self.files[str(path)], "close": lambda _self: None})()

    def exists(self, path: _HPath) -> bool:
        return str(path) in self.files

    def delete(self, path: _HPath, recursive: bool) -> bool:
        self.calls.append(("delete", str(path)))
        self.files.pop(_crc(path), None)
        return self.files.pop(str(path), None) is not None

    def rename(self, src: _HPath, dst: _HPath) -> bool:
        self.calls.append(("rename", f"{src} -> {dst}"))
        if str(src) not in self.files or (self.mode == "broken" and str(src).endswith(".tmp")):
            return False
        if self.mode in ("no_replace", "broken") and str(dst) in self.files:
            return False
        self.files[str(dst)] = self.files.pop(str(src))
        if self.mode == "crc":
            return False  # the data file moved; its .crc side file is left behind
        if _crc(src) in self.files:
            self.files[_crc(dst)] = self.files.pop(_crc(src))
        return True


def _hadoop_files(fs: _HadoopRenames) -> Any:
    from types import SimpleNamespace

    from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles

    files = object.__new__(HadoopFiles)
    files.fs = fs
    files._Path = _HPath
    files.root_path = _HPath("file:/cp")
    io_utils = SimpleNamespace(IOUtils=SimpleNamespace(toByteArray=lambda stream: stream.data))
    files._jvm = SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(commons=SimpleNamespace(io=io_utils))))
    return files


HB = "file:/cp/_ckpt/heartbeat.json"


def _left(fs: _HadoopRenames) -> dict[str, bytes]:
    """The files left, crc side files aside."""
    return {k: v for k, v in fs.files.items() if not k.endswith(".crc")}


@pytest.mark.parametrize("mode", ["replace", "crc", "no_replace"])
def test_a_control_file_write_puts_the_new_bytes_in_place_whatever_the_rename_returns(mode: str) -> None:
    fs = _HadoopRenames(mode, {HB: b"old"})
    _hadoop_files(fs).write("_ckpt/heartbeat.json", b"new")
    assert _left(fs) == {HB: b"new"}  # no temporary or moved-aside file left
    assert not [k for k in fs.files if k.endswith(".tmp.crc") or ".old" in k]
    assert ("delete", HB) not in fs.calls  # the target is never deleted, only moved aside to be replaced


def test_a_false_rename_that_moved_the_data_keeps_the_new_target_untouched() -> None:
    """ChecksumFileSystem's false after the data moved: the old code deleted the new target."""
    fs = _HadoopRenames("crc", {HB: b"old"})
    _hadoop_files(fs).write("_ckpt/heartbeat.json", b"new")
    assert fs.files[HB] == b"new"
    assert fs.calls[0][0] == "rename"  # then only the temporary file's stray crc is removed
    assert all(op == "delete" and path.endswith(".tmp.crc") for op, path in fs.calls[1:])


def test_a_rename_that_does_not_replace_moves_the_old_target_aside() -> None:
    fs = _HadoopRenames("no_replace", {HB: b"old"})
    _hadoop_files(fs).write("_ckpt/heartbeat.json", b"new")
    renames = [c[1] for c in fs.calls if c[0] == "rename"]
    assert len(renames) == 3 and renames[1].startswith(f"{HB} -> file:/cp/_ckpt/.heartbeat.json.")
    assert fs.files[HB] == b"new"


def test_a_new_file_that_cannot_be_put_in_place_leaves_the_old_one_and_says_so() -> None:
    fs = _HadoopRenames("broken", {HB: b"old"})
    with pytest.raises(OSError, match=r"heartbeat.json keeps its previous content"):
        _hadoop_files(fs).write("_ckpt/heartbeat.json", b"new")
    assert fs.files == {HB: b"old"}  # temporary file and its crc removed; the old target back in place


def test_a_moved_temporary_file_whose_target_holds_other_bytes_is_an_error() -> None:
    class Overwritten(_HadoopRenames):
        """The data moved, then another writer's rename landed on the target."""

        def rename(self, src: _HPath, dst: _HPath) -> bool:
            super().rename(src, dst)
            self.files[str(dst)] = b"theirs"
            return False

    fs = Overwritten("crc", {HB: b"old"})
    with pytest.raises(OSError, match=r"holds 6 other bytes instead of the 3 bytes written.*one driver"):
        _hadoop_files(fs).write("_ckpt/heartbeat.json", b"new")
    assert fs.files == {HB: b"theirs"}


def test_a_new_control_file_refused_by_the_store_is_an_error_without_leftovers() -> None:
    fs = _HadoopRenames("broken", {})
    with pytest.raises(OSError, match=r"does not exist; check that the driver can write in file:/cp/_ckpt"):
        _hadoop_files(fs).write("_ckpt/heartbeat.json", b"new")
    assert fs.files == {}


# -- ckpt stop without Spark ----------------------------------------------------------------------


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), stdout=out, stderr=err), out.getvalue(), err.getvalue()


def test_cli_stop_nothing_running_exits_4(tmp_path: Path) -> None:
    control = control_at(tmp_path)
    put(control, HEARTBEAT, beat("stopped", now=datetime.now(timezone.utc)).to_json())
    code, out, err = run_cli("stop", control.uri, "--quiet-period", "0.2", "--json")
    assert code == 4 and "nothing to stop" in err
    result = StopResult.from_json(out)
    assert result.outcome is StopOutcome.NOT_RUNNING and "heartbeat of run r1 is stopped" in (result.detail or "")
    assert control.request() is None


def test_cli_stop_without_any_heartbeat_says_it_cannot_tell_and_exits_5(tmp_path: Path) -> None:
    """An idle job without GracefulStop looks like no job: never claim that none runs."""
    control = control_at(tmp_path)
    code, out, err = run_cli("stop", control.uri, "--quiet-period", "0.2")
    assert code == 5 and control.request() is None
    assert "no query runs" not in err and "nothing to stop" not in err.split("\n")[0]
    assert "no heartbeat was ever written" in err and "last commit: batch 2," in err and " s ago" in err
    assert "GracefulStop" in err and "--pid" in err and "spark-side.md" in err
    assert "no_heartbeat" in out and "last commit: batch 2" in out


def test_cli_stop_of_a_query_without_graceful_stop_names_it_and_exits_2(tmp_path: Path) -> None:
    """Batches appear while no heartbeat was ever written: not "a second query?", but the real cause."""
    control = control_at(tmp_path)

    def planner() -> None:
        time.sleep(0.3)
        put(control, "offsets/3", 'v1\n{}\n{"events":{"0":1}}')

    thread = threading.Thread(target=planner)
    thread.start()
    code, out, err = run_cli("stop", control.uri, "--quiet-period", "5")
    thread.join()
    assert code == 2 and out == "" and control.request() is None
    assert err.startswith("ckpt: error: query running without GracefulStop")
    assert "offsets/3 appeared" in err and "no heartbeat was ever written" in err
    assert "second query" not in err and "--pid" in err and "spark-side.md" in err


def test_cli_stop_acknowledged_by_a_driver(tmp_path: Path) -> None:
    control = control_at(tmp_path)
    put(control, HEARTBEAT, beat(now=datetime.now(timezone.utc), interval=30).to_json())

    def driver() -> None:  # what GracefulStop does: see the request, ack it, then beat "stopped"
        deadline = time.monotonic() + 10
        while (request := control.request()) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert request is not None
        put(control, STOP_ACK, an_ack(request.request_id, run_id="r1").to_json())
        put(control, HEARTBEAT, beat("stopped", now=datetime.now(timezone.utc), interval=30).to_json())

    thread = threading.Thread(target=driver)
    thread.start()
    code, out, err = run_cli("stop", control.uri, "--timeout", "10", "--quiet-period", "0.2", "--json")
    thread.join()
    assert (code, err) == (0, ""), err
    result = StopResult.from_json(out)
    assert result.outcome is StopOutcome.GRACEFUL and result.last_committed_batch == 2
    assert result.ack is not None and result.request_id == result.ack["request_id"]


def test_cli_stop_timeout_without_pid_exits_2(tmp_path: Path) -> None:
    control = control_at(tmp_path)
    put(control, HEARTBEAT, beat(now=datetime.now(timezone.utc), interval=30).to_json())
    code, out, err = run_cli("stop", control.uri, "--timeout", "0.3", "--quiet-period", "0")
    assert code == 2 and out == "" and "--pid" in err and err.count("\n") == 1
    assert not os.path.exists(Path(control.root) / "_ckpt" / "stop-request.json")


# -- where a stop's time went ---------------------------------------------------------------------


def test_stop_timeline_splits_request_to_quiet_into_phases() -> None:
    from airflow_ckpt_provider.checkpoint.stop import STOP_PHASES, describe_stop_timeline, stop_timeline
    from airflow_ckpt_provider.clock import epoch_seconds as parse_iso

    request = StopRequest(request_id="r", requested_at="2026-11-23T10:00:00.000+00:00")
    ack = StopAck(request_id="r", query_id="q", run_id="u", outcome="clean", last_committed_batch=4,
                  last_planned_batch=4, seen_at="2026-11-23T10:00:00.400+00:00",
                  boundary_at="2026-11-23T10:00:01.900+00:00", stopped_at="2026-11-23T10:00:02.300+00:00")
    noticed = parse_iso("2026-11-23T10:00:03.000+00:00")
    assert noticed is not None
    timeline = stop_timeline(request, ack, noticed, noticed + 5.0)
    assert list(timeline) == [name for name in STOP_PHASES if "killed" not in name]
    assert timeline == {"driver saw the request": 0.4, "batch boundary found": 1.5,
                        "query stopped and acknowledged": 0.4, "requester noticed the acknowledgement": 0.7,
                        "quiet check": 5.0}
    assert describe_stop_timeline(timeline).startswith("driver saw the request 0.4 s, batch boundary found 1.5 s")


def test_stop_timeline_of_an_older_driver_or_an_escalation_leaves_unknown_phases_out() -> None:
    from airflow_ckpt_provider.checkpoint.stop import stop_timeline
    from airflow_ckpt_provider.clock import epoch_seconds as parse_iso

    request = StopRequest(request_id="r", requested_at="2026-11-23T10:00:00+00:00")
    older = StopAck.from_json('{"request_id": "r", "query_id": "q", "run_id": "u", "outcome": "clean", '
                              '"last_committed_batch": 1, "last_planned_batch": 1, '
                              '"stopped_at": "2026-11-23T10:00:02+00:00"}')
    start = parse_iso(request.requested_at)
    assert start is not None
    assert stop_timeline(request, older, start + 3, start + 8) == {
        "query stopped and acknowledged": 2.0, "requester noticed the acknowledgement": 1.0, "quiet check": 5.0}
    # an escalation: no acknowledgement was ever noticed; the wait ended in a kill
    assert stop_timeline(request, None, start + 60, start + 65) == {
        "no acknowledgement: waited, then killed": 60.0, "quiet check": 5.0}


@pytest.mark.parametrize(("ack_outcome", "ack_planned", "expected_quiet"), [
    ("clean", 2, 1.0),         # the driver stopped its query: a short check for a second writer
    ("interrupted", 2, 5.0),   # a cut batch: the full quiet period
    ("clean", 1, 5.0),         # the checkpoint planned a batch the ack does not know: the full period
])
def test_a_clean_acknowledgement_shortens_the_quiet_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          ack_outcome: str, ack_planned: int,
                                                          expected_quiet: float) -> None:
    from airflow_ckpt_provider.storage import stop as core

    control = control_at(tmp_path)  # batches 0..2 planned and committed
    request, _ = control.request_stop("me", "x", 60)
    asked: list[float] = []
    real = core.wait_quiet
    monkeypatch.setattr(core, "wait_quiet", lambda ctl, quiet, **kw: asked.append(quiet) or real(ctl, 0, **kw))
    ack = StopAck(request_id=request.request_id, query_id="q", run_id="r1", outcome=ack_outcome,
                  last_committed_batch=2, last_planned_batch=ack_planned, stopped_at=NOW.isoformat())
    result = finish_stop(control, reason=StopReason.ACKNOWLEDGED, request_id=request.request_id,
                         requested_at=time.time(), ack=ack, kill=None, timeout_s=60, quiet_period=5.0,
                         acknowledged_quiet_period=1.0)
    assert asked == [expected_quiet]
    assert result.outcome == "graceful" and result.last_committed_batch == 2
    assert "quiet check" in (result.timeline or {})


def test_without_an_acknowledged_quiet_period_the_quiet_check_is_unchanged(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_ckpt_provider.storage import stop as core

    control = control_at(tmp_path)
    request, _ = control.request_stop("me", "x", 60)
    asked: list[float] = []
    monkeypatch.setattr(core, "wait_quiet", lambda ctl, quiet, **kw: asked.append(quiet) or ctl.batch_state())
    finish_stop(control, reason=StopReason.ACKNOWLEDGED, request_id=request.request_id, requested_at=time.time(),
                ack=an_ack(request.request_id), kill=None, timeout_s=60, quiet_period=5.0)
    assert asked == [5.0]


def test_poll_until_decides_reports_progress_and_never_sleeps_past_the_deadline() -> None:
    from airflow_ckpt_provider.storage.stop import poll_until

    now = [100.0]
    slept: list[float] = []
    progress: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    decided = poll_until(lambda t: "done" if t >= 109.5 else None, deadline=109.5, poll_interval=2.0,
                         progress=progress.append, progress_every_s=3.0, clock=lambda: now[0], sleep=sleep)
    assert decided == "done"
    assert slept == [2.0, 2.0, 2.0, 2.0, 1.5], "the last sleep ends at the deadline"
    assert progress == [104.0, 108.0], "a progress line every 3 s of waiting, not on the first poll"
