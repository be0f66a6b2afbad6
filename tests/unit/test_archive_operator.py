"""CheckpointArchiveOperator / CheckpointRestoreOperator executed directly on synthetic checkpoints."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_ckpt_provider.checkpoint.errors import HandoverMismatch, TargetNotEmpty, UnsafeStreamName
from airflow_ckpt_provider.operators.archive import CheckpointArchiveOperator, CheckpointRestoreOperator
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.unit.conftest import write_checkpoint

RUN_ID = "manual__2026-11-21T20:05:12.123456+00:00"


def context(run_id: str = RUN_ID, user: str | None = "alice") -> dict:
    return {"run_id": run_id, "dag": SimpleNamespace(dag_id="upgrade_orders"),
            "dag_run": SimpleNamespace(triggering_user_name=user)}


def test_archive_operator_returns_summary_and_records_who_why_which_run(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(3), state_operators=(0,))
    handover = CheckpointReader(built.uri).handover()
    op = CheckpointArchiveOperator(task_id="archive", checkpoint_uri=built.uri, archive_root=str(tmp_path / "a"),
                                   stream_name="orders", handover=handover.to_json(), reason="new schema")
    result = op.execute(context())
    assert result["handover"] == handover.to_dict()
    assert result["file_count"] == len(built.files()) and result["total_bytes"] > 0
    assert result["upgrade_id"] == "manual__2026-11-21T20-05-12.123456-00-00"
    assert Path(result["location"]).parent == tmp_path / "a" / "orders"
    assert (result["created_by"], result["reason"]) == ("alice (Airflow)", "new schema")
    assert result["dag_run_id"] == f"upgrade_orders/{RUN_ID}"
    assert Path(built.root).exists()

    # a retried task (same run id) finds the same archive
    again = CheckpointArchiveOperator(task_id="archive", checkpoint_uri=built.uri, archive_root=str(tmp_path / "a"),
                                      stream_name="orders", remove_source=True).execute(context())
    assert again["location"] == result["location"]
    assert not Path(built.root).exists()


def test_archive_operator_accepts_the_handover_operator_xcom_and_prunes(tmp_path: Path) -> None:
    built = write_checkpoint(f"memory://op-{uuid.uuid4().hex}/ck", batches=range(3))
    xcom = {"handover": CheckpointReader(built.uri).handover().to_dict(), "starting_offsets": "{}"}
    root = f"memory://op-{uuid.uuid4().hex}/archive"
    locations = []
    for run in ("r1", "r2", "r3"):
        op = CheckpointArchiveOperator(task_id="a", checkpoint_uri=built.uri, archive_root=root, stream_name="s",
                                       handover=xcom, keep_last=2)  # type: ignore[arg-type] (native rendering)
        result = op.execute(context(run_id=run, user=None))
        locations.append(result["location"])
        assert "(Airflow)" in result["created_by"]
    assert len(set(locations)) == 3
    assert result["removed_archives"] == [locations[0]]


def test_archive_operator_refuses_a_stale_handover(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(3))
    stale = write_checkpoint(str(tmp_path / "old"), batches=range(2))
    op = CheckpointArchiveOperator(task_id="a", checkpoint_uri=built.uri, archive_root=str(tmp_path / "a"),
                                   stream_name="s", handover=CheckpointReader(stale.uri).handover().to_json())
    with pytest.raises(HandoverMismatch):
        op.execute(context())
    assert not (tmp_path / "a").exists()


def test_archive_operator_checks_fixed_arguments_early() -> None:
    with pytest.raises(UnsafeStreamName):
        CheckpointArchiveOperator(task_id="a", checkpoint_uri="x", archive_root="y", stream_name="../etc")
    with pytest.raises(ValueError):
        CheckpointArchiveOperator(task_id="a", checkpoint_uri="x", archive_root="y", stream_name="s", keep_last=-1)
    with pytest.raises(ValueError):
        CheckpointArchiveOperator(task_id="a", checkpoint_uri="x", archive_root="y", stream_name="s",
                                  keep_newer_than="1 day")  # type: ignore[arg-type]
    op = CheckpointArchiveOperator(task_id="a", checkpoint_uri="{{ params.cp }}", archive_root="{{ params.a }}",
                                   stream_name="{{ params.s }}", keep_newer_than=3600)
    assert op.keep_newer_than is not None and op.keep_newer_than.total_seconds() == 3600
    for field in op.template_fields:
        value = getattr(op, field)
        assert value is None or isinstance(value, str), field


def test_restore_operator(tmp_path: Path) -> None:
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(3))
    archived = CheckpointArchiveOperator(task_id="a", checkpoint_uri=built.uri, archive_root=str(tmp_path / "a"),
                                         stream_name="s").execute(context())
    target = tmp_path / "back"
    op = CheckpointRestoreOperator(task_id="r", archive_uri=archived["location"], target_uri=str(target))
    result = op.execute(context())
    assert result["restored_to"] == str(target) and result["file_count"] == len(built.files())
    assert {p.relative_to(target).as_posix(): p.read_bytes() for p in target.rglob("*") if p.is_file()} == {
        rel: built.read(rel) for rel in built.files()}
    with pytest.raises(TargetNotEmpty):
        op.execute(context())
    for field in op.template_fields:
        assert getattr(op, field) is None or isinstance(getattr(op, field), str)


def test_archive_conn_id_for_a_scheme_airflow_cannot_attach(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hdfs:// has no Airflow object storage: the hook builds the fsspec filesystem from the
    connection instead (memory:// stands in for hdfs:// here; both are unregistered in Airflow)."""
    monkeypatch.setenv("AIRFLOW_CONN_CKPT_ARCHIVE_STORE", '{"conn_type": "generic", "extra": {}}')
    built = write_checkpoint(str(tmp_path / "ck"), batches=range(2))
    root = f"memory://conn-{uuid.uuid4().hex}/archive"
    result = CheckpointArchiveOperator(task_id="a", checkpoint_uri=built.uri, archive_root=root, stream_name="s",
                                       archive_conn_id="ckpt_archive_store").execute(context())
    assert result["location"].startswith(root + "/s/")
    import fsspec

    assert fsspec.filesystem("memory").exists(result["location"] + "/manifest.json")
