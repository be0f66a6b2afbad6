"""Plain kafka-python access to partition lists and offset ranges (no Airflow imports).

:class:`KafkaBroker` turns a bootstrap address into a :class:`BrokerView` for the reconciliation
in :mod:`airflow_ckpt_provider.checkpoint.reconcile`. The Airflow hook in ``hooks/kafka.py`` wraps
it; tests and subclasses replace :meth:`KafkaBroker._make_consumer` (the client factory).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from airflow_ckpt_provider.checkpoint.errors import BrokerError, BrokerUnreachable, OutputScanTimedOut
from airflow_ckpt_provider.checkpoint.reconcile import BrokerView
from airflow_ckpt_provider.checkpoint.secrets import REDACTED, is_sensitive_key, redact_conf, redact_text
from airflow_ckpt_provider.source_header import SOURCE_HEADER, Source, source_of

log = logging.getLogger(__name__)

DEFAULT_CLIENT_CONFIG: dict[str, Any] = {
    "bootstrap_timeout_ms": 10_000,
    "request_timeout_ms": 15_000,
    "enable_auto_commit": False,
    "allow_auto_create_topics": False,  # a read-only check must never create a topic
    "client_id": "airflow-ckpt-provider",
}

#: How long a scan of an output topic (:meth:`KafkaBroker.sources_written_since`) may read, in
#: seconds: the scan runs inside the downtime, and a lost broker must not hold it until the
#: task's own timeout.
DEFAULT_SCAN_TIMEOUT_S = 300.0


class KafkaBroker:
    """Read-only view of a Kafka cluster.

    ``client_config`` is passed to ``kafka.KafkaConsumer`` on top of :data:`DEFAULT_CLIENT_CONFIG`
    (security settings, timeouts). No consumer group is joined and nothing is committed. Secrets
    of the config (SASL and SSL passwords) never appear in ``repr()`` or in the errors raised,
    even when the client library's own message echoes them.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str], **client_config: Any) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.client_config = {**DEFAULT_CLIENT_CONFIG, **client_config}

    def __repr__(self) -> str:
        return f"KafkaBroker({self.bootstrap_servers!r}, {redact_conf(self.client_config)})"

    def _scrub(self, text: str) -> str:
        """``text`` without any secret value of the client config (and without key=secret pairs)."""
        for key, value in self.client_config.items():
            if is_sensitive_key(key) and isinstance(value, str) and value:
                text = text.replace(value, REDACTED)
        return redact_text(text)

    def _make_consumer(self) -> Any:
        """Client factory: a group-less ``KafkaConsumer``."""
        from kafka import KafkaConsumer

        return KafkaConsumer(bootstrap_servers=self.bootstrap_servers, group_id=None, **self.client_config)

    @contextmanager
    def _consumer(self, expected: str) -> Iterator[Any]:
        """A group-less consumer, closed afterwards; client errors become :class:`BrokerUnreachable`
        (the cluster did not answer in time) or :class:`BrokerError` (anything else, including
        client settings the library rejects), with every secret scrubbed."""
        from kafka import errors

        unreachable = tuple(
            getattr(errors, name)
            for name in ("KafkaConnectionError", "KafkaTimeoutError", "NoBrokersAvailable")
            if hasattr(errors, name)
        )
        consumer = None
        try:
            consumer = self._make_consumer()
            yield consumer
        except unreachable as exc:
            raise BrokerUnreachable(
                found=self._scrub(f"{type(exc).__name__}: {exc}"),
                expected=f"a Kafka cluster answering at {self.bootstrap_servers}",
            ) from None
        except errors.KafkaError as exc:
            raise BrokerError(found=self._scrub(f"{type(exc).__name__}: {exc}"), expected=expected) from None
        except (TypeError, ValueError, AssertionError) as exc:  # kafka-python's checks of its settings
            settings = ", ".join(sorted(k for k, v in self.client_config.items()
                                        if k not in DEFAULT_CLIENT_CONFIG or DEFAULT_CLIENT_CONFIG[k] != v))
            raise BrokerError(
                found=self._scrub(f"client settings kafka-python rejects ({type(exc).__name__}: {exc})"),
                expected=f"valid Kafka client settings (given: {settings or 'defaults only'})",
                action="Fix the Kafka connection's extra (types and values of the settings), then retry.",
            ) from None
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:  # noqa: BLE001 - closing must not hide the real outcome
                    log.debug("closing the Kafka consumer failed", exc_info=True)

    def topics(self) -> set[str]:
        """The names of the cluster's topics (what the connection's user may see); raises as
        :meth:`view` does."""
        with self._consumer("a topic list") as consumer:
            return set(consumer.topics())

    def offsets_for_time(
        self, partitions: Iterable[tuple[str, int]], timestamp_ms: int
    ) -> dict[tuple[str, int], int | None]:
        """Per (topic, partition): the first offset whose record timestamp is >= ``timestamp_ms``,
        None when every record is older (Kafka's ``offsets_for_times``). Raises as :meth:`view`."""
        from kafka import TopicPartition

        wanted = [TopicPartition(topic, partition) for topic, partition in sorted(set(partitions))]
        with self._consumer("offsets for a time") as consumer:
            found = consumer.offsets_for_times({tp: int(timestamp_ms) for tp in wanted}) if wanted else {}
        return {(tp.topic, tp.partition): (None if found.get(tp) is None else int(found[tp].offset)) for tp in wanted}

    def sources_written_since(self, topic: str, since_ms: int, *, max_records: int = 2_000_000,
                              header: str = SOURCE_HEADER,
                              scan_timeout_s: float = DEFAULT_SCAN_TIMEOUT_S) -> set[Source] | None:
        """The input records named by ``header`` on the records of output ``topic`` whose timestamp
        is >= ``since_ms``, up to each partition's log end when the scan starts: a set of
        (topic, partition, offset). None when more than ``max_records`` records would be read
        (the scan is bounded). Records without the header are read and ignored. Logs progress.
        The reads end within ``scan_timeout_s`` seconds (a broker lost mid-scan answers no poll):
        :class:`OutputScanTimedOut` then, naming what was read and which partitions did not reach
        their end. Raises as :meth:`view` does."""
        from kafka import TopicPartition

        if not scan_timeout_s > 0:
            raise ValueError(f"scan_timeout_s must be above 0, not {scan_timeout_s!r}")
        deadline = time.monotonic() + scan_timeout_s

        with self._consumer(f"the records of {topic} since {since_ms}") as consumer:
            parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
            if not parts:
                return set()
            ends = consumer.end_offsets(parts)
            found = consumer.offsets_for_times({tp: int(since_ms) for tp in parts})
            starts = {tp: ends[tp] if found.get(tp) is None else int(found[tp].offset) for tp in parts}
            total = sum(ends[tp] - starts[tp] for tp in parts)
            if total > max_records:
                log.warning("%s holds %d records since %d: more than the %d a scan reads", topic, total, since_ms,
                            max_records)
                return None
            wanted = [tp for tp in parts if ends[tp] > starts[tp]]
            sources: set[Source] = set()
            if not wanted:
                return sources
            consumer.assign(wanted)
            for tp in wanted:
                consumer.seek(tp, starts[tp])
            log.info("scanning %d records of %s (%d partitions) for the %r header", total, topic, len(wanted), header)
            done, next_report = 0, 100_000
            pending = set(wanted)
            while pending:
                if time.monotonic() >= deadline:
                    left = ", ".join(f"{tp.topic}-{tp.partition} at {consumer.position(tp)} of {ends[tp]}"
                                     for tp in sorted(pending, key=lambda tp: tp.partition))
                    raise OutputScanTimedOut(
                        found=f"{done:,} of {total:,} records of {topic} read in {scan_timeout_s:g} s; not at their "
                              f"end: {left}",
                        expected=f"every partition of {topic} read to its log end within {scan_timeout_s:g} s")
                batch = consumer.poll(timeout_ms=1000, max_records=10_000)
                for tp, messages in batch.items():
                    for message in messages:
                        if message.offset >= ends[tp]:
                            break
                        done += 1
                        source = source_of(message.headers or (), header)
                        if source is not None:
                            sources.add(source)
                for tp in list(pending):
                    if consumer.position(tp) >= ends[tp]:
                        pending.discard(tp)
                if done >= next_report:
                    log.info("scanned %d of %d records of %s", done, total, topic)
                    next_report += 100_000
            return sources

    def view(self, topics: Iterable[str]) -> BrokerView:
        """Partitions and (earliest, latest) offsets of ``topics``; unknown topics are left out.

        Raises :class:`BrokerUnreachable` when the cluster cannot be reached in time and
        :class:`BrokerError` for any other client error, including client settings the client
        library rejects (``request.timeout.ms`` given as text, ...).
        """
        from kafka import TopicPartition

        wanted = sorted(set(topics))
        with self._consumer("offsets and partition lists") as consumer:
            partitions = [
                TopicPartition(topic, p)
                for topic in wanted
                for p in sorted(consumer.partitions_for_topic(topic) or ())
            ]
            earliest = consumer.beginning_offsets(partitions) if partitions else {}
            latest = consumer.end_offsets(partitions) if partitions else {}
        view: dict[str, dict[int, tuple[int, int]]] = {}
        for tp in partitions:
            view.setdefault(tp.topic, {})[tp.partition] = (earliest[tp], latest[tp])
        missing = [t for t in wanted if t not in view]
        if missing:
            log.info("topics not found on %s: %s", self.bootstrap_servers, ", ".join(missing))
        return BrokerView(view)



def broker_ranges(bootstrap_servers: str, topics: Iterable[str], **client_config: Any) -> dict[tuple[str, int],
                                                                                                 tuple[int, int]]:
    """(topic, partition) -> (earliest, log end) of ``topics`` as the broker reports them now
    (:meth:`KafkaBroker.view`, which raises as documented there; unknown topics are left out)."""
    view = KafkaBroker(bootstrap_servers, **client_config).view(topics)
    return {(topic, partition): span for topic in view.topics for partition, span in view.partitions(topic).items()}
