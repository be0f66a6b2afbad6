"""Cooperative graceful stop, inside the user's Spark driver: stop between two batches, on request.

Use it instead of ``query.awaitTermination()``::

    query = frame.writeStream.option("checkpointLocation", cp).trigger(processingTime="10 seconds").start()
    GracefulStop(spark, query, cp).run()   # blocks until the query ends; returns the StopAck or None
    spark.stop()

While the query runs, a daemon thread refreshes ``_ckpt/heartbeat.json`` (state running) every
``heartbeat_interval`` seconds, and :meth:`GracefulStop.run` polls ``_ckpt/stop-request.json``.
On a request it waits for a batch boundary — no trigger active, the last planned batch committed,
and (for processing-time triggers) not too close to the next trigger — then calls
``query.stop()``. A trigger can still start between that check and the stop; so afterwards it
lists ``offsets/`` and ``commits/`` again and reports honestly: ``clean`` when the last planned
batch is the last committed one, ``interrupted`` otherwise. It writes ``_ckpt/stop-ack.json``,
then the heartbeat with state stopped, and returns.

All files go through the Hadoop FileSystem of the checkpoint (via the JVM), so any location the
query itself can write (local, HDFS, s3a://, abfss://, gs://) works. Imports only pyspark, the
standard library and this package's standard-library-only modules (``spark.control``,
``clock``, ``batch_names``): the driver has no Airflow.

A request already present when this run starts is honoured only if it is not acknowledged and
not expired (a job still starting up when the stop was asked). If the query terminates on its
own, :meth:`run` writes the stopped heartbeat and re-raises its exception like
``awaitTermination``. A driver that never calls this cannot acknowledge: the requester
escalates to a kill after its timeout.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import replace
from typing import Any

from airflow_ckpt_provider.batch_names import batch_number
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.spark.control import (
    CLEAN,
    CONTROL_DIR,
    HEARTBEAT,
    INTERRUPTED,
    RUNNING,
    STOP_ACK,
    STOP_REQUEST,
    STOPPED,
    Heartbeat,
    ProcessScope,
    StopAck,
    StopRequest,
)
from airflow_ckpt_provider.spark.standby import standby_run_id

log = logging.getLogger(__name__)


class HadoopFiles:
    """Small whole-file reads and writes under one directory through Hadoop's FileSystem (JVM)."""

    def __init__(self, spark: Any, root: str) -> None:
        jvm = spark._jvm
        self._jvm = jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.root = root.rstrip("/")
        root_path = self._Path(self.root)
        self.fs = root_path.getFileSystem(spark._jsc.hadoopConfiguration())
        # Spark may not have created the checkpoint yet; qualify the path the way Spark does
        self.root_path = self.fs.makeQualified(root_path)

    def path(self, rel: str) -> Any:
        return self._Path(self.root_path, rel)

    def read(self, rel: str) -> bytes | None:
        """The file's bytes, or None when it does not exist."""
        path = self.path(rel)
        try:
            stream = self.fs.open(path)
        except Exception as exc:  # noqa: BLE001 - py4j wraps java.io.FileNotFoundException
            if "FileNotFoundException" in str(exc) or not self.fs.exists(path):
                return None
            raise
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write(self, rel: str, data: bytes) -> None:
        """Write whole: a temporary file in the same folder, then a rename over the target."""
        target = self.path(rel)
        parent = target.getParent()
        tmp = self._Path(parent, f".{target.getName()}.{uuid.uuid4().hex}.tmp")
        out = self.fs.create(tmp, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        if not self.fs.rename(tmp, target):  # stores whose rename does not replace
            self.fs.delete(target, False)
            if not self.fs.rename(tmp, target):
                self.fs.delete(tmp, False)
                raise OSError(f"could not write {target.toString()}")

    def last_batch(self, folder: str) -> int | None:
        """Highest batch id named in ``folder`` (offsets/ or commits/) by the name rule of
        :mod:`airflow_ckpt_provider.batch_names`, None when none."""
        path = self.path(folder)
        if not self.fs.exists(path):
            return None
        ids = (batch_number(s.getPath().getName()) for s in self.fs.listStatus(path))
        return max((i for i in ids if i is not None), default=None)


def _trigger_interval_s(query: Any) -> float | None:
    """The processing-time trigger interval of a classic query, None if unknown or another trigger."""
    try:
        trigger = query._jsq.streamingQuery().trigger()
        if "ProcessingTime" in trigger.getClass().getName():
            interval = int(trigger.intervalMs())
            return interval / 1000.0 if interval > 0 else None
    except Exception:  # noqa: BLE001 - Spark Connect or a changed internal API: no alignment
        return None
    return None


class GracefulStop:
    """Run a started streaming ``query`` until it ends or a stop request arrives (see module doc).

    ``checkpoint_location`` is the query's ``checkpointLocation``. ``trigger_interval`` overrides
    the processing-time interval found on the query (used to avoid stopping just before a trigger
    fires); ``margin`` is how close to the next trigger a stop is not attempted.
    ``boundary_timeout`` (seconds, default: none) stops anyway, reported as interrupted if a
    batch was cut, when no boundary was seen that long after the request.
    """

    def __init__(
        self,
        spark: Any,
        query: Any,
        checkpoint_location: str,
        heartbeat_interval: float = 1.0,
        poll_interval: float = 0.5,
        *,
        trigger_interval: float | None = None,
        margin: float = 0.15,
        boundary_timeout: float | None = None,
    ) -> None:
        if heartbeat_interval <= 0 or poll_interval <= 0:
            raise ValueError("heartbeat_interval and poll_interval must be positive")
        self.spark = spark
        self.query = query
        self.files = HadoopFiles(spark, checkpoint_location)
        self.heartbeat_interval = float(heartbeat_interval)
        self.poll_interval = float(poll_interval)
        self.trigger_interval = trigger_interval if trigger_interval is not None else _trigger_interval_s(query)
        self.margin = margin
        self.boundary_timeout = boundary_timeout
        self.run_id = standby_run_id() or uuid.uuid4().hex  # a released standby keeps its run
        scope = ProcessScope.current()
        self.heartbeat = Heartbeat(
            query_id=str(query.id),
            run_id=self.run_id,
            state=RUNNING,
            started_at=utc_iso(timespec="milliseconds"),
            updated_at=utc_iso(timespec="milliseconds"),
            interval_s=self.heartbeat_interval,
            host=scope.host,
            pid=os.getpid(),
            app_id=self._app_id(),
            boot_id=scope.boot_id,
            pid_namespace=scope.pid_namespace,
        )
        self._stop_beats = threading.Event()
        self._beat_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _app_id(self) -> str:
        try:
            return str(self.spark.sparkContext.applicationId)
        except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
            return ""

    # -- heartbeat ---------------------------------------------------------------------------------

    def _beat(self, state: str = RUNNING) -> None:
        with self._beat_lock:
            self.heartbeat = replace(self.heartbeat, state=state, updated_at=utc_iso(timespec="milliseconds"))
            self.files.write(HEARTBEAT, self.heartbeat.to_json().encode())

    def _beat_loop(self) -> None:
        while not self._stop_beats.wait(self.heartbeat_interval):
            try:
                self._beat()
            except Exception as exc:  # noqa: BLE001 - keep beating; a stale beat escalates anyway
                log.warning("heartbeat write failed: %s", exc)

    # -- stop request ------------------------------------------------------------------------------

    def _request(self) -> StopRequest | None:
        data = self.files.read(STOP_REQUEST)
        if data is None:
            return None
        try:
            return StopRequest.from_json(data)
        except (ValueError, TypeError) as exc:
            log.warning("ignoring unreadable stop request: %s", exc)
            return None

    def _acked_request_id(self) -> str | None:
        data = self.files.read(STOP_ACK)
        if data is None:
            return None
        try:
            return StopAck.from_json(data).request_id
        except (ValueError, TypeError):
            return None

    def _at_boundary(self) -> bool:
        """No trigger active, the last planned batch committed, not about to trigger."""
        if self.query.status.get("isTriggerActive", True):
            return False
        planned, committed = self.files.last_batch("offsets"), self.files.last_batch("commits")
        if planned is not None and planned != committed:
            return False
        if self.trigger_interval:  # processing-time triggers fire at multiples of the interval
            until_next = self.trigger_interval - (time.time() % self.trigger_interval)
            if until_next < self.margin:
                return False
        return not self.query.status.get("isTriggerActive", True)

    def _stop_at_boundary(self, request: StopRequest) -> StopAck:
        asked = time.monotonic()
        seen_at = utc_iso(timespec="milliseconds")
        log.info("stop request %s (by %s): waiting for a batch boundary", request.request_id,
                 request.requested_by or "unknown")
        while self.query.isActive:
            if self._at_boundary():
                break
            if self.boundary_timeout is not None and time.monotonic() - asked > self.boundary_timeout:
                log.warning("no batch boundary within %.1f s: stopping anyway", self.boundary_timeout)
                break
            time.sleep(min(0.05, self.poll_interval))
        boundary_at = utc_iso(timespec="milliseconds")
        self.query.stop()
        planned, committed = self.files.last_batch("offsets"), self.files.last_batch("commits")
        clean = planned is None or planned == committed
        ack = StopAck(
            request_id=request.request_id,
            query_id=str(self.query.id),
            run_id=self.run_id,
            outcome=CLEAN if clean else INTERRUPTED,
            last_committed_batch=committed,
            last_planned_batch=planned,
            stopped_at=utc_iso(timespec="milliseconds"),
            seen_at=seen_at,
            boundary_at=boundary_at,
        )
        log.info("query stopped %s after %.1f s: last committed batch %s, last planned batch %s",
                 ack.outcome, time.monotonic() - asked, committed, planned)
        return ack

    # -- main loop ---------------------------------------------------------------------------------

    def run(self) -> StopAck | None:
        """Block until the query ends; the StopAck if it was stopped on request, else None.

        Re-raises the query's exception (``StreamingQueryException``) if it failed.
        """
        self.files.fs.mkdirs(self.files.path(CONTROL_DIR))
        stale = self._request()
        ignored = None
        if stale is not None and (stale.is_expired() or stale.request_id == self._acked_request_id()):
            ignored = stale.request_id
        self._beat()
        self._thread = threading.Thread(target=self._beat_loop, name="ckpt-heartbeat", daemon=True)
        self._thread.start()
        ack: StopAck | None = None
        try:
            while True:
                if self.query.awaitTermination(self.poll_interval):
                    break  # ended by itself (or by someone's stop()); raises if it failed
                request = self._request()
                if request is None or request.request_id == ignored:
                    continue
                if request.is_expired():
                    log.info("ignoring expired stop request %s", request.request_id)
                    ignored = request.request_id
                    continue
                ack = self._stop_at_boundary(request)
                self.files.write(STOP_ACK, ack.to_json().encode())
                break
        finally:
            self._stop_beats.set()
            self._thread.join(timeout=self.heartbeat_interval + 5)
            try:
                self._beat(STOPPED)
            except Exception as exc:  # noqa: BLE001 - do not hide the query's own exception
                log.warning("could not write the stopped heartbeat: %s", exc)
        return ack
