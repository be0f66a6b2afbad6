"""The approval summary a person decides an upgrade on (pure Markdown)."""

from __future__ import annotations

from airflow_ckpt_provider.checkpoint import BrokerView, Handover, reconcile
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceOffsets
from airflow_ckpt_provider.checkpoint.summary import MAX_PARTITION_ROWS, UpgradePlan, approval_summary

TAKEN = "2026-11-23T12:00:00.000001+00:00"


def plan(offsets: dict[int, int], broker: dict[int, tuple[int, int]], *, accept: bool = False,
         in_flight: int | None = 8, **kw: object) -> UpgradePlan:
    source = SourceOffsets.parse(0, KafkaOffsets({"events": offsets}).to_json())
    handover = Handover(query_id="q-1", checkpoint_uri="/data/cp/v1", batch_id=7, from_initial=False,
                        sources=(source,), in_flight_batch=in_flight, taken_at=TAKEN)
    view = BrokerView({"events": broker})
    result = reconcile(handover.kafka_offsets(), view, accept_data_loss=accept)
    defaults: dict[str, object] = dict(stream_name="orders", old_checkpoint="/data/cp/v1",
                                       new_checkpoint="s3://lake/cp/v2", archive_location="/data/archive/orders/",
                                       old_query_running=True, checkpoint_files=312, checkpoint_bytes=5 * 1024 ** 2)
    return UpgradePlan(handover=handover, reconciliation=result, broker=view, **{**defaults, **kw})  # type: ignore[arg-type]


def test_a_person_reads_the_decision_in_tables_with_units() -> None:
    text = approval_summary(plan({0: 1_500, 1: 200}, {0: (1_000, 2_000), 1: (200, 260), 2: (0, 40)},
                                 spark_ui_url="http://driver-1:4040"))
    assert text.startswith("### Upgrade of stream `orders`")
    assert "| last committed batch (handed over) | batch 7 |" in text
    assert "batch 8 (planned, never committed: its offsets are NOT used)" in text
    assert "312 files, 5.0 MiB" in text and "[`/data/cp/v1`](file:///data/cp/v1)" in text
    assert "`s3://lake/cp/v2` (empty)" in text and "[Spark UI](http://driver-1:4040)" in text
    assert "| events-0 | 1,500 | 1,000 / 2,000 | 500 records | 500 records |" in text
    assert "| events-1 | 200 | 200 / 260 | 0 records **(at risk)** | 60 records |" in text  # nothing to spare
    assert "| events-2 | earliest (new partition) | 0 / 40 | - | 40 records |" in text
    assert "| new partitions (start at earliest) | events-2 |" in text
    assert "{" not in text, "no JSON dump"


def test_accepted_data_loss_and_many_partitions() -> None:
    count = MAX_PARTITION_ROWS + 7
    offsets = {p: 10 for p in range(count)}
    broker = {p: (50 if p == 0 else 0, 100) for p in range(count)}
    text = approval_summary(plan(offsets, broker, accept=True, in_flight=None, old_query_running=False))
    assert "| events-0 | 50 (**data loss accepted**: handed over 10) |" in text
    assert "| data loss accepted | events-0 |" in text and "| in-flight batch | none |" in text
    assert "**not running**" in text
    rows = [line for line in text.splitlines() if line.startswith("| events-")]
    assert "… and 7 more partitions" in text and len(rows) == MAX_PARTITION_ROWS


def test_the_approver_is_told_how_the_new_version_starts_and_what_a_standby_costs() -> None:
    standby = approval_summary(plan({0: 10}, {0: (0, 20)}, relaunch_mode="standby"))
    assert "| new version starts | as a **standby**" in standby and "**both drivers run at once**" in standby
    cold = approval_summary(plan({0: 10}, {0: (0, 20)}, relaunch_mode="cold"))
    assert "| new version starts | after the stop and the archive (one driver at a time" in cold
    assert "| new version starts |" not in approval_summary(plan({0: 10}, {0: (0, 20)}))


def test_a_rewind_shows_what_is_processed_again_per_partition() -> None:
    from airflow_ckpt_provider.checkpoint.rewind import StartChoice, plan_start

    resume = KafkaOffsets({"events": {0: 1_500, 1: 200}})
    start = plan_start(StartChoice.parse("rewind_to_batch", "5"), resume, KafkaOffsets({"events": {0: 1_100, 1: 150}}))
    text = approval_summary(plan({0: 1_500, 1: 200}, {0: (1_000, 2_000), 1: (100, 260)}, start_plan=start))
    assert "#### Where the old version stops" in text
    assert "#### The new version does NOT resume: records processed again or skipped" in text
    assert "**Where v2 starts:** rewind to the start of batch 5 — 450 records processed again, 0 skipped." in text
    assert "| events-0 | 1500 | 1100 | 400 | 0 |" in text and "| events-1 | 200 | 150 | 50 | 0 |" in text
    resumed = approval_summary(plan({0: 10}, {0: (0, 20)}, start_plan=plan_start(
        StartChoice(), KafkaOffsets({"events": {0: 10}}), KafkaOffsets({"events": {0: 10}}))))
    assert "does NOT resume" not in resumed and "#### Where the new version starts, per partition" in resumed
