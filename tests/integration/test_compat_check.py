"""The compatibility check on real Spark and Kafka, table-driven over the changes of Spark's guide.

For each change: an old version (launched with spark-submit) drains a topic into its sink and
is stopped; more records arrive; ``check_upgrade`` tries the new version on copies and gives its
verdict (the migrated trial of a stateful old version with its state, as the upgrade carries it); then what REALLY happens is observed: the new version, launched normally, restarted on
another copy of the real checkpoint — does it commit a new batch, or fail, with which Spark
error? The verdict must match that reality (and for a change Spark accepts silently though its
guide forbids it, the verdict must name the rule while the restart runs). After every check the
live checkpoint's files (names, sizes, sha256) are unchanged and the trial files are gone.
One broker, each old version's checkpoint written once (the three side by side), ``local[1]`` and 1
shuffle partition.

One real restart per verdict of the guide's table, not per change: the two changes Spark allows
(a filter added, a projection changed with the same schema) are one new version; the
deduplication columns case names the same rule, from the same Spark error class and message, as
the aggregation key case, and is unit-tested with Spark's own text of its restart
(``tests/unit/test_compat.py``).
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.compat import Rule, spark_error
from airflow_ckpt_provider.checkpoint.errors import TrialRefused
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.hooks.compat import check_upgrade
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.local.spark import local_spark_conf
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.transfer import copy_tree
from tests.harness.records import produce_records

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "compat_job.py"
#: JVM starts on a loaded 2-core machine: generous deadlines, never a timing assertion.
DEADLINE_S = 600.0
RECORDS = 60


@dataclass(frozen=True)
class Case:
    name: str
    old: str
    new: str
    #: the rule the verdict must name (None: in place OK)
    rule: Rule | None
    #: Spark itself restarts the change without an error although its guide forbids it
    silent: bool = False
    #: the new version does not start at all
    crashes: bool = False
    #: the new version continues the old state: the migrated trial must be given it
    seeded: bool = False


CASES = [
    Case("filter added, projection changed with the same schema", "stateless", "filter_projection", None),
    Case("aggregation key changed", "agg", "agg_key", Rule.STATE_KEY_SCHEMA),
    Case("aggregate added, old state carried", "agg", "agg_seeded", Rule.STATE_VALUE_SCHEMA, seeded=True),
    Case("a source added", "stateless", "two_sources", Rule.SOURCE_CHANGED),
    Case("stream-stream join type changed", "join", "join_left_outer", Rule.JOIN_TYPE, silent=True),
    Case("new version crashes on start", "stateless", "crash", Rule.UNKNOWN, crashes=True),
]


def spark_conf() -> dict[str, str]:
    conf = local_spark_conf("compat-test")
    conf.pop("spark.app.name"), conf.pop("spark.master")
    conf["spark.pyspark.python"] = conf["spark.pyspark.driver.python"] = sys.executable
    conf.update({"spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1"})
    return conf


def file_digests(root: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def wait_for(predicate: Any, what: str, hook: SparkLauncherHook, handle: LaunchHandle) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {DEADLINE_S:.0f} s\n{hook.log_tail(handle, 60)}")
        time.sleep(0.5)


def committed(checkpoint: Path) -> int | None:
    if not (checkpoint / "commits").is_dir():
        return None
    ids = [int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()]
    return max(ids, default=None)


def consumed(checkpoint: Path) -> int:
    """Records the last committed batch covers (source 0)."""
    if committed(checkpoint) is None:
        return 0
    offsets = CheckpointReader(str(checkpoint)).handover().sources[0].kafka
    return sum(o for parts in offsets.offsets.values() for o in parts.values()) if offsets else 0


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SparkLauncherHook, list[LaunchHandle]]]:
    hook = SparkLauncherHook(master="local[1]", deploy_mode="client",
                             log_dir=str(tmp_path_factory.mktemp("compat-logs")))
    handles: list[LaunchHandle] = []
    yield hook, handles
    for handle in handles:
        try:
            hook.kill(handle)
        except Exception as exc:  # noqa: BLE001 - cleanup tries every handle
            print(f"cleanup: could not kill {handle.app_name}: {exc}")


@pytest.fixture(scope="module")
def old_versions(kafka, hook, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:  # noqa: ANN001
    """Every old variant's stopped checkpoint and its topic, written side by side by one driver each
    (a driver's start is mostly waiting; on 2 cores three at once take little more than one)."""
    return old_checkpoints(sorted({case.old for case in CASES}), kafka, hook, tmp_path_factory.getbasetemp())


def old_checkpoints(variants: list[str], kafka: Any, hook: Any, root: Path) -> dict[str, tuple[Path, str]]:
    """Run each of ``variants`` (at once) until it consumed its topic's records and recorded its
    plan's stateful operators, stop it, then add records it has not read: (checkpoint, topic) each."""
    launcher, handles = hook
    running = {}
    for variant in variants:
        topic = f"compat-{variant}-{uuid.uuid4().hex[:6]}"
        kafka.create_topic(topic, 2)
        produce_records(kafka.bootstrap_servers, topic, RECORDS)
        checkpoint, sink = root / f"{variant}-checkpoint", root / f"{variant}-sink"
        handle = launcher.launch(str(JOB), checkpoint_uri=str(checkpoint), conf=spark_conf(),
                                 application_args=[variant, kafka.bootstrap_servers, topic, str(sink)],
                                 starting_offsets="earliest", name=f"compat-old-{variant}")
        handles.append(handle)
        running[variant] = (checkpoint, topic, handle)
    written = {}
    for variant, (checkpoint, topic, handle) in running.items():
        # a running version records its plan's stateful operators after its first batch
        wait_for(lambda cp=checkpoint: consumed(cp) >= RECORDS and (cp / "_ckpt" / "stateful-operators.json").exists(),
                 f"old version {variant} consumes {RECORDS} records", launcher, handle)
        launcher.kill(handle)
        # records the old version has not read yet: a trial or a restart has a batch to run
        produce_records(kafka.bootstrap_servers, topic, 20, start=RECORDS)
        written[variant] = (checkpoint, topic)
    return written


@dataclass
class Reality:
    """The new version restarted, as a normal run, on a copy of the real checkpoint."""

    handle: LaunchHandle
    copy: Path
    before: int | None


def start_reality(launcher: SparkLauncherHook, handles: list[LaunchHandle], checkpoint: Path, variant: str,
                  bootstrap: str, topic: str, work: Path) -> Reality:
    """Restart ``variant`` on a copy of ``checkpoint`` (it runs beside the trials: they use copies too)."""
    copy = work / "reality-checkpoint"
    fs = fsspec.filesystem("file")
    copy_tree(fs, str(checkpoint), fs, str(copy), skip=lambda rel: rel.startswith("_ckpt"))
    handle = launcher.launch(str(JOB), checkpoint_uri=str(copy), conf=spark_conf(),
                             application_args=[variant, bootstrap, topic, str(work / "reality-sink")],
                             name=f"compat-reality-{variant}")
    handles.append(handle)
    return Reality(handle, copy, committed(copy))


def restart_outcome(launcher: SparkLauncherHook, reality: Reality, variant: str) -> tuple[bool, str]:
    """What really happened: (it committed a new batch, its driver log's Spark error when it failed)."""
    def decided() -> bool:
        return launcher.driver_state(reality.handle).alive is False or \
            (committed(reality.copy) or -1) > (reality.before or -1)

    wait_for(decided, f"restart of {variant} commits or fails", launcher, reality.handle)
    ran = (committed(reality.copy) or -1) > (reality.before or -1)
    launcher.kill(reality.handle)
    return ran, "" if ran else launcher.log_tail(reality.handle, 400)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_verdict_matches_what_a_restart_does(case: Case, kafka, hook, old_versions,  # noqa: ANN001
                                             tmp_path_factory: pytest.TempPathFactory) -> None:
    launcher, handles = hook
    checkpoint, topic = old_versions[case.old]
    before = file_digests(checkpoint)
    trial_root = tmp_path_factory.mktemp("trials")
    reality = start_reality(launcher, handles, checkpoint, case.new, kafka.bootstrap_servers, topic,
                            tmp_path_factory.mktemp("reality"))

    verdict = check_upgrade(old_checkpoint=str(checkpoint), new_application=str(JOB),
                            application_args=[case.new, kafka.bootstrap_servers, topic, "/nonexistent/live-sink"],
                            launcher=launcher, conf=spark_conf(), trial_root=str(trial_root), batches=1,
                            timeout=DEADLINE_S, source=0 if case.old == "join" else None)  # a self-join: 2 sources

    assert file_digests(checkpoint) == before, "a trial changed the live checkpoint"
    assert list(trial_root.iterdir()) == [], "the trial files must be deleted"
    assert not Path("/nonexistent/live-sink").exists()
    ran, log = restart_outcome(launcher, reality, case.new)
    print(f"{case.name}: verdict {verdict.headline()}; restart on the real checkpoint "
          f"{'commits' if ran else 'fails: ' + '/'.join(spark_error(log))[:300]}")

    if case.crashes:
        assert not ran and not verdict.new_version_starts and verdict.migrated_ok is False
        assert "deliberate crash on start" in verdict.driver_error + verdict.log_tail
        return
    assert verdict.new_version_starts and verdict.migrated_ok is True, verdict.to_json()
    if case.silent:  # Spark restarts it; the verdict names the rule of its guide from the plans
        assert ran, "Spark was expected to accept this restart silently"
        assert verdict.in_place_ok is False and verdict.rule is case.rule, verdict.to_json()
        assert "Inner" in verdict.old and "LeftOuter" in verdict.new
        return
    assert verdict.in_place_ok is ran, f"verdict {verdict.headline()} but the real restart {'ran' if ran else log}"
    assert verdict.rule is case.rule, verdict.to_json()
    if not ran:  # the same Spark error as the real restart, with both sides named
        assert verdict.error_class and verdict.error_class == spark_error(log)[0]
        assert verdict.old and verdict.new and verdict.old != verdict.new
    if case.seeded:  # the migrated trial started from the old state: one count per key the old version saw
        assert verdict.state_batch == committed(checkpoint), verdict.to_json()
        assert verdict.state_rows == RECORDS, verdict.to_json()
    elif case.old != "stateless":  # stateful: its state went to the migrated trial too
        assert verdict.state_batch is not None, verdict.to_json()
    else:
        assert verdict.state_batch is None, verdict.to_json()


def test_refusals_start_nothing(kafka, hook, old_versions, tmp_path: Path,  # noqa: ANN001
                                tmp_path_factory: pytest.TempPathFactory) -> None:
    """A trial location inside the live checkpoint, and a job without the trial contract, are
    refused before anything starts; the checkpoint is unchanged."""
    launcher, _ = hook
    checkpoint, topic = old_versions["stateless"]
    before = file_digests(checkpoint)
    args = ["stateless", kafka.bootstrap_servers, topic, str(tmp_path / "sink")]
    with pytest.raises(TrialRefused, match="overlaps the old checkpoint"):
        check_upgrade(old_checkpoint=str(checkpoint), new_application=str(JOB), application_args=args,
                      launcher=launcher, conf=spark_conf(), trial_root=str(checkpoint / "trial"))
    plain = tmp_path / "plain_job.py"
    shutil.copy(Path(__file__).parent / "jobs" / "kafka_to_parquet.py", plain)
    with pytest.raises(TrialRefused, match="never uses sink_location, GracefulStop"):
        check_upgrade(old_checkpoint=str(checkpoint), new_application=str(plain), application_args=args,
                      launcher=launcher, conf=spark_conf(), trial_root=str(tmp_path / "trials"))
    assert file_digests(checkpoint) == before
    assert not (checkpoint / "trial").exists()
