"""One result per step kind and the notes each step writes, built by the steps' own result types (their
``to_dict``), as the operators return and note them: what the step table's rows must decode, and
what the planner, the report and the record inputs tests record in a journal."""

from __future__ import annotations

from typing import Any

from airflow_ckpt_provider.checkpoint.compat import CompatibilitySkipped, CompatibilityVerdict, Rule
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle, LaunchMode
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets, SourceOffsets
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.checkpoint.path import PathChoice, UpgradeMode, UpgradePath
from airflow_ckpt_provider.checkpoint.report import StepTiming, UpgradeReport
from airflow_ckpt_provider.checkpoint.rollback import PartitionReprocess, RollbackHandover, RollbackHandoverUnread
from airflow_ckpt_provider.checkpoint.state import StateExport
from airflow_ckpt_provider.checkpoint.stop import StopOutcome, StopResult
from airflow_ckpt_provider.checkpoint.switchover import DowntimeSplit, SwitchoverResult, TakenBy
from airflow_ckpt_provider.checkpoint.verify import PartitionStart, VerifyResult
from airflow_ckpt_provider.upgrade.results import ApprovalAnswer, ArchiveResult, PreflightPlanning, RestoreResult

OLD, NEW, ARCHIVE = "/lake/ck/orders-v1", "/lake/ck/orders-v2", "/lake/archive/orders/20261121T194700Z-up-1"
AT = "2026-11-21T19:47:00+00:00"


def handle(app: str = "orders-v2", checkpoint: str = NEW) -> LaunchHandle:
    return LaunchHandle(mode=LaunchMode.LOCAL, checkpoint_uri=checkpoint, app_name=app, started_at=AT, pid=4242,
                        log_path=f"/logs/{app}.log", host="h", boot_id="b", pid_namespace="pid:[1]")


def handover(batch: int = 41) -> HandoverResult:
    sources = (SourceOffsets.parse(0, '{"orders":{"0":120,"1":80}}'),)
    taken = Handover(query_id="q1", checkpoint_uri=OLD, batch_id=batch, from_initial=False, sources=sources,
                     in_flight_batch=None, taken_at=AT)
    return HandoverResult(taken, taken.kafka_offsets())


def stop() -> StopResult:
    return StopResult(checkpoint_uri=OLD, outcome=StopOutcome.GRACEFUL, last_committed_batch=41,
                      interrupted_batch=None, waited_s=3.2, last_planned_batch=41, request_id="r1", query_id="q1",
                      timeline={"request noticed": 0.5, "quiet check": 1.0})


def verify() -> VerifyResult:
    offsets = KafkaOffsets.from_json('{"orders":{"0":120,"1":80}}')
    return VerifyResult(checkpoint_uri=NEW, query_id="q2", source=0, starting_offsets=offsets, recorded=offsets,
                        partitions=(PartitionStart("orders", 0, 120, 120, "exact"),
                                    PartitionStart("orders", 1, 80, 80, "exact")),
                        last_committed_batch=2, progress_batches=(0, 1, 2))


def archive(location: str = ARCHIVE) -> ArchiveResult:
    return ArchiveResult(location=location, stream_name="orders", upgrade_id="up-1", source_uri=OLD, query_id="q1",
                         last_committed_batch=41, file_count=12, total_bytes=4096,
                         handover=handover().handover.to_dict(), created_by="alice (Airflow)", reason="upgrade",
                         dag_run_id="stream_upgrade/manual__1", completed_at=AT)


def switchover(*, taken_by: TakenBy = TakenBy.STANDBY, state_path: str = "") -> SwitchoverResult:
    used: dict[str, Any] = {"release_id": "sw-1", "state_path": state_path} if taken_by is TakenBy.STANDBY else \
        {"release_id": "sw-1", "reason": "stop_not_clean", "found": "ack outcome interrupted"}
    return SwitchoverResult(handle=handle().to_dict(), stop=stop().to_dict(), handover=handover().to_dict(),
                            used=used, downtime=DowntimeSplit(1.5, 0.2, 0.3, None, 0.4, 2.0, 2.9).to_dict(),
                            taken_by=taken_by)


def rollback(mode: RollbackMode = RollbackMode.FORWARD) -> RollbackHandover:
    return RollbackHandover(mode=mode, checkpoint=f"{NEW}-rollback" if mode is RollbackMode.FORWARD else OLD,
                            resume=KafkaOffsets.from_json('{"orders":{"0":130,"1":85}}'),
                            partitions=(PartitionReprocess("orders", 0, 120, 130, 120, 130),
                                        PartitionReprocess("orders", 1, 80, 85, 80, 85)),
                            new_committed_batch=2, new_planned_batch=2)


def planning(relaunch: str = "cold", rollback_mode: RollbackMode = RollbackMode.RESTORE) -> PreflightPlanning:
    return PreflightPlanning(resuming=False, old_query_running=True, relaunch_mode=relaunch,
                             rollback_mode=rollback_mode, state_export=f"{ARCHIVE}-state",
                             rollback_checkpoint=f"{NEW}-rollback")


def path_choice(in_place: bool = False) -> PathChoice:
    return PathChoice(UpgradePath.IN_PLACE if in_place else UpgradePath.NEW_CHECKPOINT, "the check says so",
                      UpgradeMode.AUTO)


#: A result of each step kind (and of the report), in each of the shapes its step returns.
RESULTS: dict[str, list[Any]] = {
    "preflight": [planning(), PreflightPlanning(resuming=True, relaunch_mode="standby",
                                                rollback_mode=RollbackMode.FORWARD, state_export="",
                                                rollback_checkpoint=f"{NEW}-rollback"),
                  PreflightPlanning(relaunch_mode="switchover", accepted_undeclared_sink=True)],
    "compatibility_check": [CompatibilityVerdict(in_place_ok=False, migrated_ok=True, rule=Rule.UNKNOWN),
                            CompatibilitySkipped("switched off")],
    "choose_path": [path_choice(), path_choice(in_place=True)],
    "approve": [ApprovalAnswer("Approve", {"id": "7", "name": "alice"}, AT), ApprovalAnswer("Reject", None, "")],
    "start_standby": [handle()],
    "graceful_stop": [stop()],
    "extract_handover": [handover()],
    "export_state": [StateExport(location=f"{ARCHIVE}-state", batch_id=41, stores=2, rows=100, size=2048,
                                 seconds=3.5, operators=(0, 1)),
                     StateExport(skipped="a stateless query")],
    "relaunch": [handle()],
    "verify": [verify()],
    "archive": [archive()],
    "switchover": [switchover(state_path=f"{NEW}/_ckpt/seed"), switchover(taken_by=TakenBy.PROVIDER)],
    "in_place_stop": [stop()],
    "in_place_handover": [handover()],
    "in_place_archive": [archive()],
    "in_place_restart": [handle(checkpoint=OLD)],
    "in_place_verify": [verify()],
    "rollback_stop_new": [stop()],
    "rollback_handover": [rollback(), rollback(RollbackMode.RESTORE),
                          RollbackHandoverUnread(checkpoint=NEW, error="InvalidHandover: no commits")],
    "rollback_restore": [RestoreResult(OLD, archive()), RestoreResult(None, target_in_place=True)],
    "rollback_restart_old": [handle("orders-v1", OLD)],
    "rollback_restart_forward": [handle("orders-v1", f"{NEW}-rollback")],
    "in_place_rollback_stop": [stop()],
    "in_place_rollback_restart": [handle("orders-v1", OLD)],
    "report": [UpgradeReport(stream="orders", outcome="upgraded", run_id="manual__1",
                             steps=(StepTiming("graceful_stop", "success", 2.5),))],
}

_DECISION = [{"summary_md": "### Upgrade of `orders`"}, {"refusal": "DeltaWritesSkipped: txnAppId"}]
_LAUNCH = [{"launching": True, "min_batch": 42, "launch_id": "9f1b"},
           {"launching": True, "min_batch": 0, "launch_id": "9f1b", "handle": handle().to_dict()},
           {"released": "rel-1", "handle": handle().to_dict()},
           {"standby_lost": "no heartbeat", "launching": True, "min_batch": 0, "launch_id": "9f1b"}]
_FALLBACK = {"release": {"release_id": "rel-2"}, "stop": stop().to_dict(), "handover": handover().to_dict(),
             "refusal": {"reason": "stop_not_clean"}, "stop_requested_at": AT, "stop_acknowledged_at": AT,
             "handed_over_at": AT}
#: What each step kind notes mid-way, as its operator calls ``journal.note`` (merged, as the journal keeps them).
NOTES: dict[str, list[dict[str, Any]]] = {
    **{kind: [{}] for kind in RESULTS},
    "preflight": _DECISION, "compatibility_check": _DECISION, "choose_path": _DECISION,
    **{kind: _LAUNCH for kind in ("start_standby", "relaunch", "in_place_restart", "rollback_restart_old",
                                  "rollback_restart_forward", "in_place_rollback_restart")},
    "switchover": [{"released": "rel-1", "stop_request": "r1", "handle": handle().to_dict()},
                   {"released": "rel-1", "stop_request": "r1", "handle": handle().to_dict(), "old_stopped": True},
                   {"released": "rel-1", "stop_request": "r1", "handle": handle().to_dict(), "fallback": _FALLBACK}],
    "export_state": [{"job": handle("export", f"{ARCHIVE}-state").to_dict()}],
    "rollback_restore": [{"restoring": True, "archive": ARCHIVE}],
}
