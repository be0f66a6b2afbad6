"""The provider's one UTC clock: "now" as a timezone-aware datetime or as ISO-8601 text.

Standard library only: the code in the user's Spark driver (``airflow_ckpt_provider.spark``)
imports it as well as the core and the Airflow side. Modules that take a ``clock`` or ``now``
argument for tests default to :func:`utc_now`.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["epoch_seconds", "utc_iso", "utc_now"]


def utc_now() -> datetime:
    """The current time, timezone-aware, in UTC."""
    return datetime.now(timezone.utc)


def utc_iso(moment: datetime | None = None, timespec: str = "auto") -> str:
    """``moment`` (default: now, UTC) as ISO-8601 text, cut to ``timespec`` like
    :meth:`datetime.isoformat` (``"seconds"``, ``"milliseconds"``, ``"microseconds"`` ...); an
    aware UTC moment ends in ``+00:00``. ``ValueError`` for an unknown ``timespec``."""
    return (moment or utc_now()).isoformat(timespec=timespec)


def epoch_seconds(iso: str | None) -> float | None:
    """Epoch seconds of ISO-8601 text (a time without offset counts as UTC; a trailing ``Z`` is
    UTC on every supported Python, 3.10 included); None for ''/None, for anything not text, or
    text that is no ISO-8601 time."""
    if not iso or not isinstance(iso, str):
        return None
    try:
        moment = datetime.fromisoformat(iso[:-1] + "+00:00" if iso.endswith(("Z", "z")) else iso)
    except ValueError:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()
