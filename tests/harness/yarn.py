"""A single-node YARN on 127.0.0.1 (a ResourceManager and a NodeManager), from Maven-resolved jars.

``LocalYarn`` runs beside a :class:`~tests.harness.hdfs.LocalHdfs` (``fs.defaultFS`` is that HDFS:
spark-submit stages an application's files there and the NodeManager localizes them from it). It
writes ``core-site.xml``, ``hdfs-site.xml``, ``yarn-site.xml`` and ``capacity-scheduler.xml`` into
its conf folder (the ``HADOOP_CONF_DIR`` of every spark-submit to it), starts ``ResourceManager``
and ``NodeManager`` (two JVMs, each in its own process group), waits until the ResourceManager's
REST API lists one RUNNING node with memory to give, and stops both. Containers run in process
groups of their own, so ``stop`` first kills every application still running through the
ResourceManager, then sweeps the container processes this NodeManager started.

Memory: the NodeManager offers ``node_memory_mb`` (default 8 GiB) to containers. A Spark
application in cluster mode takes one container for the driver (the application master) and one
per executor, each the requested memory plus 384 MB of overhead. The AM share of the default queue
is 0.8, not YARN's 0.1, so two applications (an old version and its standby) run at once.
The jars come from ``python -m airflow_ckpt_provider.local.jvm fetch yarn``.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.local import jvm
from airflow_ckpt_provider.local.processes import LOOPBACK, LocalServer, free_port, log_tail, stop_process_group
from tests.harness.errors import YarnStartFailed
from tests.harness.hdfs import JAVA_OPENS, JVM_FOOTPRINT, site_xml

if TYPE_CHECKING:
    from tests.harness.hdfs import LocalHdfs

log = logging.getLogger(__name__)

RESOURCE_MANAGER = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NODE_MANAGER = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
#: The ``yarn`` command's own main class for ``yarn application ...`` (hadoop-yarn-client).
APPLICATION_CLI = "org.apache.hadoop.yarn.client.cli.ApplicationCLI"
#: Folders the servers' HTTP servers look up on the classpath.
WEBAPPS = ("cluster", "node", "static", "proxy", "applicationhistory", "yarn")
#: Guice (the RM's and NM's web apps) reflects into these packages on Java 17.
GUICE_OPENS = tuple(f"--add-opens=java.base/{pkg}=ALL-UNNAMED"
                    for pkg in ("java.util", "java.lang.reflect", "java.net", "java.io", "java.util.concurrent"))
FINAL_STATES = frozenset({"FINISHED", "FAILED", "KILLED"})

_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.yarn.server.resourcemanager.RMAuditLogger=WARN
log4j.logger.org.apache.hadoop.yarn.server.nodemanager.NMAuditLogger=WARN
log4j.logger.org.apache.hadoop.yarn.server.nodemanager.containermanager.monitor=WARN
log4j.logger.org.apache.hadoop.conf.Configuration.deprecation=ERROR
"""

_CAPACITY_SCHEDULER = {
    "yarn.scheduler.capacity.root.queues": "default",
    "yarn.scheduler.capacity.root.default.capacity": "100",
    "yarn.scheduler.capacity.root.default.maximum-capacity": "100",
    "yarn.scheduler.capacity.root.default.state": "RUNNING",
    "yarn.scheduler.capacity.root.default.acl_submit_applications": "*",
    "yarn.scheduler.capacity.root.default.acl_administer_queue": "*",
    "yarn.scheduler.capacity.maximum-am-resource-percent": "0.8",
    "yarn.scheduler.capacity.node-locality-delay": "-1",
}


class LocalYarn(LocalServer):
    """A ResourceManager and a NodeManager on 127.0.0.1 for the HDFS ``hdfs``, data in ``work_dir``.

    Start and stop are idempotent; a failed start stops whatever it started and raises
    :class:`YarnStartFailed` with the tail of the failing server's log.
    """

    def __init__(
        self,
        work_dir: Path | str,
        hdfs: LocalHdfs,
        *,
        node_memory_mb: int = 8192,
        node_vcores: int = 8,
        yarn_config: Mapping[str, str] | None = None,
        startup_timeout: float = 240.0,
        user: str | None = None,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.hdfs = hdfs
        self.node_memory_mb = node_memory_mb
        self.node_vcores = node_vcores
        self.yarn_config = dict(yarn_config or {})
        self.startup_timeout = startup_timeout
        self.user = user or getpass.getuser()
        self.ports: dict[str, int] = {}
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    # -- addresses ---------------------------------------------------------------------------------

    @property
    def rm_url(self) -> str:
        """``http://127.0.0.1:<port>``: the ResourceManager's web address (REST API, UI, proxy)."""
        return f"http://{LOOPBACK}:{self.ports['rm_webapp']}"

    @property
    def conf_dir(self) -> Path:
        """The client configuration: spark-submit's ``HADOOP_CONF_DIR``."""
        return self.work_dir / "conf"

    def log_file(self, server: str) -> Path:
        return self.work_dir / f"{server}.log"

    def processes(self) -> list[subprocess.Popen[bytes] | None]:
        return list(self._processes.values())

    def client_env(self) -> dict[str, str]:
        """What a spark-submit to this YARN needs in its environment."""
        return {"HADOOP_CONF_DIR": str(self.conf_dir), "YARN_CONF_DIR": str(self.conf_dir),
                "HADOOP_USER_NAME": self.user}

    def yarn_site(self) -> dict[str, str]:
        p = self.ports
        local = self.work_dir / "nm"
        props = {
            "yarn.resourcemanager.hostname": LOOPBACK,
            "yarn.resourcemanager.address": f"{LOOPBACK}:{p['rm']}",
            "yarn.resourcemanager.scheduler.address": f"{LOOPBACK}:{p['rm_scheduler']}",
            "yarn.resourcemanager.resource-tracker.address": f"{LOOPBACK}:{p['rm_tracker']}",
            "yarn.resourcemanager.admin.address": f"{LOOPBACK}:{p['rm_admin']}",
            "yarn.resourcemanager.webapp.address": f"{LOOPBACK}:{p['rm_webapp']}",
            "yarn.resourcemanager.scheduler.class":
                "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler",
            "yarn.resourcemanager.recovery.enabled": "false",
            "yarn.resourcemanager.am.max-attempts": "2",
            "yarn.nodemanager.hostname": LOOPBACK,
            "yarn.nodemanager.address": f"{LOOPBACK}:{p['nm']}",
            "yarn.nodemanager.localizer.address": f"{LOOPBACK}:{p['nm_localizer']}",
            "yarn.nodemanager.webapp.address": f"{LOOPBACK}:{p['nm_webapp']}",
            "yarn.nodemanager.collector-service.address": f"{LOOPBACK}:{p['nm_collector']}",
            "yarn.nodemanager.resource.memory-mb": str(self.node_memory_mb),
            "yarn.nodemanager.resource.cpu-vcores": str(self.node_vcores),
            "yarn.nodemanager.local-dirs": str(local / "local"),
            "yarn.nodemanager.log-dirs": str(local / "logs"),
            "yarn.nodemanager.vmem-check-enabled": "false",
            "yarn.nodemanager.pmem-check-enabled": "false",
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "99.5",
            "yarn.nodemanager.disk-health-checker.min-free-space-per-disk-mb": "0",
            "yarn.nodemanager.delete.debug-delay-sec": "0",
            "yarn.nodemanager.env-whitelist":
                "JAVA_HOME,HADOOP_COMMON_HOME,HADOOP_HDFS_HOME,HADOOP_CONF_DIR,HADOOP_USER_NAME,PATH,LANG,TZ",
            "yarn.resourcemanager.nodemanagers.heartbeat-interval-ms": "500",
            "yarn.scheduler.minimum-allocation-mb": "256",
            "yarn.scheduler.maximum-allocation-mb": "4096",
            "yarn.log-aggregation-enable": "false",
            "yarn.timeline-service.enabled": "false",
            "yarn.webapp.ui2.enable": "false",
            "yarn.acl.enable": "false",
        }
        props.update(self.yarn_config)
        return props

    def spark_conf(self, *, jars: tuple[str, ...] = (), python: str | None = None) -> dict[str, str]:
        """The Spark conf of a small cluster-mode application on this YARN: pyspark's own jars
        (``local:``, never zipped and uploaded per submit) and ``jars`` (``local:`` too: every
        container runs on this machine), the driver and executors on ``python`` (default this
        interpreter), one 640 MB executor; containers take 640 MB + 384 MB of overhead each, and their
        JVMs run with :data:`~tests.harness.hdfs.JVM_FOOTPRINT`."""
        import pyspark

        spark_jars = Path(pyspark.__file__).parent / "jars"
        conf = {
            "spark.yarn.jars": f"local:{spark_jars}/*",
            "spark.yarn.submit.waitAppCompletion": "false",
            "spark.yarn.maxAppAttempts": "1",
            "spark.yarn.appMasterEnv.PYSPARK_PYTHON": python or sys.executable,
            "spark.executorEnv.PYSPARK_PYTHON": python or sys.executable,
            "spark.driver.memory": "640m",
            "spark.executor.memory": "640m",
            "spark.executor.instances": "1",
            "spark.executor.cores": "1",
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.showConsoleProgress": "false",
            # a small footprint on a shared 2-core machine, as the HDFS and YARN servers run: one GC
            # thread, the quick JIT only (these jobs live minutes)
            "spark.driver.extraJavaOptions": " ".join(JVM_FOOTPRINT),
            "spark.executor.extraJavaOptions": " ".join(JVM_FOOTPRINT),
        }
        if jars:
            conf["spark.jars"] = ",".join(f"local:{jar}" for jar in jars)
        return conf

    def kafka_delta_conf(self) -> dict[str, str]:
        """:meth:`spark_conf` for a job that reads Kafka and writes Delta: Spark's Kafka connector
        and Delta's jars (``local:``) and Delta's session extension and catalog."""
        from airflow_ckpt_provider.local.spark import delta_spark_conf

        delta = delta_spark_conf()
        delta.pop("spark.jars")
        jars = tuple(str(path) for path in (*jvm.jars(jvm.SPARK_KAFKA), *jvm.jars(jvm.DELTA)))
        # Delta replays its log in 50 tasks by default: on one small node its log is tiny
        return {**self.spark_conf(jars=jars), **delta, "spark.databricks.delta.snapshotPartitions": "2"}

    def submit(self, application: Path, args: list[str], *, name: str, conf: Mapping[str, str],
               tags: tuple[str, ...] = (), log_path: Path) -> str:
        """``spark-submit --master yarn --deploy-mode cluster`` of ``application`` as a person would
        run it (no provider involved); the application id once the ResourceManager accepted it."""
        import pyspark

        spark_home = Path(pyspark.__file__).parent
        command = [str(spark_home / "bin" / "spark-submit"), "--master", "yarn", "--deploy-mode", "cluster",
                   "--name", name]
        for key, value in {**conf, **({"spark.yarn.tags": ",".join(tags)} if tags else {})}.items():
            command += ["--conf", f"{key}={value}"]
        command += [str(application), *args]
        env = {**os.environ, **self.client_env(), "SPARK_HOME": str(spark_home)}
        with open(log_path, "wb") as out:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
        output = log_path.read_text(errors="replace")
        found = re.search(r"application_\d+_\d+", output)
        if done.returncode != 0 or not found:
            raise RuntimeError(f"spark-submit of {application.name} to YARN exited {done.returncode}:\n"
                               + "\n".join(output.splitlines()[-20:]))
        return found.group(0)

    def application(self, app_id: str) -> dict[str, Any]:
        """The ResourceManager's description of ``app_id``."""
        return dict(self.rest(f"/ws/v1/cluster/apps/{app_id}")["app"])

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> LocalYarn:
        """Write the configuration and start both servers; return once a node offers memory.

        Raises :class:`ToolMissing` without Java, :class:`JarsMissing` before ``jvm fetch yarn``
        and :class:`YarnStartFailed` if a server exits or no node registers within
        ``startup_timeout``.
        """
        if self.running:
            return self
        java = jvm.require_java()
        jars = jvm.jars(jvm.YARN)
        taken: set[int] = set()
        for name in ("rm", "rm_scheduler", "rm_tracker", "rm_admin", "rm_webapp", "nm", "nm_localizer",
                     "nm_webapp", "nm_collector"):
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            self.ports[name] = port
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.conf_dir.mkdir(exist_ok=True)
        (self.conf_dir / "core-site.xml").write_text(site_xml(self.hdfs.core_site()))
        (self.conf_dir / "hdfs-site.xml").write_text(site_xml(self.hdfs.hdfs_site()))
        (self.conf_dir / "yarn-site.xml").write_text(site_xml(self.yarn_site()))
        (self.conf_dir / "capacity-scheduler.xml").write_text(site_xml(_CAPACITY_SCHEDULER))
        (self.conf_dir / "log4j.properties").write_text(_LOG4J)
        for app in WEBAPPS:
            (self.work_dir / "resources" / "webapps" / app).mkdir(parents=True, exist_ok=True)
        classpath = os.pathsep.join([str(self.conf_dir), str(self.work_dir / "resources"), *map(str, jars)])
        java_home = str(Path(java).resolve().parents[1])
        env = {**os.environ, "HADOOP_USER_NAME": self.user, "JAVA_HOME": java_home,
               "HADOOP_CONF_DIR": str(self.conf_dir)}
        log.info("starting YARN on %s (NodeManager: %d MB, %d vcores; work in %s)", self.rm_url,
                 self.node_memory_mb, self.node_vcores, self.work_dir)
        try:
            for server, main, heap in (("resourcemanager", RESOURCE_MANAGER, "384m"),
                                       ("nodemanager", NODE_MANAGER, "256m")):
                command = [java, f"-Xmx{heap}", "-Xms64m", *JVM_FOOTPRINT, *JAVA_OPENS, *GUICE_OPENS,
                           f"-Dhadoop.log.dir={self.work_dir}", f"-Dyarn.log.dir={self.work_dir}",
                           f"-Dlog4j.configuration=file:{self.conf_dir / 'log4j.properties'}",
                           "-cp", classpath, main]
                with open(self.log_file(server), "ab") as out:
                    self._processes[server] = subprocess.Popen(
                        command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        env=env, start_new_session=True,
                    )
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def rest(self, path: str, *, method: str = "GET", body: Mapping[str, Any] | None = None,
             timeout: float = 30.0) -> Any:
        """The ResourceManager's REST answer to ``path`` (``/ws/v1/cluster/...``), decoded."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.rm_url}{path}", data=data, method=method,
                                         headers={"Accept": "application/json", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - loopback only
            return json.loads(response.read() or b"null")

    def _wait_ready(self) -> None:
        started = time.monotonic()
        deadline = started + self.startup_timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            for server, proc in self._processes.items():
                code = proc.poll()
                if code is not None:
                    raise YarnStartFailed(
                        found=f"the {server} process exited with code {code}",
                        expected=f"a running {server}",
                        action=f"Read {self.log_file(server)} for the cause.",
                        detail=log_tail(self.log_file(server)),
                    )
            try:
                nodes = (self.rest("/ws/v1/cluster/nodes", timeout=10.0).get("nodes") or {}).get("node") or []
                running = [n for n in nodes if n.get("state") == "RUNNING" and n.get("availMemoryMB", 0) > 0]
                if running:
                    log.info("YARN ready on %s after %.1f s (%d MB on %s)", self.rm_url,
                             time.monotonic() - started, running[0]["availMemoryMB"], running[0].get("id"))
                    return
                last = f"nodes: {[(n.get('id'), n.get('state')) for n in nodes]}"
            except (OSError, ValueError) as exc:
                last = f"{type(exc).__name__}: {str(exc)[:200]}"
            time.sleep(1.0)
        raise YarnStartFailed(
            found=f"no RUNNING NodeManager after {self.startup_timeout:.0f} s (last: {last})",
            expected="a ResourceManager with one registered NodeManager",
            action=f"Read {self.log_file('resourcemanager')} and {self.log_file('nodemanager')}; on a slow "
            "machine raise startup_timeout.",
            detail=log_tail(self.log_file("resourcemanager")) + "\n---\n" + log_tail(self.log_file("nodemanager")),
        )

    def applications(self) -> list[dict[str, Any]]:
        """Every application the ResourceManager knows, as its REST API describes them."""
        return list(((self.rest("/ws/v1/cluster/apps") or {}).get("apps") or {}).get("app") or [])

    def kill_running(self, timeout: float = 60.0) -> None:
        """Kill every application not yet final through the ResourceManager and wait for them."""
        deadline = time.monotonic() + timeout
        live = [a["id"] for a in self.applications() if a.get("state") not in FINAL_STATES]
        for app_id in live:
            try:
                self.rest(f"/ws/v1/cluster/apps/{app_id}/state?user.name={self.user}", method="PUT",
                          body={"state": "KILLED"})
            except (OSError, ValueError) as exc:
                log.warning("could not kill YARN application %s: %s", app_id, exc)
        while live and time.monotonic() < deadline:
            states = {a["id"]: a.get("state") for a in self.applications()}
            live = [app_id for app_id in live if states.get(app_id) not in FINAL_STATES]
            time.sleep(0.5)

    def _sweep_containers(self) -> None:
        """SIGKILL the process groups of the containers this NodeManager launched (each container
        runs under ``setsid``, so stopping the NodeManager's own group leaves them running)."""
        for pid_file in (self.work_dir / "nm" / "local").glob("nmPrivate/**/*.pid"):
            try:
                pid = int(pid_file.read_text().strip())
                os.killpg(pid, signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def stop(self, timeout: float = 30.0) -> None:
        """Kill running applications, stop the NodeManager, then the ResourceManager (SIGTERM to
        each process group, SIGKILL after ``timeout`` seconds), then sweep leftover containers."""
        if self._processes.get("resourcemanager") is not None and self.running:
            try:
                self.kill_running()
            except (OSError, ValueError) as exc:
                log.warning("could not list YARN applications on stop: %s", exc)
        processes, self._processes = self._processes, {}
        for server in ("nodemanager", "resourcemanager"):
            stop_process_group(processes.get(server), f"YARN {server}", timeout)
        self._sweep_containers()
