"""A single-node HDFS on 127.0.0.1 (a NameNode and a DataNode, WebHDFS on), from Maven-resolved jars.

``LocalHdfs`` writes ``core-site.xml`` and ``hdfs-site.xml`` into its work folder, formats a fresh
NameNode directory, starts ``NameNode`` and ``DataNode`` (two JVMs, each in its own process group,
heap bounded by ``heap``), waits until a real WebHDFS write and read succeed (the NameNode is out
of safe mode and the DataNode takes blocks) and stops both cleanly. Spark writes through
``hdfs://127.0.0.1:<rpc_port>/…``; the provider reads the same files through WebHDFS at
``http://127.0.0.1:<http_port>``. Used as a session fixture by the HDFS tests
(``make test-hdfs``); the jars come from ``python -m airflow_ckpt_provider.local.jvm fetch hdfs``.
"""

from __future__ import annotations

import getpass
import logging
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from airflow_ckpt_provider.local import jvm
from airflow_ckpt_provider.local.processes import (
    LOOPBACK,
    LocalServer,
    ensure_port_free,
    free_port,
    log_tail,
    stop_process_group,
)
from airflow_ckpt_provider.storage.locations import webhdfs_filesystem
from tests.harness.errors import HdfsStartFailed

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

log = logging.getLogger(__name__)

#: Folders the NameNode's and DataNode's HTTP servers look up on the classpath (HttpServer2
#: refuses to start without them; the jars' own web UI files are not needed).
WEBAPPS = ("hdfs", "datanode", "secondary", "journal", "static")
#: Java 17 closes java.lang to reflection that Hadoop's HTTP server (WebHDFS) still uses.
JAVA_OPENS = ("--add-opens=java.base/java.lang=ALL-UNNAMED", "--add-opens=java.base/java.nio=ALL-UNNAMED",
              "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED")
#: A small footprint for two test servers on a shared machine: one GC thread, the quick JIT only.
JVM_FOOTPRINT = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=64m")
NAMENODE = "org.apache.hadoop.hdfs.server.namenode.NameNode"
DATANODE = "org.apache.hadoop.hdfs.server.datanode.DataNode"

_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.org.apache.hadoop.hdfs.server.namenode.FSNamesystem.audit=WARN
log4j.logger.BlockStateChange=WARN
"""


def site_xml(properties: Mapping[str, str]) -> str:
    """A Hadoop ``*-site.xml`` document holding ``properties``."""
    rows = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                   for k, v in properties.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


class LocalHdfs(LocalServer):
    """A NameNode and a DataNode on 127.0.0.1 whose data lives in ``work_dir``.

    Ports left unset are picked free at start. ``hdfs_config`` adds or overrides
    ``hdfs-site.xml`` entries. Start and stop are idempotent; a failed start stops whatever it
    started and raises :class:`HdfsStartFailed` with the tail of the failing server's log.
    """

    def __init__(
        self,
        work_dir: Path | str,
        *,
        rpc_port: int | None = None,
        http_port: int | None = None,
        hdfs_config: Mapping[str, str] | None = None,
        startup_timeout: float = 180.0,
        heap: str = "256m",
        user: str | None = None,
    ) -> None:
        self.work_dir = Path(work_dir)
        self._requested = (rpc_port, http_port)
        self.rpc_port = rpc_port or 0
        self.http_port = http_port or 0
        self.datanode_ports: dict[str, int] = {}
        self.hdfs_config = dict(hdfs_config or {})
        self.startup_timeout = startup_timeout
        self.heap = heap
        self.user = user or getpass.getuser()
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    # -- addresses ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``hdfs://127.0.0.1:<rpc_port>``: what Spark (and ``fs.defaultFS``) uses."""
        return f"hdfs://{LOOPBACK}:{self.rpc_port}"

    @property
    def webhdfs_url(self) -> str:
        """``webhdfs://127.0.0.1:<http_port>``: the same namespace for fsspec's WebHDFS client."""
        return f"webhdfs://{LOOPBACK}:{self.http_port}"

    @property
    def conf_dir(self) -> Path:
        return self.work_dir / "conf"

    def log_file(self, server: str) -> Path:
        return self.work_dir / f"{server}.log"

    def processes(self) -> list[subprocess.Popen[bytes] | None]:
        return list(self._processes.values())

    def filesystem(self) -> AbstractFileSystem:
        """fsspec's WebHDFS client on this HDFS, as the provider builds it (a new instance)."""
        return webhdfs_filesystem({"host": LOOPBACK, "port": self.http_port, "user": self.user,
                                   "skip_instance_cache": True})

    def core_site(self) -> dict[str, str]:
        return {"fs.defaultFS": self.url, "hadoop.tmp.dir": str(self.work_dir / "tmp"),
                "hadoop.security.authentication": "simple"}

    def hdfs_site(self) -> dict[str, str]:
        dn = self.datanode_ports
        props = {
            "dfs.namenode.name.dir": (self.work_dir / "name").as_uri(),
            "dfs.datanode.data.dir": (self.work_dir / "data").as_uri(),
            "dfs.namenode.rpc-address": f"{LOOPBACK}:{self.rpc_port}",
            "dfs.namenode.http-address": f"{LOOPBACK}:{self.http_port}",
            "dfs.namenode.secondary.http-address": f"{LOOPBACK}:0",
            "dfs.datanode.address": f"{LOOPBACK}:{dn['data']}",
            "dfs.datanode.http.address": f"{LOOPBACK}:{dn['http']}",
            "dfs.datanode.ipc.address": f"{LOOPBACK}:{dn['ipc']}",
            "dfs.datanode.hostname": LOOPBACK,
            "dfs.namenode.datanode.registration.ip-hostname-check": "false",
            "dfs.replication": "1",
            "dfs.webhdfs.enabled": "true",
            "dfs.permissions.enabled": "false",
            "dfs.namenode.safemode.extension": "0",
            "dfs.namenode.safemode.min.datanodes": "0",
            "dfs.heartbeat.interval": "1",
            "dfs.namenode.heartbeat.recheck-interval": "5000",
            "dfs.blocksize": str(8 * 1024 * 1024),
            "dfs.datanode.du.reserved": "0",
        }
        props.update(self.hdfs_config)
        return props

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> LocalHdfs:
        """Format a fresh NameNode directory and start both servers; return once WebHDFS writes.

        Raises :class:`ToolMissing` without Java, :class:`JarsMissing` before
        ``jvm fetch hdfs``, :class:`PortInUse` for a taken requested port and
        :class:`HdfsStartFailed` if a server exits or WebHDFS does not write within
        ``startup_timeout``.
        """
        if self.running:
            return self
        java = jvm.require_java()
        jars = jvm.jars(jvm.HDFS)
        rpc, http = self._requested
        for port, what in ((rpc, "HDFS NameNode RPC"), (http, "HDFS NameNode HTTP")):
            if port:
                ensure_port_free(port, what)
        taken: set[int] = set()

        def pick(requested: int | None) -> int:
            port = requested or free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            return port

        self.rpc_port, self.http_port = pick(rpc), pick(http)
        self.datanode_ports = {name: pick(None) for name in ("data", "http", "ipc")}
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.conf_dir.mkdir(exist_ok=True)
        (self.conf_dir / "core-site.xml").write_text(site_xml(self.core_site()))
        (self.conf_dir / "hdfs-site.xml").write_text(site_xml(self.hdfs_site()))
        (self.conf_dir / "log4j.properties").write_text(_LOG4J)
        for app in WEBAPPS:
            (self.work_dir / "resources" / "webapps" / app).mkdir(parents=True, exist_ok=True)
        classpath = os.pathsep.join([str(self.conf_dir), str(self.work_dir / "resources"), *map(str, jars)])
        base = [java, f"-Xmx{self.heap}", "-Xms64m", *JVM_FOOTPRINT, *JAVA_OPENS, f"-Dhadoop.log.dir={self.work_dir}",
                f"-Dlog4j.configuration=file:{self.conf_dir / 'log4j.properties'}", "-cp", classpath]
        env = {**os.environ, "HADOOP_USER_NAME": self.user}
        env.pop("HADOOP_CONF_DIR", None)

        fmt = subprocess.run([*base, NAMENODE, "-format", "-force", "-nonInteractive"],
                             capture_output=True, text=True, check=False, env=env)
        if fmt.returncode != 0:
            raise HdfsStartFailed(
                found=f"`NameNode -format` exit code {fmt.returncode}",
                expected="a formatted NameNode directory",
                action=f"Check that {self.work_dir} is writable and not used by another NameNode.",
                detail="\n".join((fmt.stdout + fmt.stderr).splitlines()[-20:]),
            )
        log.info("starting HDFS on %s (WebHDFS on http://%s:%d, data in %s)", self.url, LOOPBACK,
                 self.http_port, self.work_dir)
        try:
            for server, main in (("namenode", NAMENODE), ("datanode", DATANODE)):
                with open(self.log_file(server), "ab") as out:
                    self._processes[server] = subprocess.Popen(
                        [*base, main], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        env=env, start_new_session=True,
                    )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        """Until a WebHDFS write and read-back succeed: the NameNode answers, has left safe mode,
        and a DataNode took the block."""
        started = time.monotonic()
        deadline = started + self.startup_timeout
        probe = f"/tmp/.ready-{os.getpid()}"
        last = "no answer yet"
        while time.monotonic() < deadline:
            for server, proc in self._processes.items():
                code = proc.poll()
                if code is not None:
                    raise HdfsStartFailed(
                        found=f"the {server} process exited with code {code}",
                        expected=f"a running {server}",
                        action=f"Read {self.log_file(server)} for the cause (a taken port shows as "
                        "'Address already in use').",
                        detail=log_tail(self.log_file(server)),
                    )
            try:
                fs = self.filesystem()
                fs.pipe_file(probe, b"ready")
                if fs.cat_file(probe) == b"ready":
                    fs.rm(probe)
                    log.info("HDFS ready on %s after %.1f s", self.url, time.monotonic() - started)
                    return
            except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
                last = f"{type(exc).__name__}: {str(exc)[:200]}"
            time.sleep(1.0)
        raise HdfsStartFailed(
            found=f"no successful WebHDFS write after {self.startup_timeout:.0f} s (last: {last})",
            expected="a NameNode out of safe mode with a live DataNode",
            action=f"Read {self.log_file('namenode')} and {self.log_file('datanode')}; on a slow machine "
            "raise startup_timeout.",
            detail=log_tail(self.log_file("namenode")) + "\n---\n" + log_tail(self.log_file("datanode")),
        )

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the DataNode, then the NameNode: SIGTERM to each process group, SIGKILL after
        ``timeout`` seconds."""
        processes, self._processes = self._processes, {}
        for server in ("datanode", "namenode"):
            stop_process_group(processes.get(server), f"HDFS {server}", timeout)

