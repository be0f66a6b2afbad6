"""The settings Spark fixes for a checkpoint's life, as a decision table: each setting x old value
(as the checkpoint records it) x new value (the new version's conf) x stateful / stateless, and the
verdict in Spark's words. What Spark really does is checked on real Spark 4.2 checkpoints in
tests/integration/test_spark42_fixed_settings.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.compat import CompatibilityVerdict, Rule, TrialKind, TrialResult, classify
from airflow_ckpt_provider.checkpoint.fixed_settings import (
    HDFS_PROVIDER,
    PROVIDER_KEY,
    ROCKSDB_PROVIDER,
    CheckpointFacts,
    Effect,
    FixedSetting,
    SettingVerdict,
    fixed_settings,
)

CFV, ENC, CRC = (FixedSetting.CHECKPOINT_FORMAT.value, FixedSetting.ENCODING_FORMAT.value,
                 FixedSetting.ROW_CHECKSUM.value)
EVO, OLV = FixedSetting.SOURCE_EVOLUTION.value, FixedSetting.OFFSET_LOG_FORMAT.value
ROCKS = {PROVIDER_KEY: ROCKSDB_PROVIDER}


def facts(*, stateful: bool, state_format: int | None = 1, offsets: int | None = 1,
          conf: dict[str, str] | None = None, tws: bool = False) -> CheckpointFacts:
    return CheckpointFacts(offsets_version=offsets, state_format=state_format, conf=conf or {}, stateful=stateful,
                           transform_with_state=tws)


# (case, checkpoint, new conf, expected (setting, old, new, effect, Spark error or ""))
TABLE: list[tuple[str, CheckpointFacts, dict[str, str], tuple[FixedSetting, str, str, Effect, str] | None]] = [
    # state checkpoint format: recorded as the commit log version
    ("format 1 -> 2, stateful RocksDB", facts(stateful=True, conf=ROCKS), {**ROCKS, CFV: "2"},
     (FixedSetting.CHECKPOINT_FORMAT, "1", "2", Effect.REFUSED, "CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT")),
    ("format 2 -> 1, stateful RocksDB", facts(stateful=True, state_format=2, conf=ROCKS), {**ROCKS, CFV: "1"},
     (FixedSetting.CHECKPOINT_FORMAT, "2", "1", Effect.REFUSED, "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED")),
    ("format 2 -> default 1, stateful RocksDB", facts(stateful=True, state_format=2, conf=ROCKS), ROCKS,
     (FixedSetting.CHECKPOINT_FORMAT, "2", "1", Effect.REFUSED, "CANNOT_LOAD_STATE_STORE.UNCATEGORIZED")),
    ("format 1 -> 2, stateful HDFS checkpoint, RocksDB new", facts(stateful=True), {**ROCKS, CFV: "2"},
     (FixedSetting.CHECKPOINT_FORMAT, "1", "2", Effect.REFUSED, "STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED")),
    ("format 1 -> 2, stateful, HDFS store new", facts(stateful=True), {CFV: "2"},
     (FixedSetting.CHECKPOINT_FORMAT, "1", "2", Effect.UNSUPPORTED, "STATE_STORE_CHECKPOINT_IDS_NOT_SUPPORTED")),
    ("format 1 -> 2, stateless", facts(stateful=False), {CFV: "2"},
     (FixedSetting.CHECKPOINT_FORMAT, "1", "2", Effect.NO_STATE, "")),
    ("format 2 -> 1, stateless", facts(stateful=False, state_format=2), {CFV: "1"},
     (FixedSetting.CHECKPOINT_FORMAT, "2", "1", Effect.NO_STATE, "")),
    ("format unchanged 2, stateful", facts(stateful=True, state_format=2, conf=ROCKS), {**ROCKS, CFV: "2"}, None),
    ("format: nothing committed yet", facts(stateful=True, state_format=None, offsets=None), {CFV: "2"}, None),
    # state encoding: offsets conf map, restored silently on a restart; avro only for transformWithState
    ("encoding unsaferow -> avro, transformWithState", facts(stateful=True, conf={ENC: "unsaferow"}, tws=True),
     {ENC: "avro"}, (FixedSetting.ENCODING_FORMAT, "unsaferow", "avro", Effect.KEPT, "")),
    ("encoding absent (Spark 3.5/4.0) -> avro, transformWithState", facts(stateful=True, tws=True), {ENC: "avro"},
     (FixedSetting.ENCODING_FORMAT, "unsaferow", "avro", Effect.KEPT, "")),
    ("encoding avro -> default unsaferow, transformWithState", facts(stateful=True, conf={ENC: "avro"}, tws=True), {},
     (FixedSetting.ENCODING_FORMAT, "avro", "unsaferow", Effect.KEPT, "")),
    ("encoding unsaferow -> avro, dropDuplicates/aggregation", facts(stateful=True, conf={ENC: "unsaferow"}),
     {ENC: "avro"}, (FixedSetting.ENCODING_FORMAT, "unsaferow", "avro", Effect.UNSUPPORTED,
                     "AnalysisException: State store encoding format as avro is not supported")),
    ("encoding unsaferow -> avro, stateless", facts(stateful=False, conf={ENC: "unsaferow"}), {ENC: "avro"},
     (FixedSetting.ENCODING_FORMAT, "unsaferow", "avro", Effect.NO_STATE, "")),
    ("encoding unchanged avro", facts(stateful=True, conf={ENC: "avro"}), {ENC: "AVRO"}, None),
    # row checksums: offsets conf map, restored silently on a restart
    ("row checksum false -> true, stateful", facts(stateful=True, conf={CRC: "false"}), {CRC: "true"},
     (FixedSetting.ROW_CHECKSUM, "false", "true", Effect.KEPT, "")),
    ("row checksum absent -> true, stateful", facts(stateful=True), {CRC: "true"},
     (FixedSetting.ROW_CHECKSUM, "false", "true", Effect.KEPT, "")),
    ("row checksum true -> false, stateful", facts(stateful=True, conf={CRC: "true"}), {CRC: "false"},
     (FixedSetting.ROW_CHECKSUM, "true", "false", Effect.KEPT, "")),
    ("row checksum false -> true, stateless", facts(stateful=False, conf={CRC: "false"}), {CRC: "true"},
     (FixedSetting.ROW_CHECKSUM, "false", "true", Effect.NO_STATE, "")),
    # source evolution: the offset log version
    ("source evolution on, offsets v1, stateful", facts(stateful=True), {EVO: "true"},
     (FixedSetting.SOURCE_EVOLUTION, "false", "true", Effect.REFUSED,
      "cannotEnableSourceEvolutionOnExistingCheckpointError")),
    ("source evolution on, offsets v1, stateless", facts(stateful=False), {EVO: "true"},
     (FixedSetting.SOURCE_EVOLUTION, "false", "true", Effect.REFUSED,
      "cannotEnableSourceEvolutionOnExistingCheckpointError")),
    ("source evolution on, offsets v2 already", facts(stateful=True, offsets=2, conf={EVO: "true"}), {EVO: "true"},
     None),
    ("offset log v2 asked, offsets v1", facts(stateful=False), {OLV: "2"},
     (FixedSetting.OFFSET_LOG_FORMAT, "1", "2", Effect.KEPT, "")),
    ("offset log v1 asked, offsets v2", facts(stateful=False, offsets=2), {OLV: "1"},
     (FixedSetting.OFFSET_LOG_FORMAT, "2", "1", Effect.KEPT, "")),
    ("offset log version not set, offsets v2", facts(stateful=False, offsets=2), {}, None),
]


@pytest.mark.parametrize(("checkpoint", "new_conf", "expected"), [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
def test_the_decision_table(checkpoint: CheckpointFacts, new_conf: dict[str, str],
                            expected: tuple[FixedSetting, str, str, Effect, str] | None) -> None:
    found = fixed_settings(checkpoint, new_conf)
    if expected is None:
        assert found == ()
        return
    (verdict,) = found
    setting, old, new, effect, error = expected
    assert (verdict.setting, verdict.old, verdict.new, verdict.effect) == (setting, old, new, effect)
    assert verdict.spark_error.startswith(error) if error else verdict.spark_error == ""
    assert verdict.needs_new_checkpoint is (effect in (Effect.KEPT, Effect.REFUSED))
    if verdict.needs_new_checkpoint or effect is Effect.UNSUPPORTED:
        assert "new checkpoint" in verdict.migration  # each has its migration path
    line = verdict.describe()
    assert line.startswith(f"{setting}: {old} -> {new}: ")
    if verdict.needs_new_checkpoint:
        assert "needs a new checkpoint" in line
    assert SettingVerdict.from_dict(json.loads(json.dumps(verdict.to_dict()))) == verdict


@pytest.mark.parametrize(("version", "effect"), [("4.2.0", Effect.KEPT), ("4.1.1", Effect.KEPT),
                                                 ("4.3.0", Effect.REFUSED), (None, Effect.REFUSED)])
@pytest.mark.parametrize("stateful", [True, False])
def test_source_evolution_by_spark_version(version: str | None, effect: Effect, stateful: bool) -> None:
    """Spark 4.2 restores ``enableSourceEvolution=false`` from a v1 checkpoint (sources stay
    positional); Spark's source after 4.2 refuses the restart. Both need a new checkpoint."""
    (verdict,) = fixed_settings(facts(stateful=stateful), {EVO: "true"}, spark_version=version)
    assert (verdict.setting, verdict.old, verdict.new, verdict.effect) == (FixedSetting.SOURCE_EVOLUTION, "false",
                                                                           "true", effect)
    assert verdict.needs_new_checkpoint and "named sources on a new checkpoint" in verdict.migration
    assert ("state exported and seeded" in verdict.migration) is stateful


# real-time mode: the new version's trigger, recorded nowhere
REAL_TIME = [
    ("stateful, format 1, Spark 4.2", facts(stateful=True), "4.2.0", Effect.UNSUPPORTED,
     "STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST"),
    ("stateful, format 2, Spark 4.2", facts(stateful=True, state_format=2), "4.2.1", Effect.UNSUPPORTED,
     "STREAMING_REAL_TIME_MODE.OPERATOR_OR_SINK_NOT_IN_ALLOWLIST"),
    ("stateful, format 1, Spark 4.3", facts(stateful=True), "4.3.0", Effect.REFUSED,
     "STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED"),
    ("stateful, format 1, Spark unknown", facts(stateful=True), None, Effect.REFUSED,
     "STREAMING_REAL_TIME_MODE.CHECKPOINT_FORMAT_V1_NOT_SUPPORTED"),
    ("stateful, format 2, Spark 4.3", facts(stateful=True, state_format=2), "4.3.0", Effect.TRIAL, ""),
    ("stateless, Spark 4.2", facts(stateful=False), "4.2.0", Effect.TRIAL, ""),
]


@pytest.mark.parametrize(("checkpoint", "version", "effect", "error"), [c[1:] for c in REAL_TIME],
                         ids=[c[0] for c in REAL_TIME])
def test_real_time_mode(checkpoint: CheckpointFacts, version: str | None, effect: Effect, error: str) -> None:
    same = {**ROCKS, CFV: str(checkpoint.state_format)}  # only the trigger changes
    assert fixed_settings(checkpoint, same, spark_version=version) == ()  # micro-batch stays micro-batch
    (verdict,) = fixed_settings(checkpoint, same, real_time=True, spark_version=version)
    assert (verdict.setting, verdict.old, verdict.new) == (FixedSetting.REAL_TIME_MODE, "micro-batch", "real-time")
    assert (verdict.effect, verdict.spark_error) == (effect, error)
    if effect is Effect.REFUSED:
        assert f"{FixedSetting.CHECKPOINT_FORMAT}=2" in verdict.migration and ROCKSDB_PROVIDER in verdict.migration


def test_several_settings_in_the_order_of_the_table() -> None:
    checkpoint = facts(stateful=True, conf={**ROCKS, ENC: "unsaferow", CRC: "false"})
    found = fixed_settings(checkpoint, {**ROCKS, CFV: "2", ENC: "avro", CRC: "true", EVO: "true"}, real_time=True,
                           spark_version="4.3.0")
    assert [v.setting for v in found] == [FixedSetting.CHECKPOINT_FORMAT, FixedSetting.ENCODING_FORMAT,
                                          FixedSetting.ROW_CHECKSUM, FixedSetting.SOURCE_EVOLUTION,
                                          FixedSetting.REAL_TIME_MODE]
    assert "only transformWithState state in avro" in found[1].migration


def test_facts_from_a_snapshot_and_its_commit() -> None:
    assert CheckpointFacts.of(offsets_version=2, commit_has_state_ids=True, conf={ENC: "avro"},
                              state_operators=(0,), transform_with_state=True) == CheckpointFacts(2, 2, {ENC: "avro"},
                                                                                                  True, True)
    assert not CheckpointFacts.of(offsets_version=2, commit_has_state_ids=True, conf={}, state_operators=(),
                                  transform_with_state=True).transform_with_state
    assert CheckpointFacts.of(offsets_version=1, commit_has_state_ids=False, conf={}, state_operators=()) == \
        CheckpointFacts(1, 1, {}, False)
    assert CheckpointFacts.of(offsets_version=None, commit_has_state_ids=None, conf={}, state_operators=()) \
        .state_format is None
    assert HDFS_PROVIDER.endswith("HDFSBackedStateStoreProvider")


def ok(kind: TrialKind) -> TrialResult:
    return TrialResult(kind, started=True, batches_committed=1)


def test_a_setting_that_needs_a_new_checkpoint_decides_the_verdict_without_the_in_place_trial() -> None:
    (setting,) = fixed_settings(facts(stateful=True, conf=ROCKS), {**ROCKS, CFV: "2"})
    verdict = classify(None, ok(TrialKind.MIGRATED), settings=[setting])
    assert (verdict.in_place_ok, verdict.migrated_ok, verdict.rule) == (False, True, Rule.FIXED_SETTING)
    assert (verdict.operator, verdict.old, verdict.new) == (CFV, "1", "2")
    assert verdict.error_class == "CANNOT_WRITE_STATE_STORE.CANNOT_COMMIT" and verdict.new_version_starts
    assert verdict.headline() == (f"needs a new checkpoint: a setting Spark fixes for a checkpoint's life changed "
                                  f"({CFV}: 1 -> 2); the new version starts on a new checkpoint at the handover")
    assert any(line.startswith(f"setting {CFV}: 1 -> 2: needs a new checkpoint") for line in verdict.describe())
    assert CompatibilityVerdict.from_json(verdict.to_json()) == verdict
    assert CompatibilityVerdict.from_json(verdict.to_json()).settings == (setting,)
    crashed = TrialResult(TrialKind.MIGRATED, started=False, error_class="SOME_ERROR", error_message="[SOME_ERROR] x")
    assert classify(None, crashed, settings=[setting]).new_version_starts is False


def test_a_setting_that_does_not_need_one_leaves_the_trials_to_decide() -> None:
    (setting,) = fixed_settings(facts(stateful=False), {CFV: "2"})
    verdict = classify(ok(TrialKind.IN_PLACE), ok(TrialKind.MIGRATED), settings=[setting])
    assert verdict.in_place_ok is True and verdict.rule is None and verdict.settings == (setting,)
    with pytest.raises(ValueError, match="no in-place trial"):
        classify(None, ok(TrialKind.MIGRATED), settings=[setting])


def test_check_upgrade_runs_only_the_migrated_trial_when_a_setting_decides(tmp_path: Path) -> None:
    """The hook reads the old checkpoint (offsets conf, commit log, state/) before anything is
    launched: a stateful RocksDB checkpoint of format 1 and a new version asking for format 2 need
    a new checkpoint, so only the migrated trial runs."""
    from airflow_ckpt_provider.hooks import compat as hook
    from tests.unit.test_compat import TrialLauncher, spark_checkpoint

    old = spark_checkpoint(tmp_path, stateful=True)
    (old / "offsets" / "0").write_text('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":'
                                       + json.dumps(ROCKS) + '}\n{"t":{"0":5,"1":3}}')
    assert [s.setting for s in hook.checkpoint_settings(str(old), {**ROCKS, CFV: "2"})] == \
        [FixedSetting.CHECKPOINT_FORMAT]
    launcher = TrialLauncher()
    verdict = hook.check_upgrade(old_checkpoint=str(old), new_application="v2.jar", launcher=launcher,  # type: ignore[arg-type]
                                 conf={**ROCKS, CFV: "2"}, trial_root=str(tmp_path / "trials"), carry_state=False,
                                 poll_interval=0.01)
    assert [launch["name"] for launch in launcher.launches] == ["ckpt-trial-migrated"]
    assert verdict.rule is Rule.FIXED_SETTING and verdict.in_place_ok is False and verdict.migrated_ok is True
    assert list((tmp_path / "trials").iterdir()) == []
    unchanged: dict[str, Any] = {**ROCKS, CFV: "1"}
    launcher = TrialLauncher()
    verdict = hook.check_upgrade(old_checkpoint=str(old), new_application="v2.jar", launcher=launcher,  # type: ignore[arg-type]
                                 conf=unchanged, trial_root=str(tmp_path / "trials"), carry_state=False,
                                 poll_interval=0.01)
    assert [launch["name"] for launch in launcher.launches] == ["ckpt-trial-in_place", "ckpt-trial-migrated"]
    assert verdict.in_place_ok is True and verdict.settings == ()


def test_ckpt_check_upgrade_real_time_reaches_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from airflow_ckpt_provider.cli import main
    from tests.unit.test_compat import fake_check

    (setting,) = fixed_settings(facts(stateful=True), {}, real_time=True, spark_version="4.2.0")
    verdict = classify(ok(TrialKind.IN_PLACE), ok(TrialKind.MIGRATED), settings=[setting])
    calls = fake_check(monkeypatch, verdict, "airflow_ckpt_provider.hooks.compat")
    out = io.StringIO()
    assert main(["check-upgrade", "--old", "/data/ckpt", "--new-application", "v2.py", "--real-time"], stdout=out,
                stderr=io.StringIO()) == 0
    assert calls[0]["real_time"] is True
    assert "setting trigger(realTime=...): micro-batch -> real-time: the new Spark refuses" in out.getvalue()
    main(["check-upgrade", "--old", "/data/ckpt", "--new-application", "v2.py"], stdout=io.StringIO(),
         stderr=io.StringIO())
    assert calls[1]["real_time"] is False
