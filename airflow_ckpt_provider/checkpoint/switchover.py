"""A switchover's result and where its downtime went. Pure: values and arithmetic on recorded times,
no I/O.

A switchover (:class:`~airflow_ckpt_provider.operators.switchover.StandbySwitchoverOperator`)
ends with one :class:`SwitchoverResult`: the new version's launch handle, the old query's stop
result, the handover the provider re-derived (the contract of the later steps), what the standby
recorded when it started (``_ckpt/switchover-handover.json``) and the :class:`DowntimeSplit`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidStepResult
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.clock import epoch_seconds
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import Codec, Field, one_of

__all__ = ["DowntimeSplit", "SwitchoverResult", "TakenBy", "downtime_split"]


def _between(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(max(0.0, end - start), 3)


@dataclass(frozen=True)
class DowntimeSplit:
    """Where a switchover's time went, in seconds (None: a time was not recorded).

    ``stop_s``: the stop request to the old query's acknowledgement (the old driver finishing its
    batch and stopping; the old query processes until its last commit, so only its end is
    downtime); ``notice_s``: the acknowledgement to the standby seeing it; ``handover_read_s``: the
    standby reading the old checkpoint's last commit; ``state_wait_s``: waiting for state (None: the
    switchover carried none); ``query_start_s``: the start planned and released to the new query;
    ``first_batch_s``: the new query's start to its first commit; ``downtime_s``: the acknowledgement
    to the first commit (what readers of the stream wait for)."""

    stop_s: float | None
    notice_s: float | None
    handover_read_s: float | None
    state_wait_s: float | None
    query_start_s: float | None
    first_batch_s: float | None
    downtime_s: float | None

    def parts(self) -> list[tuple[str, float | None]]:
        """Each part in the user's words, in order, with the downtime (acknowledgement to first commit) last."""
        return [("old query's stop (request to acknowledgement; it processes until then)", self.stop_s),
                ("standby notices the acknowledgement", self.notice_s), ("handover read", self.handover_read_s),
                ("state wait", self.state_wait_s), ("query start", self.query_start_s),
                ("first batch", self.first_batch_s), ("downtime (acknowledgement to first commit)", self.downtime_s)]

    def describe(self) -> str:
        """``downtime 2.4 s: notice 0.2 s, handover read 0.3 s, ...`` for a log line or report."""
        parts = [(name, value) for name, value in (
            ("notice", self.notice_s), ("handover read", self.handover_read_s), ("state wait", self.state_wait_s),
            ("query start", self.query_start_s), ("first batch", self.first_batch_s)) if value is not None]
        head = f"downtime {self.downtime_s:.1f} s" if self.downtime_s is not None else "downtime unknown"
        stop = f" (the old query took {self.stop_s:.1f} s to stop)" if self.stop_s is not None else ""
        return head + (": " + ", ".join(f"{name} {value:.1f} s" for name, value in parts) if parts else "") + stop

    def to_dict(self) -> dict[str, Any]:
        return _DOWNTIME.encode(asdict(self))

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> DowntimeSplit:
        return cls(**_DOWNTIME.decode(data))


def downtime_split(*, stop_requested_at: str, stop_acknowledged_at: str, ack_seen_at: str, handover_read_at: str,
                   released_at: str, first_commit_at: float | None, state_seeded_at: str = "") -> DowntimeSplit:
    """The split of one switchover from the times the standby recorded (ISO 8601 with zone; ``state_seeded_at``
    "" when it seeded no state) and the new query's first commit (epoch seconds, None when unknown)."""
    requested, acknowledged, seen, read, seeded, released = (
        epoch_seconds(moment) for moment in (stop_requested_at, stop_acknowledged_at, ack_seen_at, handover_read_at,
                                             state_seeded_at, released_at))
    return DowntimeSplit(stop_s=_between(requested, acknowledged), notice_s=_between(acknowledged, seen),
                         handover_read_s=_between(seen, read), state_wait_s=_between(read, seeded),
                         query_start_s=_between(seeded if seeded is not None else read, released),
                         first_batch_s=_between(released, first_commit_at),
                         downtime_s=_between(acknowledged, first_commit_at))


_SECONDS = Field((float,), nullable=True)
_DOWNTIME = Codec("DowntimeSplit", InvalidStepResult, {
    name: _SECONDS for name in ("stop_s", "notice_s", "handover_read_s", "state_wait_s", "query_start_s",
                                "first_batch_s", "downtime_s")})


class TakenBy(StrEnum):
    """Who started the new query at the handover: the standby by itself, or the provider after the
    standby refused (the old query's stop cut a batch: the sink ledger decided the handover)."""

    STANDBY = "standby"
    PROVIDER = "provider"


@dataclass(frozen=True)
class SwitchoverResult:
    """The switchover step's result: ``handle`` (the new version's LaunchHandle dict), ``stop`` (the
    old query's StopResult dict), ``handover`` (the HandoverResult dict the provider re-derived: what
    the later steps take), ``used`` (what the standby recorded when it started) and ``downtime``
    (a :class:`DowntimeSplit` dict); ``taken_by`` the provider when the standby refused and the
    provider released it at its own handover (``used`` is then the standby's refusal, and the
    split's handover read is the provider's handover and release)."""

    handle: Mapping[str, Any]
    stop: Mapping[str, Any]
    handover: Mapping[str, Any]
    used: Mapping[str, Any]
    downtime: Mapping[str, Any]
    taken_by: TakenBy = TakenBy.STANDBY

    def __post_init__(self) -> None:
        object.__setattr__(self, "taken_by", TakenBy(self.taken_by))

    def to_dict(self) -> dict[str, Any]:
        """Its JSON object; ``taken_by`` only when the provider took over (as the release before it wrote)."""
        values: dict[str, Any] = {name: dict(getattr(self, name)) for name in ("handle", "stop", "handover", "used",
                                                                              "downtime")}
        if self.taken_by is TakenBy.PROVIDER:
            values["taken_by"] = self.taken_by.value
        return _RESULT.encode(values)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> SwitchoverResult:
        """Decode (strict: :class:`InvalidStepResult` for anything else)."""
        return cls(**_RESULT.decode(data))

    @property
    def launch_handle(self) -> LaunchHandle:
        """The new query's launch handle (checked when decoded)."""
        return LaunchHandle.from_json(self.handle)

    @property
    def stop_result(self) -> StopResult:
        """The old query's stop (checked when decoded)."""
        return StopResult.from_json(self.stop)

    @property
    def handover_result(self) -> HandoverResult:
        """The handover the provider re-derived, which the later steps take (checked when decoded)."""
        return HandoverResult.from_json(self.handover)

    @property
    def seeded_state(self) -> str:
        """Where the standby seeded the old query's state ("" when it seeded none, or refused)."""
        return str(self.used.get("state_path") or "") if self.taken_by is TakenBy.STANDBY else ""

    @property
    def refusal(self) -> tuple[str, str] | None:
        """The standby's refusal (its reason and what it found) when the provider took over, else None."""
        if self.taken_by is not TakenBy.PROVIDER:
            return None
        return str(self.used.get("reason") or "?"), str(self.used.get("found") or "?")


def _checked(decode: Callable[[Mapping[str, Any]], object]) -> Callable[[Mapping[str, Any]], Mapping[str, Any]]:
    """A decoder that checks a nested value by its own codec and keeps its dict."""
    def check(value: Mapping[str, Any]) -> Mapping[str, Any]:
        decode(value)
        return dict(value)

    return check


def _used(value: Mapping[str, Any]) -> Mapping[str, Any]:
    """What the standby recorded (its handover record, or its refusal): the words the provider reads are text."""
    wrong = sorted(key for key in ("state_path", "reason", "found") if key in value and not isinstance(value[key], str))
    if wrong:
        raise TypeError(f"{', '.join(wrong)} not text")
    return dict(value)


_RESULT = Codec("SwitchoverResult", InvalidStepResult, {
    "handle": Field((dict,), decode=_checked(LaunchHandle.from_json)),
    "stop": Field((dict,), decode=_checked(StopResult.from_json)),
    "handover": Field((dict,), decode=_checked(HandoverResult.from_json)),
    "used": Field((dict,), decode=_used),
    "downtime": Field((dict,), decode=_checked(DowntimeSplit.from_json)),
    "taken_by": Field((str,), required=False, default=TakenBy.STANDBY, decode=one_of(*TakenBy, decode=TakenBy))})
