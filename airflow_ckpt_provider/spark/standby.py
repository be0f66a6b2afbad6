"""Standby start, inside the user's Spark driver: be ready before the old version stops.

A standby launch (the reference DAG's default ``relaunch_mode="standby"``) starts the new
version BEFORE the old one stops, with ``--conf spark.ckpt.standby=true`` and no offsets. The
driver builds its SparkSession, warms it up, then :func:`await_handover` writes a ``standby``
heartbeat in the new checkpoint's ``_ckpt/`` folder and waits. Once the old version stopped and
its offsets were handed over, the provider writes ``_ckpt/standby-release.json``
(:class:`~airflow_ckpt_provider.records.control.StandbyRelease`); the driver sets the released
``spark.ckpt.*`` keys in its session and returns, and the job starts its query exactly as a cold
launch would. Downtime is then the stop, the handover and one first batch on a warm session,
not a JVM and a session start.

:func:`~airflow_ckpt_provider.spark.kafka.read_kafka` and
:func:`~airflow_ckpt_provider.spark.kafka.checkpoint_location` call :func:`await_handover`
themselves, so a job written with them works unchanged in both modes. A job that builds its
Kafka reader by hand calls it before reading ``spark.ckpt.startingOffsets``::

    spark = SparkSession.builder.getOrCreate()
    await_handover(spark)          # returns at once in a cold launch
    offsets = spark.conf.get("spark.ckpt.startingOffsets")

While it waits, a stop request (the upgrade was aborted, or timed out) makes the driver
acknowledge it like a stopped query with no batch, write a stopped heartbeat, stop its session
and exit with code 0: it never writes a checkpoint file (only ``_ckpt/``). No release within
``spark.ckpt.standbyTimeoutS`` (default one hour): the same, exit code
:data:`EXIT_STANDBY_TIMEOUT`. A release is taken only when it names this driver's standby run,
so a release left over from an earlier upgrade never starts a later standby.

Driver-to-driver handover (the driver half of a switchover): the provider may instead release the
standby BEFORE the old version stops, with ``_ckpt/switchover-release.json``
(:class:`~airflow_ckpt_provider.spark.switchover.SwitchoverRelease`) naming the old checkpoint.
The standby then watches the old checkpoint's ``_ckpt/``: once the old query acknowledges its
stop clean (or held at the sink gate), the standby reads the old checkpoint's last committed
batch itself (:func:`~airflow_ckpt_provider.spark.checkpoint_files.read_handover`, the provider's
own reader), applies the chosen start, compares it with the approved plan, writes
``_ckpt/switchover-handover.json`` and returns like after a normal release. On an interrupted
stop, an expired stop request or a plan that differs it does not start: it writes
``_ckpt/switchover-refusal.json`` and keeps waiting for the provider (a normal release, a stop
request, or its timeout). See :mod:`airflow_ckpt_provider.spark.switchover`.

Imports only pyspark (lazily), the standard library and this package's standard-library-only
modules: the driver has no Airflow. All files go through the checkpoint's Hadoop FileSystem.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.records.control import (
    CLEAN,
    CONF_CHECKPOINT_LOCATION,
    CONF_STANDBY,
    CONF_STANDBY_TIMEOUT_S,
    CONTROL_DIR,
    DEFAULT_STANDBY_TIMEOUT_S,
    STANDBY,
    STANDBY_RELEASE,
    STOP_ACK,
    STOP_REQUEST,
    STOPPED,
    StandbyRelease,
    StopAck,
    StopRequest,
    pending_request,
)

log = logging.getLogger(__name__)

#: Exit code of a standby driver that was never released within its timeout.
EXIT_STANDBY_TIMEOUT = 3
__all__ = ["EXIT_STANDBY_TIMEOUT", "await_handover", "is_standby", "standby_run_id", "warm_up_session"]

#: The release this driver took (one per driver process), and the standby run it was meant for.
_taken: dict[str, Any] = {"release": None, "run_id": ""}
_lock = threading.Lock()


def is_standby(spark: Any) -> bool:
    """Whether this driver was launched as a standby (``--conf spark.ckpt.standby=true``)."""
    return str(spark.conf.get(CONF_STANDBY, "false")).strip().lower() == "true"


def standby_run_id() -> str:
    """The standby run this driver heartbeated as ("" when it was no standby). GracefulStop keeps
    it as its own run id, so a stop request sent while the released query starts is answered."""
    return str(_taken["run_id"])


def warm_up_session(spark: Any) -> None:
    """Run a tiny job and load the Kafka source's classes: the executor, the scheduler and code
    generation are ready before the release."""
    spark.range(64).selectExpr("sum(id) AS total").collect()
    try:
        spark._jvm.java.lang.Class.forName("org.apache.spark.sql.kafka010.KafkaSourceProvider")
    except Exception as exc:  # noqa: BLE001 - no connector on the classpath: the query will say so
        log.info("could not preload the Kafka source: %s", exc)


class _StandbyWait:
    """One standby wait on one checkpoint (see the module doc)."""

    def __init__(self, spark: Any, checkpoint: str, *, heartbeat_interval: float, poll_interval: float,
                 timeout_s: float) -> None:
        # graceful_stop imports this module (standby_run_id): its helpers are bound here, once
        from airflow_ckpt_provider.spark.graceful_stop import (
            HadoopFiles,
            HeartbeatWriter,
            driver_logging,
            new_heartbeat,
            read_record,
        )

        driver_logging()  # the wait, the release and a switchover in the driver log
        self._read_record = read_record
        self.spark = spark
        self.files = HadoopFiles(spark, checkpoint)
        self.poll_interval = poll_interval
        self.timeout_s = timeout_s
        self.beats = HeartbeatWriter(self.files, new_heartbeat(spark, run_id=uuid.uuid4().hex, state=STANDBY,
                                                               interval_s=heartbeat_interval),
                                     thread_name="ckpt-standby-heartbeat")
        # the switchover imports the core: bound here, not at import
        from airflow_ckpt_provider.spark.switchover import SwitchoverWatch

        self.switchover = SwitchoverWatch(spark, self.files, self.run_id, read_record)
        self._switchover_error = ""

    @property
    def run_id(self) -> str:
        return self.beats.heartbeat.run_id

    def _read(self, rel: str, cls: Any) -> Any:
        return self._read_record(self.files, rel, cls)

    def _pending_stop(self, ignored: str | None) -> StopRequest | None:
        request = self._read(STOP_REQUEST, StopRequest)
        if request is None or request.request_id == ignored:
            return None
        return request if pending_request(request, self._read(STOP_ACK, StopAck)) else None

    def _switchover(self) -> StandbyRelease | None:
        """One look at a switchover release and the old checkpoint. A read error of the store
        (``OSError``, or the JVM's through py4j) is logged (once per message) and the standby keeps
        waiting: the old checkpoint may be briefly unreadable. Anything else ends the driver
        (a record the watch could not write after its retries: :meth:`_fail`; any other error
        propagates as it is), so the provider's wait sees it die instead of waiting out its deadline."""
        from py4j.protocol import Py4JError

        from airflow_ckpt_provider.checkpoint.errors import SwitchoverRecordNotWritten

        try:
            return self.switchover.poll()
        except (OSError, Py4JError) as exc:
            if str(exc) != self._switchover_error:
                self._switchover_error = str(exc)
                log.warning("could not look at the switchover (still waiting as a standby): %s", exc)
            return None
        except SwitchoverRecordNotWritten as exc:
            self._fail(exc)
            raise

    def _fail(self, exc: Exception) -> None:
        """The switchover could not record its answer: say so, beat stopped, stop the session; the
        caller re-raises, and the driver exits with the error."""
        log.error("the switchover failed in this standby (%s: %s): exiting without starting the query (no checkpoint "
                  "file written)", type(exc).__name__, exc)
        try:
            self.beats.end(STOPPED)
        finally:
            self.spark.stop()

    def _end(self, code: int, request: StopRequest | None = None) -> None:
        """Acknowledge ``request`` (if any), beat stopped, stop the session, exit with ``code``."""
        if request is not None:
            ack = StopAck(request_id=request.request_id, query_id="", run_id=self.run_id, outcome=CLEAN,
                          last_committed_batch=None, last_planned_batch=None,
                          stopped_at=utc_iso(timespec="milliseconds"))
            self.files.write(STOP_ACK, ack.to_json().encode())
        try:
            self.beats.end(STOPPED)
        finally:
            self.spark.stop()
        raise SystemExit(code)

    def run(self) -> StandbyRelease:
        self.files.fs.mkdirs(self.files.path(CONTROL_DIR))
        stale = self._read(STOP_REQUEST, StopRequest)  # an answered or expired request is history
        ignored = stale.request_id if stale is not None and not pending_request(
            stale, self._read(STOP_ACK, StopAck)) else None
        self.beats.start()
        log.info("standby on %s (run %s): session ready, waiting up to %.0f s for the handover",
                 self.files.root, self.run_id, self.timeout_s)
        waited_from = time.monotonic()
        try:
            while True:
                release = self._read(STANDBY_RELEASE, StandbyRelease)
                if release is not None and release.standby_run_id == self.run_id:
                    log.info("released after %.1f s (release %s): starting at %s", time.monotonic() - waited_from,
                             release.release_id, release.starting_offsets)
                    return release
                switched = self._switchover()
                if switched is not None:
                    log.info("switched over after %.1f s as a standby: starting at %s", time.monotonic() - waited_from,
                             switched.starting_offsets)
                    return switched
                request = self._pending_stop(ignored)
                if request is not None:
                    log.info("stop request %s while waiting as a standby (by %s): exiting without writing a "
                             "checkpoint file", request.request_id, request.requested_by or "unknown")
                    self._end(0, request)
                if time.monotonic() - waited_from > self.timeout_s:
                    log.error("no handover within %.0f s: exiting without writing a checkpoint file", self.timeout_s)
                    self._end(EXIT_STANDBY_TIMEOUT)
                time.sleep(self.poll_interval)
        finally:  # released: GracefulStop beats on under the same run id; ended: the last beat is written
            self.beats.end(None)


def await_handover(
    spark: Any,
    *,
    warm_up: Callable[[Any], object] | None = warm_up_session,
    poll_interval: float = 0.2,
    heartbeat_interval: float = 1.0,
    timeout_s: float | None = None,
) -> StandbyRelease | None:
    """In a standby launch: warm the session up, wait for the release, set its keys in the
    session's conf and return it. In any other launch: None at once (the keys came with
    ``--conf``). Idempotent: a second call returns the same release.

    ``warm_up`` runs once before the standby heartbeat (None: no warm-up); ``timeout_s``
    overrides ``spark.ckpt.standbyTimeoutS``. Ends the driver (``SystemExit``, session stopped,
    no checkpoint file written) on a stop request (code 0) or a timeout
    (:data:`EXIT_STANDBY_TIMEOUT`).
    """
    if not is_standby(spark):
        return None
    with _lock:
        if _taken["release"] is not None:
            return _taken["release"]
        checkpoint = str(spark.conf.get(CONF_CHECKPOINT_LOCATION, "") or "")
        if not checkpoint:
            raise ValueError(f"a standby launch needs --conf {CONF_CHECKPOINT_LOCATION}=<new checkpoint>")
        if heartbeat_interval <= 0 or poll_interval <= 0:
            raise ValueError("heartbeat_interval and poll_interval must be positive")
        timeout = timeout_s if timeout_s is not None else float(
            spark.conf.get(CONF_STANDBY_TIMEOUT_S, str(DEFAULT_STANDBY_TIMEOUT_S)))
        if warm_up is not None:
            from airflow_ckpt_provider.spark.graceful_stop import driver_logging

            driver_logging()  # the warm-up's lines too
            started = time.monotonic()
            warm_up(spark)
            log.info("standby warm-up done in %.1f s", time.monotonic() - started)
        wait = _StandbyWait(spark, checkpoint, heartbeat_interval=heartbeat_interval, poll_interval=poll_interval,
                            timeout_s=timeout)
        _taken["run_id"] = wait.run_id
        release = wait.run()
        for key, value in release.spark_conf().items():
            spark.conf.set(key, value)
        _taken["release"] = release
        return release
