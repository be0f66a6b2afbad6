"""Before anything stops: does the new version need a new checkpoint, and will it start?"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint.compat import CompatibilitySkipped, CompatibilityVerdict, compatibility_result
from airflow_ckpt_provider.checkpoint.errors import NewVersionDoesNotStart
from airflow_ckpt_provider.checkpoint.path import UpgradeMode, choose_path, resumed_path
from airflow_ckpt_provider.hooks.compat import check_upgrade
from airflow_ckpt_provider.hooks.launcher import SparkLauncherHook
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.operators.handover import flag, start_choice
from airflow_ckpt_provider.operators.journaled import decided, journal_at
from airflow_ckpt_provider.storage.journal import UpgradeJournal
from airflow_ckpt_provider.upgrade import planner
from airflow_ckpt_provider.upgrade.inputs import FromRecord, resolve
from airflow_ckpt_provider.upgrade.steps import COMPATIBILITY_CHECK, PATH_CHOICE


def verdict_markdown(verdict: CompatibilityVerdict) -> str:
    """The verdict for the approval's body and the report (Markdown)."""
    lines = ["### Compatibility check (trial runs on copies)", ""]
    lines += [f"- {line}" for line in verdict.describe()]
    if not verdict.new_version_starts and verdict.log_tail:
        lines += ["", "```text", verdict.log_tail.rstrip()[-4000:], "```"]
    return "\n".join(lines) + "\n"


class CompatibilityCheckOperator(BaseOperator):
    """Try the new version on copies of the old checkpoint, in place and migrated, and give the verdict.

    Runs :func:`~airflow_ckpt_provider.hooks.compat.check_upgrade`: the new version started
    (detached, with ``spark.ckpt.trial=true``) on a COPY of the old checkpoint and on an empty one
    at the handover (with the old query's state, exported from the copy, unless ``carry_state``
    is off), each for ``batches`` batches with its output under the trial location, then
    stopped and deleted. The old checkpoint, the live sinks and Kafka's consumer groups are not
    touched. Returns (XCom) :meth:`CompatibilityVerdict.to_dict` plus ``summary_md`` (Markdown
    for an approval); later steps read it with
    :func:`~airflow_ckpt_provider.checkpoint.compat.compatibility_result`. Raises
    :class:`TrialRefused` (the job does not follow the trial contract, or the trial location
    overlaps a live one: nothing started) and, with ``fail_if_does_not_start``,
    :class:`NewVersionDoesNotStart` (the driver's error and log tail) — before anything stops.

    With ``journal`` it first asks the planner
    (:func:`~airflow_ckpt_provider.upgrade.planner.next_action`): an upgrade under way (a step with a
    side effect began: its new version was tried before its stop) or already ended tries nothing,
    returns :class:`~airflow_ckpt_provider.checkpoint.compat.CompatibilitySkipped` (``{"skipped":
    <why>, "summary_md": ""}``), logs why and leaves the journal as it is (the
    first run's verdict stays the upgrade's). Otherwise ``enabled`` decides, and the verdict, the
    refusal or the switch-off goes in the journal's ``planning``. A refusal recorded there (nothing
    stopped yet) ends the upgrade ``refused``
    (:func:`~airflow_ckpt_provider.upgrade.planner.refusal`): the steps after it skip themselves,
    and the report closes the journal with the refusal's reason and releases the stream's lock.

    :param old_checkpoint_uri: the running (old) version's checkpoint
    :param new_application: the new version (``.py`` or jar)
    :param application_args: the new version's arguments
    :param conf: Spark conf of the trials (the new version's)
    :param live_locations: what -> URI of other live locations (new checkpoint, sinks) to keep apart
    :param trial_root: where the trials run (default: a local temp folder; for cluster launches one the driver reaches)
    :param batches: batches each trial runs
    :param migrated: also try the new version on an empty checkpoint at the handover
    :param carry_state: give the migrated trial the old query's state, as the upgrade's ``export_state`` will
    :param fail_if_does_not_start: fail the task when the new version does not start
    :param master: spark-submit ``--master`` of the trials (or ``spark_conn_id``)
    :param deploy_mode: ``client`` or ``cluster``
    :param spark_conn_id: Spark connection, instead of ``master``/``deploy_mode``
    :param spark_home: the Spark that runs the trials
    :param spark_binary: spark-submit binary, when not ``<spark_home>/bin/spark-submit``
    :param storage_conn_id: Airflow connection for the checkpoint's and the trial location's storage
    :param trial_timeout: seconds a trial may run before it is killed (then it proves nothing)
    :param enabled: False (or a template rendering "False", the ``check_compatibility`` param): run nothing,
        return ``{"skipped": "switched off", ...}``
    :param source: Kafka source index or name the migrated trial starts from (default: the only one, as the handover)
    :param journal: the upgrade journal's URI (templated): the verdict (or the refusal) goes in its ``planning``
    :param journal_conn_id: Airflow connection of the journal's storage
    :param real_time: the new version runs with ``trigger(realTime=...)``: judged with the settings Spark fixes for a
        checkpoint's life (read from the old checkpoint before any trial; one that needs a new checkpoint skips the
        in-place trial)
    """

    template_fields: Sequence[str] = ("old_checkpoint_uri", "new_application", "application_args", "conf",
                                      "live_locations", "trial_root", "master", "deploy_mode", "spark_conn_id",
                                      "spark_home", "spark_binary", "storage_conn_id", "enabled", "carry_state",
                                      "journal", "journal_conn_id")
    ui_color = "#f4f0e0"

    def __init__(
        self,
        *,
        old_checkpoint_uri: str,
        new_application: str,
        application_args: Sequence[str] | str = (),
        conf: Mapping[str, str] | str | None = None,
        live_locations: Mapping[str, str] | str | None = None,
        trial_root: str = "",
        batches: int = 2,
        migrated: bool = True,
        carry_state: bool | str = True,
        fail_if_does_not_start: bool = True,
        master: str | None = "local[2]",
        deploy_mode: str | None = None,
        spark_conn_id: str | None = None,
        spark_home: str | None = None,
        spark_binary: str | None = None,
        storage_conn_id: str | None = None,
        trial_timeout: float = 600.0,
        enabled: bool | str = True,
        source: int | str | None = None,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        real_time: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source = source
        self.journal = journal
        self.journal_conn_id = journal_conn_id
        self.real_time = bool(real_time)
        if batches < 1 or trial_timeout <= 0:
            raise ValueError("batches must be at least 1 and trial_timeout positive")
        self.old_checkpoint_uri = old_checkpoint_uri
        self.new_application = new_application
        self.application_args = application_args
        self.conf = conf
        self.live_locations = live_locations
        self.trial_root = trial_root
        self.batches = int(batches)
        self.migrated = bool(migrated)
        self.carry_state = carry_state
        self.fail_if_does_not_start = bool(fail_if_does_not_start)
        self.master = master
        self.deploy_mode = deploy_mode
        self.spark_conn_id = spark_conn_id
        self.spark_home = spark_home
        self.spark_binary = spark_binary
        self.storage_conn_id = storage_conn_id
        self.trial_timeout = float(trial_timeout)
        self.enabled = enabled

    @cached_property
    def launcher_hook(self) -> SparkLauncherHook:
        return SparkLauncherHook(self.spark_conn_id or None, master=self.master or None,
                                 deploy_mode=self.deploy_mode or None, spark_binary=self.spark_binary or None,
                                 spark_home=self.spark_home or None)

    @cached_property
    def storage_hook(self) -> CheckpointStorageHook:
        return CheckpointStorageHook(storage_conn_id=self.storage_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        journal = journal_at(self.journal, self.journal_conn_id)
        decision = planner.next_action(journal.read() if journal is not None and journal.exists() else None,
                                       COMPATIBILITY_CHECK)
        if decision.act is planner.Act.SKIP:
            self.log.info("no trial runs: %s", decision.reason)
            return _skipped(decision.reason)
        return decided(journal, COMPATIBILITY_CHECK, context, self._check,
                       lambda value: {k: v for k, v in value.items() if k not in ("trials", "log_tail", "summary_md")},
                       said=lambda value: str(value.get("summary_md") or ""))

    def _check(self) -> dict[str, Any]:
        if not flag(self.enabled, "enabled"):
            self.log.info("compatibility check switched off: no trial runs")
            return _skipped("switched off")
        args = self.application_args
        conf = self.conf if isinstance(self.conf, Mapping) else {}
        live = self.live_locations if isinstance(self.live_locations, Mapping) else {}
        verdict = check_upgrade(
            old_checkpoint=self.old_checkpoint_uri, new_application=self.new_application,
            application_args=[str(a) for a in args] if not isinstance(args, str) else [],
            launcher=self.launcher_hook, conf={str(k): str(v) for k, v in conf.items()}, storage=self.storage_hook,
            trial_root=self.trial_root or None, live_locations={str(k): str(v) for k, v in live.items() if v},
            batches=self.batches, timeout=self.trial_timeout, migrated=self.migrated,
            carry_state=flag(self.carry_state, "carry_state"), source=self.source, real_time=self.real_time)
        for line in verdict.describe():
            self.log.info("compatibility: %s", line)
        if self.fail_if_does_not_start and not verdict.new_version_starts:
            first = verdict.error_line
            raise NewVersionDoesNotStart(
                found=f"{self.new_application} fails in its trial: {verdict.error_class or 'driver failed'} {first}"
                .rstrip(),
                expected="the new version to run its trial batches", log_tail=verdict.log_tail,
                path=self.new_application)
        return {**verdict.to_dict(), "summary_md": verdict_markdown(verdict)}


class UpgradePathOperator(BaseOperator):
    """Choose the upgrade's path: the new version on a new checkpoint (the migration), or a plain
    restart of it on the old checkpoint (in place).

    :func:`~airflow_ckpt_provider.checkpoint.path.choose_path`: ``mode`` ``new_checkpoint`` always
    migrates; ``auto`` restarts in place only when ``verdict`` (the compatibility check's result)
    says in place OK and the new version resumes where the old one stops (``start``). With
    ``journal`` a resumed upgrade goes on along the path its journal records
    (:func:`~airflow_ckpt_provider.checkpoint.path.resumed_path`: one of ``in_place_steps``
    recorded: in place; another step: the migration). The choice is not a side effect: it goes in
    the journal's ``planning``, which a rejected upgrade's next run starts afresh; a failure recorded
    there (an unknown mode, an unreadable verdict) ends the upgrade ``refused``, as the check's
    refusal does. Returns (XCom)
    :meth:`PathChoice.to_dict`
    plus ``summary_md`` (a line for the approval). Raises ``ValueError`` for an unknown mode.

    :param mode: ``new_checkpoint`` or ``auto`` (templated)
    :param verdict: the compatibility check's XCom (dict or JSON; empty or ``skipped``: it did not run), or
        ``FromRecord(RecordInput.COMPATIBILITY_VERDICT)``: the verdict it recorded in the journal
    :param start: where the new version starts (a StartChoice, its JSON or dict; empty: resume)
    :param in_place_steps: the task ids of the in-place path's steps, to recognise it in the journal
    :param journal: the upgrade journal's URI (templated; read only)
    :param journal_conn_id: Airflow connection of the journal's storage
    """

    template_fields: Sequence[str] = ("mode", "verdict", "start", "journal", "journal_conn_id")
    ui_color = "#f4f0e0"

    def __init__(self, *, mode: str = UpgradeMode.NEW_CHECKPOINT.value,
                 verdict: Mapping[str, Any] | str | FromRecord | None = None,
                 start: Mapping[str, Any] | str | None = None, in_place_steps: Sequence[str] = (),
                 journal: str | None = None, journal_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mode = mode
        self.verdict = verdict
        self.start = start
        self.in_place_steps = list(in_place_steps)
        self.journal = journal
        self.journal_conn_id = journal_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        journal = journal_at(self.journal, self.journal_conn_id)
        return decided(journal, PATH_CHOICE, context, lambda: self._choose(journal),
                       lambda value: {k: v for k, v in value.items() if k != "summary_md"},
                       said=lambda value: str(value.get("summary_md") or ""))

    def _choose(self, journal: UpgradeJournal | None) -> dict[str, Any]:
        record = journal.read() if journal is not None and journal.exists() else None
        kinds = [step.step_kind for step in record.steps.values()] if record is not None else []
        choice = resumed_path(kinds, self.in_place_steps, self.mode)  # the steps begun, by kind
        if choice is None:
            raw = self.verdict
            if isinstance(raw, FromRecord):
                raw = resolve(record, raw.input, argument="verdict")
                self.log.info("verdict: the compatibility check's, read from the upgrade record: %s",
                              "none (it did not run)" if raw is None else raw.get("skipped") or "a verdict")
            choice = choose_path(self.mode, _verdict(raw), start_mode=start_choice(self.start).mode)
        self.log.info("%s", choice.describe())
        return {**choice.to_dict(), "summary_md": f"**{choice.describe()}**\n"}


def _verdict(raw: Mapping[str, Any] | str | None) -> CompatibilityVerdict | None:
    """The check's verdict; None when it did not run or tried nothing (:class:`InvalidVerdict`
    for anything else than its result)."""
    if raw is None or (isinstance(raw, str) and raw.strip() in ("", "None", "null", "{}")):
        return None
    if isinstance(raw, Mapping) and not raw:
        return None
    result = compatibility_result(raw)
    return None if isinstance(result, CompatibilitySkipped) else result


def _skipped(reason: str) -> dict[str, Any]:
    """The check's XCom when it tried nothing (no Markdown for the approval)."""
    return {**CompatibilitySkipped(reason).to_dict(), "summary_md": ""}


__all__ = ["CompatibilityCheckOperator", "UpgradePathOperator", "verdict_markdown"]
