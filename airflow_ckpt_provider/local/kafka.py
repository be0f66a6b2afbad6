"""A single-node Apache Kafka broker in KRaft mode on 127.0.0.1, from Maven-resolved jars.

``LocalKafka`` formats a fresh log directory (a formatted one keeps its cluster id: a restart on
the same work folder reuses its data), starts ``kafka.Kafka`` in its own process group,
waits until kafka-python gets a metadata response (the port opens before the broker is ready)
and stops it cleanly. Run detached by ``ckpt dev-stack start``; a session fixture of the tests and the broker of
``make demo``.
"""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from airflow_ckpt_provider.local import jvm
from airflow_ckpt_provider.local.errors import BrokerStartFailed
from airflow_ckpt_provider.local.processes import (
    LOOPBACK,
    LocalServer,
    ensure_port_free,
    free_port,
    log_tail,
    stop_process_group,
)

log = logging.getLogger(__name__)

_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka.request.logger=WARN
log4j.logger.state.change.logger=WARN
"""


def kraft_cluster_id() -> str:
    """A KRaft cluster id as ``kafka-storage random-uuid`` makes one (16 random bytes, URL-safe
    base64 without padding). One in 32 starts with ``-``: it is passed as ``--cluster-id=<id>``,
    never as a separate argument the tool's parser would take for an option."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def formatted_cluster_id(log_dir: Path) -> str | None:
    """The cluster id a formatted KRaft log directory keeps in its ``meta.properties``; None when
    the directory was never formatted. Raises :class:`BrokerStartFailed` for a ``meta.properties``
    without one (not a Kafka log directory this broker can reuse)."""
    meta = log_dir / "meta.properties"
    if not meta.is_file():
        return None
    for line in meta.read_text(encoding="utf-8", errors="replace").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "cluster.id" and value.strip():
            return value.strip()
    raise BrokerStartFailed(
        found=f"{meta} without a cluster.id",
        expected="a KRaft log directory formatted by `StorageTool format` (its meta.properties names its cluster.id)",
        action=f"Move {log_dir} aside (it holds the old broker's data) or use another work folder.",
    )


class LocalKafka(LocalServer):
    """A KRaft broker+controller on 127.0.0.1 whose data lives in ``work_dir``.

    ``broker_config`` adds or overrides ``server.properties`` entries (for example small
    ``log.segment.bytes`` for retention tests). Start and stop are idempotent; ``stop`` also
    runs when ``start`` fails, so a failed start leaves nothing running.
    """

    def __init__(
        self,
        work_dir: Path | str,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        broker_config: Mapping[str, str] | None = None,
        startup_timeout: float = 90.0,
        heap: str = "512m",
    ) -> None:
        self.work_dir = Path(work_dir)
        self._requested_ports = (port, controller_port)
        self.port = port or 0
        self.controller_port = controller_port or 0
        self.broker_config = dict(broker_config or {})
        self.startup_timeout = startup_timeout
        self.heap = heap
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "broker.log"

    def processes(self) -> list[subprocess.Popen[bytes] | None]:
        return [self._process]

    def server_properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{LOOPBACK}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{LOOPBACK}:{self.port},CONTROLLER://{LOOPBACK}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self.work_dir / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "share.coordinator.state.topic.replication.factor": "1",
        }
        props.update(self.broker_config)
        return props

    def start(self) -> LocalKafka:
        """Format storage and start the broker; return once it answers metadata requests.

        Raises :class:`ToolMissing` without Java, :class:`JarsMissing` before ``make jvm``,
        :class:`PortInUse` for a taken requested port, :class:`BrokerStartFailed` if the broker
        exits or does not answer within ``startup_timeout`` (with the tail of its log).
        """
        if self.running:
            return self
        java = jvm.require_java()
        classpath = os.pathsep.join(str(j) for j in jvm.jars(jvm.KAFKA_BROKER))
        port, controller_port = self._requested_ports
        if port:
            ensure_port_free(port, "Kafka broker listener")
        if controller_port:
            ensure_port_free(controller_port, "Kafka controller listener")
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()

        self.work_dir.mkdir(parents=True, exist_ok=True)
        props_file = self.work_dir / "server.properties"
        props_file.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))
        log4j_file = self.work_dir / "log4j.properties"
        log4j_file.write_text(_LOG4J)
        base = [java, f"-Dlog4j.configuration=file:{log4j_file}", "-cp", classpath]

        kept = formatted_cluster_id(self.work_dir / "data")
        if kept is not None:
            log.info("reusing the Kafka data in %s (cluster id %s)", self.work_dir / "data", kept)
        cluster_id = kept or kraft_cluster_id()
        fmt = subprocess.run(
            [*base, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(props_file),
             "--ignore-formatted"],
            capture_output=True, text=True, check=False,
        )
        if fmt.returncode != 0:
            raise BrokerStartFailed(
                found=f"`StorageTool format` exit code {fmt.returncode}",
                expected="a formatted KRaft log directory",
                action=f"Check {self.work_dir} is writable and not used by another broker.",
                detail="\n".join((fmt.stdout + fmt.stderr).splitlines()[-20:]),
            )

        log.info("starting Kafka broker on %s (data in %s)", self.bootstrap_servers, self.work_dir)
        with open(self.log_file, "ab") as out:
            self._process = subprocess.Popen(
                [java, "-Xms128m", f"-Xmx{self.heap}", *base[1:], "kafka.Kafka", str(props_file)],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        started = time.monotonic()
        deadline = started + self.startup_timeout
        # Refused connections are expected while the JVM starts; keep them out of the logs.
        client_log = logging.getLogger("kafka")
        level = client_log.level
        client_log.setLevel(logging.CRITICAL)
        try:
            self._poll_ready(started, deadline)
        finally:
            client_log.setLevel(level)

    def _poll_ready(self, started: float, deadline: float) -> None:
        from kafka import KafkaAdminClient
        from kafka.errors import KafkaError

        last_error = "no answer yet"
        while time.monotonic() < deadline:
            assert self._process is not None
            code = self._process.poll()
            if code is not None:
                raise BrokerStartFailed(
                    found=f"the broker process exited with code {code}",
                    expected="a running broker",
                    action=f"Read {self.log_file} for the cause (a port taken by another process "
                    "shows as 'Address already in use').",
                    detail=log_tail(self.log_file),
                )
            try:
                admin = KafkaAdminClient(
                    bootstrap_servers=self.bootstrap_servers,
                    request_timeout_ms=3000,
                )
                try:
                    admin.describe_cluster()
                finally:
                    admin.close()
                log.info("Kafka broker ready on %s after %.1f s",
                         self.bootstrap_servers, time.monotonic() - started)
                return
            except (KafkaError, OSError, ValueError) as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(0.5)
        raise BrokerStartFailed(
            found=f"no metadata response from {self.bootstrap_servers} after "
            f"{self.startup_timeout:.0f} s (last: {last_error})",
            expected="a broker answering metadata requests",
            action=f"Read {self.log_file}; on a slow machine raise startup_timeout.",
            detail=log_tail(self.log_file),
        )

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker: SIGTERM to its process group, SIGKILL after ``timeout`` seconds."""
        proc, self._process = self._process, None
        stop_process_group(proc, f"Kafka broker on {self.bootstrap_servers}", timeout)

    # -- topic administration, for tests and the demo -------------------------------------

    def admin(self):  # noqa: ANN201 - kafka-python has no type hints
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.bootstrap_servers)

    def create_topic(self, name: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
        """Create ``name`` with ``partitions`` partitions and wait until its metadata shows them."""
        from kafka.admin import NewTopic

        admin = self.admin()
        try:
            admin.create_topics(
                [NewTopic(name, partitions, 1, topic_configs=dict(config or {}))]
            )
        finally:
            admin.close()
        self.wait_for_partitions(name, partitions)

    def add_partitions(self, name: str, total: int) -> None:
        """Grow ``name`` to ``total`` partitions."""
        from kafka.admin import NewPartitions

        admin = self.admin()
        try:
            admin.create_partitions({name: NewPartitions(total_count=total)})
        finally:
            admin.close()
        self.wait_for_partitions(name, total)

    def wait_for_partitions(self, name: str, count: int, timeout: float = 30.0) -> None:
        """Wait until the broker's metadata shows ``name`` with at least ``count`` partitions."""
        from kafka.errors import KafkaError

        admin = self.admin()
        seen = 0
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    described = admin.describe_topics([name])
                    seen = len(described[0].get("partitions") or []) if described else 0
                except KafkaError:
                    seen = 0
                if seen >= count:
                    return
                time.sleep(0.2)
        finally:
            admin.close()
        raise TimeoutError(f"topic {name} shows {seen} partitions, not {count}, after {timeout:.0f} s")
