"""Reading JSON input: the one parser every JSON document the core reads goes through (pure).

:func:`load_json` parses through the records' parser
(:func:`airflow_ckpt_provider.records.codec.load_json_text`: the size and depth limits of
:mod:`airflow_ckpt_provider.json_limits` checked before parsing) and raises :class:`JsonTooLarge` (a
:class:`CheckpointError` and a ``ValueError``, so callers that refuse malformed JSON refuse this
too) instead of ``RecursionError`` or a ``MemoryError``. ``strict`` also refuses duplicate object
keys and NaN/Infinity.
"""

from __future__ import annotations

from typing import Any

from airflow_ckpt_provider.checkpoint.errors import JsonTooLarge
from airflow_ckpt_provider.json_limits import MAX_JSON_BYTES, MAX_JSON_DEPTH, json_limit_problem
from airflow_ckpt_provider.records.codec import JsonLimitExceeded, load_json_text

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_DEPTH", "check_json_limits", "load_json"]


def check_json_limits(data: str | bytes, *, what: str = "JSON", path: str | None = None, line: int | None = None,
                      max_bytes: int = MAX_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`JsonTooLarge` when ``data`` exceeds the size or depth limit (before parsing)."""
    problem = json_limit_problem(data, max_bytes=max_bytes, max_depth=max_depth)
    if problem is not None:
        raise JsonTooLarge(found=f"{what}: {problem}",
                           expected=f"at most {max_bytes:,} bytes nested at most {max_depth} levels deep",
                           path=path, line=line)


def load_json(data: str | bytes, *, what: str = "JSON", path: str | None = None, line: int | None = None,
              strict: bool = False, max_bytes: int = MAX_JSON_BYTES,
              max_depth: int = MAX_JSON_DEPTH) -> Any:  # noqa: ANN401
    """Parse ``data`` (``what`` names it in the error, ``path`` and ``line`` where it came from).

    Raises :class:`JsonTooLarge` beyond the limits and ``ValueError`` (``json.JSONDecodeError``,
    ``UnicodeDecodeError``) when it is not JSON.
    """
    try:
        return load_json_text(data, what=what, strict=strict, max_bytes=max_bytes, max_depth=max_depth)
    except JsonLimitExceeded as exc:
        raise JsonTooLarge(found=exc.found, expected=exc.expected, path=path, line=line) from None
