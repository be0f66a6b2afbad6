"""Which way the upgrade goes: to a new checkpoint (the migration), or a plain restart of the new
version on the old checkpoint. Pure: no I/O.

The user chooses a :class:`UpgradeMode`: ``new_checkpoint`` always migrates; ``auto`` restarts in
place when, and only when, the compatibility check proved it on a copy of the old checkpoint
(:attr:`CompatibilityVerdict.in_place_ok` true) and the new version resumes where the old one
stopped. Anything else (no verdict, a verdict that needs a new checkpoint or proved nothing, a
rewind or another start) migrates, and :class:`PathChoice` says why. A resumed upgrade goes on
along the path whose steps its journal records (:func:`resumed_path`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.checkpoint.compat import CompatibilityVerdict
from airflow_ckpt_provider.checkpoint.errors import InvalidUpgradePath
from airflow_ckpt_provider.checkpoint.rewind import StartMode
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec, Field, one_of


class UpgradeMode(StrEnum):
    """What the user allows: always a new checkpoint, or a plain restart when the check proves it."""

    NEW_CHECKPOINT = "new_checkpoint"
    AUTO = "auto"


class UpgradePath(StrEnum):
    """The way the upgrade went."""

    NEW_CHECKPOINT = "new checkpoint"
    IN_PLACE = "in place"


@dataclass(frozen=True)
class PathChoice:
    """The path chosen and, in the user's words, why."""

    path: UpgradePath
    reason: str
    mode: UpgradeMode = UpgradeMode.NEW_CHECKPOINT

    @property
    def in_place(self) -> bool:
        return self.path is UpgradePath.IN_PLACE

    def describe(self) -> str:
        what = ("a plain restart of the new version on the old checkpoint (no new checkpoint, no handover "
                "offsets: Spark resumes after the old version's last committed batch)" if self.in_place
                else "the new version on a new checkpoint from the handover")
        return f"upgrade path: {what}; {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return _PATH_CHOICE.encode({"path": self.path.value, "reason": self.reason, "mode": self.mode.value,
                                    "in_place": self.in_place})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, data: str | bytes | Mapping[str, Any]) -> PathChoice:
        """From :meth:`to_dict` or its JSON (the path step's XCom, with its ``summary_md``) through
        its strict codec; :class:`InvalidUpgradePath` on anything else."""
        return cls(**_PATH_CHOICE.decode(data))


#: :class:`PathChoice`'s codec (no format number, as today's release writes it): ``in_place`` is
#: derived from ``path``; the path step's XCom adds the approval's ``summary_md``.
_PATH_CHOICE = Codec("PathChoice", InvalidUpgradePath, {
    "path": Field((str,), decode=one_of(*UpgradePath, decode=UpgradePath)),
    "reason": Field((str,)),
    "mode": Field((str,), required=False, default=UpgradeMode.NEW_CHECKPOINT,
                  decode=one_of(*UpgradeMode, decode=UpgradeMode)),
    "in_place": Field((bool,), required=False, derived=True),
    "summary_md": Field((str,), required=False, derived=True),
}, versions=(UNVERSIONED,))


def choose_path(mode: UpgradeMode | str, verdict: CompatibilityVerdict | None, *,
                start_mode: StartMode | str = StartMode.RESUME) -> PathChoice:
    """The path for ``mode`` given the compatibility check's ``verdict`` (None: the check did not
    run) and where the new version starts (``start_mode``). ``ValueError`` for an unknown mode."""
    mode = UpgradeMode(mode)
    start = StartMode(start_mode)
    if mode is UpgradeMode.NEW_CHECKPOINT:
        return PathChoice(UpgradePath.NEW_CHECKPOINT, "mode new_checkpoint: always a new checkpoint", mode)
    if start is not StartMode.RESUME:
        return PathChoice(UpgradePath.NEW_CHECKPOINT, f"mode auto, but a {start.value} start needs a new checkpoint "
                          "(on the old one Spark resumes after its last committed batch)", mode)
    if verdict is None:
        return PathChoice(UpgradePath.NEW_CHECKPOINT, "mode auto, but the compatibility check did not run (switched "
                          "off): nothing proves a restart on the old checkpoint works", mode)
    if verdict.in_place_ok is True:
        return PathChoice(UpgradePath.IN_PLACE, "mode auto, and the compatibility check ran the new version on a copy "
                          "of the old checkpoint: in place OK", mode)
    return PathChoice(UpgradePath.NEW_CHECKPOINT, f"mode auto; the compatibility check: {verdict.headline()}", mode)


def resumed_path(recorded: Collection[str], in_place_steps: Collection[str],
                 mode: UpgradeMode | str = UpgradeMode.NEW_CHECKPOINT) -> PathChoice | None:
    """The path of an upgrade whose journal records the steps ``recorded`` (started or done):
    in place when one of them is an ``in_place_steps`` step, a new checkpoint when another step
    was recorded, None when nothing was (the choice is then made afresh)."""
    mode = UpgradeMode(mode)
    if set(recorded) & set(in_place_steps):
        return PathChoice(UpgradePath.IN_PLACE, "resuming the in-place restart the upgrade's journal records", mode)
    if recorded:
        return PathChoice(UpgradePath.NEW_CHECKPOINT, "resuming the migration the upgrade's journal records", mode)
    return None


__all__ = ["PathChoice", "UpgradeMode", "UpgradePath", "choose_path", "resumed_path"]
