"""Extract the handover of a stopped query and reconcile it with the live Kafka cluster."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any, Protocol

from airflow.sdk import BaseOperator, Context

from airflow_ckpt_provider.checkpoint import BrokerView, CheckpointReader, Handover, Reconciliation, reconcile
from airflow_ckpt_provider.checkpoint.handover import HandoverResult
from airflow_ckpt_provider.checkpoint.journal import UPGRADE_PHASE
from airflow_ckpt_provider.hooks.kafka import KafkaBrokerHook
from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook
from airflow_ckpt_provider.operators.journaled import JOURNAL_FIELDS, JournaledStep


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

    With ``journal`` (an upgrade journal's URI) a handover already taken for this upgrade is
    returned as recorded: a re-run after the old checkpoint was archived (or removed) hands over
    the same offsets.
    """

    template_fields: Sequence[str] = ("checkpoint_uri", "kafka_conn_id", "storage_conn_id", *JOURNAL_FIELDS)
    ui_color = "#e8f4fd"

    def __init__(
        self,
        *,
        checkpoint_uri: str,
        kafka_conn_id: str = KafkaBrokerHook.default_conn_name,
        storage_conn_id: str | None = None,
        source: int | str | None = None,
        accept_data_loss: bool = False,
        journal: str | None = None,
        journal_conn_id: str | None = None,
        journal_phase: str = UPGRADE_PHASE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.init_journal(journal, journal_conn_id, journal_phase)
        if source is not None and not isinstance(source, (int, str)):
            raise TypeError(f"source must be an int index or a source name, not {type(source).__name__}")
        self.checkpoint_uri = checkpoint_uri
        self.kafka_conn_id = kafka_conn_id
        self.storage_conn_id = storage_conn_id
        self.source = source
        self.accept_data_loss = bool(accept_data_loss)

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
        handover, result = reconciled_handover(
            CheckpointReader(self.checkpoint_uri, fs=fs), self.kafka_hook,
            source=self.source, accept_data_loss=self.accept_data_loss, log=self.log,
        )
        return HandoverResult(handover, result.starting_offsets, result).to_dict()


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
) -> tuple[Handover, Reconciliation, BrokerView]:
    """:func:`reconciled_handover` plus the broker view it was reconciled with."""
    handover = reader.handover()
    offsets = handover.kafka_offsets(source)
    if handover.from_initial:
        log.info("no batch committed yet in %s: handing over the initial offsets", reader.uri)
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
