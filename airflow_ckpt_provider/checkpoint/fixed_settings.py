"""The settings Spark fixes for a checkpoint's life, judged from the old checkpoint and the new
version's conf before any trial (pure: no Airflow, no Spark, no I/O).

What Spark 4.2 records, and what it does when a restart asks for another value (read in Spark's
source, ``OffsetSeqMetadata`` and the state stores, and confirmed by restarts of real Spark 4.2.0
checkpoints, ``tests/integration/test_spark42_fixed_settings.py``):

* ``spark.sql.streaming.stateStore.encodingFormat``, ``spark.sql.streaming.stateStore.rowChecksum.
  enabled`` and ``spark.sql.streaming.queryEvolution.enableSourceEvolution`` are in
  ``OffsetSeqMetadata.relevantSQLConfs``: every ``offsets/N`` carries them in its ``conf`` map
  (absent in older checkpoints: Spark then assumes ``unsaferow`` / ``false``). On a restart
  ``OffsetSeqMetadata.setSessionConf`` puts the checkpoint's value back into the session ("Updating
  the value of conf ... in current session"): the restart runs, silently with the OLD value. Two
  exceptions fail instead: ``avro`` for an operator other than transformWithState is refused at
  analysis, before the checkpoint is read, on any checkpoint (tried for ``dropDuplicates``; the
  trials, which still run, show it for other operators); and Spark after 4.2 refuses source
  evolution on an offset log v1 (``cannotEnableSourceEvolutionOnExistingCheckpointError``; Spark
  4.2.0 keeps Kafka sources positional and fails a file source: ``batch N doesn't exist``).
* ``spark.sql.streaming.stateStore.checkpointFormatVersion`` is NOT in the ``conf`` map: the commit
  log records it (``commits/N`` v2 with ``stateUniqueIds`` = format 2). A stateful query fails on
  a restart with the other format (1 -> 2: ``CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT``; 2 -> 1:
  ``CANNOT_LOAD_STATE_STORE.UNCATEGORIZED``; the HDFS-backed store, which the checkpoint's
  ``stateStore.providerClass`` keeps, refuses format 2: ``STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED``);
  a stateless one simply writes the other commit log version.
* ``spark.sql.streaming.offsetLog.formatVersion``: an existing checkpoint keeps its offset log
  version (first line of ``offsets/N``) whatever the conf says.
* Real-time mode is the new version's trigger, recorded nowhere: Spark 4.2 runs only stateless
  queries in it (a stateful plan fails its allowlist, ``STREAMING_REAL_TIME_MODE.
  OPERATOR_OR_SINK_NOT_IN_ALLOWLIST``, on any checkpoint); Spark's source after 4.2 runs stateful
  ones on commit log v2 only (``STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED``).

Spark 4.2.0 is what was run; "after 4.2" is Spark's current source, not a release tried here: a
version before 4.3 is judged as 4.2, any other (or an unknown one) by the current source.

:func:`fixed_settings` gives one :class:`SettingVerdict` per setting whose value changes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import InvalidVerdict
from airflow_ckpt_provider.enums import StrEnum
from airflow_ckpt_provider.records.codec import Codec, Field, one_of

#: Spark's state store providers, by the class name ``stateStore.providerClass`` holds.
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"


class FixedSetting(StrEnum):
    """A setting Spark fixes for a checkpoint's life (the value is Spark's conf key; real-time
    mode is a trigger, not a conf)."""

    CHECKPOINT_FORMAT = "spark.sql.streaming.stateStore.checkpointFormatVersion"
    ENCODING_FORMAT = "spark.sql.streaming.stateStore.encodingFormat"
    ROW_CHECKSUM = "spark.sql.streaming.stateStore.rowChecksum.enabled"
    SOURCE_EVOLUTION = "spark.sql.streaming.queryEvolution.enableSourceEvolution"
    OFFSET_LOG_FORMAT = "spark.sql.streaming.offsetLog.formatVersion"
    REAL_TIME_MODE = "trigger(realTime=...)"


class Effect(StrEnum):
    """What a restart of the new version on the old checkpoint does with the changed setting."""

    NO_STATE = "no_state"        # the query keeps no state: the restart is not affected
    KEPT = "kept"                # the restart runs with the OLD value (Spark restores it silently)
    REFUSED = "refused"          # the restart fails with Spark's error
    UNSUPPORTED = "unsupported"  # the new Spark refuses the new value for this query on any checkpoint
    TRIAL = "trial"              # not decided by the checkpoint: the trial decides


#: Where Spark records each setting in a checkpoint.
RECORDED = {
    FixedSetting.CHECKPOINT_FORMAT: "commits/N version (v2 with stateUniqueIds = format 2); not in the offsets conf",
    FixedSetting.ENCODING_FORMAT: "offsets/N metadata conf (absent: unsaferow)",
    FixedSetting.ROW_CHECKSUM: "offsets/N metadata conf (absent: false)",
    FixedSetting.SOURCE_EVOLUTION: "offsets/N metadata conf (absent: false); offsets/N first line v2 = named sources",
    FixedSetting.OFFSET_LOG_FORMAT: "offsets/N first line (v1 / v2)",
    FixedSetting.REAL_TIME_MODE: "not recorded (the new version's trigger); the commit log version decides",
}

#: Spark 4.2's defaults, the new value when the new version's conf does not set the key.
DEFAULTS = {
    FixedSetting.CHECKPOINT_FORMAT: "1",
    FixedSetting.ENCODING_FORMAT: "unsaferow",
    FixedSetting.ROW_CHECKSUM: "false",
    FixedSetting.SOURCE_EVOLUTION: "false",
    FixedSetting.OFFSET_LOG_FORMAT: "1",
}

_EFFECT_TEXT = {
    Effect.NO_STATE: "the query keeps no state: a restart on the old checkpoint is not affected",
    Effect.KEPT: "needs a new checkpoint: on the old one Spark keeps the old value (a restart runs with it)",
    Effect.REFUSED: "needs a new checkpoint: a restart on the old one fails",
    Effect.UNSUPPORTED: "the new Spark refuses the new value for this query on any checkpoint",
    Effect.TRIAL: "not decided by the checkpoint: the trial decides",
}

_MIGRATE = ("the provider's migration: the new version on a new checkpoint at the handover, the old query's "
            "state exported and seeded")


@dataclass(frozen=True)
class CheckpointFacts:
    """What the old checkpoint records of the fixed settings: the offset log version of the last
    committed batch, its commit log's state checkpoint format (2 when it holds ``stateUniqueIds``),
    its metadata ``conf`` map, whether the query keeps state (``state/`` has operators) and whether
    every stateful operator is a transformWithState (its ``state/<op>/_stateSchema``)."""

    offsets_version: int | None
    state_format: int | None
    conf: Mapping[str, str] = field(default_factory=dict, hash=False)
    stateful: bool = False
    transform_with_state: bool = False

    @classmethod
    def of(cls, *, offsets_version: int | None, commit_has_state_ids: bool | None, conf: Mapping[str, str],
           state_operators: tuple[int, ...] | list[int], transform_with_state: bool = False) -> CheckpointFacts:
        """From a :class:`~airflow_ckpt_provider.checkpoint.snapshot.CheckpointSnapshot`'s fields and
        its last commit (``commit_has_state_ids``: None when nothing is committed)."""
        fmt = None if commit_has_state_ids is None else (2 if commit_has_state_ids else 1)
        return cls(offsets_version, fmt, dict(conf), bool(state_operators),
                   bool(state_operators) and transform_with_state)


@dataclass(frozen=True)
class SettingVerdict:
    """One fixed setting that changes: its old and new value in Spark's words, what a restart on
    the old checkpoint does (``effect``; ``spark_error``: the error class a refused restart gives),
    where Spark records it and the migration path."""

    setting: FixedSetting
    old: str
    new: str
    effect: Effect
    spark_error: str = ""
    migration: str = ""

    @property
    def needs_new_checkpoint(self) -> bool:
        return self.effect in (Effect.KEPT, Effect.REFUSED)

    @property
    def recorded(self) -> str:
        return RECORDED[self.setting]

    def describe(self) -> str:
        line = f"{self.setting}: {self.old} -> {self.new}: {_EFFECT_TEXT[self.effect]}"
        if self.spark_error:
            line += f" ({self.spark_error})"
        return line + (f"; path: {self.migration}" if self.migration else "")

    def to_dict(self) -> dict[str, Any]:
        return {"setting": self.setting.value, "old": self.old, "new": self.new, "effect": self.effect.value,
                "spark_error": self.spark_error, "migration": self.migration,
                "needs_new_checkpoint": self.needs_new_checkpoint, "recorded": self.recorded}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SettingVerdict:
        """From :meth:`to_dict` through :data:`SETTING_CODEC` (derived keys checked, then left
        out); :class:`~airflow_ckpt_provider.checkpoint.errors.InvalidVerdict` otherwise."""
        return cls(**SETTING_CODEC.decode(raw))


#: The codec of a :class:`SettingVerdict` (:mod:`airflow_ckpt_provider.records.codec`): a part of the
#: compatibility verdict, whose format number covers it; what it derives (needs_new_checkpoint,
#: recorded) is type-checked, then left out.
SETTING_CODEC = Codec("setting verdict", InvalidVerdict, {
    "setting": Field((str,), decode=one_of(*FixedSetting, decode=FixedSetting)),
    "old": Field((str,)),
    "new": Field((str,)),
    "effect": Field((str,), decode=one_of(*Effect, decode=Effect)),
    "spark_error": Field((str,), required=False, default=""),
    "migration": Field((str,), required=False, default=""),
    "needs_new_checkpoint": Field((bool,), required=False, derived=True),
    "recorded": Field((str,), required=False, derived=True),
}, version=None)


def _value(conf: Mapping[str, str], key: FixedSetting) -> str:
    return str(conf.get(key.value, DEFAULTS[key])).strip().lower()


def _version_before(spark_version: str | None, major: int, minor: int) -> bool:
    """True only when ``spark_version`` is known and older than ``major.minor``."""
    found = re.match(r"(\d+)\.(\d+)", spark_version or "")
    if found is None:
        return False
    return (int(found.group(1)), int(found.group(2))) < (major, minor)


def fixed_settings(facts: CheckpointFacts, new_conf: Mapping[str, str], *, real_time: bool = False,
                   spark_version: str | None = None) -> tuple[SettingVerdict, ...]:
    """One :class:`SettingVerdict` per fixed setting whose value the new version changes, in the
    order of :class:`FixedSetting` (see the module doc for Spark's behaviour behind each).

    ``new_conf``: the new version's Spark conf (a key it does not set takes Spark 4.2's default);
    ``real_time``: the new version runs with ``trigger(realTime=...)``; ``spark_version``: the
    new version's Spark (None: unknown)."""
    found: list[SettingVerdict] = []
    if facts.state_format is not None:
        old, new = str(facts.state_format), _value(new_conf, FixedSetting.CHECKPOINT_FORMAT)
        if old != new:
            found.append(_checkpoint_format(facts, new_conf, old, new))
    for setting in (FixedSetting.ENCODING_FORMAT, FixedSetting.ROW_CHECKSUM):
        old, new = _value(facts.conf, setting), _value(new_conf, setting)
        if facts.offsets_version is not None and old != new:
            found.append(_recorded_conf(setting, old, new, facts))
    found += _sources(facts, new_conf, spark_version)
    if real_time:
        found.append(_real_time(facts, spark_version))
    return tuple(found)


def _checkpoint_format(facts: CheckpointFacts, new_conf: Mapping[str, str], old: str, new: str) -> SettingVerdict:
    setting = FixedSetting.CHECKPOINT_FORMAT
    if not facts.stateful:
        return SettingVerdict(setting, old, new, Effect.NO_STATE,
                              migration=f"none: the restart writes commit log v{new} from its next batch")
    old_provider = str(facts.conf.get(PROVIDER_KEY, HDFS_PROVIDER))
    new_provider = str(new_conf.get(PROVIDER_KEY, HDFS_PROVIDER))
    if new == "2" and new_provider == HDFS_PROVIDER:
        return SettingVerdict(setting, old, new, Effect.UNSUPPORTED, "STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED",
                              migration=f"format 2 needs {PROVIDER_KEY}={ROCKSDB_PROVIDER}, on a new checkpoint "
                                        f"({_MIGRATE})")
    if new == "2" and old_provider == HDFS_PROVIDER:
        error = "STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED"  # the checkpoint's provider wins on a restart
    else:
        error = "CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT" if new == "2" else "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED"
    return SettingVerdict(setting, old, new, Effect.REFUSED, error,
                          migration=f"a new checkpoint with the RocksDB state store and format {new} ({_MIGRATE}; "
                                    "format 2 state is exported by Spark 4.1+)")


def _recorded_conf(setting: FixedSetting, old: str, new: str, facts: CheckpointFacts) -> SettingVerdict:
    if not facts.stateful:
        return SettingVerdict(setting, old, new, Effect.NO_STATE,
                              migration="none: Spark keeps the checkpoint's value, which no state depends on")
    if setting is FixedSetting.ENCODING_FORMAT and new == "avro" and not facts.transform_with_state:
        return SettingVerdict(setting, old, new, Effect.UNSUPPORTED,
                              "AnalysisException: State store encoding format as avro is not supported for operator",
                              migration="Spark 4.2 encodes only transformWithState state in avro: keep unsaferow, or "
                                        "move the operator to transformWithState on a new checkpoint "
                                        f"({_MIGRATE})")
    return SettingVerdict(setting, old, new, Effect.KEPT,
                          migration=f"a new checkpoint with {setting}={new} ({_MIGRATE})")


def _sources(facts: CheckpointFacts, new_conf: Mapping[str, str], spark_version: str | None) -> list[SettingVerdict]:
    if facts.offsets_version is None:
        return []
    old_version = str(facts.offsets_version)
    evolution = _value(new_conf, FixedSetting.SOURCE_EVOLUTION) == "true"
    migration = ("the provider's migration: the new version with named sources on a new checkpoint (offsets v2) "
                 "at the handover" + (", the state exported and seeded" if facts.stateful else ""))
    if evolution and facts.offsets_version < 2:
        old = _value(facts.conf, FixedSetting.SOURCE_EVOLUTION)
        if _version_before(spark_version, 4, 3):
            return [SettingVerdict(FixedSetting.SOURCE_EVOLUTION, old, "true", Effect.KEPT, migration=(
                f"{migration}; on this offsets v{old_version} checkpoint Spark {spark_version} restores "
                f"{FixedSetting.SOURCE_EVOLUTION}={old}: Kafka sources stay positional, names are not recorded (a "
                "file source fails: IllegalStateException: batch N doesn't exist)"))]
        return [SettingVerdict(FixedSetting.SOURCE_EVOLUTION, old, "true", Effect.REFUSED,
                               "cannotEnableSourceEvolutionOnExistingCheckpointError",
                               f"{migration}; the old checkpoint's offset log is v{old_version}")]
    wanted = _value(new_conf, FixedSetting.OFFSET_LOG_FORMAT)
    if not evolution and wanted != old_version and FixedSetting.OFFSET_LOG_FORMAT.value in new_conf:
        return [SettingVerdict(FixedSetting.OFFSET_LOG_FORMAT, old_version, wanted, Effect.KEPT,
                               migration=migration if wanted == "2" else f"a new checkpoint ({_MIGRATE})")]
    return []


def _real_time(facts: CheckpointFacts, spark_version: str | None) -> SettingVerdict:
    setting, old = FixedSetting.REAL_TIME_MODE, "micro-batch"
    if not facts.stateful:
        return SettingVerdict(setting, old, "real-time", Effect.TRIAL,
                              migration="Spark 4.1+ runs stateless queries in real-time mode; the trial decides")
    if _version_before(spark_version, 4, 3):
        return SettingVerdict(setting, old, "real-time", Effect.UNSUPPORTED,
                              "STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST",
                              migration=f"Spark {spark_version} runs no stateful query in real-time mode: keep "
                                        "micro-batch, or move to a Spark that does (Spark's source after 4.2) on a "
                                        "new checkpoint with format 2")
    if facts.state_format == 2:
        return SettingVerdict(setting, old, "real-time", Effect.TRIAL,
                              migration="commit log v2 already: the trial decides")
    return SettingVerdict(setting, old, "real-time", Effect.REFUSED,
                          "STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED",
                          migration=f"a new checkpoint with {PROVIDER_KEY}={ROCKSDB_PROVIDER} and "
                                    f"{FixedSetting.CHECKPOINT_FORMAT}=2 ({_MIGRATE})")


__all__ = ["DEFAULTS", "RECORDED", "CheckpointFacts", "Effect", "FixedSetting", "SettingVerdict", "fixed_settings"]
