"""Checkpoints on a real S3-compatible server (moto, fixture ``s3``), written by Spark through ``s3a://``.

Hadoop 3.4's S3A keeps a zero-byte directory marker per directory (``cp/``, ``cp/commits/``, ...)
by default; the test asserts they really are in the bucket, then reads the checkpoint, takes the
handover, archives it S3 -> S3 and S3 -> local disk, verifies, restores to a new S3 location and
lets Spark continue from the restored checkpoint with its state. The journal's lock is raced by
8 contenders on the same server: exactly one wins.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pyarrow.parquet as pq
import pytest

from airflow_ckpt_provider.checkpoint.errors import UpgradeInProgress
from airflow_ckpt_provider.checkpoint.manifest import DATA_DIR
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.storage.archive import CheckpointArchive
from airflow_ckpt_provider.storage.files import create_exclusive
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.storage.reader import CheckpointReader
from airflow_ckpt_provider.storage.restore import restore_archive, verify_archive
from airflow_ckpt_provider.upgrade.record import UpgradeIntent, derive_upgrade_id
from tests.harness.records import produce_records

pytestmark = pytest.mark.integration

JOB = Path(__file__).parent / "jobs" / "s3_stateful.py"
CONTENDERS = 8


def run_job(kafka: Any, s3: Any, topic: str, checkpoint: str, sink: Path) -> None:  # noqa: ANN401
    """Run the stateful query once (availableNow) in its own Spark driver; fail with its output tail."""
    done = subprocess.run([sys.executable, str(JOB), kafka.bootstrap_servers, topic, checkpoint, str(sink),
                           json.dumps(s3.spark_conf())], capture_output=True, text=True, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def final_counts(sink: Path) -> tuple[dict[int, int], list[int]]:
    """(count per partition after the last batch, batch ids) of the job's sink."""
    counts: dict[int, tuple[int, int]] = {}
    batches = sorted(int(p.name.split("=")[1]) for p in sink.glob("batch=*"))
    for batch in batches:
        for row in pq.read_table(sink / f"batch={batch}").to_pylist():
            counts[row["partition"]] = (batch, row["count"])
    return {partition: count for partition, (_, count) in counts.items()}, batches


def objects(fs: Any, root: str) -> dict[str, bytes]:  # noqa: ANN401
    """Every object below ``root`` except directory markers (relative key -> bytes), by raw find."""
    fs.invalidate_cache()
    return {key[len(root) + 1:]: fs.cat_file(key) for key in fs.find(root)
            if not key.endswith("/") and key.startswith(root + "/")}


def local_tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_spark_checkpoint_on_s3_is_read_archived_restored_and_resumed(kafka, s3, new_topic, tmp_path: Path,  # noqa: ANN001
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = s3.create_bucket(f"ckpt-{uuid.uuid4().hex[:8]}")
    topic = new_topic(2)
    produce_records(kafka.bootstrap_servers, topic, 200)
    source = f"{bucket}/streams/counts/cp"
    run_job(kafka, s3, topic, f"s3a://{source}", tmp_path / "sink1")
    counts, _ = final_counts(tmp_path / "sink1")
    assert sum(counts.values()) == 200

    fs = s3.filesystem()
    raw = fs.find(source)
    markers = {key for key in raw if key.endswith("/")}
    assert {f"{source}/", f"{source}/commits/", f"{source}/offsets/"} <= markers, sorted(raw)
    original = objects(fs, source)
    assert any(key.startswith("state/") for key in original), "the aggregation must have written state"

    # inspect and hand over, through fsspec's s3 with storage options
    reader = CheckpointReader(f"s3a://{source}", storage_options=s3.storage_options())
    snapshot = reader.snapshot()
    handover = reader.handover()
    assert snapshot.last_committed_batch is not None and handover.batch_id == snapshot.last_committed_batch
    assert handover.kafka_offsets().total() == 200

    # the same checkpoint through an Airflow aws connection alone (storage_conn_id): no AWS_* variable
    # names the server, so only the connection's extra can bring the reader to it
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_S3_TEST", s3.connection_uri())
    conn_fs, _ = CheckpointStorageHook(storage_conn_id="ckpt_s3_test").filesystem(f"s3a://{source}")
    through_connection = CheckpointReader(f"s3a://{source}", fs=conn_fs).handover()
    assert (through_connection.batch_id, through_connection.kafka_offsets()) == (handover.batch_id,
                                                                                 handover.kafka_offsets())

    # archive S3 -> S3 and S3 -> local disk; the checkpoint stays as it was
    manifest = CheckpointArchive(fs, f"{bucket}/archive", archive_uri=f"s3://{bucket}/archive").archive(
        fs, source, stream_name="counts", upgrade_id="s3-1", source_uri=f"s3a://{source}", reason="S3 test")
    assert {f.path for f in manifest.files} == set(original), "markers are not files; every object is archived"
    assert manifest.handover is not None and manifest.handover.kafka_offsets().total() == 200
    archive_path = f"{bucket}/archive/counts/{manifest.name}"
    assert verify_archive(fs, archive_path) == manifest

    local = fsspec.filesystem("file")
    local_manifest = CheckpointArchive(local, str(tmp_path / "archive")).archive(
        fs, source, stream_name="counts", upgrade_id="s3-2", source_uri=f"s3a://{source}", reason="S3 to disk")
    local_archive = tmp_path / "archive" / "counts" / local_manifest.name
    assert verify_archive(local, str(local_archive)) == local_manifest
    assert local_tree(local_archive / DATA_DIR) == original
    assert objects(fs, source) == original, "archiving must not change the checkpoint"

    # restore to a new S3 location (byte for byte) and let Spark continue from it
    restored = f"{bucket}/streams/counts/cp-restored"
    restore_archive(fs, archive_path, fs, restored)
    assert objects(fs, restored) == original
    produce_records(kafka.bootstrap_servers, topic, 100, start=200)
    run_job(kafka, s3, topic, f"s3a://{restored}", tmp_path / "sink2")
    counts, batches = final_counts(tmp_path / "sink2")
    assert sum(counts.values()) == 300, counts
    assert batches and min(batches) > handover.batch_id, "the restored query resumes after the handover batch"
    assert CheckpointReader(f"s3a://{restored}", storage_options=s3.storage_options()).handover() \
        .kafka_offsets().total() == 300


def race(contenders: int, attempt: Any) -> list[Any]:  # noqa: ANN401
    """Run ``attempt(i)`` in ``contenders`` threads released together; results or exceptions."""
    gate = threading.Barrier(contenders)
    results: list[Any] = [None] * contenders

    def run(i: int) -> None:
        gate.wait()
        try:
            results[i] = attempt(i)
        except Exception as exc:  # noqa: BLE001 - collected for the assertions
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_conditional_create_has_exactly_one_winner_on_s3(s3) -> None:  # noqa: ANN001
    bucket = s3.create_bucket(f"lock-{uuid.uuid4().hex[:8]}")
    path = f"{bucket}/journal/_lock.json"
    results = race(CONTENDERS, lambda i: create_exclusive(s3.filesystem(), path, f"{i}".encode()))
    assert sorted(map(repr, results)) == sorted(["True"] + ["False"] * (CONTENDERS - 1)), results
    winner = results.index(True)
    assert s3.filesystem().cat_file(path) == f"{winner}".encode()


def test_the_journal_lock_admits_one_upgrade_of_eight_on_s3(s3) -> None:  # noqa: ANN001
    bucket = s3.create_bucket(f"journal-{uuid.uuid4().hex[:8]}")
    root = f"s3://{bucket}/archive"

    def attempt(i: int) -> str:
        intent = UpgradeIntent(stream_name="orders", old_checkpoint=f"s3a://{bucket}/cp/v1",
                               new_checkpoint=f"s3a://{bucket}/cp/v2-{i}", old_application="v1.py",
                               new_application="v2.py", archive_root=root)
        upgrade_id = derive_upgrade_id(intent)
        fs = s3.filesystem()
        journal = UpgradeJournal(fs, UpgradeJournal.location(f"{bucket}/archive", "orders", upgrade_id))
        journal.open(intent, upgrade_id, run_id=f"run-{i}")
        return upgrade_id

    results = race(CONTENDERS, attempt)
    winners = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, UpgradeInProgress)]
    assert len(winners) == 1 and len(refused) == CONTENDERS - 1, results
    fs = s3.filesystem()
    lock_path = UpgradeJournal(fs, UpgradeJournal.location(f"{bucket}/archive", "orders", winners[0])).lock_path
    lock = json.loads(fs.cat_file(lock_path))
    assert lock["upgrade_id"] == winners[0]
    assert all(winners[0] in str(r) or "holding" in str(r) for r in refused)
