"""Size and depth limits for every JSON document the provider reads (standard library only).

A checkpoint, an archive or a control folder is input the provider does not control: a manifest,
an offsets line, ``metadata``, a journal, a lock or a handover file nested 100,000 levels deep
would make :func:`json.loads` raise ``RecursionError``, and one of 10 GB would fill memory and
every log line it is quoted in. :func:`json_limit_problem` checks a text against the limits before
it is parsed, in linear time and without recursion; the core wraps it in
:func:`airflow_ckpt_provider.checkpoint.jsonin.load_json` (which raises the typed
:class:`~airflow_ckpt_provider.checkpoint.errors.JsonTooLarge`), the Spark driver side in
:func:`loads` (``ValueError``, which its callers already treat as a damaged control file).

The limits are far above anything Spark or the provider writes: offsets and metadata nest 2
levels, manifests and journals fewer than 10; the largest manifest measured (100,000 state
files) is about 25 MB.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_DEPTH", "json_limit_problem", "loads"]

#: the deepest nesting accepted (objects and arrays)
MAX_JSON_DEPTH = 64
#: the largest document accepted, in bytes (characters for text already decoded)
MAX_JSON_BYTES = 256 * 1024 * 1024

# a JSON string (escapes included; an unterminated one runs to the end) or one bracket
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\Z)|[\[\]{}]', re.DOTALL)


def json_limit_problem(text: str | bytes, *, max_bytes: int = MAX_JSON_BYTES,
                       max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """What about ``text`` exceeds the limits (a short description), or None when it is within them.
    Brackets inside strings do not count; the text need not be valid JSON."""
    if len(text) > max_bytes:
        return f"a document of {len(text):,} bytes, more than the {max_bytes:,} accepted"
    data = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    if data.count("[") + data.count("{") <= max_depth:
        return None  # cannot nest deeper: the common case costs two counts
    depth = 0
    for match in _TOKEN.finditer(data):
        token = match[0]
        if token in "[{":
            depth += 1
            if depth > max_depth:
                line = data.count("\n", 0, match.start()) + 1
                return f"JSON nested more than {max_depth} levels deep (line {line})"
        elif token in "]}":
            depth = max(depth - 1, 0)
    return None


def loads(text: str | bytes, *, what: str = "JSON", max_bytes: int = MAX_JSON_BYTES,
          max_depth: int = MAX_JSON_DEPTH) -> Any:  # noqa: ANN401 - any JSON value
    """:func:`json.loads` within the limits; ``ValueError`` naming ``what`` when a limit is exceeded
    (for code that must not import the core: the Spark driver side)."""
    problem = json_limit_problem(text, max_bytes=max_bytes, max_depth=max_depth)
    if problem is not None:
        raise ValueError(f"{what}: {problem}")
    return json.loads(text)
