"""What runs inside the user's Spark driver: imports only pyspark, the standard library and this
package's standard-library-only modules (the driver has no Airflow).

* :func:`read_kafka`, :func:`checkpoint_location`: the Kafka source and the checkpoint at the
  handover (:mod:`.kafka`);
* :class:`GracefulStop`: stop between two batches on request (:mod:`.graceful_stop`);
* :func:`await_handover`: a standby launch waits here for its release (:mod:`.standby`);
* :func:`sink_location`, :func:`is_dry_run`: the trial contract of the compatibility check
  (:mod:`.trial`);
* :func:`foreach_batch`: the job's foreachBatch function behind the stop gate, so a stop needs no
  idle moment between batches (:mod:`.gate`);
* :func:`with_source_header`: a Kafka sink's output records name their input records, so a batch
  cut by a stop is counted exactly in the output topic (:mod:`.kafka`);
* :func:`delta_txn_options`, :func:`delta_txn_conf`: Delta idempotent writes (appends; MERGE and
  other DML) whose txnAppId is new with each checkpoint (:mod:`.delta`).
"""

from __future__ import annotations

from airflow_ckpt_provider.spark.delta import delta_txn_conf, delta_txn_options
from airflow_ckpt_provider.spark.gate import foreach_batch
from airflow_ckpt_provider.spark.graceful_stop import GracefulStop
from airflow_ckpt_provider.spark.kafka import (
           checkpoint_location,
           handed_over_starting_offsets,
           handover_json,
           read_kafka,
           with_source_header,
)
from airflow_ckpt_provider.spark.standby import await_handover, is_standby
from airflow_ckpt_provider.spark.trial import is_dry_run, sink_location

__all__ = ["GracefulStop", "await_handover", "checkpoint_location", "delta_txn_conf", "delta_txn_options",
           "foreach_batch", "handed_over_starting_offsets", "handover_json", "is_dry_run", "is_standby", "read_kafka",
           "sink_location", "with_source_header"]
