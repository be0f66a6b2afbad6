"""The sink declaration and the sink ledger's decisions (pure), and the Delta log reader's edge cases.

The reader runs on real Delta tables written by Spark in tests/integration/test_delta_sink.py; here
it reads small logs laid out as Delta lays them, for the cases Spark does not produce on demand
(a missing commit, a broken line, a multi-part checkpoint with a part missing).
"""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    DeltaWritesSkipped,
    InvalidSinkSpec,
    SinkLogUnreadable,
    SinkNotDelivered,
)
from airflow_ckpt_provider.sinks import SinkKind, SinkSpec, inspect_sink, verify_sink
from airflow_ckpt_provider.sinks.delta import DeltaLog, DeltaTxn
from airflow_ckpt_provider.sinks.ledger import assess_sink, judge_delivery

LOCAL = fsspec.filesystem("file")
OLD, NEW = "11111111-old", "22222222-new"


@pytest.mark.parametrize("value", [None, "", "None", "null", "{}", {}])
def test_nothing_declared(value) -> None:
    spec = SinkSpec.from_value(value)
    assert not spec.declared and spec.kind is SinkKind.NONE


def test_declaration_round_trips_from_mapping_and_json() -> None:
    spec = SinkSpec.from_value({"kind": "delta_foreach_batch", "location": " /lake/orders ", "txn_app_id": "w"})
    assert (spec.kind, spec.location, spec.txn_app_id) == (SinkKind.DELTA_FOREACH_BATCH, "/lake/orders", "w")
    assert SinkSpec.from_value(spec.to_json()) == spec == SinkSpec.from_value(spec)


@pytest.mark.parametrize(("value", "found"), [
    ({"kind": "delta", "location": "/t", "path": "/t"}, "unknown sink key(s) path"),
    ({"kind": "iceberg", "location": "/t"}, "sink kind 'iceberg'"),
    ({"kind": "delta"}, "sink kind delta without a location"),
    ({"kind": "file"}, "sink kind file without a location"),
    ({"kind": "delta", "location": "/t", "txn_app_id": "w"}, "txn_app_id given for sink kind delta"),
    ({"kind": "kafka", "location": 3}, "location=3"),
    ("[1]", "sink of type list"),
    ("{not json", "not JSON"),
])
def test_bad_declarations_are_refused(value, found: str) -> None:
    with pytest.raises(InvalidSinkSpec) as raised:
        SinkSpec.from_value(value)
    assert found in raised.value.found


def test_a_sink_location_with_credentials_is_refused_without_showing_them() -> None:
    from airflow_ckpt_provider.checkpoint.errors import CredentialsInLocation

    with pytest.raises(CredentialsInLocation) as raised:
        SinkSpec.from_value({"kind": "delta", "location": "s3a://AKIAEXAMPLE:s3cr3t@lake/orders"})
    assert "s3cr3t" not in str(raised.value) and "AKIAEXAMPLE" not in str(raised.value)


@pytest.mark.parametrize(("spec", "old_app", "new_app", "constant"), [
    (SinkSpec(SinkKind.DELTA, "/t"), OLD, NEW, ""),
    (SinkSpec(SinkKind.DELTA_FOREACH_BATCH, "/t"), OLD, NEW, ""),
    (SinkSpec(SinkKind.DELTA_FOREACH_BATCH, "/t", txn_app_id="w"), "w", "w", "w"),
    (SinkSpec(SinkKind.DELTA_FOREACH_BATCH, "/t", txn_app_id="w", new_txn_app_id="w2"), "w", "w2", "w2"),
    (SinkSpec(SinkKind.KAFKA), None, None, ""),
])
def test_app_ids_of_each_kind(spec: SinkSpec, old_app, new_app, constant: str) -> None:
    assert (spec.old_app_id(OLD), spec.new_app_id(NEW), spec.constant_new_app_id) == (old_app, new_app, constant)


def txns(*entries: tuple[str, int, int]) -> dict[str, DeltaTxn]:
    return {app: DeltaTxn(app, version, table) for app, version, table in entries}


def test_a_constant_txn_app_id_the_table_recorded_is_refused() -> None:
    spec = SinkSpec(SinkKind.DELTA_FOREACH_BATCH, "/lake/t", txn_app_id="writer")
    with pytest.raises(DeltaWritesSkipped) as raised:
        assess_sink(spec, txns=txns(("writer", 812, 1650)), table_version=1651, old_query_id=OLD, uri="/lake/t")
    error = raised.value
    assert "'writer' at txnVersion 812 (table version 1650)" in error.found
    assert "skip its batches 0-812" in error.found and error.path == "/lake/t"
    assert "delta_txn_options" in str(error) and "new_txn_app_id" in str(error)


@pytest.mark.parametrize(("spec", "recorded", "held"), [
    # a new constant the table never saw; the old one's batches are read under the old id
    (SinkSpec(SinkKind.DELTA_FOREACH_BATCH, "/t", txn_app_id="w", new_txn_app_id="w2"), txns(("w", 40, 80)), 40),
    (SinkSpec(SinkKind.DELTA_FOREACH_BATCH, "/t"), txns((OLD, 17, 30)), 17),
    (SinkSpec(SinkKind.DELTA, "/t"), txns((OLD, 17, 30), ("other", 99, 31)), 17),
    (SinkSpec(SinkKind.DELTA, "/t"), {}, None),
])
def test_delta_sinks_that_keep_an_exact_record_pass(spec: SinkSpec, recorded, held) -> None:
    finding = assess_sink(spec, txns=recorded, table_version=31, old_query_id=OLD, uri="/t")
    assert finding.exact and finding.old_last_batch == held and finding.table_version == 31
    assert "exact" in finding.line and finding.to_dict()["sink"] == spec.to_dict()


@pytest.mark.parametrize(("spec", "exact", "words"), [
    (SinkSpec(), False, "not declared"),
    (SinkSpec(SinkKind.FILE, "/out"), True, "_spark_metadata"),
    (SinkSpec(SinkKind.KAFKA), False, "at-least-once"),
    (SinkSpec(SinkKind.FOREACH_BATCH), False, "at-least-once"),
])
def test_other_sinks_say_whether_they_are_exact(spec: SinkSpec, exact: bool, words: str) -> None:
    finding = assess_sink(spec, txns={}, table_version=None, old_query_id=OLD, uri="")
    assert finding.exact is exact and words in finding.line


def test_delivery_needs_every_committed_batch_in_the_log() -> None:
    spec = SinkSpec(SinkKind.DELTA, "/t")
    delivery = judge_delivery(spec, app_id=NEW, committed=[0, 1, 2], recorded={0: 50, 1: 51, 2: 53}, latest=None,
                              uri="/t")
    assert delivery.checked and dict(delivery.batches) == {0: 50, 1: 51, 2: 53}
    with pytest.raises(SinkNotDelivered) as raised:
        judge_delivery(spec, app_id="w", committed=[0, 1, 2], recorded={2: 53}, latest=DeltaTxn("w", 812, 1650),
                       uri="/t")
    assert "batch(es) 0, 1" in raised.value.found and "latest txn for 'w' is version 812" in raised.value.found


def write_log(table: Path, commits: dict[int, list[dict]]) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    for version, actions in commits.items():
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in actions) + "\n")


def txn(app: str, version: int) -> dict:
    return {"txn": {"appId": app, "version": version, "lastUpdated": 0}}


def commit_info() -> dict:
    return {"commitInfo": {"operation": "WRITE"}}


def test_the_latest_txn_per_app_id_wins(tmp_path: Path) -> None:
    write_log(tmp_path, {0: [commit_info(), txn("a", 0)], 1: [txn("a", 1), txn("b", 7)], 2: [commit_info()],
                         3: [txn("a", 2)]})
    log = DeltaLog(LOCAL, str(tmp_path))
    assert log.listing().latest == 3
    assert log.transactions() == txns(("a", 2, 3), ("b", 7, 1))
    assert [t.version for t in log.recent_txns("a")] == [2, 1, 0]


def test_a_missing_commit_or_a_broken_line_is_a_typed_error(tmp_path: Path) -> None:
    write_log(tmp_path, {0: [txn("a", 0)], 2: [txn("a", 1)]})
    with pytest.raises(SinkLogUnreadable) as raised:
        DeltaLog(LOCAL, str(tmp_path)).transactions()
    assert "commit(s) 1 missing" in raised.value.found
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_text('{"txn": {"appId": "a", "version": "x"}}\n')
    with pytest.raises(SinkLogUnreadable, match="integer version"):
        DeltaLog(LOCAL, str(tmp_path)).transactions()
    (tmp_path / "_delta_log" / f"{1:020d}.json").write_text('{"txn": \n')
    with pytest.raises(SinkLogUnreadable, match="line 1 is not JSON"):
        DeltaLog(LOCAL, str(tmp_path)).transactions()


def test_checkpoint_names_and_incomplete_multi_part_checkpoints(tmp_path: Path) -> None:
    write_log(tmp_path, {10: [txn("a", 3)]})
    log = tmp_path / "_delta_log"
    for name in (f"{10:020d}.checkpoint.parquet", f"{20:020d}.checkpoint.0000000001.0000000002.parquet",
                 f"{30:020d}.checkpoint.0123abcd-0000-4000-8000-000000000000.json", f"{10:020d}.crc",
                 f"{40:020d}.00000000000000000045.compacted.json", "_last_checkpoint"):
        (log / name).write_text("")
    listing = DeltaLog(LOCAL, str(tmp_path)).listing()
    assert sorted(listing.checkpoints) == [10, 30] and sorted(listing.commits) == [10]
    assert listing.checkpoint_at_or_before(29) == 10


def test_an_absent_table_has_no_record(tmp_path: Path) -> None:
    log = DeltaLog(LOCAL, str(tmp_path / "none"))
    assert not log.exists() and log.transactions() == {}
    finding = inspect_sink(LOCAL, str(tmp_path / "none"), SinkSpec(SinkKind.DELTA, str(tmp_path / "none")),
                           old_query_id=OLD)
    assert finding.exact and finding.old_last_batch is None


def test_verify_with_a_shared_app_id_does_not_count_the_old_querys_batches(tmp_path: Path) -> None:
    # version 1 wrote batches 0-5 under "w"; version 2 (same id) committed 0-2, which Delta skipped
    write_log(tmp_path, {v: [commit_info(), txn("w", v)] for v in range(6)})
    spec = SinkSpec(SinkKind.DELTA_FOREACH_BATCH, str(tmp_path), txn_app_id="w")
    with pytest.raises(SinkNotDelivered) as raised:
        verify_sink(LOCAL, str(tmp_path), spec, new_query_id=NEW, committed=[0, 1, 2], old_query_id=OLD,
                    handover_batch=5)
    assert "batch(es) 0, 1, 2" in raised.value.found
    # a new id the table records for every committed batch passes
    write_log(tmp_path, {6: [txn(NEW, 0)], 7: [txn(NEW, 1)], 8: [txn(NEW, 2)]})
    delivery = verify_sink(LOCAL, str(tmp_path), SinkSpec(SinkKind.DELTA_FOREACH_BATCH, str(tmp_path)),
                           new_query_id=NEW, committed=[0, 1, 2], old_query_id=OLD, handover_batch=5)
    assert dict(delivery.batches) == {0: 6, 1: 7, 2: 8}


def test_sinks_the_provider_cannot_read_are_not_checked(tmp_path: Path) -> None:
    delivery = verify_sink(None, "", SinkSpec(SinkKind.KAFKA), new_query_id=NEW, committed=[0])
    assert not delivery.checked and "cannot read" in delivery.note


@pytest.mark.parametrize(("declared", "txns"), [
    # declared "the query id" (no txn_app_id) while the job writes under a constant: the table knows only that one
    ({"kind": "delta_foreach_batch", "location": "/t"}, {"constant-app": DeltaTxn("constant-app", 7, 9)}),
    # declared the Delta streaming sink on a table the old query never wrote
    ({"kind": "delta", "location": "/t"}, {}),
])
def test_a_declaration_the_tables_record_contradicts_is_refused(declared: dict, txns: dict) -> None:
    from airflow_ckpt_provider.checkpoint.errors import SinkDeclarationMismatch

    spec = SinkSpec.from_value(declared)
    with pytest.raises(SinkDeclarationMismatch) as raised:
        assess_sink(spec, txns=txns, table_version=9, old_query_id=OLD, uri="/t", old_committed_batch=7)
    assert "committed batches up to 7" in raised.value.found and repr(OLD) in raised.value.found
    # an old query that committed nothing yet has nothing the table should hold
    assert assess_sink(spec, txns=txns, table_version=9, old_query_id=OLD, uri="/t").exact
