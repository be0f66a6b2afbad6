"""LocalAirflow's REST client against a tiny real HTTP server that stalls or fails on purpose.

Reads are asked again after timeouts, refused connections and 5xx, within the caller's deadline;
calls that change something are sent again only after a read shows they did not happen.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.harness.airflow_server import LocalAirflow
from tests.harness.errors import AirflowApiError, AirflowApiUnavailable

#: A step's answer: (status, JSON body), or STALL (no answer until the test ends).
Answer = tuple[int, Any] | None
Step = Callable[[Any], Answer]


def STALL(body: Any) -> Answer:  # reads as a constant in the plans
    return None


HITL = "/api/v2/dags/d/dagRuns/r/taskInstances/approve/-1/hitlDetails"


def answer(status: int, payload: Any = None) -> Step:
    return lambda body: (status, payload)


class FakeApi:
    """Planned answers per (method, path), used in order; the last one repeats. Records calls."""

    def __init__(self) -> None:
        self.plans: dict[tuple[str, str], list[Step]] = {("POST", "/auth/token"): [answer(201, {"access_token": "tok"})]}
        self.calls: list[tuple[str, str, Any, str | None]] = []
        self.release = threading.Event()
        self.lock = threading.Lock()

    def plan(self, method: str, path: str, *steps: Step) -> None:
        self.plans[(method, path)] = list(steps)

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _, _ in self.calls if (m, p) == (method, path))

    def next_answer(self, method: str, path: str, body: Any, auth: str | None) -> Answer:
        with self.lock:
            self.calls.append((method, path, body, auth))
            steps = self.plans.get((method, path))
            if not steps:
                return 404, {"detail": "not planned"}
            step = steps.pop(0) if len(steps) > 1 else steps[0]
        return step(body)


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            result = api.next_answer(self.command, self.path, body, self.headers.get("Authorization"))
            if result is None:
                api.release.wait(60)
                result = 200, {}
            status, payload = result
            data = json.dumps(payload).encode() if payload is not None else b""
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up on a stalled request

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler


@pytest.fixture
def api() -> FakeApi:
    return FakeApi()


@pytest.fixture
def server(api: FakeApi) -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    api.release.set()
    httpd.shutdown()
    httpd.server_close()


def local_airflow(tmp_path: Path, port: int, **kwargs: float) -> LocalAirflow:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "simple_auth_manager_passwords.json.generated").write_text(json.dumps({"admin": "pw"}))
    return LocalAirflow(home, tmp_path, port=port, **{"request_timeout": 0.5, "api_deadline": 30.0, **kwargs})


def test_read_is_asked_again_after_5xx_and_logs_each_retry(
    api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api.plan("GET", "/api/v2/dags/d", answer(500, {}), answer(503, {}), answer(200, {"dag_id": "d"}))
    af = local_airflow(tmp_path, server.server_port)
    with caplog.at_level(logging.WARNING):
        assert af.api("GET", "/dags/d") == {"dag_id": "d"}
    assert api.count("GET", "/api/v2/dags/d") == 3
    assert all(auth == "Bearer tok" for m, _, _, auth in api.calls if m == "GET")
    retries = [r.getMessage() for r in caplog.records if "asking again" in r.getMessage()]
    assert len(retries) == 2 and "HTTP 500" in retries[0] and "HTTP 503" in retries[1], retries


def test_read_is_asked_again_after_a_stall(api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path) -> None:
    api.plan("GET", "/api/v2/dags/d", STALL, answer(200, {"dag_id": "d"}))
    af = local_airflow(tmp_path, server.server_port)
    assert af.api("GET", "/dags/d") == {"dag_id": "d"}
    assert api.count("GET", "/api/v2/dags/d") == 2


def test_request_timeout_never_runs_past_the_deadline(
    api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    api.plan("GET", "/api/v2/dags/d", STALL)
    af = local_airflow(tmp_path, server.server_port, request_timeout=60.0)
    started = time.monotonic()
    with pytest.raises(AirflowApiUnavailable, match="no answer within"):
        af.api("GET", "/dags/d", deadline=time.monotonic() + 1.0)
    assert time.monotonic() - started < 30, "one request must not wait its full 60 s past the deadline"


def test_read_is_asked_again_while_the_server_refuses_connections(
    api: FakeApi, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api.plan("GET", "/api/v2/dags/d", answer(200, {"dag_id": "d"}))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api), bind_and_activate=False)
    httpd.allow_reuse_address = True
    httpd.server_bind()  # bound but not listening: connections are refused

    serving = threading.Event()

    def open_later() -> None:
        httpd.server_activate()
        serving.set()
        httpd.serve_forever()

    opener = threading.Timer(1.5, open_later)
    opener.daemon = True
    af = local_airflow(tmp_path, httpd.server_port)
    af._token = "tok"  # the token endpoint is behind the same refusing port
    opener.start()
    try:
        with caplog.at_level(logging.WARNING):
            assert af.api("GET", "/dags/d", deadline=time.monotonic() + 60) == {"dag_id": "d"}
    finally:
        opener.cancel()
        if serving.is_set():
            httpd.shutdown()
        httpd.server_close()
    assert any("connection failed" in r.getMessage() for r in caplog.records)


def test_unanswered_reads_end_at_the_deadline(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        af = local_airflow(tmp_path, port)
        af._token = "tok"
        with pytest.raises(AirflowApiUnavailable, match="attempt"):
            af.api("GET", "/dags/d", deadline=time.monotonic() + 2.0)


def test_a_post_is_not_sent_again_after_5xx_or_a_stall(
    api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    af = local_airflow(tmp_path, server.server_port)
    api.plan("POST", "/api/v2/things", answer(500, {"detail": "boom"}))
    with pytest.raises(AirflowApiError, match="HTTP 500") as failed:
        af.api("POST", "/things", {})
    assert failed.value.status == 500
    api.plan("POST", "/api/v2/other", STALL)
    with pytest.raises(AirflowApiUnavailable, match="Not sent again"):
        af.api("POST", "/other", {})
    assert api.count("POST", "/api/v2/things") == api.count("POST", "/api/v2/other") == 1


def _dag_api(api: FakeApi, *posts: Callable[[Any, set[str]], Answer]) -> set[str]:
    """GET/PATCH /dags/d answer; POST dagRuns runs ``posts`` in order; GET of a run finds the
    run ids created so far."""
    created: set[str] = set()
    api.plan("GET", "/api/v2/dags/d", answer(200, {"dag_id": "d"}))
    api.plan("PATCH", "/api/v2/dags/d", answer(200, {"dag_id": "d", "is_paused": False}))
    api.plan("POST", "/api/v2/dags/d/dagRuns", *[(lambda body, p=p: p(body, created)) for p in posts])
    original = api.next_answer

    def with_runs(method: str, path: str, body: Any, auth: str | None) -> Answer:
        prefix = "/api/v2/dags/d/dagRuns/"
        if method == "GET" and path.startswith(prefix):
            with api.lock:
                api.calls.append((method, path, body, auth))
            run_id = path[len(prefix):]
            return (200, {"dag_run_id": run_id, "state": "queued"}) if run_id in created else (404, {})
        return original(method, path, body, auth)

    api.next_answer = with_runs  # type: ignore[method-assign]
    return created


def test_a_trigger_that_got_no_answer_but_created_its_run_is_not_sent_again(
    api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    def create_then_stall(body: Any, created: set[str]) -> Answer:
        created.add(body["dag_run_id"])
        return None

    created = _dag_api(api, create_then_stall)
    run_id = local_airflow(tmp_path, server.server_port).trigger("d", {"x": 1})
    assert created == {run_id}
    assert api.count("POST", "/api/v2/dags/d/dagRuns") == 1


def test_a_trigger_is_sent_again_only_when_its_run_does_not_exist(
    api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    def fail(body: Any, created: set[str]) -> Answer:
        return 500, {"detail": "database is locked"}

    def create(body: Any, created: set[str]) -> Answer:
        created.add(body["dag_run_id"])
        return 200, {"dag_run_id": body["dag_run_id"]}

    created = _dag_api(api, fail, create)
    run_id = local_airflow(tmp_path, server.server_port).trigger("d")
    posts = [body for m, p, body, _ in api.calls if (m, p) == ("POST", "/api/v2/dags/d/dagRuns")]
    assert created == {run_id} and [b["dag_run_id"] for b in posts] == [run_id, run_id]


def _details(chosen: list[str] | None, user: str = "admin") -> dict[str, Any]:
    return {"response_received": chosen is not None, "chosen_options": chosen,
            "responded_by_user": {"id": user, "name": user} if chosen else None,
            "responded_at": "2026-11-23T13:30:00Z" if chosen else None, "params_input": {}}


def test_hitl_already_answered_with_our_answer_is_done(
    api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    api.plan("PATCH", HITL, answer(409, {"detail": "already updated"}))
    api.plan("GET", HITL, answer(200, _details(["Approve"])))
    got = local_airflow(tmp_path, server.server_port).answer_hitl("d", "r", "approve", "Approve")
    assert got["chosen_options"] == ["Approve"] and got["responded_by"]["name"] == "admin"
    assert api.count("PATCH", HITL) == 1


@pytest.mark.parametrize(("chosen", "user"), [(["Reject"], "admin"), (["Approve"], "someone")])
def test_hitl_answered_by_someone_else_is_refused(
    api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path, chosen: list[str], user: str
) -> None:
    api.plan("PATCH", HITL, answer(409, {"detail": "already updated"}))
    api.plan("GET", HITL, answer(200, _details(chosen, user)))
    with pytest.raises(AirflowApiError, match="already answered"):
        local_airflow(tmp_path, server.server_port).answer_hitl("d", "r", "approve", "Approve")
    assert api.count("PATCH", HITL) == 1


def test_hitl_answer_is_sent_again_only_when_none_is_recorded(
    api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    recorded: list[list[str]] = []

    def record(body: Any) -> Answer:
        recorded.append(body["chosen_options"])
        return 200, {"chosen_options": body["chosen_options"], "responded_by": {"id": "admin", "name": "admin"}}

    api.plan("PATCH", HITL, STALL, record)  # the first one is lost on the way
    api.plan("GET", HITL, lambda body: (200, _details(recorded[-1] if recorded else None)))
    got = local_airflow(tmp_path, server.server_port).answer_hitl("d", "r", "approve", "Approve")
    assert got["chosen_options"] == ["Approve"]
    assert api.count("PATCH", HITL) == 2 and recorded == [["Approve"]]


def test_hitl_answer_recorded_despite_a_stall_is_not_sent_again(
    api: FakeApi, server: ThreadingHTTPServer, tmp_path: Path
) -> None:
    recorded: list[list[str]] = []

    def record_then_stall(body: Any) -> Answer:
        recorded.append(body["chosen_options"])
        return None

    api.plan("PATCH", HITL, record_then_stall)
    api.plan("GET", HITL, lambda body: (200, _details(recorded[-1] if recorded else None)))
    got = local_airflow(tmp_path, server.server_port).answer_hitl("d", "r", "approve", "Approve")
    assert got["chosen_options"] == ["Approve"]
    assert api.count("PATCH", HITL) == 1
