"""Reference DAG: move a Spark Structured Streaming job reading Kafka to a new checkpoint and a new
version, with nothing lost and nothing duplicated, and prove it.

Standby (``relaunch_mode="standby"``, the default: ``stream_upgrade``): preflight -> compatibility
check (the new version tried on copies of the old checkpoint, in place and migrated with the state
``carry_state`` carries; a new version that does not start is refused here, before anything stops:
the upgrade ends ``refused``, its journal closed and the stream's lock released;
``check_compatibility`` param) -> approval (HITL, can be switched off) -> start the new version as
a standby (its session is ready, its query waits) -> graceful stop of the old version -> handover
-> state export -> release the standby at the handover (relaunch) -> verify -> archive of the old
checkpoint. The stream is down only from the stop to the standby's first batch. Both drivers run
at once for the standby window.

Cold (``relaunch_mode="cold"``: ``stream_upgrade_cold``, for clusters without room for a second
driver): preflight -> compatibility check -> approval -> graceful stop -> handover -> state export
-> archive -> relaunch -> verify.

Switchover (``relaunch_mode="switchover"``: ``stream_upgrade_switchover``):
preflight -> compatibility check -> approval -> start the new version as a standby -> switchover
(one step: it releases the standby for a switchover and asks the old query to stop; the standby,
inside the new version's driver, reads the old checkpoint's last committed batch the moment the
old query acknowledges — and, for a stateful query with ``carry_state``, its state at that batch
with Spark's state reader in its own warm session, seeded to the job as
``spark.ckpt.initialStatePath`` — and starts its query, with no Airflow task in between; the step
then re-derives the handover and compares) -> export_state (after the switch: the verified export
for the archive, which must equal the seed store by store, rows and checksum) -> verify -> archive.
The downtime does not depend on the scheduler; the report splits it into the old query's stop, the
standby's notice, its handover read, the state wait, the query start and the first batch. The
preflight refuses it (nothing changed) for a start ``at_time`` and partitions added since the old
query's last commit: use ``stream_upgrade``. A failed switchover rolls back as a failed stop or release
does: the standby is stopped, and the old version is restarted only when it had acknowledged the
stop (the step notes which; an unacknowledged request is withdrawn, the old version goes on).

State (``carry_state``, default on): for a stateful old query, ``export_state`` writes its state
as of the handover batch (Spark's state reader, Parquet and a verified ``state-manifest.json``,
under ``<archive_root>/<stream>/_state/<upgrade id>``) and the new version gets that location as
``spark.ckpt.initialStatePath`` (see docs "Starting from the old query's state"). For a stateless
query the step exports nothing and says so. The old checkpoint is only read: a rollback is as
without it.

In place (``mode="auto"``): when the compatibility check proved the new version runs on a copy
of the old checkpoint (in place OK) and it resumes where the old one stops, ``choose_path`` picks
a plain restart instead of the migration: after the approval, graceful stop -> handover (the
last committed batch N, for the checks and the report) -> verified archive of the old checkpoint
(never removed: the new version goes on writing it) -> the new version restarted ON the old
checkpoint -> verify (it committed batch N+1, which started where N ended, as the same query).
No new checkpoint, no offsets handed over, no state export: Spark resumes the query. If a step
after the stop fails, the new version is stopped and the old version restarted on the same
checkpoint, where it resumes after the last batch either committed: nothing is processed twice.
``mode="new_checkpoint"`` (the default) always migrates; the path step says why it chose.

Rollback: when a step after a completed stop fails, stop the new version, work out from its
checkpoint what it processed (``rollback_handover``: the offsets the old version will process a
second time, per partition, in the report), then restart the old version: with
``rollback_mode="restore"`` (default) restore the old checkpoint if it was removed and restart
the old version on it; with ``"forward"`` (stateless queries, checked in the preflight) restart
it on the fresh checkpoint ``rollback_checkpoint`` (default ``<new_checkpoint>.rollback``) from
the new version's handover, so nothing is processed twice. Never after a failure before or
during the stop, when the old version may still run — then only a standby is stopped, and the
old version is left as it is. Always: the upgrade report, which fails the run unless the outcome
is "upgraded" or "rejected".

Every step records itself in the upgrade journal next to the archives (the preflight opens it
and takes the stream's lock): a retried task or a re-triggered run with the same params resumes
the upgrade instead of repeating a side effect — no second archive, no second launch, and no
stop of the new job — and approval is not asked again once the stop has begun. A run of an
upgrade that was rolled back is refused by the preflight (set the ``upgrade_id`` param to a new
value); one of an upgrade already finished skips every step and reports "already done", naming
the first run's report, which is never replaced. After the approval a step takes what it needs of
earlier steps (the handover, the state export, the archive, launch handles) from the journal's
record (``FromRecord``), never from their XComs: XCom carries only the journal's location. See
docs "Reliability" and "Inputs from the upgrade record".

Four DAGs come from one call of :func:`~airflow_ckpt_provider.dags.stream_upgrade.build_reference_dags`:
``stream_upgrade`` (standby), ``stream_upgrade_cold`` and ``stream_upgrade_switchover`` for manual
runs (trigger form), and ``stream_upgrade_on_artifact`` (standby, no approval), scheduled on the
Asset of the new application artifact. Each is generated from the step table
(:data:`airflow_ckpt_provider.upgrade.table.TABLE`: one row per step, naming its operator, its
inputs from the upgrade record, its result type, its retries and its ``execution_timeout``): this
file holds only the DAGs' documentation and that one call; their params are the package's
(:data:`~airflow_ckpt_provider.dags.stream_upgrade.PARAMS`). Copy it and change the defaults
(``defaults=``) to upgrade your own streams; the operators can also be used one by one (see the docs'
XCom contract), each planned as the step kind it is.
"""

from __future__ import annotations

from airflow.sdk import Asset

from airflow_ckpt_provider.dags.stream_upgrade import build_reference_dags

# stream_upgrade (standby), stream_upgrade_cold, stream_upgrade_switchover, and
# stream_upgrade_on_artifact: scheduled on the new version's artifact (publishing it, an Asset event,
# starts the upgrade with the params' defaults and no approval; set them for your stream first with
# defaults={...})
manual, cold, switchover, on_artifact = build_reference_dags(
    doc_md=__doc__,
    artifact=Asset(name="demo_stream_v2_artifact", uri="file:///opt/streams/demo/stream_v2.py"))
