"""``StrEnum``: the base of the provider's vocabularies (states, reasons, outcomes, modes).

Members are strings: they compare equal to their value, serialise to it in JSON, and — unlike a
plain ``(str, Enum)`` on Python 3.11+ — ``str()`` and f-strings give the value too, so a state
written into a report, a log line or a control file reads ``running``, never ``State.RUNNING``.
Standard library only (the Spark driver side imports it); Python 3.10 has no ``enum.StrEnum``.
"""

from __future__ import annotations

from enum import Enum


class StrEnum(str, Enum):
    """A string enumeration whose ``str()`` and ``format()`` are its value."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
