"""Start verification (checkpoint/verify.py) and the launch preflight, on synthetic checkpoints."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import fsspec
import pytest

from airflow_ckpt_provider import cli
from airflow_ckpt_provider.checkpoint import BrokerView, KafkaOffsets
from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointNotEmpty,
    FileSinkHazard,
    InvalidHandover,
    NotStartedYet,
    SharedCheckpoint,
    SourceNotKafka,
    StartMismatch,
)
from airflow_ckpt_provider.checkpoint.handover import HandoverResult, handover_from_snapshot
from airflow_ckpt_provider.checkpoint.verify import (
    AT_EARLIEST,
    EXACT,
    GAP,
    MISSING,
    OVERLAP,
    UNEXPECTED,
    InvalidVerifyResult,
    VerifyResult,
    compare_starts,
    verify_start,
)
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.locations import check_launch_target
from tests.unit.conftest import kafka_json, write_checkpoint

T = "events"


def offsets(**parts: int) -> KafkaOffsets:
    return KafkaOffsets({T: {int(k[1:]): v for k, v in parts.items()}})


HANDOVER = offsets(p0=100, p1=200)


@pytest.mark.parametrize(
    ("recorded", "given", "broker", "expected"),
    [
        pytest.param(offsets(p0=100, p1=200), HANDOVER, None, {0: EXACT, 1: EXACT}, id="exact"),
        pytest.param(offsets(p0=101, p1=200), HANDOVER, None, {0: GAP, 1: EXACT}, id="gap"),
        pytest.param(offsets(p0=100, p1=150), HANDOVER, None, {0: EXACT, 1: OVERLAP}, id="overlap"),
        pytest.param(offsets(p0=100), HANDOVER, None, {0: EXACT, 1: MISSING}, id="missing-partition"),
        pytest.param(offsets(p0=100, p1=200, p2=0), offsets(p0=100, p1=200, p2=-2), None,
                     {0: EXACT, 1: EXACT, 2: AT_EARLIEST}, id="new-partition-at-earliest"),
        pytest.param(offsets(p0=100, p1=200, p2=5), offsets(p0=100, p1=200, p2=-2),
                     BrokerView({T: {0: (0, 300), 1: (0, 300), 2: (5, 40)}}),
                     {0: EXACT, 1: EXACT, 2: AT_EARLIEST}, id="new-partition-at-broker-earliest"),
        pytest.param(offsets(p0=100, p1=200, p2=7), offsets(p0=100, p1=200, p2=-2),
                     BrokerView({T: {0: (0, 300), 1: (0, 300), 2: (5, 40)}}),
                     {0: EXACT, 1: EXACT, 2: GAP}, id="new-partition-above-earliest"),
        pytest.param(offsets(p0=100, p1=200, p2=0), HANDOVER, None,
                     {0: EXACT, 1: EXACT, 2: UNEXPECTED}, id="unexpected-partition"),
        pytest.param(offsets(p0=90, p1=200), offsets(p0=90, p1=200), None, {0: OVERLAP, 1: EXACT},
                     id="given-differs-from-handover"),
    ],
)
def test_compare_starts(recorded: KafkaOffsets, given: KafkaOffsets, broker: BrokerView | None,
                        expected: dict[int, str]) -> None:
    parts = compare_starts(recorded, given, handover=HANDOVER, broker=broker)
    assert {p.partition: p.status for p in parts} == expected


def test_accepted_data_loss_starts_where_given() -> None:
    given = offsets(p0=150, p1=200)  # p0 expired below 150; the loss was accepted upstream
    parts = compare_starts(offsets(p0=150, p1=200), given, handover=HANDOVER, accepted_loss={(T, 0)})
    assert [p.status for p in parts] == [EXACT, EXACT]
    parts = compare_starts(offsets(p0=150, p1=200), given, handover=HANDOVER)
    assert [p.status for p in parts] == [GAP, EXACT]


def new_checkpoint(root: Path, recorded: dict[int, int], committed: int | None = 0) -> str:
    """A new checkpoint whose sources/0/0 records ``recorded`` (batches 0..committed)."""
    start = kafka_json({T: recorded})
    batches = range(committed + 1) if committed is not None else range(0)
    write_checkpoint(str(root), batches=batches,
                     sources=lambda b: [start if b < 0 else kafka_json({T: {p: o + 10 * (b + 1)
                                                                           for p, o in recorded.items()}})])
    return str(root)


def test_verify_start_on_checkpoint(tmp_path: Path) -> None:
    uri = new_checkpoint(tmp_path / "new", {0: 100, 1: 200, 2: 0})
    snapshot = CheckpointReader(uri).snapshot(include_initial=True)
    result = verify_start(snapshot, offsets(p0=100, p1=200, p2=-2), handover=HANDOVER)
    assert result.ok and result.source == 0 and result.last_committed_batch == 0
    assert result.recorded == offsets(p0=100, p1=200, p2=0)
    data = json.loads(result.to_json())
    assert data["partitions"][2] == {"topic": T, "partition": 2, "given": -2, "recorded": 0, "status": AT_EARLIEST,
                                     "handed_over": None, "broker_earliest": None}


def test_mismatch_names_partitions_and_offsets(tmp_path: Path) -> None:
    uri = new_checkpoint(tmp_path / "new", {0: 103, 1: 190})
    snapshot = CheckpointReader(uri).snapshot(include_initial=True)
    with pytest.raises(StartMismatch) as caught:
        verify_start(snapshot, HANDOVER, handover=HANDOVER)
    error = caught.value
    assert error.details == ((T, 0, 100, 103, GAP), (T, 1, 200, 190, OVERLAP))
    assert f"{T}-0: gap, given 100, recorded 103" in str(error)
    assert f"{T}-1: overlap, given 200, recorded 190" in str(error)


def test_not_started_and_not_kafka(tmp_path: Path) -> None:
    uri = new_checkpoint(tmp_path / "fresh", {0: 1}, committed=None)
    (tmp_path / "fresh" / "sources" / "0" / "0").unlink()
    with pytest.raises(NotStartedYet):
        verify_start(CheckpointReader(uri).snapshot(include_initial=True), HANDOVER)
    rate = tmp_path / "rate"
    write_checkpoint(str(rate), sources=lambda b: [str(max(b, 0) * 5)])
    with pytest.raises(SourceNotKafka):
        verify_start(CheckpointReader(str(rate)).snapshot(include_initial=True), HANDOVER)


def test_handover_result_shapes(tmp_path: Path) -> None:
    old = tmp_path / "old"
    write_checkpoint(str(old), sources=lambda b: [kafka_json({T: {0: 100, 1: 200}})])
    handover = handover_from_snapshot(CheckpointReader(str(old)).snapshot())
    bare = HandoverResult.from_json(handover.to_json())
    assert (bare.handover, bare.starting_offsets, bare.accepted_loss) == (handover, None, frozenset())
    assert bare.offsets() == offsets(p0=100, p1=200) and HandoverResult.from_json(handover) == bare
    xcom = {"handover": handover.to_dict(), "starting_offsets": '{"events":{"0":150,"1":200}}',
            "reconciliation": {"startingOffsets": {T: {"0": 150, "1": 200}}, "addedPartitions": [],
                               "expired": [{"topic": T, "partition": 0, "offset": 100, "earliest": 150}],
                               "acceptDataLoss": True}}
    got = HandoverResult.from_json(json.dumps(xcom))
    assert (got.handover, got.offsets(), got.accepted_loss) == (handover, offsets(p0=150, p1=200), frozenset({(T, 0)}))
    assert HandoverResult.from_json(xcom) == got == HandoverResult.from_json(got.to_json())
    assert got.to_dict() == {"format": 1, **xcom}, "the XCom shape the handover operator returned, now with its format"
    for bad in ("not json", "[1]", {**xcom, "extra": 1}, {**xcom, "reconciliation": {"expired": "x"}}):
        with pytest.raises(InvalidHandover):
            HandoverResult.from_json(bad)


# -- launch preflight ------------------------------------------------------------------------------


def local(path: Path) -> tuple[object, str]:
    return fsspec.filesystem("file"), str(path)


def test_launch_target_refusals(tmp_path: Path) -> None:
    check_launch_target(local(tmp_path / "missing"), "missing")  # missing: fine, and not created
    assert not (tmp_path / "missing").exists()
    (tmp_path / "empty").mkdir()
    assert check_launch_target(local(tmp_path / "empty"), "empty") is False
    old = tmp_path / "old"
    write_checkpoint(str(old))
    with pytest.raises(SharedCheckpoint):
        check_launch_target(local(tmp_path / "old" / "." ), "old", old=local(old))
    with pytest.raises(CheckpointNotEmpty) as caught:
        check_launch_target(local(old), "old")
    assert "metadata" in str(caught.value) and "Nothing was started" in str(caught.value)
    assert check_launch_target(local(old), "old", old=local(old), allow_existing_checkpoint=True) is True

    sink = tmp_path / "sink"
    (sink / "_spark_metadata").mkdir(parents=True)
    with pytest.raises(FileSinkHazard):
        check_launch_target(local(tmp_path / "new"), "new", sink=local(sink))
    # restarting a version on its own checkpoint continues its batch ids: no hazard
    check_launch_target(local(old), "old", sink=local(sink), allow_existing_checkpoint=True)
    check_launch_target(local(tmp_path / "new"), "new", sink=local(tmp_path / "other-sink"))


def test_launch_target_on_memory_fs() -> None:
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/verify-target/cp/metadata", b'{"id":"x"}')
    with pytest.raises(CheckpointNotEmpty):
        check_launch_target((fs, "/verify-target/cp"), "memory://verify-target/cp")
    with pytest.raises(SharedCheckpoint):
        check_launch_target((fs, "/verify-target/cp"), "memory://verify-target/cp", old=(fs, "/verify-target/cp/"))
    fs.rm("/verify-target", recursive=True)


# -- ckpt verify-handover --------------------------------------------------------------------------


def run_cli(*argv: str, stdin: str | None = None,
            monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    if stdin is not None and monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_cli_verify_handover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = tmp_path / "old"
    write_checkpoint(str(old), sources=lambda b: [kafka_json({T: {0: 100, 1: 200}})])
    handover = handover_from_snapshot(CheckpointReader(str(old)).snapshot())
    file = tmp_path / "handover.json"
    file.write_text(handover.to_json())
    good = new_checkpoint(tmp_path / "good", {0: 100, 1: 200})
    code, out, err = run_cli("verify-handover", str(file), good)
    assert (code, err) == (0, "") and out.startswith("OK:") and f"{T}-1: exact" in out

    xcom = json.dumps({"handover": handover.to_dict(), "starting_offsets": '{"events":{"0":100,"1":200}}'})
    code, out, _ = run_cli("verify-handover", "-", good, "--json", stdin=xcom, monkeypatch=monkeypatch)
    assert code == 0 and json.loads(out)["ok"] is True

    bad = new_checkpoint(tmp_path / "bad", {0: 100, 1: 201})
    code, out, err = run_cli("verify-handover", str(file), bad)
    assert code == 2 and out == "" and err.startswith("ckpt: error: new query did not start at the handover")
    assert f"{T}-1: gap, given 200, recorded 201" in err and "Traceback" not in err


def test_verify_result_round_trips_through_its_one_parser(tmp_path: Path) -> None:
    cp = tmp_path / "new"
    write_checkpoint(str(cp), batches=range(2), sources=lambda b: [kafka_json({T: {0: 100, 1: 200}})])
    result = verify_start(CheckpointReader(str(cp)).snapshot(include_initial=True), offsets(p0=100, p1=200),
                          handover=HANDOVER).with_progress(3, (2, 3))
    assert VerifyResult.from_json(result.to_json()) == result == VerifyResult.from_json(result.to_dict())
    for bad in ("{}", '{"partitions": 5}', "not json"):
        with pytest.raises(InvalidVerifyResult):
            VerifyResult.from_json(bad)


def test_unread_partitions_name_what_the_query_has_not_read() -> None:
    from airflow_ckpt_provider.checkpoint.verify import unread_partitions

    position = KafkaOffsets.from_json('{"t":{"0":5,"1":7}}')
    assert unread_partitions(position, BrokerView({"t": {0: (0, 5), 1: (2, 7)}})) == []
    assert unread_partitions(position, BrokerView({"t": {0: (0, 6), 1: (2, 7), 2: (0, 3)}})) == [
        "t-0: at 5, log end 6", "t-2: at nothing, log end 3"]
    assert unread_partitions(position, BrokerView({"t": {0: (0, 5), 1: (0, 7), 2: (0, 0)}})) == []
