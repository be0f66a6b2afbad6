"""Cooperative graceful stop, inside the user's Spark driver: stop between two batches, on request.

Use it instead of ``query.awaitTermination()``::

    query = frame.writeStream.option("checkpointLocation", cp).trigger(processingTime="10 seconds").start()
    GracefulStop(spark, query, cp).run()   # blocks until the query ends; returns the StopAck or None
    spark.stop()

While the query runs, a daemon thread refreshes ``_ckpt/heartbeat.json`` (state running) every
``heartbeat_interval`` seconds, and :meth:`GracefulStop.run` polls ``_ckpt/stop-request.json``.
On a request it arms the query's :class:`~airflow_ckpt_provider.spark.gate.BatchGate`: a job
whose ``foreachBatch`` function is wrapped by :func:`~airflow_ckpt_provider.spark.gate.foreach_batch`
has its next batch held at the sink before it writes anything, so the stop needs no idle moment
between batches (Spark's default trigger, a query catching up). Meanwhile it also watches for a
batch boundary — no trigger active, the last planned batch committed, and (for processing-time
triggers) not too close to the next trigger — and then calls ``query.stop()``. Afterwards it lists
``offsets/`` and ``commits/`` again and reports honestly: ``clean`` when the last planned batch is
the last committed one, ``held`` when the one after it was held at the gate (nothing of it was
written), ``interrupted`` otherwise (a trigger started between the check and the stop: the batch
was cut). A query with a built-in sink (no gate to hold a batch at) that finds no boundary within
two of its recent batch durations (at least :data:`BUILTIN_SINK_WAIT_FLOOR_S`) stops anyway,
``interrupted``: the stop is bounded by about one batch on any trigger, and the provider's sink
ledger decides what the sink holds of the batch it cut. While it waits it re-reads the request, and
once more when it is about to stop (its last look: at a boundary it then checks the boundary again,
so nothing slow sits between that check and ``query.stop()``): a request withdrawn (removed or replaced) or
expired meanwhile is not carried out — the query keeps running, and the driver answers so in
``_ckpt/stop-withdrawn.json`` (:class:`~airflow_ckpt_provider.records.control.StopWithdrawn`). A request
withdrawn after that last look is carried out: the driver writes ``_ckpt/stop-ack.json``, then the
heartbeat with state stopped, and returns. A request the provider withdraws
(``_ckpt/stop-withdrawal.json``) before the driver ever read it is answered the same way from the
main loop, so a withdrawal always gets one of the two answers (the provider waits for it). The test
hook :func:`~airflow_ckpt_provider.faults.pause_point` ``driver:stopping`` sits between the last look
and ``query.stop()``.

All files go through the Hadoop FileSystem of the checkpoint (via the JVM), so any location the
query itself can write (local, HDFS, s3a://, abfss://, gs://) works. Imports only pyspark, the
standard library and this package's standard-library-only modules (``records.control``,
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
from typing import Any, TypeVar

from airflow_ckpt_provider.batch_names import batch_number
from airflow_ckpt_provider.clock import utc_iso
from airflow_ckpt_provider.faults import pause_point
from airflow_ckpt_provider.records.control import (
    CLEAN,
    CONTROL_DIR,
    HEARTBEAT,
    HELD,
    INTERRUPTED,
    RUNNING,
    STOP_ACK,
    STOP_REQUEST,
    STOP_WITHDRAWAL,
    STOP_WITHDRAWN,
    STOPPED,
    Heartbeat,
    ProcessScope,
    StandbyRelease,
    StopAck,
    StopRequest,
    StopWithdrawal,
    StopWithdrawn,
    parse_record,
    pending_request,
)
from airflow_ckpt_provider.spark.gate import gate_for
from airflow_ckpt_provider.spark.standby import standby_run_id
from airflow_ckpt_provider.spark.trial import (
    OPERATORS_RECORD,
    TRIAL_RECORD,
    operators_record,
    stateful_operators,
    trial_batches,
    trial_record,
)

log = logging.getLogger(__name__)
T = TypeVar("T", StopRequest, StopAck, Heartbeat, StandbyRelease, StopWithdrawal, StopWithdrawn)
#: The pause point between the driver's last look at a stop request and ``query.stop()`` (tests).
STOPPING_PAUSE = "driver:stopping"
#: Attempts at writing the answer to a withdrawn request before the driver gives up (and runs on).
ANSWER_ATTEMPTS = 3


#: Hadoop schemes of object stores: a file is written as one object on close; no atomic rename.
OBJECT_STORE_SCHEMES = frozenset({"s3a", "s3", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cosn"})


class HadoopFiles:
    """Small whole-file reads and writes under one directory through Hadoop's FileSystem (JVM)."""

    #: Hadoop's raw local file system when the directory is on file: (see ``__init__``), else None.
    _raw: Any = None

    def __init__(self, spark: Any, root: str) -> None:
        jvm = spark._jvm
        self._jvm = jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self.root = root.rstrip("/")
        root_path = self._Path(self.root)
        conf = spark._jsc.hadoopConfiguration()
        self.fs = root_path.getFileSystem(conf)
        # Spark may not have created the checkpoint yet; qualify the path the way Spark does
        self.root_path = self.fs.makeQualified(root_path)
        #: writes to file: go through Hadoop's raw local file system, whose rename replaces the
        #: target atomically: readers never see a control file missing while it is rewritten (Hive's
        #: ProxyLocalFileSystem, which Spark's Hive jars register for file:, refuses to rename over
        #: an existing file, and a checksummed rename moves a .crc side file after the data)
        if str(self.root_path.toUri().getScheme() or "").lower() == "file":
            raw = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
            raw.initialize(jvm.java.net.URI.create("file:///"), conf)
            self._raw = raw

    def path(self, rel: str) -> Any:
        return self._Path(self.root_path, rel)

    def read(self, rel: str) -> bytes | None:
        """The file's bytes, or None when it does not exist."""
        return self._read(self.path(rel))

    def _read(self, path: Any) -> bytes | None:
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

    @property
    def object_store(self) -> bool:
        """Whether the checkpoint is on an object store (S3A, GCS, Azure ...), which has no rename."""
        return str(self.root_path.toUri().getScheme() or "").lower() in OBJECT_STORE_SCHEMES

    def write(self, rel: str, data: bytes) -> None:
        """Write whole: on an object store one object, which appears whole when the stream closes
        (S3A's rename is a copy that refuses an existing target); elsewhere a temporary file in
        the same folder, then a rename over the target (:meth:`_settle` when that returns false);
        on file: both through the raw local file system (atomic replace, no ``.crc`` side file).
        Raises OSError when the target cannot be put in place; the temporary file is removed."""
        target = self.path(rel)
        if self.object_store:
            out = self.fs.create(target, True)
            try:
                out.write(bytearray(data))
            finally:
                out.close()
            return
        tmp = self._Path(target.getParent(), f".{target.getName()}.{uuid.uuid4().hex}.tmp")
        fs = self._raw if self._raw is not None else self.fs
        out = fs.create(tmp, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        if self._raw is not None:  # a .crc of an earlier checksummed write would not match the new bytes
            crc = self._Path(target.getParent(), f".{target.getName()}.crc")
            if self._raw.exists(crc):
                self._raw.delete(crc, False)
        renamed = False
        try:
            renamed = bool(fs.rename(tmp, target))
            if not renamed:
                self._settle(tmp, target, data)
        finally:
            if not renamed:
                self._discard(tmp)

    def _settle(self, tmp: Any, target: Any, data: bytes) -> None:
        """Finish a write whose rename of ``tmp`` over ``target`` returned false, never deleting
        a target that holds ``data`` nor losing the old one. Hadoop returns false both when the
        data moved but its ``.crc`` side file did not (ChecksumFileSystem) and when the target
        exists (HDFS; Hive's ProxyLocalFileSystem, which Spark's Hive jars register for file:)."""
        name = target.toString()
        if not self.fs.exists(tmp):
            try:
                found = self._read(target)
            except Exception as exc:  # noqa: BLE001 - py4j wraps e.g. a ChecksumException
                found, seen = None, f"an unreadable file ({exc})"
            else:
                seen = "nothing" if found is None else f"{len(found)} other bytes"
            if found == data:
                log.debug("rename to %s returned false but moved the file; kept", name)
                return
            raise OSError(f"could not write {name}: the rename returned false and the temporary file is gone, but "
                          f"{name} holds {seen} instead of the {len(data)} bytes written; another process may be "
                          "writing the same file: run one driver per checkpoint")
        if not self.fs.exists(target):
            raise OSError(f"could not write {name}: Hadoop refused to rename {tmp.toString()} to it and it does "
                          f"not exist; check that the driver can write in {target.getParent().toString()}")
        log.debug("rename refused the existing %s; moving it aside to replace it", name)
        old = self._Path(target.getParent(), f".{target.getName()}.{uuid.uuid4().hex}.old")
        if not self._move(target, old):
            raise OSError(f"could not write {name}: the store does not rename over an existing file and moving "
                          f"the old one aside to {old.toString()} failed; {name} is unchanged; check that the "
                          "driver can rename files there")
        if self._move(tmp, target):
            self._discard(old)
            return
        kept = f"{name} keeps its previous content" if self._move(old, target) else \
            f"its previous content is in {old.toString()}: rename that back to {name}"
        raise OSError(f"could not write {name}: the rename of the new file failed after the old one was moved "
                      f"aside; {kept}")

    def _move(self, src: Any, dst: Any) -> bool:
        """Rename ``src`` to a free ``dst``: true when it moved, even if Hadoop returned false."""
        return bool(self.fs.rename(src, dst)) or (not self.fs.exists(src) and bool(self.fs.exists(dst)))

    def _discard(self, path: Any) -> None:
        """Remove ``path`` and its ``.crc`` side file (ChecksumFileSystem's name for it) if they are
        left; failures only logged (never hide the error being raised)."""
        for stray in (path, self._Path(path.getParent(), f".{path.getName()}.crc")):
            try:
                if self.fs.exists(stray):
                    self.fs.delete(stray, False)
            except Exception as exc:  # noqa: BLE001 - best effort, like a temporary file left behind
                log.debug("could not remove %s: %s", stray.toString(), exc)

    def last_batch(self, folder: str) -> int | None:
        """Highest batch id named in ``folder`` (offsets/ or commits/) by the name rule of
        :mod:`airflow_ckpt_provider.batch_names`, None when none."""
        path = self.path(folder)
        if not self.fs.exists(path):
            return None
        ids = (batch_number(s.getPath().getName()) for s in self.fs.listStatus(path))
        return max((i for i in ids if i is not None), default=None)


def read_record(files: Any, rel: str, cls: type[T]) -> T | None:
    """The control record ``rel`` read through ``files`` (a :class:`HadoopFiles`), None when the
    file is missing or unreadable (logged: a half-written file reads as "not yet")."""
    return parse_record(files.read(rel), cls, rel)


def new_heartbeat(spark: Any, *, run_id: str, state: str, interval_s: float, query_id: str = "") -> Heartbeat:
    """A first heartbeat of this driver process (its scope, pid and Spark application id)."""
    scope = ProcessScope.current()
    now = utc_iso(timespec="milliseconds")
    try:
        app_id = str(spark.sparkContext.applicationId)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        app_id = ""
    return Heartbeat(query_id=query_id, run_id=run_id, state=state, started_at=now, updated_at=now,
                     interval_s=interval_s, host=scope.host, pid=os.getpid(), app_id=app_id, boot_id=scope.boot_id,
                     pid_namespace=scope.pid_namespace)


class HeartbeatWriter:
    """Keeps one run's ``_ckpt/heartbeat.json`` fresh from a daemon thread, every ``interval_s``
    of its heartbeat, and writes its last state once: a beat that comes due while it ends never
    overwrites that last state. Write errors while beating are logged (a stale beat reads as
    gone, which the requester handles)."""

    def __init__(self, files: Any, heartbeat: Heartbeat, thread_name: str = "ckpt-heartbeat") -> None:
        self.files = files
        self.heartbeat = heartbeat
        self.thread_name = thread_name
        self._ended = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _write(self, state: str) -> None:
        self.heartbeat = replace(self.heartbeat, state=state, updated_at=utc_iso(timespec="milliseconds"))
        self.files.write(HEARTBEAT, self.heartbeat.to_json().encode())

    def beat(self) -> None:
        """Refresh the heartbeat in its state; nothing once ended."""
        with self._lock:
            if not self._ended.is_set():
                self._write(self.heartbeat.state)

    def start(self) -> None:
        """Beat once now (errors raise), then from the thread."""
        self.beat()
        self._thread = threading.Thread(target=self._loop, name=self.thread_name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._ended.wait(self.heartbeat.interval_s):
            try:
                self.beat()
            except Exception as exc:  # noqa: BLE001 - keep beating; a stale beat escalates anyway
                log.warning("heartbeat write failed: %s", exc)

    def end(self, state: str | None = STOPPED) -> None:
        """Stop beating and write ``state`` as the last beat (None: leave the last one as it is).
        Only the first call writes; a failure is logged, not raised (it must not hide what
        ended the run)."""
        with self._lock:
            if not self._ended.is_set() and state is not None:
                try:
                    self._write(state)
                except Exception as exc:  # noqa: BLE001
                    log.warning("could not write the %s heartbeat: %s", state, exc)
            self._ended.set()
        if self._thread is not None:
            self._thread.join(timeout=self.heartbeat.interval_s + 5)


def driver_logging() -> None:
    """Show the stop protocol in the driver log: under spark-submit nothing configures Python's
    logging, so this package's INFO lines (request seen, batch held, boundary, ack) would be lost.
    Adds a stderr handler to ``airflow_ckpt_provider.spark`` only when neither it nor the root
    logger has one (a job that configures logging keeps its own)."""
    package = logging.getLogger("airflow_ckpt_provider.spark")
    if package.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package.addHandler(handler)
    package.setLevel(logging.INFO)


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


#: The least a query with a built-in sink waits for a batch boundary before it stops anyway.
BUILTIN_SINK_WAIT_FLOOR_S = 5.0


def _recent_batch_s(query: Any) -> float | None:
    """The median ``triggerExecution`` duration of the query's recent progress, None if unknown."""
    try:
        durations = sorted(float(p["durationMs"]["triggerExecution"]) / 1000.0
                           for p in (query.recentProgress or ()) if p.get("durationMs", {}).get("triggerExecution"))
    except Exception:  # noqa: BLE001 - Spark Connect or an unexpected shape: no estimate
        return None
    return durations[len(durations) // 2] if durations else None


class GracefulStop:
    """Run a started streaming ``query`` until it ends or a stop request arrives (see module doc).

    ``checkpoint_location`` is the query's ``checkpointLocation``. ``trigger_interval`` overrides
    the processing-time interval found on the query (used to avoid stopping just before a trigger
    fires); ``margin`` is how close to the next trigger a stop is not attempted.
    ``boundary_timeout`` (seconds) stops anyway, reported as interrupted if a batch was cut, when
    no boundary was seen that long after the request; by default none for a query whose sink goes
    through :func:`~airflow_ckpt_provider.spark.gate.foreach_batch` (its gate holds the next
    batch), and two recent batch durations (at least :data:`BUILTIN_SINK_WAIT_FLOOR_S`) for one
    with a built-in sink.
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
        driver_logging()
        self.spark = spark
        self.query = query
        self.files = HadoopFiles(spark, checkpoint_location)
        self.gate = gate_for(checkpoint_location)
        self.gate.disarm()  # a query restarted in this process on the same checkpoint starts open
        self.heartbeat_interval = float(heartbeat_interval)
        self.poll_interval = float(poll_interval)
        self.trigger_interval = trigger_interval if trigger_interval is not None else _trigger_interval_s(query)
        self.margin = margin
        self.boundary_timeout = boundary_timeout
        self.run_id = standby_run_id() or uuid.uuid4().hex  # a released standby keeps its run
        self.beats = HeartbeatWriter(self.files, new_heartbeat(spark, run_id=self.run_id, state=RUNNING,
                                                               interval_s=self.heartbeat_interval,
                                                               query_id=str(query.id)))

    @property
    def heartbeat(self) -> Heartbeat:
        """The last heartbeat written."""
        return self.beats.heartbeat

    # -- stop request ------------------------------------------------------------------------------

    def _request(self) -> StopRequest | None:
        return read_record(self.files, STOP_REQUEST, StopRequest)

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

    def _still_asked(self, request: StopRequest) -> str:
        """"" while ``request`` stands; else why not ("withdrawn", "replaced", "expired")."""
        current = self._request()
        if current is None:
            return "withdrawn"
        if current.request_id != request.request_id:
            return "replaced"
        return "expired" if current.is_expired() else ""

    #: the last request this driver answered as not carried out (StopWithdrawn)
    _answered = ""
    #: an answer whose writes all failed: written again on every poll until it lands
    _unanswered: StopWithdrawn | None = None

    def _carried_out(self, request: StopRequest, seen_at: str, asked: float) -> bool:
        """Whether ``request`` still stands. When it does not (withdrawn, replaced, expired) and no
        batch was held at the gate meanwhile (a held batch ends the query: the stop goes on), the
        gate opens, the driver answers :class:`StopWithdrawn` and the query keeps running: False."""
        why = self._still_asked(request)
        if not why:
            return True
        self.gate.disarm()
        if self.gate.held_batch is not None:
            log.warning("stop request %s was %s, but batch %d was already held at the sink gate: the query ends, "
                        "acknowledging the stop", request.request_id, why, self.gate.held_batch)
            return True
        log.warning("stop request %s was %s %.1f s after the driver read it, before it stopped the query: not "
                    "stopping, the query keeps running", request.request_id, why, time.monotonic() - asked)
        self._answer_withdrawn(request.request_id, why, seen_at)
        return False

    def _answer_withdrawn(self, request_id: str, reason: str, seen_at: str = "") -> None:
        """Write :class:`StopWithdrawn` for ``request_id`` (the query goes on), retried
        :data:`ANSWER_ATTEMPTS` times at once; an answer that still cannot be written is kept and
        written again on every later poll of the main loop (:meth:`_retry_unanswered`) until it
        lands, while the query runs on (the provider, until it has an answer, takes the query for
        possibly stopped)."""
        answer = StopWithdrawn(request_id=request_id, run_id=self.run_id, query_id=str(self.query.id), reason=reason,
                               answered_at=utc_iso(timespec="milliseconds"), seen_at=seen_at)
        for attempt in range(1, ANSWER_ATTEMPTS + 1):
            error = self._write_answer(answer)
            if error is None:
                return
            if attempt == ANSWER_ATTEMPTS:
                log.error("could not answer the withdrawn stop request %s after %d attempts (%s): the query keeps "
                          "running and the driver tries again on every poll; until it lands the provider may take "
                          "the query for stopped", request_id, attempt, error)
                self._unanswered = answer
                return
            log.warning("could not answer the withdrawn stop request %s (attempt %d of %d): %s", request_id,
                        attempt, ANSWER_ATTEMPTS, error)
            time.sleep(self.poll_interval * attempt)

    def _write_answer(self, answer: StopWithdrawn) -> Exception | None:
        """Write ``answer``; the store's error if it failed (None once written)."""
        from py4j.protocol import Py4JError  # lazily: spark.control's importers (the pure core) load this module

        try:
            self.files.write(STOP_WITHDRAWN, answer.to_json().encode())
        except (OSError, Py4JError) as exc:  # the store's error, through py4j or from the rename's check
            return exc
        self._answered, self._unanswered = answer.request_id, None
        log.info("answered stop request %s: %s, the query goes on", answer.request_id, answer.reason)
        return None

    def _retry_unanswered(self) -> None:
        """Write again the answer that could not be written (:meth:`_answer_withdrawn`), once per poll
        of the main loop; quiet while the store still refuses (the first failures were logged)."""
        answer = self._unanswered
        if answer is None:
            return
        error = self._write_answer(answer)
        if error is not None:
            log.debug("still cannot answer the withdrawn stop request %s: %s", answer.request_id, error)

    def _answer_unseen_withdrawal(self) -> None:
        """Answer a withdrawal (``_ckpt/stop-withdrawal.json``) of a request this driver never read:
        the provider asked and took it back between two of its looks."""
        withdrawal = read_record(self.files, STOP_WITHDRAWAL, StopWithdrawal)
        if withdrawal is None or withdrawal.request_id == self._answered:
            return
        if self._unanswered is not None and self._unanswered.request_id == withdrawal.request_id:
            return  # its answer is written again on every poll already (_retry_unanswered)
        answered = read_record(self.files, STOP_WITHDRAWN, StopWithdrawn)
        acked = read_record(self.files, STOP_ACK, StopAck)
        if any(r is not None and r.request_id == withdrawal.request_id for r in (answered, acked)):
            self._answered = withdrawal.request_id
            return
        log.info("stop request %s was withdrawn (by %s) before this driver read it", withdrawal.request_id,
                 withdrawal.withdrawn_by or "unknown")
        self._answer_withdrawn(withdrawal.request_id, "withdrawn")

    def _stop_at_boundary(self, request: StopRequest) -> StopAck | None:
        """Stop at the gate or at a batch boundary (see the module doc); None when the request was
        withdrawn or expired before the driver's last look at it (the query keeps running, the
        driver answered :class:`StopWithdrawn`)."""
        asked = time.monotonic()
        seen_at = utc_iso(timespec="milliseconds")
        self.gate.arm(request.request_id)
        log.info("stop request %s (by %s): %s", request.request_id, request.requested_by or "unknown",
                 "holding the next batch at the sink gate" if self.gate.used else "waiting for a batch boundary")
        next_check = asked + self.poll_interval
        builtin_wait = max(BUILTIN_SINK_WAIT_FLOOR_S, 2 * (_recent_batch_s(self.query) or 0.0))
        while self.query.isActive:
            if self.gate.held_batch is not None:
                break  # the held batch ends the query: the stop goes on, whatever the request says now
            if self._at_boundary():
                # the last look at the request, then the boundary once more: nothing slow before stop()
                if not self._carried_out(request, seen_at, asked):
                    return None
                if self.gate.held_batch is not None or self._at_boundary():
                    break
                continue
            waited = time.monotonic() - asked
            if self.boundary_timeout is not None and waited > self.boundary_timeout:
                if not self._carried_out(request, seen_at, asked):  # the last look
                    return None
                log.warning("no batch boundary within %.1f s: stopping anyway", self.boundary_timeout)
                break
            if self.boundary_timeout is None and not self.gate.used and waited > builtin_wait:
                if not self._carried_out(request, seen_at, asked):  # the last look
                    return None
                log.warning("no batch boundary within %.1f s and no sink gate (a built-in sink): stopping now; the "
                            "provider's sink ledger decides what the sink holds of a batch this cuts", builtin_wait)
                break
            if time.monotonic() >= next_check:
                next_check = time.monotonic() + self.poll_interval
                if not self._carried_out(request, seen_at, asked):
                    return None
            time.sleep(min(0.05, self.poll_interval))
        pause_point(STOPPING_PAUSE)
        boundary_at = utc_iso(timespec="milliseconds")
        self.query.stop()
        held = self.gate.held_batch
        self.gate.disarm()
        planned, committed = self.files.last_batch("offsets"), self.files.last_batch("commits")
        if planned is None or planned == committed:
            outcome = CLEAN
        elif held is not None and planned == held and (committed if committed is not None else -1) == held - 1:
            outcome = HELD
            log.info("batch %d was planned and held at the sink gate before it wrote anything (Spark logs the "
                     "query's end with the gate's error: expected)", held)
        else:
            outcome = INTERRUPTED
        ack = StopAck(
            request_id=request.request_id,
            query_id=str(self.query.id),
            run_id=self.run_id,
            outcome=outcome,
            last_committed_batch=committed,
            last_planned_batch=planned,
            stopped_at=utc_iso(timespec="milliseconds"),
            seen_at=seen_at,
            boundary_at=boundary_at,
        )
        log.info("query stopped %s after %.1f s: last committed batch %s, last planned batch %s",
                 ack.outcome, time.monotonic() - asked, committed, planned)
        return ack

    # -- stateful operators and trials ---------------------------------------------------------------

    _operators: list[dict[str, Any]] | None = None

    def _record_operators(self) -> None:
        """Once the first batch ran: the stateful operators of the executed plan, in
        ``_ckpt/stateful-operators.json`` (a compatibility check compares them with a new
        version's). Failures are logged: they never stop the query."""
        if self._operators is not None or self.query.lastProgress is None:
            return
        found = stateful_operators(self.query)
        if found is None:
            return
        self._operators = found
        try:
            self.files.write(OPERATORS_RECORD, operators_record(found))
        except Exception as exc:  # noqa: BLE001
            log.warning("could not record the stateful operators: %s", exc)

    def _trial_batches(self) -> int:
        return len({p["batchId"] for p in self.query.recentProgress or ()})

    def _end_trial(self, error: str = "") -> None:
        """Write the trial's record (``_ckpt/trial.json``): it honoured the contract, its batches,
        the stateful operators it ran, the query's error."""
        if self._operators is None and not error:
            self._operators = stateful_operators(self.query)
        try:
            self.files.write(TRIAL_RECORD, trial_record(batches=self._trial_batches(), operators=self._operators,
                                                        error=error))
        except Exception as exc:  # noqa: BLE001 - the log keeps the query's error
            log.warning("could not write the trial record: %s", exc)

    # -- main loop ---------------------------------------------------------------------------------

    def run(self) -> StopAck | None:
        """Block until the query ends; the StopAck if it was stopped on request, else None.

        Re-raises the query's exception (``StreamingQueryException``) if it failed.
        """
        self.files.fs.mkdirs(self.files.path(CONTROL_DIR))
        stale = self._request()  # an answered or expired request is history
        ignored = None
        if stale is not None and not pending_request(stale, read_record(self.files, STOP_ACK, StopAck)):
            ignored = stale.request_id
        self.beats.start()
        ack: StopAck | None = None
        trial = trial_batches(self.spark)  # a trial of the compatibility check: stop after N batches
        try:
            while True:
                try:
                    if self.query.awaitTermination(self.poll_interval):
                        break  # ended by itself (or by someone's stop()); raises if it failed
                except Exception as exc:
                    if trial is not None:
                        self._end_trial(error=str(exc))
                    raise
                self._record_operators()
                self._retry_unanswered()
                if trial is not None and self._trial_batches() >= trial:
                    log.info("trial run: %s batch(es) done, stopping", trial)
                    self.query.stop()
                    self._end_trial()
                    break
                request = self._request()
                if request is None:
                    self._answer_unseen_withdrawal()
                    continue
                if request.request_id == ignored:
                    continue
                if request.is_expired():
                    log.info("ignoring expired stop request %s", request.request_id)
                    ignored = request.request_id
                    continue
                ack = self._stop_at_boundary(request)
                if ack is None:
                    ignored = request.request_id
                    continue
                self.files.write(STOP_ACK, ack.to_json().encode())
                break
        finally:
            self.beats.end(STOPPED)  # never raises: the query's own exception is not hidden
        return ack
