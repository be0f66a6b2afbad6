"""The approval summary: what a person decides an upgrade on, as Markdown (pure).

:func:`approval_summary` renders the preflight's findings for the HITL approval's body (and the
``summary_md`` XCom): the stream, both checkpoints (linked), the old query, the handover batch and
any in-flight batch, what will be archived (files, bytes), then one row per partition: where the
new query starts, the broker's earliest and latest offsets, the retention margin (records the
broker still keeps below the handover offset: at 0 the next retention run loses data before the
new version reads it) and how far behind the old query was. Numbers carry their units.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from airflow_ckpt_provider.checkpoint.handover import Handover
from airflow_ckpt_provider.checkpoint.history import BatchRecord
from airflow_ckpt_provider.checkpoint.manifest import human_bytes
from airflow_ckpt_provider.checkpoint.offsets import EARLIEST, LATEST
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView, Reconciliation
from airflow_ckpt_provider.checkpoint.rewind import StartMode, StartPlan

#: Partition rows shown before the rest is summed up in one line.
MAX_PARTITION_ROWS = 50


@dataclass(frozen=True)
class UpgradePlan:
    """What the preflight found, for the summary."""

    stream_name: str
    old_checkpoint: str
    new_checkpoint: str
    archive_location: str
    handover: Handover
    reconciliation: Reconciliation
    broker: BrokerView
    old_query_running: bool
    checkpoint_files: int
    checkpoint_bytes: int
    spark_ui_url: str | None = None
    relaunch_mode: str = ""  # "standby" | "cold" | "switchover" | "" (not said: a preflight used on its own)
    start_plan: StartPlan | None = None  # a start other than where the old version stops
    start_warning: str = ""  # e.g. a rewound batch close to Spark's purge horizon
    load: str = ""  # load_line(): busy, falling behind, idle or steady


def _link(uri: str) -> str:
    """A checkpoint location as a link where a browser can open it, else as code."""
    if uri.startswith(("http://", "https://")):
        return f"[{uri}]({uri})"
    if uri.startswith("/"):
        return f"[`{uri}`](file://{uri})"
    return f"`{uri}`"


def _records(count: int) -> str:
    return f"{count:,} record{'s' if count != 1 else ''}"


def _partition_rows(plan: UpgradePlan) -> list[str]:
    added = plan.reconciliation.added_partitions
    expired = {(t, p): (o, e) for t, p, o, e in plan.reconciliation.expired}
    rows = []
    for topic, partition, start in plan.reconciliation.starting_offsets.items():
        earliest, latest = plan.broker.partitions(topic).get(partition, (None, None))
        if (topic, partition) in added:
            given = "earliest (new partition)"
        elif (topic, partition) in expired:
            given = f"{start:,} (**data loss accepted**: handed over {expired[(topic, partition)][0]:,})"
        else:
            given = {EARLIEST: "earliest", LATEST: "latest"}.get(start, f"{start:,}")
        if earliest is None or latest is None:
            margin = behind = "?"
        elif start < 0:
            margin, behind = "-", _records(latest - earliest)
        else:
            kept = start - earliest
            margin = _records(kept) + (" **(at risk)**" if kept <= 0 else "")
            behind = _records(max(latest - start, 0))
        edge = "?" if earliest is None else f"{earliest:,} / {latest:,}"
        rows.append(f"| {topic}-{partition} | {given} | {edge} | {margin} | {behind} |")
    if len(rows) > MAX_PARTITION_ROWS:
        rows = rows[:MAX_PARTITION_ROWS] + [f"| … and {len(rows) - MAX_PARTITION_ROWS} more partitions | | | | |"]
    return rows


#: How many of the newest batches the load line looks at.
LOAD_BATCHES = 20
#: A gap between a commit and the next batch's plan shorter than this (or than a tenth of the
#: median batch) counts as "back to back": Spark planned the next batch at once.
BACK_TO_BACK_S = 0.25


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def load_line(history: Sequence[BatchRecord], behind: int, *, now_s: float) -> str:
    """The approver's line on how the old query runs, from its newest committed batches (planned
    and commit times, input rows) and the records it is ``behind`` the broker's log end: busy
    (batches back to back: the default trigger, or batches longer than their trigger), falling
    behind (more than 3 batches' worth of records behind), idle, or steady. Pure."""
    done = [(b.planned_at_ms / 1000, b.committed_at, b.input_rows) for b in history
            if b.committed_at is not None and b.planned_at_ms is not None][-LOAD_BATCHES:]
    lag = f"{_records(behind)} behind the broker's log end"
    if len(done) < 2:
        return f"**Load:** too few committed batches to judge; {lag}."
    durations = [max(0.0, committed - planned) for planned, committed, _ in done]
    gaps = [max(0.0, nxt[0] - prev[1]) for prev, nxt in zip(done, done[1:], strict=False)]
    typical = _median(durations)
    tight = sum(1 for g in gaps if g < max(BACK_TO_BACK_S, typical / 10))
    rows = [rows for _, _, rows in done if rows]
    per_batch = _median([float(r) for r in rows]) if rows else 0.0
    shape = f"the last {len(done)} batches took {typical:.1f} s each (median)"
    idle_for = now_s - done[-1][1]
    if behind > 0 and per_batch and behind > 3 * per_batch:
        return (f"**Load: falling behind** — {lag}, about {behind / per_batch:.0f} batches' worth; {shape}. The stop "
                "holds the next batch at the sink gate (jobs using `foreach_batch`); the new version starts with that "
                "backlog.")
    if tight >= max(1, int(0.8 * len(gaps))):
        return (f"**Load: busy** — {shape} and ran back to back ({tight} of {len(gaps)} gaps under "
                f"{max(BACK_TO_BACK_S, typical / 10):.2f} s: Spark's default trigger, or batches longer than their "
                f"trigger interval); {lag}. The stop holds the next batch at the sink gate (jobs using "
                "`foreach_batch`); on a built-in sink it may cut one, which the sink ledger accounts for.")
    if behind == 0 and idle_for > max(10.0, 5 * _median(gaps)):
        return (f"**Load: idle** — the last batch committed {idle_for:.0f} s ago and nothing is waiting: the new "
                "version is checked by its start and the broker's log end, not by a batch.")
    return f"**Load:** steady — {shape}, {_median(gaps):.1f} s apart (median); {lag}."


#: What the approver is told about each relaunch mode (resources and downtime).
RELAUNCH_NOTES = {
    "standby": ("as a **standby**, before the old version stops: **both drivers run at once** (their memory and "
                "cores) from the approval until the old one has stopped; the stream is down only from the stop "
                "to the standby's first batch"),
    "cold": "after the stop and the archive (one driver at a time; the downtime includes its start-up)",
    "switchover": ("as a **standby** that takes over **inside the drivers**: **both drivers run at once** from the "
                   "approval until the old one has stopped; the standby reads the old query's last committed batch "
                   "itself and starts the moment the old query acknowledges its stop (no Airflow task in between); "
                   "the provider then re-reads the handover and compares"),
}


def approval_summary(plan: UpgradePlan) -> str:
    """The Markdown body of the approval (see the module doc)."""
    handover = plan.handover
    in_flight = ("none" if handover.in_flight_batch is None
                 else f"batch {handover.in_flight_batch} (planned, never committed: its offsets are NOT used)")
    batch = "nothing committed yet (initial offsets)" if handover.batch_id is None else f"batch {handover.batch_id}"
    partitions = plan.reconciliation.starting_offsets.partitions()
    old_query = "running: it will be stopped between two batches" if plan.old_query_running \
        else "**not running** (no live heartbeat)"
    if plan.spark_ui_url:
        old_query += f" — [Spark UI]({plan.spark_ui_url})"
    facts = [
        ("old checkpoint", _link(plan.old_checkpoint)),
        ("old query", old_query),
        ("query id", f"`{handover.query_id}`"),
        ("last committed batch (handed over)", batch),
        ("in-flight batch", in_flight),
        ("new checkpoint", f"{_link(plan.new_checkpoint)} (empty)"),
        ("archived to", f"{_link(plan.archive_location)}: {plan.checkpoint_files:,} files, "
                        f"{human_bytes(plan.checkpoint_bytes)}"),
        ("partitions", f"{len(partitions)} of {', '.join(plan.reconciliation.starting_offsets.topics)}"),
        ("new partitions (start at earliest)",
         ", ".join(f"{t}-{p}" for t, p in sorted(plan.reconciliation.added_partitions)) or "none"),
        ("data loss accepted", ", ".join(f"{t}-{p}" for t, p, _, _ in plan.reconciliation.expired) or "no"),
    ]
    if plan.relaunch_mode:
        facts.append(("new version starts", RELAUNCH_NOTES.get(plan.relaunch_mode, plan.relaunch_mode)))
    lines = [f"### Upgrade of stream `{plan.stream_name}` to a new checkpoint", "",
             "| | |", "| --- | --- |", *[f"| {key} | {value} |" for key, value in facts], "",
             "#### Where the new version starts, per partition", "",
             "| partition | handed over (next offset) | broker earliest / latest | retention margin | behind |",
             "| --- | --- | --- | --- | --- |", *_partition_rows(plan), "",
             "The offsets are taken again after the graceful stop (startingOffsets of the last committed "
             "batch then). All preflight checks passed: nothing has been changed yet."]
    if plan.load:
        where = lines.index("#### Where the new version starts, per partition")
        lines[where:where] = [plan.load, ""]
    start = plan.start_plan
    if start is not None and start.choice.mode is not StartMode.RESUME:
        lines[lines.index("#### Where the new version starts, per partition")] = "#### Where the old version stops"
        lines += ["", "#### The new version does NOT resume: records processed again or skipped", "",
                  *start.markdown(), "",
                  "Counted against where the old version is now. The new version's start is fixed; the old "
                  "version keeps processing until its stop, so the records processed again grow by what it "
                  "reads until then (the report has the final count)."]
        if plan.start_warning:
            lines += ["", plan.start_warning]
    return "\n".join(lines)
