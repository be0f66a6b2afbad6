"""One HTTP call with a JSON answer, for the cluster managers' REST APIs (the YARN ResourceManager
and NodeManager, the Kubernetes API server): urllib, a bounded answer, no redirect followed.

:func:`request_json` returns every HTTP status as an :class:`HttpAnswer` (a redirect too: a
standby ResourceManager redirects to the active one, and the caller decides whether to try the
next endpoint); it raises ``OSError`` only when no usable answer came (unreachable, timed out, an
answer beyond ``max_bytes``). Headers are never logged or put into an error (a bearer token
travels in one); answers are cut and masked before they go into an error.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.checkpoint.jsonin import load_json
from airflow_ckpt_provider.checkpoint.secrets import redact_text

#: The largest answer read (a list of applications or pods can be long; more is refused).
MAX_RESPONSE_BYTES = 8_000_000
#: How much of an answer's text an error quotes.
QUOTED_CHARS = 300


@dataclass(frozen=True)
class HttpAnswer:
    """An answer: its status, its JSON (None when empty or not JSON), the start of its text
    (secrets masked, for errors) and its ``Location`` header ("" if none)."""

    status: int
    body: Any
    text: str = ""
    location: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def redirect(self) -> bool:
        return 300 <= self.status < 400


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - urllib's signature
        return None  # the 3xx reaches the caller as an HTTPError, answered as it is


def _read(response: Any, max_bytes: int, url: str) -> bytes:  # noqa: ANN401 - a urllib response
    data = response.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(f"{url}: an answer beyond {max_bytes:,} bytes")
    return bytes(data)


def _answer(status: int, data: bytes, location: str) -> HttpAnswer:
    text = data.decode("utf-8", errors="replace")
    try:
        body = load_json(data, what="cluster manager answer") if data.strip() else None
    except ValueError:
        body = None
    return HttpAnswer(status, body, redact_text(text[:QUOTED_CHARS]), location)


def request_json(method: str, url: str, *, body: Mapping[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None, timeout: float = 10.0,
                 max_bytes: int = MAX_RESPONSE_BYTES, ssl_context: ssl.SSLContext | None = None) -> HttpAnswer:
    """``method`` ``url`` with ``body`` as JSON; the answer, whatever its status. ``OSError`` when
    nothing usable answered (see the module doc)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Accept": "application/json", **(headers or {}),
                                              **({"Content-Type": "application/json"} if data is not None else {})})
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    if ssl_context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=timeout) as response:
            return _answer(response.status, _read(response, max_bytes, url), response.headers.get("Location", ""))
    except urllib.error.HTTPError as error:
        with error:
            return _answer(error.code, _read(error, max_bytes, url), error.headers.get("Location", "") or "")
    except urllib.error.URLError as error:
        raise OSError(f"{url}: {error.reason}") from None
    except http.client.HTTPException as error:  # a broken answer (IncompleteRead, BadStatusLine)
        raise OSError(f"{url}: {type(error).__name__}") from None


__all__ = ["MAX_RESPONSE_BYTES", "HttpAnswer", "request_json"]
