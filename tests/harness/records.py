"""Keyed test records for the local stack: produce a fixed count, or keep producing.

Each record's value names its sequence number, so a sink can be audited per Kafka
(partition, offset) by the tests and the demo.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


def _producer(bootstrap_servers: str):  # noqa: ANN202 - kafka-python has no type hints
    from kafka import KafkaProducer

    # short metadata age: partitions added to a topic get records within seconds
    return KafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", linger_ms=5, metadata_max_age_ms=2000)


def produce_records(bootstrap_servers: str, topic: str, count: int, *, start: int = 0) -> int:
    """Send ``count`` keyed records (``key-<i>`` / ``value-<i>``), wait for all acks, return count."""
    producer = _producer(bootstrap_servers)
    try:
        futures = [
            producer.send(topic, key=f"key-{i}".encode(), value=f"value-{i}".encode())
            for i in range(start, start + count)
        ]
        producer.flush()
        for future in futures:
            future.get(timeout=30)
    finally:
        producer.close()
    log.info("produced %d records to %s", count, topic)
    return count


class ContinuousProducer:
    """Produces keyed records to a topic from a background thread until stopped.

    ``rate`` is records per second (approximate). ``record(i)`` gives the i-th record's (key,
    value) bytes (default ``key-<i>`` / ``value-<i>``). ``stop()`` flushes and returns how many
    records the broker acknowledged, which is the number the sink must hold.

    ``bursts=(on_s, off_s)`` makes the traffic bursty: ``on_s`` seconds at ``rate``, then ``off_s``
    seconds of silence, and again; :meth:`burst_now` ends a silence at once and keeps the burst
    going at least that long. ``windows`` holds each burst's wall-clock ``[start, end]`` (end 0.0
    while it runs).
    """

    def __init__(self, bootstrap_servers: str, topic: str, *, rate: float = 200.0,
                 record: Callable[[int], tuple[bytes, bytes]] | None = None,
                 bursts: tuple[float, float] | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.rate = rate
        self.record = record or (lambda i: (f"key-{i}".encode(), f"value-{i}".encode()))
        self.bursts = bursts
        self.windows: list[list[float]] = []
        self.acked = 0
        self.failed = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._burst_until = 0.0  # monotonic: a burst asked for by burst_now() lasts at least until then
        self._thread = threading.Thread(target=self._run, name=f"producer-{topic}", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> ContinuousProducer:
        self._thread.start()
        return self

    def burst_now(self, min_s: float) -> None:
        """Produce now (ending a silence) and for at least ``min_s`` seconds from now."""
        with self._lock:
            self._burst_until = max(self._burst_until, time.monotonic() + min_s)
        self._wake.set()

    def _on_ack(self, _metadata: object) -> None:
        with self._lock:
            self.acked += 1

    def _on_error(self, _exc: BaseException) -> None:
        with self._lock:
            self.failed += 1

    def _run(self) -> None:
        producer = _producer(self.bootstrap_servers)
        sent = 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                ends = started + self.bursts[0] if self.bursts else float("inf")
                window = [time.time(), 0.0]
                self.windows.append(window)
                in_burst = 0
                while not self._stop.is_set():
                    with self._lock:
                        until = max(ends, self._burst_until)
                    if time.monotonic() >= until:
                        break
                    key, value = self.record(sent)
                    future = producer.send(self.topic, key=key, value=value)
                    future.add_callback(self._on_ack).add_errback(self._on_error)
                    sent += 1
                    in_burst += 1
                    ahead = in_burst / self.rate - (time.monotonic() - started)
                    if ahead > 0:
                        self._stop.wait(ahead)
                window[1] = time.time()
                if self.bursts is None or self._stop.is_set():
                    break
                self._wake.clear()
                quiet_until = time.monotonic() + self.bursts[1]
                while not (self._stop.is_set() or self._wake.is_set()) and time.monotonic() < quiet_until:
                    self._wake.wait(0.05)
            producer.flush()
        finally:
            producer.close()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=60)
        if self.failed:
            log.warning("%d records to %s were not acknowledged", self.failed, self.topic)
        return self.acked


#: customers of the purchase records
CUSTOMERS = 50


def purchase(i: int) -> tuple[bytes, bytes]:
    """The i-th purchase record: key ``customer-<c>``, value ``{"customer": c, "amount": a}`` with
    c = i mod :data:`CUSTOMERS` and an amount from 1 to 97 that varies with i."""
    customer = i % CUSTOMERS
    return f"customer-{customer}".encode(), json.dumps({"customer": customer, "amount": i * 7 % 97 + 1}).encode()
