"""Where the new version starts (checkpoint/rewind.py) and CheckpointReader.batch_start."""

from __future__ import annotations

import io
from datetime import datetime, timezone

import pytest

from airflow_ckpt_provider.checkpoint.errors import (
    BatchNotRewindable,
    ExpiredOffsets,
    InvalidStartChoice,
    ReprocessingNotAccepted,
)
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView
from airflow_ckpt_provider.checkpoint.rewind import (
    PartitionStart,
    StartChoice,
    StartMode,
    StartPlan,
    offsets_at_time,
    plan_start,
)
from airflow_ckpt_provider.checkpoint.summary import approval_summary
from airflow_ckpt_provider.storage.reader import CheckpointReader
from tests.unit.conftest import kafka_offsets_at, write_checkpoint


def offsets(**parts: int) -> KafkaOffsets:
    return KafkaOffsets({"events": {int(p[1:]): o for p, o in parts.items()}})


@pytest.mark.parametrize(("mode", "value", "expected"), [
    ("resume", None, StartChoice()),
    ("", "", StartChoice()),
    ("rewind_to_batch", "12", StartChoice(StartMode.REWIND_TO_BATCH, batch=12)),
    ("rewind_to_batch", 0, StartChoice(StartMode.REWIND_TO_BATCH, batch=0)),
    ("at_time", "2026-11-23T10:00:00Z",
     StartChoice(StartMode.AT_TIME, at_time=datetime(2026, 11, 23, 10, tzinfo=timezone.utc))),
    ("offsets", '{"events": {"0": 5, "1": 7}}', StartChoice(StartMode.OFFSETS, offsets=offsets(p0=5, p1=7))),
    ("offsets", {"events": {"0": 5, "1": 7}}, StartChoice(StartMode.OFFSETS, offsets=offsets(p0=5, p1=7))),
])
def test_parse_each_mode_and_round_trip(mode: str, value: object, expected: StartChoice) -> None:
    choice = StartChoice.parse(mode, value)
    assert choice == expected
    assert StartChoice.from_dict(choice.to_dict()) == choice


@pytest.mark.parametrize(("mode", "value", "found"), [
    ("rewind", "3", "handover mode 'rewind'"),
    ("resume", "3", "a value ('3') with mode resume"),
    ("rewind_to_batch", "", "mode rewind_to_batch without a value"),
    ("rewind_to_batch", "-1", "batch '-1'"),
    ("rewind_to_batch", "three", "batch 'three'"),
    ("at_time", "2026-11-23T10:00:00", "without a zone"),
    ("at_time", "yesterday", "time 'yesterday'"),
    ("offsets", "{not json", "offsets '{not json'"),
    ("offsets", '{"events": {"0": -2}}', "offsets with -1/-2"),
])
def test_bad_choices_are_refused_with_what_was_found(mode: str, value: str, found: str) -> None:
    with pytest.raises(InvalidStartChoice) as caught:
        StartChoice.parse(mode, value)
    assert found in caught.value.found
    assert "handover_mode" in str(caught.value)


def test_at_time_offsets_fall_back_to_the_end_offset() -> None:
    broker = BrokerView({"events": {0: (0, 50), 1: (10, 80)}})
    assert offsets_at_time({("events", 0): 20, ("events", 1): None}, broker) == offsets(p0=20, p1=80)
    with pytest.raises(InvalidStartChoice, match="events-2 not on the broker"):
        offsets_at_time({("events", 2): 3}, broker)


def test_plan_counts_reprocessed_and_skipped_per_partition() -> None:
    choice = StartChoice.parse("offsets", '{"events": {"0": 40, "1": 90, "2": 70}}')
    plan = plan_start(choice, offsets(p0=50, p1=80, p2=70), choice.offsets or KafkaOffsets({}))
    assert [(p.partition, p.reprocessed, p.skipped) for p in plan.partitions] == [(0, 10, 0), (1, 0, 10), (2, 0, 0)]
    assert (plan.reprocessed, plan.skipped) == (10, 10)
    assert plan.partitions[0].describe() == "events-0: offsets 40..49 processed again (10 records)"
    assert plan.partitions[1].describe() == "events-1: offsets 80..89 SKIPPED (10 records)"
    assert StartPlan.from_dict(plan.to_dict()) == plan
    assert "| events-0 | 50 | 40 | 10 | 0 |" in plan.markdown()


def test_consent_is_required_for_anything_but_resume() -> None:
    rewind = plan_start(StartChoice.parse("rewind_to_batch", "2"), offsets(p0=50), offsets(p0=30))
    with pytest.raises(ReprocessingNotAccepted) as caught:
        rewind.require_consent(accept_reprocessing=False, accept_data_loss=False)
    assert "accept_reprocessing=True" in caught.value.expected and "accept_data_loss" not in caught.value.expected
    assert "events-0: offsets 30..49 processed again (20 records)" in str(caught.value)
    rewind.require_consent(accept_reprocessing=True, accept_data_loss=False)
    skip = plan_start(StartChoice.parse("offsets", '{"events": {"0": 60}}'), offsets(p0=50), offsets(p0=60))
    with pytest.raises(ReprocessingNotAccepted, match="accept_data_loss=True"):
        skip.require_consent(accept_reprocessing=True, accept_data_loss=False)
    skip.require_consent(accept_reprocessing=True, accept_data_loss=True)
    plan_start(StartChoice(), offsets(p0=50), offsets(p0=50)).require_consent(accept_reprocessing=False,
                                                                             accept_data_loss=False)


def test_start_must_name_every_subscribed_partition_and_be_retained() -> None:
    choice = StartChoice.parse("offsets", '{"events": {"0": 40, "7": 1}}')
    with pytest.raises(InvalidStartChoice) as caught:
        plan_start(choice, offsets(p0=50, p1=80), choice.offsets or KafkaOffsets({}))
    assert "missing partitions events-1" in caught.value.found and "not subscribed events-7" in caught.value.found
    broker = BrokerView({"events": {0: (45, 100), 1: (0, 100)}})
    with pytest.raises(ExpiredOffsets):  # a rewind never silently starts later than asked
        plan_start(StartChoice.parse("rewind_to_batch", "1"), offsets(p0=50, p1=80), offsets(p0=40, p1=60), broker)
    grown = BrokerView({"events": {0: (0, 100), 1: (0, 100), 2: (0, 9)}})
    plan = plan_start(StartChoice.parse("rewind_to_batch", "1"), offsets(p0=50, p1=80), offsets(p0=40, p1=60), grown)
    assert plan.starting_offsets.get("events", 2) == -2  # a partition added since starts at earliest
    assert [p.partition for p in plan.partitions] == [0, 1]


def test_batch_start_is_the_end_of_the_batch_before(location: str) -> None:
    write_checkpoint(location, batches=range(3, 10), committed=range(3, 9))  # 0..2 purged, 9 in flight
    reader = CheckpointReader(location)
    start = reader.batch_start(6)
    assert (start.batch_id, start.from_initial) == (5, False)
    assert start.kafka_offsets() == KafkaOffsets(kafka_offsets_at(5))
    assert reader.batch_start(4).kafka_offsets() == KafkaOffsets(kafka_offsets_at(3))
    assert reader.batch_start(0).from_initial  # sources/<i>/0 is never purged
    for batch, found in [(9, "batch 9, which is not committed (last committed: 8)"),
                         (3, "batch 3, whose start (offsets/2) was purged"), (-1, "a negative batch id")]:
        with pytest.raises(BatchNotRewindable) as caught:
            reader.batch_start(batch)
        assert found in caught.value.found
        assert "batches 4..8 and batch 0" in caught.value.expected


def test_ckpt_offsets_rewind_prints_the_offsets_and_their_cost(location: str) -> None:
    from airflow_ckpt_provider.cli import main

    write_checkpoint(location, batches=range(6), committed=range(5))
    out, err = io.StringIO(), io.StringIO()
    assert main(["offsets", location, "--rewind-to-batch", "3"], stdout=out, stderr=err) == 0
    assert KafkaOffsets.from_json(out.getvalue()) == KafkaOffsets(kafka_offsets_at(2))
    assert "rewind to the start of batch 3: 800 records processed again, 0 skipped" in err.getvalue()
    assert "events-0: offsets 300..499 processed again (200 records)" in err.getvalue()
    err = io.StringIO()
    assert main(["offsets", location, "--rewind-to-batch", "5"], stdout=io.StringIO(), stderr=err) == 2
    assert "batch 5, which is not committed (last committed: 4)" in err.getvalue()
    err = io.StringIO()
    assert main(["offsets", location, "--at-time", "2026-11-23T10:00:00Z"], stdout=io.StringIO(), stderr=err) == 2
    assert "--at-time needs --bootstrap-servers" in err.getvalue()


def test_partition_start_never_reports_a_negative_count() -> None:
    assert (PartitionStart("t", 0, 5, 5).reprocessed, PartitionStart("t", 0, 5, 5).skipped) == (0, 0)


def test_a_rewind_close_to_the_purge_horizon_is_flagged() -> None:
    from airflow_ckpt_provider.checkpoint.rewind import rewind_margin, rewind_warning

    assert rewind_margin(0, 500) is None  # batch 0 starts in sources/: never purged
    assert rewind_margin(151, 249) == 150 + 100 - 249 == 1  # offsets/150 goes when batch 251 is planned
    assert rewind_margin(40, 45) == 94 and rewind_warning(40, 45) == ""
    warning = rewind_warning(151, 249)
    assert "Batch 151's start is purged after about 1 more batches" in warning and "at_time" in warning
    assert rewind_warning(30, 120, 100) != "" and rewind_margin(30, 200, 100) == 0


def test_the_approver_sees_the_purge_warning() -> None:
    from airflow_ckpt_provider.checkpoint.rewind import rewind_warning
    from tests.unit.test_summary import plan as upgrade_plan

    start = plan_start(StartChoice.parse("rewind_to_batch", "151"), offsets(p0=50), offsets(p0=30))
    text = approval_summary(upgrade_plan({0: 50}, {0: (0, 60)}, start_plan=start,
                                         start_warning=rewind_warning(151, 249)))
    assert "**Batch 151's start is purged after about 1 more batches" in text
