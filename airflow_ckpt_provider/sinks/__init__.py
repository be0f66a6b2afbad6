"""Sinks: what a streaming job writes to, and the sink's own record of what it holds (the ledger).

:mod:`.spec` declares a job's sink (pure); :mod:`.delta` reads a Delta table's log through
fsspec; :mod:`.ledger` decides, from that record, whether the new version's writes would be
skipped (preflight) and whether the sink holds the new query's batches (verify).
"""

from airflow_ckpt_provider.sinks.ledger import (
    CutDisposition,
    OffsetRange,
    SinkAccount,
    SinkDelivery,
    SinkFinding,
    account_cut,
    inspect_sink,
    sink_holds_batch,
    verify_sink,
)
from airflow_ckpt_provider.sinks.spec import SinkKind, SinkSpec

__all__ = ["CutDisposition", "OffsetRange", "SinkAccount", "SinkDelivery", "SinkFinding", "SinkKind", "SinkSpec",
           "account_cut", "inspect_sink", "sink_holds_batch", "verify_sink"]
