"""What a streaming job writes to: the sink kinds the provider knows and a job's declaration of
its sink (:class:`SinkSpec`). Pure: no I/O.

A new checkpoint restarts Spark's batch ids at 0 and gives the query a new id, and each sink
keeps its own record of what it received. Whether an upgrade is exact therefore depends on the
sink (docs "Sinks"):

* ``delta`` — the Delta streaming sink (``writeStream.format("delta")``). Its log records
  ``txn(appId=<query id>, version=<batch id>)`` with each batch, so the provider reads there
  which batches of the old query the table holds and, after the switch, that it holds the new
  query's batches.
* ``delta_foreach_batch`` — Delta idempotent writes in ``foreachBatch``
  (``txnAppId`` + ``txnVersion=batch_id``). With a txnAppId that is the same for both versions
  Delta silently skips the new version's batches; the preflight refuses that. With
  :func:`airflow_ckpt_provider.spark.delta_txn_options` (txnAppId = the checkpoint's query id)
  the record is as exact as the streaming sink's.
* ``file`` — Spark's file sink: ``_spark_metadata`` must not be in the new version's path.
* ``kafka`` — Spark's Kafka sink, ``location`` its output topic (on the cluster of the upgrade's
  Kafka connection): at-least-once, but when the job names each output record's input record
  (:func:`airflow_ckpt_provider.spark.with_source_header`), the handover counts exactly which
  records of a batch the stop cut the topic already holds, and the report names them as
  processed twice.
* ``foreach_batch`` (any other writer) — at-least-once: a batch cut by the stop may be written
  again; the approval and the report say which input range.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from airflow_ckpt_provider.checkpoint.errors import InvalidSinkSpec, JsonTooLarge
from airflow_ckpt_provider.checkpoint.jsonin import load_json
from airflow_ckpt_provider.checkpoint.locations import refuse_credentials
from airflow_ckpt_provider.checkpoint.old_job import CutExposure
from airflow_ckpt_provider.enums import StrEnum


class SinkKind(StrEnum):
    NONE = ""                                   # not declared
    DELTA = "delta"                             # writeStream.format("delta")
    DELTA_FOREACH_BATCH = "delta_foreach_batch"  # Delta idempotent writes (txnAppId, txnVersion) in foreachBatch
    FILE = "file"                               # writeStream.format("parquet"/"json"/...) with _spark_metadata
    KAFKA = "kafka"                             # writeStream.format("kafka")
    FOREACH_BATCH = "foreach_batch"             # any other writer in foreachBatch

    @property
    def is_delta(self) -> bool:
        return self in (SinkKind.DELTA, SinkKind.DELTA_FOREACH_BATCH)

    @property
    def exact(self) -> bool:
        """Whether the provider reads this sink's own record (else: at-least-once)."""
        return self.is_delta or self is SinkKind.FILE

    def cut_exposure(self, *, source_headers: bool = False) -> CutExposure:
        """What a batch a kill cuts means for this sink: exact (Delta, file sink), counted (a Kafka
        sink whose records carry source headers), at-least-once (``foreach_batch``, a Kafka sink
        without them), or nothing known (not declared)."""
        if self is SinkKind.NONE:
            return CutExposure.UNDECLARED
        if self.exact:
            return CutExposure.EXACT
        if self is SinkKind.KAFKA and source_headers:
            return CutExposure.COUNTED
        return CutExposure.AT_LEAST_ONCE


_KEYS = frozenset({"kind", "location", "txn_app_id", "new_txn_app_id"})


@dataclass(frozen=True)
class SinkSpec:
    """A job's sink: its ``kind``, its ``location`` (table or output path; the same for both
    versions unless the new version writes elsewhere), and for ``delta_foreach_batch`` the
    ``txn_app_id`` the old version writes with ("" = the checkpoint's query id, as
    :func:`~airflow_ckpt_provider.spark.delta_txn_options` writes) and the ``new_txn_app_id`` of the
    new version ("" = the same rule as the old one). :class:`InvalidSinkSpec` on bad fields,
    :class:`CredentialsInLocation` for a location with credentials in it."""

    FORMAT: ClassVar[int] = 1

    kind: SinkKind = SinkKind.NONE
    location: str = ""
    txn_app_id: str = ""
    new_txn_app_id: str = ""

    def __post_init__(self) -> None:
        for name in ("location", "txn_app_id", "new_txn_app_id"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InvalidSinkSpec(found=f"{name}={value!r}", expected=f"{name} as a string")
            object.__setattr__(self, name, value.strip())
        refuse_credentials(self.location, "sink location")  # credentials belong in a connection
        if (self.kind.is_delta or self.kind is SinkKind.FILE) and not self.location:
            raise InvalidSinkSpec(found=f"sink kind {self.kind} without a location",
                                  expected="the table or output path in location")
        if self.kind is not SinkKind.DELTA_FOREACH_BATCH and (self.txn_app_id or self.new_txn_app_id):
            raise InvalidSinkSpec(found=f"txn_app_id given for sink kind {self.kind or 'none'}",
                                  expected="txn_app_id only with kind delta_foreach_batch")

    @property
    def declared(self) -> bool:
        return self.kind is not SinkKind.NONE

    def old_app_id(self, old_query_id: str | None) -> str | None:
        """The Delta appId under which the old query's batches are recorded (None: unknown)."""
        if self.kind is SinkKind.DELTA:
            return old_query_id
        if self.kind is SinkKind.DELTA_FOREACH_BATCH:
            return self.txn_app_id or old_query_id
        return None

    def new_app_id(self, new_query_id: str | None) -> str | None:
        """The Delta appId under which the new query's batches are recorded (None: unknown)."""
        if self.kind is SinkKind.DELTA:
            return new_query_id
        if self.kind is SinkKind.DELTA_FOREACH_BATCH:
            return self.new_txn_app_id or self.txn_app_id or new_query_id
        return None

    @property
    def constant_new_app_id(self) -> str:
        """The new version's txnAppId when it is a constant ("" when it is the new query's id)."""
        if self.kind is SinkKind.DELTA_FOREACH_BATCH:
            return self.new_txn_app_id or self.txn_app_id
        return ""

    def describe(self) -> str:
        if not self.declared:
            return "not declared"
        text = f"{self.kind} at `{self.location}`" if self.location else str(self.kind)
        if self.kind is SinkKind.DELTA_FOREACH_BATCH:
            old = f"`{self.txn_app_id}`" if self.txn_app_id else "the old query's id"
            new = f"`{self.constant_new_app_id}`" if self.constant_new_app_id else "the new query's id"
            text += f" (txnAppId: old {old}, new {new})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"kind": str(self.kind), "location": self.location, "txn_app_id": self.txn_app_id,
                "new_txn_app_id": self.new_txn_app_id}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_value(cls, value: SinkSpec | Mapping[str, Any] | str | None) -> SinkSpec:
        """A spec from itself, a mapping, its JSON, or nothing (``None``, ``""``, ``{}``, a rendered
        ``None``): not declared. Unknown keys and kinds are refused."""
        if isinstance(value, SinkSpec):
            return value
        if value is None:
            return cls()
        if isinstance(value, str):
            text = value.strip()
            if text in ("", "None", "null", "{}"):
                return cls()
            try:
                value = load_json(text, what="sink declaration")
            except JsonTooLarge:
                raise
            except ValueError:
                raise InvalidSinkSpec(found=f"sink {text[:120]!r}, not JSON", expected="a JSON object") from None
        if not isinstance(value, Mapping):
            raise InvalidSinkSpec(found=f"sink of type {type(value).__name__}", expected="a JSON object")
        unknown = sorted(set(value) - _KEYS)
        if unknown:
            raise InvalidSinkSpec(found=f"unknown sink key(s) {', '.join(unknown)}",
                                  expected=f"only {', '.join(sorted(_KEYS))}")
        kind_text = value.get("kind") or ""
        try:
            kind = SinkKind(kind_text)
        except ValueError:
            raise InvalidSinkSpec(found=f"sink kind {kind_text!r}",
                                  expected=f"one of {', '.join(k.value for k in SinkKind if k.value)}") from None
        fields = {key: value.get(key, "") or "" for key in ("location", "txn_app_id", "new_txn_app_id")}
        return cls(kind=kind, **fields)
