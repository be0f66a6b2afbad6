"""A tiny HTTP server on 127.0.0.1 that replays recorded cluster-manager answers
(tests/unit/cluster_recordings) and records what it was asked: the unit tests' stand-in for a
ResourceManager, a NodeManager or a Kubernetes API server. A real server over a real socket, so
the clients' urllib, status handling and limits run as they do against a cluster."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

RECORDINGS = Path(__file__).parent / "cluster_recordings"


@dataclass
class Reply:
    """One answer: a status, a body (a recording's name under cluster_recordings, a JSON value, or
    raw bytes) and extra headers."""

    status: int = 200
    body: Any = None  # noqa: ANN401
    headers: dict[str, str] = field(default_factory=dict)

    def payload(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        if isinstance(self.body, str) and self.body.endswith(".json"):
            return (RECORDINGS / self.body).read_bytes()
        return b"" if self.body is None else json.dumps(self.body).encode()


@dataclass
class Asked:
    method: str
    path: str
    query: dict[str, list[str]]
    body: Any  # noqa: ANN401
    headers: dict[str, str]


class Replay:
    """Routes ``(METHOD, path)`` to a list of :class:`Reply`, answered in turn (the last one
    repeats); anything else is a 404. ``asked`` holds every request, in order."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], list[Reply]] = {}
        self.asked: list[Asked] = []
        self.url = ""
        self._lock = threading.Lock()

    def on(self, method: str, path: str, *replies: Reply) -> None:
        self.routes[(method, path)] = list(replies)

    def answer(self, method: str, target: str, body: bytes, headers: dict[str, str]) -> Reply:
        parts = urlsplit(target)
        with self._lock:
            parsed = json.loads(body) if body else None
            self.asked.append(Asked(method, parts.path, parse_qs(parts.query), parsed, headers))
            replies = self.routes.get((method, parts.path))
            if not replies:
                return Reply(404, {"message": f"no reply recorded for {method} {parts.path}"})
            return replies.pop(0) if len(replies) > 1 else replies[0]

    def paths(self, method: str | None = None) -> list[str]:
        return [a.path for a in self.asked if method is None or a.method == method]


def _handler(replay: Replay) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            reply = replay.answer(self.command, self.path, self.rfile.read(length) if length else b"",
                                  {k.lower(): v for k, v in self.headers.items()})
            payload = reply.payload()
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_PUT = do_DELETE = do_POST = _serve  # noqa: N815 - http.server's names

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002, ANN401 - quiet
            return

    return Handler


@contextmanager
def replay_server() -> Iterator[Replay]:
    """A :class:`Replay` served on 127.0.0.1 (a free port) for the ``with`` block."""
    replay = Replay()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(replay))
    replay.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield replay
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
