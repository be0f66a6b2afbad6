"""Extract the handover of a stopped query and reconcile it with the live Kafka cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from functools import cached_property
from typing import Any, ClassVar, Protocol

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint import BrokerView, Handover, Reconciliation, reconcile
from airflow_ckpt_provider.checkpoint.errors import (
    CheckpointError,
    InvalidStartChoice,
    NotACheckpoint,
    SinkAheadOfState,
)
from airflow_ckpt_provider.checkpoint.handover import HandoverResult, handover_from_snapshot, kafka_offsets_of
from airflow_ckpt_provider.checkpoint.jsonin import load_json
from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets
from airflow_ckpt_provider.checkpoint.outcome import RollbackMode
from airflow_ckpt_provider.checkpoint.rewind import StartChoice, StartMode, StartPlan, choose_start
from airflow_ckpt_provider.checkpoint.rollback import (
    NewVersionProgress,
    RollbackHandoverUnread,
    new_version_progress,
    rollback_handover,
)
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.operators.journaled import JOURNAL_FIELDS, JournaledStep, given
from airflow_ckpt_provider.records.control import HELD
from airflow_ckpt_provider.sinks import CutDisposition, SinkAccount, SinkKind, SinkSpec, account_cut, sink_holds_batch
from airflow_ckpt_provider.sinks.ledger import delivered_record
from airflow_ckpt_provider.storage import CheckpointReader
from airflow_ckpt_provider.storage.stop import ControlFiles
from airflow_ckpt_provider.upgrade.inputs import FromRecord
from airflow_ckpt_provider.upgrade.record import ROLLBACK_PHASE, UPGRADE_PHASE


class CheckpointHandoverOperator(JournaledStep, BaseOperator):
    """Compute the ``startingOffsets`` a new checkpoint must start from.

    Reads the checkpoint at ``checkpoint_uri`` (offsets of the LAST COMMITTED batch; the
    initial offsets if nothing was committed; never an in-flight batch), takes the Kafka
    source ``source`` (index or v2 name; default: the only Kafka source), and reconciles it
    with the cluster of ``kafka_conn_id``: partitions added since then start at earliest,
    vanished topics or partitions, offsets past the log end and offsets already deleted by
    retention are refused (the last unless ``accept_data_loss``). Nothing is written.

    Returns (XCom) :meth:`HandoverResult.to_dict`: ``{"handover": Handover JSON dict,
    "starting_offsets": JSON string for Spark's startingOffsets option, "reconciliation": {...}}``;
    later steps take it whole (``.output``) and read it with :meth:`HandoverResult.from_json`. Raises a typed
    :class:`~airflow_ckpt_provider.checkpoint.CheckpointError` on any refusal.

    ``start`` chooses another start than where the old query stopped (a
    :class:`~airflow_ckpt_provider.checkpoint.rewind.StartChoice`, its dict ``{"mode", "value"}``
    or that as JSON; modes ``resume``, ``rewind_to_batch``, ``at_time``, ``offsets``): the result
    then carries the :class:`~airflow_ckpt_provider.checkpoint.rewind.StartPlan` with the records
    processed again or skipped per partition, and it is refused
    (:class:`ReprocessingNotAccepted`) without ``accept_reprocessing`` (and ``accept_data_loss``
    for a skip). A batch whose start is no longer retained is refused (:class:`BatchNotRewindable`).

    ``sink`` declares the job's sink (:class:`~airflow_ckpt_provider.sinks.SinkSpec`, as the
    preflight's). When the stop cut a batch (planned, not committed), the sink ledger decides
    (:func:`~airflow_ckpt_provider.sinks.account_cut`): a Delta table or file sink that recorded
    the batch whole moves the handover past it (``Handover.held_by_sink``; refused with
    :class:`SinkAheadOfState` for a stateful query, whose state of that batch is not committed);
    any other sink may hold part of it, and the result's ``sink`` account names the input range per
    partition that may be processed twice.

    With ``journal`` (an upgrade journal's URI) a handover already taken for this upgrade is
    returned as recorded: a re-run after the old checkpoint was archived (or removed) hands over
    the same offsets.

    :param checkpoint_uri: the stopped query's checkpoint
    :param kafka_conn_id: Airflow connection of the Kafka cluster (type ``ckpt_kafka``)
    :param storage_conn_id: Airflow connection for the checkpoint's storage (default: fsspec's defaults)
    :param source: Kafka source index or name (default: the only Kafka source)
    :param accept_data_loss: start expired partitions at the earliest retained offset; allow a start that skips records
    :param start: where the new version starts (default: resume where the old one stopped)
    :param accept_reprocessing: allow a start that processes records a second time
    :param sink: the job's sink declaration (SinkSpec, mapping or JSON; default: not declared, at-least-once)
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("extract_handover", "in_place_handover")

    template_fields: Sequence[str] = ("checkpoint_uri", "kafka_conn_id", "storage_conn_id", "start",
                                      "accept_reprocessing", "accept_data_loss", "sink", *JOURNAL_FIELDS)
    ui_color = "#e8f4fd"

    def __init__(
        self,
        *,
        checkpoint_uri: str,
        kafka_conn_id: str = KafkaBrokerHook.default_conn_name,
        storage_conn_id: str | None = None,
        source: int | str | None = None,
        accept_data_loss: bool | str = False,
        start: StartChoice | Mapping[str, Any] | str | None = None,
        accept_reprocessing: bool | str = False,
        sink: SinkSpec | Mapping[str, Any] | str | None = None,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        journal_phase: str = UPGRADE_PHASE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.sink = sink.to_json() if isinstance(sink, SinkSpec) else sink
        self.start = start
        self.accept_reprocessing = accept_reprocessing
        self.init_journal(journal, journal_conn_id, journal_phase)
        if source is not None and not isinstance(source, (int, str)):
            raise TypeError(f"source must be an int index or a source name, not {type(source).__name__}")
        self.checkpoint_uri = checkpoint_uri
        self.kafka_conn_id = kafka_conn_id
        self.storage_conn_id = storage_conn_id
        self.source = source
        self.accept_data_loss = accept_data_loss

    @cached_property
    def kafka_hook(self) -> KafkaBrokerHook:
        return KafkaBrokerHook(kafka_conn_id=self.kafka_conn_id)

    @cached_property
    def storage_hook(self) -> CheckpointStorageHook:
        return CheckpointStorageHook(storage_conn_id=self.storage_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        return self.run_step(context, lambda start, journal: self.extract())

    def extract(self) -> dict[str, Any]:
        """The handover XCom (see the class docstring); reads only."""
        fs, _ = self.storage_hook.filesystem(self.checkpoint_uri)
        return take_handover(CheckpointReader(self.checkpoint_uri, fs=fs), SinkSpec.from_value(self.sink),
                             self.storage_hook, self.kafka_hook, start_choice(self.start), source=self.source,
                             accept_reprocessing=flag(self.accept_reprocessing, "accept_reprocessing"),
                             accept_data_loss=flag(self.accept_data_loss, "accept_data_loss"), log=self.log).to_dict()


def take_handover(reader: CheckpointReader, spec: SinkSpec, storage: CheckpointStorageHook,
                  kafka_hook: KafkaBrokerHook, choice: StartChoice, *, source: int | str | None,
                  accept_reprocessing: bool, accept_data_loss: bool, log: StepLog) -> HandoverResult:
    """The handover of the stopped query on ``reader``'s checkpoint (see
    :class:`CheckpointHandoverOperator`): its last committed batch, moved past a batch the stop cut
    when the sink's own record holds it whole (:func:`ledger_handover`), reconciled with the broker,
    at the ``choice`` of start with its consent checked. Reads only; raises a typed
    :class:`~airflow_ckpt_provider.checkpoint.CheckpointError` on any refusal."""
    handover, account = ledger_handover(reader, spec, storage, source=source, log=log, kafka=kafka_hook)
    handover, result, broker = reconciled_handover_view(
        reader, kafka_hook, source=source, accept_data_loss=accept_data_loss, log=log, handover=handover,
    )
    if choice.mode is StartMode.RESUME:
        return HandoverResult(handover, result.starting_offsets, result, sink=account.to_dict())
    plan = planned_start(choice, handover.kafka_offsets(source), reader=reader, broker=broker,
                         kafka_hook=kafka_hook, source=source, log=log)
    plan.require_consent(accept_reprocessing=accept_reprocessing, accept_data_loss=accept_data_loss)
    return HandoverResult(handover, plan.starting_offsets, result, plan, sink=account.to_dict())


#: How far before the previous batch's planned time the output topic is read (clocks of the driver
#: and of the brokers that stamp the records may differ this much).
SCAN_CLOCK_SKEW_MS = 60_000


def _scan_from(reader: CheckpointReader, cut: int) -> int | None:
    """Epoch ms from which the output topic is read for the records of batch ``cut``: the planned
    time of the batch before it (its records carry the source header too, proving the job writes
    it), less :data:`SCAN_CLOCK_SKEW_MS`; None when no planned time is recorded."""
    for batch in (cut - 1, cut):
        try:
            stamp = reader.offset_entry(batch).batch_timestamp_ms if batch >= 0 else None
        except CheckpointError:
            stamp = None
        if stamp is not None:
            return max(0, stamp - SCAN_CLOCK_SKEW_MS)
    return None


def _sink_record(reader: CheckpointReader, spec: SinkSpec, storage: CheckpointStorageHook, control: ControlFiles,
                 kafka: KafkaBrokerHook | None, *, query_id: str | None, cut: int,
                 log: StepLog) -> tuple[str | None, set[tuple[str, int, int]] | None]:
    """(the sink's own proof that it holds batch ``cut`` whole, or None; the input records a Kafka
    sink's output topic names by source header, or None when not scanned): a Delta table's or file
    sink's record, the ``foreach_batch`` wrapper's delivery record, or the output topic."""
    if spec.kind.exact:
        fs, path = storage.filesystem(spec.location)
        return sink_holds_batch(fs, path, spec, old_query_id=query_id, batch=cut, uri=spec.location), None
    if spec.kind is not SinkKind.KAFKA:  # a foreachBatch writer: the provider's wrapper records deliveries
        delivery = control.delivery()
        return delivered_record(delivery.batch_id if delivery is not None else None, cut), None
    if not spec.location or kafka is None:
        return None, None
    since = _scan_from(reader, cut)
    shown = utc_iso(datetime.fromtimestamp(since / 1000, timezone.utc), "milliseconds") if since is not None \
        else "its start"
    log.info("sink ledger: reading the output topic %s from %s for the records of batch %d", spec.location, shown, cut)
    return None, kafka.broker.sources_written_since(spec.location, since or 0)


def ledger_handover(reader: CheckpointReader, spec: SinkSpec, storage: CheckpointStorageHook, *,
                    source: int | str | None, log: StepLog,
                    kafka: KafkaBrokerHook | None = None) -> tuple[Handover, SinkAccount]:
    """The stopped query's handover and the sink ledger's account of the batch the stop cut, if any
    (see :class:`CheckpointHandoverOperator`); reads the checkpoint and the sink's record only (a
    Kafka sink's output topic through ``kafka``, the cluster of the handover)."""
    snapshot = reader.snapshot()
    handover = handover_from_snapshot(snapshot)
    cut = snapshot.in_flight_batch
    if cut is None:
        return handover, account_cut(spec, cut_batch=None, committed=None, planned=None, record=None)
    repartition = snapshot.unfinished_repartition
    if repartition is not None:  # written by Spark 4.2's offline repartition, not by the query: no records
        log.info("sink ledger: %s", repartition.describe())
        return handover, SinkAccount(CutDisposition.NONE, (
            f"batch {cut} in flight is an unfinished state repartition: it reads no records, so the sink holds "
            "nothing beyond the handover"))
    planned_sources = reader.batch_sources(cut)
    planned = kafka_offsets_of(planned_sources, source)
    control = ControlFiles(reader.fs, reader.root, reader.uri)
    ack = control.ack()
    held_at_gate = ack is not None and ack.outcome == HELD and ack.last_planned_batch == cut
    # the common path: the gate held the batch before it wrote; no sink record to look up then
    record, seen = (None, None) if held_at_gate else _sink_record(reader, spec, storage, control, kafka,
                                                                  query_id=snapshot.query_id, cut=cut, log=log)
    account = account_cut(spec, cut_batch=cut, committed=handover.kafka_offsets(source), planned=planned,
                          record=record, seen=seen, held_at_gate=held_at_gate)
    for line in account.lines():
        log.info("sink ledger: %s", line)
    if account.disposition is not CutDisposition.HELD or record is None:
        return handover, account
    if snapshot.state_operators:
        raise SinkAheadOfState(
            found=(f"the sink holds batch {cut} of the old query ({record}) and the checkpoint committed only "
                   f"{'batch ' + str(handover.batch_id) if handover.batch_id is not None else 'no batch'}; the query "
                   f"keeps state (operators {', '.join(map(str, snapshot.state_operators))})"),
            expected="a stateless query, or a checkpoint that committed every batch the sink holds",
            path=reader.uri)
    return handover.after_held_batch(cut, planned_sources, record), account


def flag(value: bool | str, name: str) -> bool:
    """A boolean operator argument, also as a rendered template ('True', 'false', ...);
    :class:`InvalidStartChoice` for anything else."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InvalidStartChoice(found=f"{name}={value!r}", expected=f"{name} True or False")


def start_choice(value: StartChoice | Mapping[str, Any] | str | None) -> StartChoice:
    """The ``start`` argument as a :class:`StartChoice` (None, '' or {}: resume)."""
    if isinstance(value, StartChoice):
        return value
    if isinstance(value, str):
        if not value.strip():
            return StartChoice()
        text = value
        try:
            value = load_json(text)
        except ValueError:
            raise InvalidStartChoice(found=f"start {text[:80]!r}", expected='JSON like {"mode": "rewind_to_batch", '
                                     '"value": "12"}') from None
    if not value:
        return StartChoice()
    if not isinstance(value, Mapping):
        raise InvalidStartChoice(found=f"start of type {type(value).__name__}", expected='{"mode": ..., "value": ...}')
    return StartChoice.from_dict(value)


def planned_start(choice: StartChoice, resume_at: KafkaOffsets, *, reader: CheckpointReader, broker: BrokerView,
                  kafka_hook: KafkaBrokerHook, source: int | str | None, log: StepLog) -> StartPlan:
    """:func:`~airflow_ckpt_provider.checkpoint.rewind.choose_start` with the broker of
    ``kafka_hook``, logged partition by partition."""
    plan = choose_start(choice, resume_at, reader=reader, broker=broker,
                        offsets_for_time=lambda parts, ms: kafka_hook.broker.offsets_for_time(parts, ms),
                        source=source)
    log.warning("%s: %d records processed again, %d skipped", choice.describe(), plan.reprocessed, plan.skipped)
    for part in plan.partitions:
        log.info("%s", part.describe())
    log.info("startingOffsets: %s", plan.starting_offsets.to_json())
    return plan


class RollbackHandoverOperator(JournaledStep, BaseOperator):
    """After the new version stopped in a rollback: where the old version restarts, and exactly
    which Kafka offsets it will process a second time (see
    :mod:`airflow_ckpt_provider.checkpoint.rollback`).

    Reads the new checkpoint ``checkpoint_uri`` (where its query started, its last committed
    batch, and a planned but uncommitted one) and takes the upgrade's handover from ``handover``
    (the handover step's result, dict or JSON), else from ``old_checkpoint_uri``.
    ``rollback_mode`` ``restore``: the old version resumes at the handover on
    ``old_checkpoint_uri``; ``forward``: it starts on ``rollback_checkpoint_uri`` at the new
    version's handover (the result's ``starting_offsets``). Logs the ranges per partition and
    returns (XCom, recorded in the journal) :meth:`RollbackHandover.to_dict`. Reads only.

    Fails with a typed :class:`~airflow_ckpt_provider.checkpoint.CheckpointError` when a
    checkpoint cannot be read; in ``restore`` mode, which does not need the answer to restart,
    it logs the error and returns :meth:`RollbackHandoverUnread.to_dict` (``{"mode": "restore",
    "checkpoint": ..., "error": ...}``). Readers decode either with
    :func:`~airflow_ckpt_provider.checkpoint.rollback.rollback_result`.
    """

    #: the step kinds it serves (the first unless ``step`` declares another): see JournaledStep
    STEP_KINDS: ClassVar[tuple[str, ...]] = ("rollback_handover",)

    template_fields: Sequence[str] = ("checkpoint_uri", "handover", "old_checkpoint_uri", "rollback_mode",
                                      "rollback_checkpoint_uri", "storage_conn_id", *JOURNAL_FIELDS)
    ui_color = "#fde8e8"

    def __init__(
        self,
        *,
        checkpoint_uri: str,
        old_checkpoint_uri: str,
        handover: HandoverResult | str | Mapping[str, Any] | FromRecord | None = None,
        rollback_mode: str = RollbackMode.RESTORE.value,
        rollback_checkpoint_uri: str | FromRecord = "",
        source: int | str | None = None,
        storage_conn_id: str | None = None,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        journal_phase: str = ROLLBACK_PHASE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.init_journal(journal, journal_conn_id, journal_phase)
        self.checkpoint_uri = checkpoint_uri
        self.old_checkpoint_uri = old_checkpoint_uri
        self.handover = given(handover)
        self.rollback_mode = rollback_mode
        self.rollback_checkpoint_uri = given(rollback_checkpoint_uri)
        self.source = source
        self.storage_conn_id = storage_conn_id

    @cached_property
    def storage_hook(self) -> CheckpointStorageHook:
        return CheckpointStorageHook(storage_conn_id=self.storage_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        return self.run_step(context, lambda start, journal: self.compute())

    def compute(self) -> dict[str, Any]:
        """The result (see the class docstring); reads only."""
        mode = RollbackMode(str(self.rollback_mode or RollbackMode.RESTORE.value))
        target = self.old_checkpoint_uri if mode is RollbackMode.RESTORE else self.rollback_checkpoint_uri
        try:
            result = rollback_handover(mode, self._handover(), self._progress(), checkpoint=target)
        except CheckpointError as exc:
            if mode is RollbackMode.FORWARD:
                raise
            self.log.warning("cannot tell what the old version will process twice (%s); it restarts on %s anyway",
                             exc, target)
            return RollbackHandoverUnread(checkpoint=target, error=str(exc), mode=mode).to_dict()
        say = self.log.warning if result.again_committed or result.again_planned else self.log.info
        for line in result.describe():
            say("%s", line)
        return result.to_dict()

    def _handover(self) -> KafkaOffsets:
        value = self.handover
        if value is not None and not (isinstance(value, str) and value.strip() in ("", "None", "null")):
            return HandoverResult.from_json(value).handover.kafka_offsets(self.source)
        self.log.info("no handover step result: reading the handover of %s", self.old_checkpoint_uri)
        fs, _ = self.storage_hook.filesystem(self.old_checkpoint_uri)
        return CheckpointReader(self.old_checkpoint_uri, fs=fs).handover().kafka_offsets(self.source)

    def _progress(self) -> NewVersionProgress:
        fs, path = self.storage_hook.filesystem(self.checkpoint_uri)
        if not fs.exists(path):
            return NewVersionProgress()
        reader = CheckpointReader(self.checkpoint_uri, fs=fs)
        try:
            snapshot = reader.snapshot(include_initial=True)
        except NotACheckpoint:  # only the provider's _ckpt/ (a standby that never started its query)
            return NewVersionProgress()
        in_flight = snapshot.in_flight_batch
        planned = reader.batch_sources(in_flight) if in_flight is not None else ()
        return new_version_progress(snapshot, planned, self.source)


class StepLog(Protocol):
    """What a step logs through: :class:`logging.Logger` or an operator's ``self.log``."""

    def info(self, msg: str, /, *args: Any) -> Any: ...  # noqa: ANN401 - loggers return what they like

    def warning(self, msg: str, /, *args: Any) -> Any: ...  # noqa: ANN401


def reconciled_handover(
    reader: CheckpointReader,
    kafka_hook: KafkaBrokerHook,
    *,
    source: int | str | None,
    accept_data_loss: bool,
    log: StepLog,
) -> tuple[Handover, Reconciliation]:
    """The handover of ``reader``'s checkpoint, reconciled with the live cluster (logged)."""
    handover, result, _ = reconciled_handover_view(reader, kafka_hook, source=source,
                                                   accept_data_loss=accept_data_loss, log=log)
    return handover, result


def reconciled_handover_view(
    reader: CheckpointReader,
    kafka_hook: KafkaBrokerHook,
    *,
    source: int | str | None,
    accept_data_loss: bool,
    log: StepLog,
    handover: Handover | None = None,
) -> tuple[Handover, Reconciliation, BrokerView]:
    """:func:`reconciled_handover` plus the broker view it was reconciled with; ``handover``: one
    already taken from ``reader`` (default: its last committed batch)."""
    handover = handover or reader.handover()
    offsets = handover.kafka_offsets(source)
    if handover.from_initial:
        log.info("no batch committed yet in %s: handing over the initial offsets", reader.uri)
    elif handover.held_by_sink:
        log.info("query %s: batch %s was cut after the sink recorded it (%s): handing over its end; %d partitions "
                 "of %s", handover.query_id, handover.batch_id, handover.held_by_sink, len(offsets.partitions()),
                 ", ".join(offsets.topics))
    else:
        log.info(
            "query %s: last committed batch %s, in-flight batch %s; %d partitions of %s",
            handover.query_id, handover.batch_id, handover.in_flight_batch,
            len(offsets.partitions()), ", ".join(offsets.topics),
        )
    broker = kafka_hook.broker_view(offsets.topics)
    result = reconcile(offsets, broker, accept_data_loss=accept_data_loss)
    for topic, partition in sorted(result.added_partitions):
        log.info("partition %s-%d is new since the handover: it starts at earliest", topic, partition)
    for topic, partition, offset, earliest in result.expired:
        log.warning(
            "DATA LOSS ACCEPTED: %s-%d handed over at %d but the broker keeps only from %d",
            topic, partition, offset, earliest,
        )
    log.info("startingOffsets: %s", result.starting_offsets.to_json())
    return handover, result, broker
