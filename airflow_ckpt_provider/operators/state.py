"""Export the stopped old query's state for the new version (the step between the handover and the
relaunch; after a switchover, the verified copy of the state the standby seeded itself)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar, cast

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint.errors import SeededStateMismatch
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.checkpoint.launch import LaunchHandle
from airflow_ckpt_provider.checkpoint.state import (
    STATE_MANIFEST,
    StateExport,
    StateManifest,
    check_seeded_state,
    state_batch,
)
from airflow_ckpt_provider.faults import fault_point
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.hooks.state_export import export_checkpoint_state
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.operators.handover import flag
from airflow_ckpt_provider.operators.journaled import JOURNAL_FIELDS, JournaledStep, given
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.storage.state import read_manifest
from airflow_ckpt_provider.upgrade.inputs import FromRecord
from airflow_ckpt_provider.upgrade.record import UPGRADE_PHASE, StepStart


class StateExportOperator(JournaledStep, BaseOperator):
    """Export the old query's state at the handover, verified, for the new version to start from.

    The batch is the handover's (its last COMMITTED batch), or K-1 for a rewind to batch K; a
    start at a time or at explicit offsets falls between batches and is refused
    (:class:`StateStartUnsupported`). Before any Spark job runs, the checkpoint is checked
    (:func:`~airflow_ckpt_provider.checkpoint.state.plan_state_export`: state version purged,
    RocksDB checkpoint format v2, operator metadata missing, batch not committed — each refused
    with nothing written). Then a Spark job reads every store with Spark's ``statestore`` reader
    and writes Parquet plus ``state-manifest.json`` to ``export_uri``, and every file is read back
    (sha256, rows) before the step succeeds (:class:`StateExportCorrupt`,
    :class:`StateExportFailed` with the driver log tail). The old checkpoint is only read.

    Nothing is exported — the step succeeds with ``skipped`` saying why, and logs it — for a
    stateless query, a query that committed nothing, a rewind to batch 0, or ``carry_state``
    false (the new version then starts with EMPTY state). The job runs detached; its handle is
    noted in the journal, and a re-run after a crash stops it if it still runs before starting
    over. The relaunch passes ``location`` to the
    new version as ``spark.ckpt.initialStatePath``. Returns (XCom)
    :meth:`~airflow_ckpt_provider.checkpoint.state.StateExport.to_dict`. With ``journal`` a done
    export is returned as recorded; a re-run after a crash replaces an unfinished export.

    After a switchover the standby seeded the state itself, in its own session, before it started
    (``seeded_state``: the seed's location); this export then runs after the switch, for the archive
    and as the check of that seed: every store must have the seed's rows and checksum (the sum of
    each row's ``xxhash64(key, value)``), else :class:`SeededStateMismatch` fails the step (the
    reference DAG rolls back). A seed with rows where nothing is exported fails the same way.

    :param checkpoint_uri: the stopped query's checkpoint
    :param export_uri: where the export goes (empty location, or this upgrade's earlier export)
    :param handover: the handover step's result (``CheckpointHandoverOperator.output``)
    :param carry_state: False: export nothing, the new version starts with empty state
    :param upgrade_id: recorded in the manifest
    :param seeded_state: where a switchover's standby seeded the state (empty: no seed to check)
    :param conf: Spark conf of the export job (the new version's, in the reference DAG)
    :param master: spark-submit ``--master`` of the job (or ``spark_conn_id``)
    :param deploy_mode: ``client`` or ``cluster``
    :param spark_conn_id: Spark connection, instead of ``master``/``deploy_mode``
    :param spark_home: the Spark that runs the job (4.0+ reads ``state-metadata``)
    :param spark_binary: spark-submit binary, when not ``<spark_home>/bin/spark-submit``
    :param storage_conn_id: Airflow connection for the checkpoint's and the export's storage
    :param export_timeout: seconds the job may run before it is killed and the step fails
    :param poll_interval: seconds between looks at the job
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("export_state",)

    template_fields: Sequence[str] = ("checkpoint_uri", "export_uri", "handover", "carry_state", "upgrade_id",
                                      "seeded_state", "conf", "master", "deploy_mode", "spark_conn_id", "spark_home",
                                      "spark_binary", "storage_conn_id", *JOURNAL_FIELDS)
    ui_color = "#eef8e8"

    def __init__(
        self,
        *,
        checkpoint_uri: str,
        export_uri: str | FromRecord,
        handover: HandoverResult | str | Mapping[str, Any] | FromRecord,
        carry_state: bool | str = True,
        upgrade_id: str | FromRecord = "",
        seeded_state: str | FromRecord = "",
        conf: Mapping[str, str] | None = None,
        master: str | None = "local[2]",
        deploy_mode: str | None = None,
        spark_conn_id: str | None = None,
        spark_home: str | None = None,
        spark_binary: str | None = None,
        submit_options: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        log_dir: str | None = None,
        storage_conn_id: str | None = None,
        export_timeout: float = 3600.0,
        poll_interval: float = 1.0,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        journal_phase: str = UPGRADE_PHASE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.init_journal(journal, journal_conn_id, journal_phase)
        if export_timeout <= 0 or poll_interval <= 0:
            raise ValueError("export_timeout and poll_interval must be positive")
        self.checkpoint_uri = checkpoint_uri
        self.export_uri = given(export_uri)
        # a FromRecord is read when the step runs (given() cannot name a union of several types)
        self.handover = cast("HandoverResult | str | Mapping[str, Any]", handover)
        self.carry_state = carry_state
        self.upgrade_id = given(upgrade_id)
        self.seeded_state = given(seeded_state)
        self.conf = conf
        self.master = master
        self.deploy_mode = deploy_mode
        self.spark_conn_id = spark_conn_id
        self.spark_home = spark_home
        self.spark_binary = spark_binary
        self.submit_options = dict(submit_options or {})
        self.env = dict(env or {})
        self.log_dir = log_dir
        self.storage_conn_id = storage_conn_id
        self.export_timeout = float(export_timeout)
        self.poll_interval = float(poll_interval)

    @cached_property
    def launcher_hook(self) -> SparkLauncherHook:
        return SparkLauncherHook(  # templated fields rendered empty mean "not set"
            self.spark_conn_id or None, master=self.master or None, deploy_mode=self.deploy_mode or None,
            spark_binary=self.spark_binary or None, spark_home=self.spark_home or None, env=self.env,
            log_dir=self.log_dir or None, submit_options=self.submit_options,
        )

    @cached_property
    def storage_hook(self) -> CheckpointStorageHook:
        return CheckpointStorageHook(storage_conn_id=self.storage_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        return self.run_step(context, lambda start, journal: self.export(start, journal))

    def _stop_earlier_job(self, start: StepStart | None) -> None:
        """A re-run after a crash: the export job the crashed attempt started may still run and
        write; stop it before its unfinished export is removed."""
        previous = start.previous if start is not None else None
        recorded = previous.notes.get("job") if previous is not None else None
        if not isinstance(recorded, Mapping):
            return
        handle = LaunchHandle.from_json(recorded)
        if self.launcher_hook.is_alive(handle) is False:
            return
        self.log.warning("resuming: the export job of an earlier attempt (run %s) may still run; stopping it (%s) "
                         "before exporting again", previous.run_id if previous else "?",
                         self.launcher_hook.kill(handle))

    def _skip(self, why: str) -> dict[str, Any]:
        self._check_seed(None)
        self.log.info("no state exported: %s", why)
        return StateExport(skipped=why).to_dict()

    def _check_seed(self, manifest: StateManifest | None) -> None:
        """The state a switchover's standby seeded (``seeded_state``) against this export (None:
        nothing exported); :class:`SeededStateMismatch` naming every difference."""
        if not self.seeded_state:
            return
        fs, root = self.storage_hook.filesystem(self.seeded_state)
        seed = read_manifest(fs, root, uri=self.seeded_state)
        if seed is None:
            raise SeededStateMismatch(found=f"no {STATE_MANIFEST} at the seed's location",
                                      expected="the manifest the standby wrote when it seeded the state",
                                      path=self.seeded_state)
        if manifest is None:
            if seed.rows:
                raise SeededStateMismatch(found=f"a seed of {seed.rows:,} rows and nothing exported",
                                          expected="the export of the state the standby seeded",
                                          path=self.seeded_state)
            return
        check_seeded_state(seed, manifest, uri=self.seeded_state)
        self.log.info("the state the standby seeded (%s rows at %s) is the export's: %s", f"{seed.rows:,}",
                      self.seeded_state, ", ".join(f"operator {s.operator_id} store {s.state_variable or s.store_name} "
                                                   f"{s.rows:,} rows, checksum {s.checksum}" for s in manifest.stores))

    def export(self, start: StepStart | None = None, journal: UpgradeJournal | None = None) -> dict[str, Any]:
        """Check and export (see the class docstring); the StateExport dict."""
        if not flag(self.carry_state, "carry_state"):
            return self._skip("carry_state is off: the new version starts with EMPTY state")
        result = HandoverResult.from_json(self.handover)
        batch = state_batch(result)
        if batch is None:
            return self._skip("the new version starts before batch 0: the state it starts from is empty")
        self._stop_earlier_job(start)
        started = time.monotonic()
        conf = {str(k): str(v) for k, v in (self.conf or {}).items()}

        def launched(handle: LaunchHandle) -> None:
            if journal is not None:  # a re-run after a crash stops this job before starting over
                journal.note(self.task_id, job=handle.to_dict())
            fault_point(f"{self.task_id}:exporting")

        plan, manifest = export_checkpoint_state(
            checkpoint_uri=self.checkpoint_uri, export_uri=self.export_uri, launcher=self.launcher_hook, batch=batch,
            conf=conf, upgrade_id=self.upgrade_id, handover=result.handover.to_dict(), storage=self.storage_hook,
            timeout=self.export_timeout, poll_interval=self.poll_interval, on_launched=launched,
        )
        if manifest is None:
            return self._skip("the old query is stateless: no state to carry" if not plan.stateful
                              else "the old query committed no batch: its state is empty")
        self._check_seed(manifest)
        return StateExport.of(manifest, self.export_uri, time.monotonic() - started).to_dict()


__all__ = ["StateExportOperator"]
