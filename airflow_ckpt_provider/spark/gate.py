"""A stop that needs no gap between batches: the next batch is held at the job's own sink.

Spark has no stop-after-current-batch, and with the default trigger (or a query catching up)
batches run back to back: a stop that waits for an idle moment between them may never find
one. :func:`foreach_batch` wraps the job's ``foreachBatch`` function with a :class:`BatchGate`:
once :class:`~airflow_ckpt_provider.spark.graceful_stop.GracefulStop` has a stop request, the
gate is armed, and the next batch that reaches the sink raises :class:`BatchHeld` BEFORE the
job's function runs — before the batch's DataFrame is computed, so it writes no output and no
state. The query then ends with that error; GracefulStop recognises it and acknowledges the
stop with outcome ``held``: the last committed batch is N, batch N+1 is planned (``offsets/N+1``)
and nothing of it reached the sink, so the handover from N is exact. The stop therefore takes
at most the rest of the running batch, on any trigger and any load.

After the job's function returns, the wrapper records the batch as delivered
(``_ckpt/delivered.json``, :class:`~airflow_ckpt_provider.records.control.Delivery`): should the
query end after that and before Spark commits the batch (a kill, a crash), the provider's sink
ledger knows the sink has the batch whole and hands over after it.

A batch already inside the job's function when the gate is armed finishes and commits normally;
the one after it is held. A withdrawn or expired request disarms the gate. Jobs whose sink is
not a ``foreachBatch`` function (a built-in sink) have no gate: their stop waits for a batch
boundary as before.

Standard library only at import (the driver side).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: Words of the error that ends a held query; GracefulStop finds them in Spark's error text.
HELD_MARKER = "airflow-ckpt-provider: batch held for a graceful stop"


class BatchHeld(RuntimeError):
    """Raised at the sink by an armed gate: this batch must not write (the query stops)."""

    def __init__(self, batch_id: int, request_id: str) -> None:
        self.batch_id = batch_id
        self.request_id = request_id
        super().__init__(f"{HELD_MARKER}: batch {batch_id} (stop request {request_id}) was planned and held before "
                         "it wrote anything; the last committed batch is the handover")


class BatchGate:
    """The gate of one checkpoint's query (see the module doc); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._request_id = ""
        self.held_batch: int | None = None
        self.last_delivered: int | None = None
        self.used = False  # a foreach_batch wrapper passed through it at least once

    @property
    def armed(self) -> bool:
        with self._lock:
            return bool(self._request_id)

    def arm(self, request_id: str) -> None:
        with self._lock:
            self._request_id = request_id or "unnamed"
            self.held_batch = None

    def disarm(self) -> None:
        with self._lock:
            self._request_id = ""

    def enter(self, batch_id: int) -> None:
        """At the start of a batch's sink call: raise :class:`BatchHeld` when armed."""
        with self._lock:
            self.used = True
            if not self._request_id:
                return
            self.held_batch = batch_id
            request_id = self._request_id
        log.info("stop request %s: holding batch %d at the sink, before it writes", request_id, batch_id)
        raise BatchHeld(batch_id, request_id)

    def delivered(self, batch_id: int) -> None:
        with self._lock:
            self.last_delivered = batch_id


_gates: dict[str, BatchGate] = {}
_gates_lock = threading.Lock()


def gate_for(checkpoint: str) -> BatchGate:
    """The process's gate for the query on ``checkpoint`` (one per checkpoint location)."""
    key = checkpoint.rstrip("/")
    with _gates_lock:
        return _gates.setdefault(key, BatchGate())


def foreach_batch(function: Callable[[Any, int], Any], checkpoint: str, *,
                  record_delivery: bool = True) -> Callable[[Any, int], None]:
    """``function`` (a ``foreachBatch`` function: ``(batch_df, batch_id)``) behind the gate of the
    query on ``checkpoint`` — the same location the query and GracefulStop are given::

        query = frame.writeStream.foreachBatch(foreach_batch(write, checkpoint)) \\
            .option("checkpointLocation", checkpoint).start()
        GracefulStop(spark, query, checkpoint).run()

    With ``record_delivery`` (default) each batch whose function returned is recorded in
    ``_ckpt/delivered.json`` (one small write per batch on the checkpoint's storage); a failed
    write is logged and the batch goes on (the ledger then treats a cut batch as at-least-once).
    """
    gate = gate_for(checkpoint)
    recorder: list[Any] = []

    def record(batch: Any, batch_id: int) -> None:
        from airflow_ckpt_provider.clock import utc_iso
        from airflow_ckpt_provider.records.control import DELIVERED, Delivery
        from airflow_ckpt_provider.spark.graceful_stop import HadoopFiles

        try:
            if not recorder:
                recorder.append(HadoopFiles(batch.sparkSession, checkpoint))
            recorder[0].write(DELIVERED, Delivery(batch_id, utc_iso(timespec="milliseconds")).to_json().encode())
        except Exception as exc:  # noqa: BLE001 - the batch's own writes succeeded: never fail it here
            log.warning("could not record batch %d as delivered: %s", batch_id, exc)

    def run(batch: Any, batch_id: int) -> None:
        gate.enter(batch_id)
        function(batch, batch_id)
        gate.delivered(batch_id)
        if record_delivery:
            record(batch, batch_id)

    run.__name__ = getattr(function, "__name__", "foreach_batch")
    return run
