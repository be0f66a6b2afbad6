"""Every step result the upgrade exchanges (XCom) or records (the journal, an archive, a state
export) is decoded by its one strict codec (:mod:`airflow_ckpt_provider.records.codec`): what
this release writes is read back exactly (the texts below are what its writers wrote, kept as they
were: archives and state exports keep them for ever), round trips are exact, and anything else is
refused with the value's own typed error naming what was found."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from airflow_ckpt_provider.checkpoint.compat import (
    CompatibilitySkipped,
    CompatibilityVerdict,
    Rule,
    StatefulOperator,
    TrialKind,
    compatibility_result,
)
from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    InvalidArchiveManifest,
    InvalidHandover,
    InvalidRollbackHandover,
    InvalidStateExport,
    InvalidStopResult,
    InvalidUpgradePath,
    InvalidUpgradeReport,
    InvalidVerdict,
    InvalidVerifyResult,
    StateExportCorrupt,
)
from airflow_ckpt_provider.checkpoint.fixed_settings import Effect, FixedSetting
from airflow_ckpt_provider.checkpoint.handover import Handover, HandoverResult
from airflow_ckpt_provider.checkpoint.manifest import ArchiveManifest
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.checkpoint.path import PathChoice
from airflow_ckpt_provider.checkpoint.report import UpgradeReport
from airflow_ckpt_provider.checkpoint.rollback import RollbackHandover, RollbackHandoverUnread, rollback_result
from airflow_ckpt_provider.checkpoint.state import ExportedStore, StateExport, StateManifest
from airflow_ckpt_provider.checkpoint.stop import StopResult
from airflow_ckpt_provider.checkpoint.verify import VerifyResult
from airflow_ckpt_provider.operators.compat import verdict_markdown

# -- what this release writes, as it wrote it ------------------------------------------------------

HANDOVER_RESULT_REWIND = (
    '{"handover":{"batch_id":41,"checkpoint_uri":"s3a://lake/ck/orders-v1","format":1,"from_initial":false,'
    '"in_flight_batch":42,"query_id":"9abfa032-811f-4801-b1cb-101f6a0769c2","sources":[{"index":0,'
    '"kind":"kafka","name":null,"offsets":{"orders":{"0":23,"1":7}},"raw":"{\\"orders\\":{\\"1\\":7,'
    '\\"0\\":23}}"},{"index":1,"kind":"rate","name":null,"offsets":11,"raw":"11"}],'
    '"taken_at":"2026-11-21T19:47:00.000001+00:00"},"reconciliation":{"acceptDataLoss":false,'
    '"addedPartitions":[],"expired":[],"startingOffsets":{"orders":{"0":20,"1":5}}},'
    '"start_plan":{"choice":{"mode":"rewind_to_batch","value":"39"},"partitions":[{"partition":0,'
    '"reprocessed":3,"resume_at":23,"skipped":0,"start_at":20,"topic":"orders"},{"partition":1,'
    '"reprocessed":2,"resume_at":7,"skipped":0,"start_at":5,"topic":"orders"}],"reprocessed":5,"skipped":0,'
    '"starting_offsets":{"orders":{"0":20,"1":5}}},"starting_offsets":"{\\"orders\\":{\\"0\\":20,'
    '\\"1\\":5}}"}'
)

HANDOVER = (
    '{"batch_id":41,"checkpoint_uri":"s3a://lake/ck/orders-v1","format":1,"from_initial":false,'
    '"in_flight_batch":42,"query_id":"9abfa032-811f-4801-b1cb-101f6a0769c2","sources":[{"index":0,'
    '"kind":"kafka","name":null,"offsets":{"orders":{"0":23,"1":7}},"raw":"{\\"orders\\":{\\"1\\":7,'
    '\\"0\\":23}}"},{"index":1,"kind":"rate","name":null,"offsets":11,"raw":"11"}],'
    '"taken_at":"2026-11-21T19:47:00.000001+00:00"}'
)

HANDOVER_HELD = (
    '{"batch_id":3,"checkpoint_uri":"/ck","format":1,"from_initial":false,'
    '"held_by_sink":"delta txn appId=q version=3","in_flight_batch":null,"query_id":"q",'
    '"sources":[{"index":0,"kind":"kafka","name":null,"offsets":{"orders":{"0":30}},'
    '"raw":"{\\"orders\\":{\\"0\\":30}}"}],"taken_at":"2026-11-21T19:47:00+00:00"}'
)

HANDOVER_RESULT = (
    '{"handover":{"batch_id":41,"checkpoint_uri":"s3a://lake/ck/orders-v1","format":1,"from_initial":false,'
    '"in_flight_batch":42,"query_id":"9abfa032-811f-4801-b1cb-101f6a0769c2","sources":[{"index":0,'
    '"kind":"kafka","name":null,"offsets":{"orders":{"0":23,"1":7}},"raw":"{\\"orders\\":{\\"1\\":7,'
    '\\"0\\":23}}"},{"index":1,"kind":"rate","name":null,"offsets":11,"raw":"11"}],'
    '"taken_at":"2026-11-21T19:47:00.000001+00:00"},"reconciliation":{"acceptDataLoss":false,'
    '"addedPartitions":[{"partition":2,"topic":"orders"}],"expired":[],"startingOffsets":{"orders":{"0":23,'
    '"1":7,"2":-2}}},"sink":{"cut_batch":null,"disposition":"none","exact":true,"record":null,"skipped":[],'
    '"twice":[],"why":"no batch was cut"},"starting_offsets":"{\\"orders\\":{\\"0\\":23,\\"1\\":7,'
    '\\"2\\":-2}}"}'
)

ARCHIVE_MANIFEST = (
    '{"archive_uri":"s3a://lake/archive/orders/20261121T194700Z-up-0123456789ab",'
    '"completed_at":"2026-11-21T19:47:05+00:00","created_by":"airflow","dag_run_id":"manual__1",'
    '"empty_dirs":["state"],"extra":{"ticket":"OPS-1"},"file_count":2,"files":[{"path":"metadata",'
    '"sha256":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":45},'
    '{"path":"offsets/41","sha256":"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",'
    '"size":120}],"format":1,"handover":{"batch_id":41,"checkpoint_uri":"s3a://lake/ck/orders-v1",'
    '"format":1,"from_initial":false,"in_flight_batch":42,'
    '"query_id":"9abfa032-811f-4801-b1cb-101f6a0769c2","sources":[{"index":0,"kind":"kafka","name":null,'
    '"offsets":{"orders":{"0":23,"1":7}},"raw":"{\\"orders\\":{\\"1\\":7,\\"0\\":23}}"},{"index":1,'
    '"kind":"rate","name":null,"offsets":11,"raw":"11"}],"taken_at":"2026-11-21T19:47:00.000001+00:00"},'
    '"hash":"sha256","last_committed_batch":41,"name":"20261121T194700Z-up-0123456789ab",'
    '"provider_version":"0.1.0","query_id":"9abfa032-811f-4801-b1cb-101f6a0769c2","reason":"upgrade",'
    '"source_uri":"s3a://lake/ck/orders-v1","spark_conf":{"spark.sql.shuffle.partitions":"4"},'
    '"started_at":"2026-11-21T19:47:01+00:00","stream_name":"orders","total_bytes":165,'
    '"upgrade_id":"up-0123456789ab"}'
)

STATE_MANIFEST = r'''{
 "batch_id": 41,
 "batch_watermark_ms": 1000,
 "checkpoint_format_version": 1,
 "checkpoint_uri": "s3a://lake/ck/orders-v1",
 "created_at": "2026-11-21T19:47:03+00:00",
 "format": 1,
 "handover": {
  "batch_id": 41,
  "checkpoint_uri": "s3a://lake/ck/orders-v1",
  "format": 1,
  "from_initial": false,
  "in_flight_batch": 42,
  "query_id": "9abfa032-811f-4801-b1cb-101f6a0769c2",
  "sources": [
   {
    "index": 0,
    "kind": "kafka",
    "name": null,
    "offsets": {
     "orders": {
      "0": 23,
      "1": 7
     }
    },
    "raw": "{\"orders\":{\"1\":7,\"0\":23}}"
   },
   {
    "index": 1,
    "kind": "rate",
    "name": null,
    "offsets": 11,
    "raw": "11"
   }
  ],
  "taken_at": "2026-11-21T19:47:00.000001+00:00"
 },
 "next_batch_watermark_ms": 2000,
 "query_id": "9abfa032-811f-4801-b1cb-101f6a0769c2",
 "spark_version": "4.2.0",
 "state_store_provider": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
 "stores": [
  {
   "files": [
    {
     "bytes": 812,
     "path": "state/0/default/part-0.parquet",
     "rows": 3,
     "sha256": "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
    }
   ],
   "key_schema": {
    "fields": [
     {
      "metadata": {},
      "name": "user",
      "nullable": true,
      "type": "string"
     }
    ],
    "type": "struct"
   },
   "num_partitions": 2,
   "operator_id": 0,
   "operator_name": "stateStoreSave",
   "path": "state/0/default",
   "renamed_fields": {
    "value.sum_4": "value.sum"
   },
   "rows": 3,
   "state_variable": null,
   "store_name": "default",
   "value_schema": {
    "fields": [
     {
      "metadata": {},
      "name": "sum_4",
      "nullable": true,
      "type": "long"
     }
    ],
    "type": "struct"
   },
   "void_fields": [
    "value.__dummy__"
   ]
  }
 ],
 "upgrade_id": "up-0123456789ab"
}'''

STOP_RESULT = (
    '{"ack":{"boundary_at":"2026-11-21T19:46:58.500+00:00","last_committed_batch":41,'
    '"last_planned_batch":41,"outcome":"CLEAN","query_id":"9abfa032-811f-4801-b1cb-101f6a0769c2",'
    '"request_id":"r1","run_id":"run1","seen_at":"2026-11-21T19:46:57.000+00:00",'
    '"stopped_at":"2026-11-21T19:46:59.100+00:00"},"checkpoint_uri":"s3a://lake/ck/orders-v1",'
    '"detail":null,"escalation":null,"interrupted_batch":null,"last_committed_batch":41,'
    '"last_planned_batch":41,"outcome":"graceful","query_id":"9abfa032-811f-4801-b1cb-101f6a0769c2",'
    '"request_id":"r1","timeline":{"batch boundary found":1.5,"driver saw the request":0.4,'
    '"quiet check":1.0},"waited_s":3.214}'
)

STOP_NOTHING = (
    '{"ack":null,"checkpoint_uri":"/ck","detail":"no heartbeat was ever written","escalation":null,'
    '"interrupted_batch":null,"last_committed_batch":null,"last_planned_batch":null,'
    '"outcome":"no_heartbeat","query_id":null,"request_id":null,"timeline":null,"waited_s":0.0}'
)

VERIFY_RESULT = (
    '{"checkpoint_uri":"s3a://lake/ck/orders-v2","last_committed_batch":1,"ok":true,'
    '"partitions":[{"broker_earliest":0,"given":23,"handed_over":23,"partition":0,"recorded":23,'
    '"status":"exact","topic":"orders"},{"broker_earliest":null,"given":7,"handed_over":7,"partition":1,'
    '"recorded":7,"status":"exact","topic":"orders"}],"progress_batches":[1],"query_id":"4c0e",'
    '"recorded":{"orders":{"0":23,"1":7}},"source":0,"starting_offsets":{"orders":{"0":23,"1":7}}}'
)

VERIFY_STEP = (
    '{"checkpoint_uri": "s3a://lake/ck/orders-v2", "last_committed_batch": 1, "ok": true,'
    ' "partitions": [{"broker_earliest": 0, "given": 23, "handed_over": 23, "partition": 0, "recorded": 23,'
    ' "status": "exact", "topic": "orders"}, {"broker_earliest": null, "given": 7, "handed_over": 7,'
    ' "partition": 1, "recorded": 7, "status": "exact", "topic": "orders"}], "progress_batches": [1],'
    ' "query_id": "4c0e", "recorded": {"orders": {"0": 23, "1": 7}}, "sink": {"app_id": "4c0e",'
    ' "batches": {"0": 5, "1": 6}, "checked": true, "note": "", "sink": {"kind": "delta",'
    ' "location": "s3a://lake/t", "new_txn_app_id": null, "txn_app_id": null}}, "source": 0,'
    ' "starting_offsets": {"orders": {"0": 23, "1": 7}}}'
)

VERIFY_CAUGHT_UP = (
    '{"caught_up": "orders-0: at 23, log end 23", "checkpoint_uri": "s3a://lake/ck/orders-v2",'
    ' "last_committed_batch": 1, "ok": true, "partitions": [{"broker_earliest": 0, "given": 23,'
    ' "handed_over": 23, "partition": 0, "recorded": 23, "status": "exact", "topic": "orders"},'
    ' {"broker_earliest": null, "given": 7, "handed_over": 7, "partition": 1, "recorded": 7,'
    ' "status": "exact", "topic": "orders"}], "progress_batches": [], "query_id": "4c0e",'
    ' "recorded": {"orders": {"0": 23, "1": 7}}, "sink": {"app_id": null, "batches": {}, "checked": false,'
    ' "note": "no sink declared", "sink": {"kind": "", "location": "", "new_txn_app_id": null,'
    ' "txn_app_id": null}}, "source": 0, "starting_offsets": {"orders": {"0": 23, "1": 7}}}'
)

PATH_CHOICE = (
    '{"in_place": true, "mode": "auto", "path": "in place", "reason": "mode auto,'
    ' and the compatibility check ran ..."}'
)

PATH_STEP = (
    '{"in_place": true, "mode": "auto", "path": "in place", "reason": "mode auto,'
    ' and the compatibility check ran ...",'
    ' "summary_md": "**upgrade path: a plain restart of the new version on the old checkpoint (no new checkpoint,'
    " no handover offsets: Spark resumes after the old version's last committed batch); mode auto,"
    ' and the compatibility check ran ...**\\n"}'
)

STATE_EXPORT = (
    '{"batch_id": 41, "bytes": 812, "location": "s3a://lake/archive/orders/_state/up-0123456789ab",'
    ' "operators": [0], "rows": 3, "seconds": 12.345, "skipped": "", "stores": 1}'
)

STATE_EXPORT_SKIPPED = (
    '{"batch_id": null, "bytes": 0, "location": "", "operators": [], "rows": 0, "seconds": 0.0,'
    ' "skipped": "stateless query: no state to carry", "stores": 0}'
)

ROLLBACK = (
    '{"again_committed": 0, "again_planned": 1, "checkpoint": "s3a://lake/ck/orders-v2.rollback",'
    ' "mode": "forward", "new_committed_batch": 3, "new_planned_batch": 4, "new_started_at_handover": true,'
    ' "partitions": [{"again_committed": [0, 0], "again_committed_count": 0, "again_planned": [30, 31],'
    ' "again_planned_count": 1, "handover": 23, "new_committed_end": 30, "new_planned_end": 31,'
    ' "new_start": 23, "partition": 0, "reread_by_new": 0, "resume": 30, "skipped_by_new": 0,'
    ' "topic": "orders"}, {"again_committed": [0, 0], "again_committed_count": 0, "again_planned": [0, 0],'
    ' "again_planned_count": 0, "handover": 7, "new_committed_end": 9, "new_planned_end": 9,'
    ' "new_start": 7, "partition": 1, "reread_by_new": 0, "resume": 9, "skipped_by_new": 0,'
    ' "topic": "orders"}], "resume": "{\\"orders\\":{\\"0\\":30,\\"1\\":9}}",'
    ' "starting_offsets": "{\\"orders\\":{\\"0\\":30,\\"1\\":9}}",'
    ' "summary": ["rollback (forward): the old version restarts on the fresh checkpoint s3a://lake/ck/orders-v2.rollback with startingOffsets {\\"orders\\":{\\"0\\":30,'
    '\\"1\\":9}}.", "The new version committed up to batch 3; batch 4 was planned,'
    ' not committed (its sink may hold part of its rows).",'
    ' "The old version processes again 0 records the new version committed,'
    ' and 1 of its uncommitted batch (written twice only where the sink holds rows of that batch).",'
    ' "orders-0: again [30, 31) uncommitted (1)"]}'
)

#: a restore rollback whose new checkpoint could not be read (the old version restarts anyway)
ROLLBACK_UNREAD = (
    '{"checkpoint": "s3a://lake/ck/orders-v1", "error": "corrupt checkpoint file: found offsets/4 not JSON; '
    'expected a Spark offset log entry", "mode": "restore"}'
)

#: the compatibility check step's result (XCom): the verdict with its trials and the approval's Markdown
COMPAT_STEP = (
    '{"driver_error": "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing '
    'state key schema.", "error_class": "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "headline": "needs a new '
    "checkpoint: a stateful operator's state key schema changed (grouping, deduplication or join keys) "
    '(operator 0); the new version starts on a new checkpoint at the handover with the old query\'s state", '
    '"in_place_ok": false, "log_tail": "ERROR driver stopped", "migrated_ok": true, "new": "struct<user:string,regi'
    'on:string>", "new_version_starts": true, "old": "struct<user:string>", "operator": "0", "rule": "state_key_sch'
    'ema", "settings": [{"effect": "no_state", "migration": "", "needs_new_checkpoint": false, "new": "unsaferow", '
    '"old": "unsaferow", "recorded": "offsets/N metadata conf (absent: unsaferow)", "setting": "spark.sql.streaming'
    '.stateStore.encodingFormat", "spark_error": ""}], "state_batch": 41, "state_rows": 3, "summary_md": '
    '"### Compatibility check (trial runs on copies)\\n\\n- needs a new checkpoint: a stateful operator\'s '
    'state key schema changed (grouping, deduplication or join keys) (operator 0); the new version starts '
    "on a new checkpoint at the handover with the old query's state\\n- old: struct<user:string>\\n- new: "
    'struct<user:string,region:string>\\n- Spark: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key '
    'schema does not match existing state key schema.\\n- setting spark.sql.streaming.stateStore.encodingFormat: '
    'unsaferow -> unsaferow: the query keeps no state: a restart on the old checkpoint is not affected\\n- '
    'migrated trial given the old query\'s state after batch 41 (3 rows), as the upgrade will give it\\n", '
    '"trials": [{"batches_committed": 0, "contract_honoured": true, "error_class": "STATE_STORE_KEY_SCHEMA_NOT_COMP'
    'ATIBLE", "error_message": "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match '
    'existing state key schema.", "kind": "in_place", "log_tail": "ERROR driver stopped", "operators": '
    '[{"detail": "user", "name": "StateStoreSaveExec", "operator_id": 0}], "seconds": 41.2, "started": '
    'false}, {"batches_committed": 2, "contract_honoured": true, "error_class": "", "error_message": "", '
    '"kind": "migrated", "log_tail": "", "operators": [{"detail": "user, region", "name": "StateStoreSaveExec", '
    '"operator_id": 0}], "seconds": 38.0, "started": true}]}'
)

#: the same verdict as the journal's planning records it (no trials, log tail or Markdown)
COMPAT_RECORDED = (
    '{"driver_error": "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing '
    'state key schema.", "error_class": "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "headline": "needs a new '
    "checkpoint: a stateful operator's state key schema changed (grouping, deduplication or join keys) "
    '(operator 0); the new version starts on a new checkpoint at the handover with the old query\'s state", '
    '"in_place_ok": false, "migrated_ok": true, "new": "struct<user:string,region:string>", "new_version_starts": '
    'true, "old": "struct<user:string>", "operator": "0", "rule": "state_key_schema", "settings": [{"effect": '
    '"no_state", "migration": "", "needs_new_checkpoint": false, "new": "unsaferow", "old": "unsaferow", '
    '"recorded": "offsets/N metadata conf (absent: unsaferow)", "setting": "spark.sql.streaming.stateStore.encoding'
    'Format", "spark_error": ""}], "state_batch": 41, "state_rows": 3}'
)

#: the compatibility check step's result when it tried nothing, as the journal records it
COMPAT_SKIPPED = '{"skipped": "switched off"}'

REPORT = r'''{
  "archive": "s3a://lake/archive/orders/20261121T194700Z-up-0123456789ab",
  "audit": null,
  "compatibility": {
    "headline": "in place OK"
  },
  "created_at": "2026-11-21T19:48:00+00:00",
  "downtime_by_step": {},
  "downtime_s": 2.5,
  "handover": {
    "batch_id": 41,
    "checkpoint_uri": "s3a://lake/ck/orders-v1",
    "format": 1,
    "from_initial": false,
    "in_flight_batch": 42,
    "query_id": "9abfa032-811f-4801-b1cb-101f6a0769c2",
    "sources": [
      {
        "index": 0,
        "kind": "kafka",
        "name": null,
        "offsets": {
          "orders": {
            "0": 23,
            "1": 7
          }
        },
        "raw": "{\"orders\":{\"1\":7,\"0\":23}}"
      },
      {
        "index": 1,
        "kind": "rate",
        "name": null,
        "offsets": 11,
        "raw": "11"
      }
    ],
    "taken_at": "2026-11-21T19:47:00.000001+00:00"
  },
  "new_batches": [
    {
      "batch_id": 0,
      "committed_at": 104.0,
      "input_rows": null,
      "planned_at_ms": 3000
    }
  ],
  "new_checkpoint": "s3a://lake/ck/orders-v2",
  "notes": [
    "a note"
  ],
  "old_batches": [
    {
      "batch_id": 40,
      "committed_at": 100.0,
      "input_rows": 30,
      "planned_at_ms": 1000
    },
    {
      "batch_id": 41,
      "committed_at": 101.5,
      "input_rows": 12,
      "planned_at_ms": 2000
    }
  ],
  "old_checkpoint": "s3a://lake/ck/orders-v1",
  "outcome": "upgraded",
  "path": "upgrade path: a plain restart of the new version on the old checkpoint (no new checkpoint, no handover offsets: Spark resumes after the old version's last committed batch); mode auto, and the compatibility check ran ...",
  "ready_at": 103.5,
  "rollback": null,
  "run_id": "manual__1",
  "sink": {
    "cut_batch": null,
    "disposition": "none",
    "exact": true,
    "record": null,
    "skipped": [],
    "twice": [],
    "why": "no batch was cut"
  },
  "start_plan": null,
  "starting_offsets": "{\"orders\":{\"0\":23,\"1\":7}}",
  "state_export": {
    "batch_id": 41,
    "bytes": 812,
    "location": "s3a://lake/archive/orders/_state/up-0123456789ab",
    "operators": [
      0
    ],
    "rows": 3,
    "seconds": 12.345,
    "skipped": "",
    "stores": 1
  },
  "steps": [
    {
      "ended_at": "2026-11-21T19:46:58.500000+00:00",
      "name": "graceful_stop",
      "seconds": 2.5,
      "started_at": "2026-11-21T19:46:56+00:00",
      "state": "success"
    },
    {
      "ended_at": null,
      "name": "archive",
      "seconds": 0.7,
      "started_at": null,
      "state": "success"
    }
  ],
  "stop_requested_at": 101.0,
  "stream": "orders"
}'''


Decode = Callable[[Any], Any]


def compact(value: Any) -> str:  # noqa: ANN401
    return json.dumps(value.to_dict(), sort_keys=True, separators=(",", ":"))


def xcom(value: Any) -> str:  # noqa: ANN401 - the operators' dicts, as json.dumps writes them
    return json.dumps(value.to_dict(), sort_keys=True)


def path_step(choice: PathChoice) -> str:
    return json.dumps({**choice.to_dict(), "summary_md": f"**{choice.describe()}**\n"}, sort_keys=True)


def compat_step(verdict: CompatibilityVerdict) -> str:
    """As the compatibility check returns it."""
    return json.dumps({**verdict.to_dict(), "summary_md": verdict_markdown(verdict)}, sort_keys=True)


def compat_recorded(verdict: CompatibilityVerdict) -> str:
    """As the compatibility check records it in the journal's planning."""
    return json.dumps({k: v for k, v in verdict.to_dict().items() if k not in ("trials", "log_tail")}, sort_keys=True)


#: name -> (decoder, the text this release wrote, how it wrote it)
WRITTEN: dict[str, tuple[Decode, str, Callable[[Any], str]]] = {
    "archive manifest.json": (ArchiveManifest.from_json, ARCHIVE_MANIFEST, lambda m: m.to_json()),
    "handover": (Handover.from_json, HANDOVER, lambda h: h.to_json()),
    "handover held by the sink": (Handover.from_json, HANDOVER_HELD, lambda h: h.to_json()),
    "handover step": (HandoverResult.from_json, HANDOVER_RESULT, lambda r: r.to_json()),
    "handover step, rewound": (HandoverResult.from_json, HANDOVER_RESULT_REWIND, lambda r: r.to_json()),
    "state-manifest.json": (StateManifest.from_json, STATE_MANIFEST, lambda m: m.to_json()),
    "stop step": (StopResult.from_json, STOP_RESULT, lambda r: r.to_json()),
    "stop step, nothing stopped": (StopResult.from_json, STOP_NOTHING, lambda r: r.to_json()),
    "verify result": (VerifyResult.from_json, VERIFY_RESULT, lambda r: r.to_json()),
    "verify step, with the sink": (VerifyResult.from_json, VERIFY_STEP, xcom),
    "verify step, caught up": (VerifyResult.from_json, VERIFY_CAUGHT_UP, xcom),
    "path choice": (PathChoice.from_json, PATH_CHOICE, lambda c: c.to_json()),
    "path step": (PathChoice.from_json, PATH_STEP, path_step),
    "state export step": (StateExport.from_json, STATE_EXPORT, xcom),
    "state export step, skipped": (StateExport.from_json, STATE_EXPORT_SKIPPED, xcom),
    "rollback handover step": (RollbackHandover.from_json, ROLLBACK, lambda r: r.to_json()),
    "rollback handover step, by its one decoder": (rollback_result, ROLLBACK, lambda r: r.to_json()),
    "rollback handover step, new checkpoint unread": (rollback_result, ROLLBACK_UNREAD, lambda r: r.to_json()),
    "compatibility step": (compatibility_result, COMPAT_STEP, compat_step),
    "compatibility step, as recorded": (compatibility_result, COMPAT_RECORDED, compat_recorded),
    "compatibility step, skipped": (compatibility_result, COMPAT_SKIPPED, lambda r: r.to_json()),
    "report/upgrade-report.json": (UpgradeReport.from_json, REPORT, lambda r: r.to_json()),
}


#: The values written without a format number by the release before this one (the texts above), which
#: this release writes with format 1 (UNVERSIONED, format 0, is how it reads the texts above).
VERSIONED_SINCE = frozenset({
    "handover step", "handover step, rewound", "stop step", "stop step, nothing stopped", "verify result",
    "verify step, with the sink", "verify step, caught up", "path choice", "path step", "state export step",
    "state export step, skipped", "rollback handover step", "rollback handover step, by its one decoder",
    "rollback handover step, new checkpoint unread", "compatibility step", "compatibility step, as recorded",
    "compatibility step, skipped", "report/upgrade-report.json"})


def without_formats(value: Any) -> Any:  # noqa: ANN401 - any JSON value
    """``value`` without the format numbers of values that had none before (format 1), at any depth."""
    if isinstance(value, dict):
        return {k: without_formats(v) for k, v in value.items() if not (k == "format" and v == 1)}
    if isinstance(value, list):
        return [without_formats(v) for v in value]
    return value


@pytest.mark.parametrize("name", WRITTEN)
def test_what_the_previous_release_wrote_is_read_back_and_written_again_with_its_format(name: str) -> None:
    """The texts above are read as they were written (the values that had no format number are
    read as format 0), and written again the same but for the format numbers this release adds;
    what this release writes reads back to the same value and is written byte for byte again."""
    decode, text, write = WRITTEN[name]
    value = decode(text)
    assert decode(json.loads(text)) == value == decode(text.encode())
    written = write(value)
    if name in VERSIONED_SINCE:
        assert json.loads(written)["format"] == 1 and "format" not in json.loads(text)
        assert without_formats(json.loads(written)) == without_formats(json.loads(text))
        assert decode(written) == value and write(decode(written)) == written
    else:
        assert written == text, "the writer's bytes changed: a reader of the previous release must read them"


def test_the_written_values_hold_what_was_written() -> None:
    manifest = ArchiveManifest.from_json(ARCHIVE_MANIFEST)
    assert manifest.handover == Handover.from_json(HANDOVER) and manifest.total_bytes == 165
    assert StateManifest.from_json(STATE_MANIFEST).stores[0].renamed_fields == {"value.sum_4": "value.sum"}
    assert StopResult.from_json(STOP_RESULT).timeline == {"batch boundary found": 1.5, "driver saw the request": 0.4,
                                                          "quiet check": 1.0}
    step = VerifyResult.from_json(VERIFY_CAUGHT_UP)
    assert step.caught_up == "orders-0: at 23, log end 23" and step.sink is not None and not step.sink["checked"]
    assert VerifyResult.from_json(VERIFY_RESULT).sink is None
    assert PathChoice.from_json(PATH_STEP) == PathChoice.from_json(PATH_CHOICE)
    assert StateExport.from_json(STATE_EXPORT) == StateExport(
        location="s3a://lake/archive/orders/_state/up-0123456789ab", batch_id=41, stores=1, rows=3, size=812,
        seconds=12.345, operators=(0,))
    rewound = HandoverResult.from_json(HANDOVER_RESULT_REWIND)
    assert rewound.start_plan is not None and rewound.start_plan.reprocessed == 5
    report = UpgradeReport.from_json(REPORT)
    assert report.old_batches[1].input_rows == 12 and report.steps[1].started_at is None
    assert rollback_result(ROLLBACK) == RollbackHandover.from_json(ROLLBACK)
    assert rollback_result(ROLLBACK_UNREAD) == RollbackHandoverUnread(
        checkpoint="s3a://lake/ck/orders-v1", error=json.loads(ROLLBACK_UNREAD)["error"], mode=RollbackMode.RESTORE)
    step = compatibility_result(COMPAT_STEP)
    assert isinstance(step, CompatibilityVerdict) and step.rule is Rule.STATE_KEY_SCHEMA and step.state_rows == 3
    assert [t.kind for t in step.trials] == [TrialKind.IN_PLACE, TrialKind.MIGRATED] and step.trials[0].started is False
    assert step.trials[1].operators == (StatefulOperator(0, "StateStoreSaveExec", "user, region"),)
    assert step.settings[0].setting is FixedSetting.ENCODING_FORMAT and step.settings[0].effect is Effect.NO_STATE
    recorded = compatibility_result(COMPAT_RECORDED)
    assert isinstance(recorded, CompatibilityVerdict) and recorded == replace(step, log_tail="") and not recorded.trials
    assert compatibility_result(COMPAT_SKIPPED) == CompatibilitySkipped("switched off")


# -- round trips -----------------------------------------------------------------------------------

VALUES = [WRITTEN[name][0](WRITTEN[name][1]) for name in WRITTEN]


@pytest.mark.parametrize("value", VALUES, ids=list(WRITTEN))
def test_round_trips(value: Any) -> None:  # noqa: ANN401
    kind = type(value)
    text = value.to_json() if hasattr(value, "to_json") else json.dumps(value.to_dict())
    assert kind.from_json(text) == value
    assert kind.from_json(value.to_dict()) == value


# -- refusals --------------------------------------------------------------------------------------


def edit(text: str, change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    """The JSON object of ``text`` after ``change`` (which edits it in place)."""
    value = copy.deepcopy(json.loads(text))
    change(value)
    return value


def with_(text: str, **changes: Any) -> dict[str, Any]:  # noqa: ANN401
    return edit(text, lambda v: v.update(changes))


def without(text: str, key: str) -> dict[str, Any]:
    return edit(text, lambda v: v.pop(key))


def first(key: str, **changes: Any) -> Callable[[dict[str, Any]], object]:  # noqa: ANN401
    """A change of the first entry of the array ``key``."""
    return lambda v: v[key][0].update(changes)


#: (case, decoder, input, the value's own error, what its ``found`` says)
REFUSED: list[tuple[str, Decode, Any, type[CheckpointError], str]] = [
    # Handover: format 1, exactly its keys
    ("handover: unknown key", Handover.from_json, with_(HANDOVER, extra=1), InvalidHandover,
     "unknown key(s) 'extra'"),
    ("handover: a number as text", Handover.from_json, with_(HANDOVER, batch_id="41"), InvalidHandover,
     "'batch_id' of JSON string ('41')"),
    ("handover: text of a number", Handover.from_json, with_(HANDOVER, checkpoint_uri=5), InvalidHandover,
     "'checkpoint_uri' of JSON integer"),
    ("handover: a boolean as text", Handover.from_json, with_(HANDOVER, from_initial="no"), InvalidHandover,
     "'from_initial' of JSON string"),
    ("handover: an object for an array", Handover.from_json, with_(HANDOVER, sources={}), InvalidHandover,
     "'sources' of JSON object"),
    ("handover: no taken_at", Handover.from_json, without(HANDOVER, "taken_at"), InvalidHandover,
     "without 'taken_at'"),
    ("handover: a newer format", Handover.from_json, with_(HANDOVER, format=2), InvalidHandover,
     "format 2 (written by a newer release"),
    ("handover: no format", Handover.from_json, without(HANDOVER, "format"), InvalidHandover,
     "without a format number"),
    ("handover: a source's unknown key", Handover.from_json, edit(HANDOVER, first("sources", extra=1)),
     InvalidHandover, "handover source with unknown key(s) 'extra'"),
    ("handover: a source's index as text", Handover.from_json, edit(HANDOVER, first("sources", index="0")),
     InvalidHandover, "'index' of JSON string"),
    ("handover: duplicate keys", Handover.from_json, HANDOVER.replace('"format":1', '"format":1,"format":1'),
     InvalidHandover, "duplicate key 'format'"),
    # HandoverResult: the handover by its codec
    ("handover result: unknown key", HandoverResult.from_json, with_(HANDOVER_RESULT, extra=1), InvalidHandover,
     "unknown key(s) 'extra'"),
    ("handover result: offsets as an object", HandoverResult.from_json,
     with_(HANDOVER_RESULT, starting_offsets={"orders": {"0": 23}}), InvalidHandover,
     "'starting_offsets' of JSON object"),
    ("handover result: offsets that are not offsets", HandoverResult.from_json,
     with_(HANDOVER_RESULT, starting_offsets='{"orders": 5}'), InvalidHandover, "'starting_offsets' = "),
    ("handover result: a reconciliation array", HandoverResult.from_json, with_(HANDOVER_RESULT, reconciliation=[]),
     InvalidHandover, "'reconciliation' of JSON array"),
    ("handover result: a sink of text", HandoverResult.from_json, with_(HANDOVER_RESULT, sink="none"),
     InvalidHandover, "'sink' of JSON string"),
    ("handover result: its handover's batch as text", HandoverResult.from_json,
     edit(HANDOVER_RESULT, lambda v: v["handover"].update(batch_id="41")), InvalidHandover,
     "'batch_id' of JSON string"),
    ("handover result: a newer format", HandoverResult.from_json, with_(HANDOVER_RESULT, format=2),
     InvalidHandover, "format 2 (written by a newer release"),
    # ArchiveManifest: format 1, sha256, every key
    ("manifest: unknown key", ArchiveManifest.from_json, with_(ARCHIVE_MANIFEST, extra_key=1),
     InvalidArchiveManifest, "unknown key(s) 'extra_key'"),
    ("manifest: a count as text", ArchiveManifest.from_json, with_(ARCHIVE_MANIFEST, total_bytes="165"),
     InvalidArchiveManifest, "'total_bytes' of JSON string ('165')"),
    ("manifest: a file's size as text", ArchiveManifest.from_json,
     edit(ARCHIVE_MANIFEST, first("files", size="45")), InvalidArchiveManifest, "'size' of JSON string"),
    ("manifest: a file's unknown key", ArchiveManifest.from_json,
     edit(ARCHIVE_MANIFEST, first("files", mode=420)), InvalidArchiveManifest, "unknown key(s) 'mode'"),
    ("manifest: an empty dir that is a number", ArchiveManifest.from_json, with_(ARCHIVE_MANIFEST, empty_dirs=[1]),
     InvalidArchiveManifest, "item 0 of JSON integer"),
    ("manifest: extra of null", ArchiveManifest.from_json, with_(ARCHIVE_MANIFEST, extra=None),
     InvalidArchiveManifest, "'extra' of JSON null"),
    ("manifest: another hash", ArchiveManifest.from_json, with_(ARCHIVE_MANIFEST, hash="md5"),
     InvalidArchiveManifest, "'hash' = 'md5', not valid"),
    ("manifest: its handover's batch as text", ArchiveManifest.from_json,
     edit(ARCHIVE_MANIFEST, lambda v: v["handover"].update(batch_id="41")), InvalidArchiveManifest,
     "'batch_id' of JSON string"),
    ("manifest: no reason", ArchiveManifest.from_json, without(ARCHIVE_MANIFEST, "reason"), InvalidArchiveManifest,
     "without 'reason'"),
    ("manifest: a newer format", ArchiveManifest.from_json, with_(ARCHIVE_MANIFEST, format=2),
     InvalidArchiveManifest, "format 2 (written by a newer release"),
    ("manifest: counts that are not the files'", ArchiveManifest.from_json, with_(ARCHIVE_MANIFEST, file_count=3),
     InvalidArchiveManifest, "file_count 3 / total_bytes 165"),
    # StateManifest: format 1, its stores and files by their codecs, its handover by the handover's
    ("state manifest: unknown key", StateManifest.from_json, with_(STATE_MANIFEST, rows=3), StateExportCorrupt,
     "unknown key(s) 'rows'"),
    ("state manifest: a batch as text", StateManifest.from_json, with_(STATE_MANIFEST, batch_id="41"),
     StateExportCorrupt, "'batch_id' of JSON string ('41')"),
    ("state manifest: a store's rows as text", StateManifest.from_json,
     edit(STATE_MANIFEST, first("stores", rows="3")), StateExportCorrupt, "ExportedStore 'rows' of JSON string"),
    ("state manifest: a store without its name", StateManifest.from_json,
     edit(STATE_MANIFEST, lambda v: v["stores"][0].pop("store_name")), StateExportCorrupt,
     "ExportedStore without 'store_name'"),
    ("state manifest: a file's sha256 of a number", StateManifest.from_json,
     edit(STATE_MANIFEST, lambda v: v["stores"][0]["files"][0].update(sha256=5)), StateExportCorrupt,
     "ExportedFile 'sha256' of JSON integer"),
    ("state manifest: a renamed field of a number", StateManifest.from_json,
     edit(STATE_MANIFEST, first("stores", renamed_fields={"value.sum_4": 4})), StateExportCorrupt,
     "'renamed_fields' = "),
    ("state manifest: a handover that is not one", StateManifest.from_json,
     with_(STATE_MANIFEST, handover={"batch_id": 41}), StateExportCorrupt, "Handover without a format number"),
    ("state manifest: no upgrade id", StateManifest.from_json, without(STATE_MANIFEST, "upgrade_id"),
     StateExportCorrupt, "without 'upgrade_id'"),
    ("state manifest: a newer format", StateManifest.from_json, with_(STATE_MANIFEST, format=2), StateExportCorrupt,
     "format 2 (written by a newer release"),
    # StopResult
    ("stop: unknown key", StopResult.from_json, with_(STOP_RESULT, surprise=1), InvalidStopResult,
     "unknown key(s) 'surprise'"),
    ("stop: a batch as text", StopResult.from_json, with_(STOP_RESULT, last_committed_batch="41"), InvalidStopResult,
     "'last_committed_batch' of JSON string ('41')"),
    ("stop: seconds as text", StopResult.from_json, with_(STOP_RESULT, waited_s="3.2"), InvalidStopResult,
     "'waited_s' of JSON string"),
    ("stop: an unknown outcome", StopResult.from_json, with_(STOP_RESULT, outcome="maybe"), InvalidStopResult,
     "'outcome' = 'maybe', not valid"),
    ("stop: a timeline of texts", StopResult.from_json, with_(STOP_RESULT, timeline={"quiet check": "1"}),
     InvalidStopResult, "'timeline' = "),
    ("stop: an ack that is an array", StopResult.from_json, with_(STOP_RESULT, ack=[]), InvalidStopResult,
     "'ack' of JSON array"),
    ("stop: no waited_s", StopResult.from_json, without(STOP_RESULT, "waited_s"), InvalidStopResult,
     "without 'waited_s'"),
    ("stop: a newer format", StopResult.from_json, with_(STOP_RESULT, format=2), InvalidStopResult,
     "format 2 (written by a newer release"),
    # VerifyResult: each partition by its codec
    ("verify: unknown key", VerifyResult.from_json, with_(VERIFY_RESULT, verdict="ok"), InvalidVerifyResult,
     "unknown key(s) 'verdict'"),
    ("verify: the source as text", VerifyResult.from_json, with_(VERIFY_RESULT, source="0"), InvalidVerifyResult,
     "'source' of JSON string ('0')"),
    ("verify: ok as text", VerifyResult.from_json, with_(VERIFY_RESULT, ok="yes"), InvalidVerifyResult,
     "'ok' of JSON string"),
    ("verify: offsets as text", VerifyResult.from_json, with_(VERIFY_RESULT, starting_offsets='{"orders":{}}'),
     InvalidVerifyResult, "'starting_offsets' of JSON string"),
    ("verify: recorded offsets of text", VerifyResult.from_json,
     with_(VERIFY_RESULT, recorded={"orders": {"0": "23"}}), InvalidVerifyResult, "'recorded' = "),
    ("verify: a partition's offset as text", VerifyResult.from_json,
     edit(VERIFY_RESULT, first("partitions", given="23")), InvalidVerifyResult,
     "PartitionStart 'given' of JSON string"),
    ("verify: a partition's unknown status", VerifyResult.from_json,
     edit(VERIFY_RESULT, first("partitions", status="fine")), InvalidVerifyResult, "'status' = 'fine', not valid"),
    ("verify: a progress batch as text", VerifyResult.from_json, with_(VERIFY_RESULT, progress_batches=["1"]),
     InvalidVerifyResult, "item 0 of JSON string"),
    ("verify: a sink of text", VerifyResult.from_json, with_(VERIFY_RESULT, sink="delta"), InvalidVerifyResult,
     "'sink' of JSON string"),
    ("verify: no partitions", VerifyResult.from_json, without(VERIFY_RESULT, "partitions"), InvalidVerifyResult,
     "without 'partitions'"),
    ("verify: a newer format", VerifyResult.from_json, with_(VERIFY_RESULT, format=2), InvalidVerifyResult,
     "format 2 (written by a newer release"),
    # PathChoice
    ("path: unknown key", PathChoice.from_json, with_(PATH_CHOICE, why="x"), InvalidUpgradePath,
     "unknown key(s) 'why'"),
    ("path: an unknown path", PathChoice.from_json, with_(PATH_CHOICE, path="sideways"), InvalidUpgradePath,
     "'path' = 'sideways', not valid"),
    ("path: a reason of a number", PathChoice.from_json, with_(PATH_CHOICE, reason=5), InvalidUpgradePath,
     "'reason' of JSON integer"),
    ("path: in_place as text", PathChoice.from_json, with_(PATH_CHOICE, in_place="true"), InvalidUpgradePath,
     "'in_place' of JSON string"),
    ("path: no reason", PathChoice.from_json, without(PATH_CHOICE, "reason"), InvalidUpgradePath,
     "without 'reason'"),
    ("path: a newer format", PathChoice.from_json, with_(PATH_CHOICE, format=2), InvalidUpgradePath,
     "format 2 (written by a newer release"),
    # StateExport
    ("state export: unknown key", StateExport.from_json, with_(STATE_EXPORT, size=812), InvalidStateExport,
     "unknown key(s) 'size'"),
    ("state export: rows as text", StateExport.from_json, with_(STATE_EXPORT, rows="3"), InvalidStateExport,
     "'rows' of JSON string ('3')"),
    ("state export: seconds as text", StateExport.from_json, with_(STATE_EXPORT, seconds="1.5"), InvalidStateExport,
     "'seconds' of JSON string"),
    ("state export: a batch of true", StateExport.from_json, with_(STATE_EXPORT, batch_id=True), InvalidStateExport,
     "'batch_id' of JSON boolean"),
    ("state export: operators as text", StateExport.from_json, with_(STATE_EXPORT, operators=["0"]),
     InvalidStateExport, "item 0 of JSON string"),
    ("state export: no location", StateExport.from_json, without(STATE_EXPORT, "location"), InvalidStateExport,
     "without 'location'"),
    ("state export: a newer format", StateExport.from_json, json.dumps(with_(STATE_EXPORT, format=2)),
     InvalidStateExport, "format 2 (written by a newer release"),
    # RollbackHandover: each partition by its codec
    ("rollback: unknown key", RollbackHandover.from_json, with_(ROLLBACK, error="x"), InvalidRollbackHandover,
     "unknown key(s) 'error'"),
    ("rollback: an unknown mode", RollbackHandover.from_json, with_(ROLLBACK, mode="sideways"),
     InvalidRollbackHandover, "'mode' = 'sideways', not valid"),
    ("rollback: resume as an object", RollbackHandover.from_json, with_(ROLLBACK, resume={"orders": {"0": 30}}),
     InvalidRollbackHandover, "'resume' of JSON object"),
    ("rollback: a partition's handover as text", RollbackHandover.from_json,
     edit(ROLLBACK, first("partitions", handover="23")), InvalidRollbackHandover,
     "rollback partition 'handover' of JSON string"),
    ("rollback: a range of one offset", RollbackHandover.from_json,
     edit(ROLLBACK, first("partitions", again_planned=[30])), InvalidRollbackHandover, "'again_planned' = [30]"),
    ("rollback: a summary of numbers", RollbackHandover.from_json, with_(ROLLBACK, summary=[1]),
     InvalidRollbackHandover, "item 0 of JSON integer"),
    ("rollback: no checkpoint", RollbackHandover.from_json, without(ROLLBACK, "checkpoint"), InvalidRollbackHandover,
     "without 'checkpoint'"),
    ("rollback: a newer format", RollbackHandover.from_json, with_(ROLLBACK, format=2), InvalidRollbackHandover,
     "format 2 (written by a newer release"),
    # the rollback step's result by its one decoder: the handover, or the error that kept it from being computed
    ("rollback result: unknown key", rollback_result, with_(ROLLBACK, extra=1), InvalidRollbackHandover,
     "RollbackHandover with unknown key(s) 'extra'"),
    ("rollback result: no mode", rollback_result, without(ROLLBACK, "mode"), InvalidRollbackHandover,
     "RollbackHandover without 'mode'"),
    ("rollback unread: a handover's key", rollback_result, with_(ROLLBACK_UNREAD, partitions=[]),
     InvalidRollbackHandover, "RollbackHandoverUnread with unknown key(s) 'partitions'"),
    ("rollback unread: forward", rollback_result, with_(ROLLBACK_UNREAD, mode="forward"), InvalidRollbackHandover,
     "'mode' = 'forward', not valid"),
    ("rollback unread: an error of a number", rollback_result, with_(ROLLBACK_UNREAD, error=5),
     InvalidRollbackHandover, "'error' of JSON integer"),
    ("rollback unread: no checkpoint", rollback_result, without(ROLLBACK_UNREAD, "checkpoint"),
     InvalidRollbackHandover, "RollbackHandoverUnread without 'checkpoint'"),
    ("rollback unread: a newer format", rollback_result, with_(ROLLBACK_UNREAD, format=2), InvalidRollbackHandover,
     "format 2 (written by a newer release"),
    ("rollback unread: by the handover's decoder", RollbackHandover.from_json, ROLLBACK_UNREAD,
     InvalidRollbackHandover, "unknown key(s) 'error'"),
    # the compatibility step's result by its one decoder: the verdict (each trial, operator and setting
    # by its codec), or that the check tried nothing
    ("verdict: unknown key", compatibility_result, with_(COMPAT_STEP, extra=1), InvalidVerdict,
     "CompatibilityVerdict with unknown key(s) 'extra'"),
    ("verdict: in_place_ok as text", compatibility_result, with_(COMPAT_RECORDED, in_place_ok="false"),
     InvalidVerdict, "'in_place_ok' of JSON string"),
    ("verdict: an unknown rule", compatibility_result, with_(COMPAT_RECORDED, rule="sideways"), InvalidVerdict,
     "'rule' = 'sideways', not valid"),
    ("verdict: state rows as text", compatibility_result, with_(COMPAT_RECORDED, state_rows="3"), InvalidVerdict,
     "'state_rows' of JSON string"),
    ("verdict: an operator of a number", compatibility_result, with_(COMPAT_RECORDED, operator=0), InvalidVerdict,
     "'operator' of JSON integer"),
    ("verdict: a headline of a number", compatibility_result, with_(COMPAT_RECORDED, headline=1), InvalidVerdict,
     "'headline' of JSON integer"),
    ("verdict: a summary_md of null", compatibility_result, with_(COMPAT_STEP, summary_md=None), InvalidVerdict,
     "'summary_md' of JSON null"),
    ("verdict: a trial as text", compatibility_result, with_(COMPAT_STEP, trials=["{}"]), InvalidVerdict,
     "item 0 of JSON string"),
    ("verdict: a trial's unknown key", compatibility_result, edit(COMPAT_STEP, first("trials", rows=3)),
     InvalidVerdict, "TrialResult with unknown key(s) 'rows'"),
    ("verdict: a trial's started as text", compatibility_result, edit(COMPAT_STEP, first("trials", started="no")),
     InvalidVerdict, "TrialResult 'started' of JSON string"),
    ("verdict: an operator's id as text", compatibility_result,
     edit(COMPAT_STEP, lambda v: v["trials"][0]["operators"][0].update(operator_id="0")), InvalidVerdict,
     "stateful operator 'operator_id' of JSON string"),
    ("verdict: a setting's unknown effect", compatibility_result,
     edit(COMPAT_RECORDED, first("settings", effect="worse")), InvalidVerdict, "'effect' = 'worse', not valid"),
    ("verdict: no in_place_ok", compatibility_result, without(COMPAT_RECORDED, "in_place_ok"), InvalidVerdict,
     "CompatibilityVerdict without 'in_place_ok'"),
    ("verdict: a newer format", compatibility_result, with_(COMPAT_RECORDED, format=2), InvalidVerdict,
     "format 2 (written by a newer release"),
    ("skipped: a reason of a number", compatibility_result, with_(COMPAT_SKIPPED, skipped=1), InvalidVerdict,
     "'skipped' of JSON integer"),
    ("skipped: an empty reason", compatibility_result, with_(COMPAT_SKIPPED, skipped=" "), InvalidVerdict,
     "'skipped' = ' ', not valid"),
    ("skipped: with a verdict's key", compatibility_result, with_(COMPAT_SKIPPED, in_place_ok=True), InvalidVerdict,
     "CompatibilitySkipped with unknown key(s) 'in_place_ok'"),
    ("skipped: a newer format", compatibility_result, with_(COMPAT_SKIPPED, format=2), InvalidVerdict,
     "format 2 (written by a newer release"),
    ("skipped: by the verdict's decoder", CompatibilityVerdict.from_json, COMPAT_SKIPPED, InvalidVerdict,
     "unknown key(s) 'skipped'"),
    # UpgradeReport: its steps and batches by their codecs
    ("report: unknown key", UpgradeReport.from_json, with_(REPORT, outcomes="upgraded"), InvalidUpgradeReport,
     "unknown key(s) 'outcomes'"),
    ("report: the downtime as text", UpgradeReport.from_json, with_(REPORT, downtime_s="2.5"), InvalidUpgradeReport,
     "'downtime_s' of JSON string ('2.5')"),
    ("report: a step's seconds as text", UpgradeReport.from_json, edit(REPORT, first("steps", seconds="2.5")),
     InvalidUpgradeReport, "report step 'seconds' of JSON string"),
    ("report: a batch id as text", UpgradeReport.from_json, edit(REPORT, first("old_batches", batch_id="40")),
     InvalidUpgradeReport, "report batch 'batch_id' of JSON string"),
    ("report: a batch's unknown key", UpgradeReport.from_json, edit(REPORT, first("new_batches", rows=3)),
     InvalidUpgradeReport, "report batch with unknown key(s) 'rows'"),
    ("report: notes of numbers", UpgradeReport.from_json, with_(REPORT, notes=[1]), InvalidUpgradeReport,
     "item 0 of JSON integer"),
    ("report: a handover that is an array", UpgradeReport.from_json, with_(REPORT, handover=[]),
     InvalidUpgradeReport, "'handover' of JSON array"),
    ("report: no created_at", UpgradeReport.from_json, without(REPORT, "created_at"), InvalidUpgradeReport,
     "without 'created_at'"),
    ("report: a newer format", UpgradeReport.from_json, with_(REPORT, format=2), InvalidUpgradeReport,
     "format 2 (written by a newer release"),
]


@pytest.mark.parametrize(("case", "decode", "given", "kind", "found"), REFUSED, ids=[row[0] for row in REFUSED])
def test_refused_with_the_values_own_error(case: str, decode: Decode, given: Any,  # noqa: ANN401
                                           kind: type[CheckpointError], found: str) -> None:
    with pytest.raises(CheckpointError) as refused:
        decode(given)
    error = refused.value
    assert type(error) is kind, f"{type(error).__name__}: {error}"
    assert found in error.found, error.found
    assert f"found {error.found}" in str(error) and error.expected


#: decoder -> its own error
DECODERS: dict[str, tuple[Decode, type[CheckpointError]]] = {
    "Handover": (Handover.from_json, InvalidHandover),
    "HandoverResult": (HandoverResult.from_json, InvalidHandover),
    "ArchiveManifest": (ArchiveManifest.from_json, InvalidArchiveManifest),
    "StateManifest": (StateManifest.from_json, StateExportCorrupt),
    "StopResult": (StopResult.from_json, InvalidStopResult),
    "VerifyResult": (VerifyResult.from_json, InvalidVerifyResult),
    "PathChoice": (PathChoice.from_json, InvalidUpgradePath),
    "StateExport": (StateExport.from_json, InvalidStateExport),
    "RollbackHandover": (RollbackHandover.from_json, InvalidRollbackHandover),
    "RollbackHandoverUnread": (RollbackHandoverUnread.from_json, InvalidRollbackHandover),
    "rollback_result": (rollback_result, InvalidRollbackHandover),
    "CompatibilityVerdict": (CompatibilityVerdict.from_json, InvalidVerdict),
    "CompatibilitySkipped": (CompatibilitySkipped.from_json, InvalidVerdict),
    "compatibility_result": (compatibility_result, InvalidVerdict),
    "UpgradeReport": (UpgradeReport.from_json, InvalidUpgradeReport),
}


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize(("given", "found"), [("{nope", "not JSON"), (7, "given as a int"), ([1], "given as a list")])
def test_what_is_not_the_values_object_is_refused(name: str, given: Any, found: str) -> None:  # noqa: ANN401
    decode, kind = DECODERS[name]
    with pytest.raises(kind) as refused:
        decode(given)
    assert found in refused.value.found, refused.value.found


def test_a_state_manifest_refusal_names_the_file() -> None:
    with pytest.raises(StateExportCorrupt) as refused:
        StateManifest.from_json(with_(STATE_MANIFEST, batch_id="41"), where="s3a://x/state-manifest.json")
    assert refused.value.path == "s3a://x/state-manifest.json"


# -- what the callers pass besides the value's object ------------------------------------------------


def test_a_state_export_is_also_its_object_a_bare_location_or_nothing() -> None:
    export = StateExport.from_json(STATE_EXPORT)
    assert StateExport.from_json(export) is export
    assert StateExport.from_json(" s3a://b/x ") == StateExport(location="s3a://b/x")
    for nothing in (None, "", " None ", "null", b""):
        assert StateExport.from_json(nothing) is None


def test_a_handover_result_is_also_a_bare_handover() -> None:
    handover = Handover.from_json(HANDOVER)
    bare = HandoverResult(handover)
    for given in (handover, HANDOVER, json.loads(HANDOVER), bare):
        assert HandoverResult.from_json(given) == bare
    result = HandoverResult.from_json(HANDOVER_RESULT)
    assert result.starting_offsets is not None and result.reconciliation is not None and result.sink is not None
    by_hand = {"handover": json.loads(HANDOVER), "reconciliation": {"expired": [], "acceptDataLoss": True}}
    assert HandoverResult.from_json(by_hand).offsets() == handover.kafka_offsets()


def test_a_skipped_check_is_its_xcom_or_its_record() -> None:
    """The step returns the reason with an empty summary_md for the approval; the journal keeps the reason."""
    from airflow_ckpt_provider.operators.compat import _skipped

    assert _skipped("switched off") == {"format": 1, "skipped": "switched off", "summary_md": ""}
    for given in (_skipped("switched off"), COMPAT_SKIPPED, COMPAT_SKIPPED.encode()):
        assert compatibility_result(given) == CompatibilitySkipped("switched off")


def test_a_python_repr_of_a_handover_result_says_how_to_pass_it() -> None:
    with pytest.raises(InvalidHandover) as refused:
        HandoverResult.from_json(repr(json.loads(HANDOVER_RESULT)))
    assert "| tojson" in refused.value.action and "not JSON" in refused.value.found


def test_a_store_of_the_export_jobs_result_drops_the_jobs_own_keys_only() -> None:
    store = json.loads(STATE_MANIFEST)["stores"][0]
    job = {k: v for k, v in store.items() if k != "files"} | {"min_batch_id": 0, "max_batch_id": 41}
    read = ExportedStore.from_job(job)
    assert read.files == () and read == ExportedStore.from_dict({**store, "files": []})
    with pytest.raises(StateExportCorrupt, match="unknown key"):
        ExportedStore.from_job({**job, "partitions": 2})
    with pytest.raises(StateExportCorrupt, match="'rows' of JSON string"):
        ExportedStore.from_job({**job, "rows": "3"})
