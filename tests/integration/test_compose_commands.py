"""docker-compose.yml's Spark, Kafka and image-build settings, run outside containers.

No Docker engine here, so the containers never start; what can run without one does. The
spark-master and spark-worker commands are taken from the compose file as written, the names
that only exist in the compose network (host names, ports, the worker's work dir) are replaced
by local ones (127.0.0.1, free ports, a temporary folder), and the rest runs unchanged with this
virtualenv's pyspark ``spark-class``, the script the image puts on PATH: the worker must register
with the master as ALIVE, and the services' health-check commands must succeed against them.
The image's wheel stage (``pip wheel --no-deps`` on the files it copies) runs the same way, and
the kafka service's ``KAFKA_*`` settings, translated as the apache/kafka image does, start a real
broker of the same Kafka version.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_ckpt_provider.local import jvm
from airflow_ckpt_provider.local.processes import LOOPBACK, free_port, log_tail, stop_process_group
from tests.harness.standalone import master_json

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
# Generous: the master and the worker start JVMs on two cores shared with other test runs.
START_LIMIT_S = 300.0


def compose_services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))["services"]


def spark_class() -> Path:
    """pyspark's ``spark-class`` script next to this interpreter (what the image has on PATH)."""
    script = Path(sys.executable).parent / "spark-class"
    assert script.is_file(), f"{script} missing: the virtualenv's pyspark must be the full pyspark"
    return script


def localize(command: list[str], names: dict[str, str]) -> list[str]:
    """``command`` with the compose-only values in ``names`` replaced: whole arguments, and the
    host and port of URLs; fails if a compose host name is left over."""

    def url(match: re.Match[str]) -> str:
        return f"{names.get(match.group(1), match.group(1))}:{names.get(match.group(2), match.group(2))}"

    out = [names[part] if part in names else re.sub(r"(?<=://)([A-Za-z0-9.-]+):(\d+)", url, part)
           for part in command]
    leftovers = [part for part in out if re.search(r"\bspark-(master|worker)\b", part) or part in names]
    assert not leftovers, f"compose-only values left in {out}: {leftovers}"
    return out


class ComposeSpark:
    """The compose file's spark-master and spark-worker, as local processes in their own groups."""

    def __init__(self, work: Path) -> None:
        self.work = work
        services = compose_services()
        self.master_svc, self.worker_svc = services["spark-master"], services["spark-worker"]
        self.port, self.ui_port, self.worker_ui_port = free_port(), free_port(), free_port()
        work_dir = self.worker_svc["command"][self.worker_svc["command"].index("--work-dir") + 1]
        self.names = {
            "spark-master": LOOPBACK,
            "spark-worker": LOOPBACK,
            "7077": str(self.port),
            "8080": str(self.ui_port),
            "8081": str(self.worker_ui_port),
            work_dir: str(work / "spark-work"),
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def command(self, service: dict[str, Any]) -> list[str]:
        cmd = localize([str(p) for p in service["command"]], self.names)
        assert cmd[0] == "spark-class", cmd
        return [str(spark_class()), *cmd[1:]]

    def env(self, service: dict[str, Any]) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("SPARK_HOME", None)  # found by pyspark's find-spark-home, as in the image
        env.update({str(k): str(v) for k, v in (service.get("environment") or {}).items()})
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        return env

    def spawn(self, name: str, service: dict[str, Any]) -> subprocess.Popen[bytes]:
        with open(self.work / f"{name}.log", "ab") as out:
            proc = subprocess.Popen(self.command(service), stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.env(service), cwd=self.work,
                                    start_new_session=True)
        self.processes.append(proc)
        return proc

    def wait_for(self, ready: Any, what: str, proc: subprocess.Popen[bytes], name: str) -> dict[str, Any]:
        started = time.monotonic()
        while time.monotonic() < started + START_LIMIT_S:
            assert proc.poll() is None, f"{name} exited with {proc.returncode}:\n{log_tail(self.work / f'{name}.log')}"
            try:
                state = master_json(f"http://{LOOPBACK}:{self.ui_port}", timeout=5)
                if ready(state):
                    return state
            except (OSError, ValueError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        raise AssertionError(f"no {what} after {START_LIMIT_S:.0f} s:\n{log_tail(self.work / f'{name}.log')}")

    def healthcheck(self, service: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        test = [str(p) for p in service["healthcheck"]["test"]]
        assert test[0] == "CMD", test
        return subprocess.run(localize(test[1:], self.names), capture_output=True, text=True)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            stop_process_group(proc, "compose Spark service")


@pytest.fixture
def compose_spark(tmp_path: Path) -> Iterator[ComposeSpark]:
    jvm.require_java()
    cluster = ComposeSpark(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


def test_compose_spark_commands_start_a_cluster_whose_worker_is_alive(compose_spark: ComposeSpark) -> None:
    cluster = compose_spark
    master = cluster.spawn("spark-master", cluster.master_svc)
    cluster.wait_for(lambda state: True, "master status page", master, "spark-master")
    worker = cluster.spawn("spark-worker", cluster.worker_svc)
    state = cluster.wait_for(lambda s: any(w.get("state") == "ALIVE" for w in s.get("workers", [])),
                             "ALIVE worker", worker, "spark-worker")
    assert state["url"] == f"spark://{LOOPBACK}:{cluster.port}"
    (alive,) = [w for w in state["workers"] if w.get("state") == "ALIVE"]
    command = cluster.worker_svc["command"]
    assert alive["cores"] == int(command[command.index("--cores") + 1])
    assert alive["memory"] == 2048, alive  # --memory 2g, in MB
    assert alive["host"] == LOOPBACK
    # the services' health checks, against the running daemons (curl, as in the image)
    if shutil.which("curl") is None:
        pytest.fail("curl is not installed: the health checks of the Spark services run it")
    for service in (cluster.master_svc, cluster.worker_svc):
        result = cluster.healthcheck(service)
        assert result.returncode == 0, f"health check {service['healthcheck']['test']}: {result.stderr}"
    # ... and they fail once a daemon is gone
    stop_process_group(worker, "compose spark-worker")
    assert cluster.healthcheck(cluster.worker_svc).returncode != 0


def test_compose_image_wheel_stage_builds_the_provider_wheel(tmp_path: Path) -> None:
    """The wheel stage's COPY and ``pip wheel --no-deps``, on the same files, with this virtualenv's
    setuptools (no build isolation: nothing is downloaded here)."""
    inline = compose_services()["airflow-init"]["build"]["dockerfile_inline"].replace("$$", "$")
    froms = [m.start() for m in re.finditer(r"^FROM\s", inline, re.MULTILINE)]
    assert len(froms) == 2, inline
    stage = inline[froms[0]:froms[1]]
    src = tmp_path / "opt" / "airflow-ckpt-provider"
    src.mkdir(parents=True)
    for line in re.findall(r"^\s*COPY\s+(.+)$", stage, re.MULTILINE):
        args = [a for a in line.split() if not a.startswith("--")]
        target = Path(args[-1].replace("/opt/airflow-ckpt-provider", str(src)))
        for source in args[:-1]:
            origin = REPO_ROOT / source
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(origin, target / source)
    (run,) = re.findall(r"^\s*RUN\s+(pip wheel .+)$", stage, re.MULTILINE)
    args = run.replace("/opt/airflow-ckpt-provider", str(src)).split()
    assert args[:2] == ["pip", "wheel"], args
    result = subprocess.run([sys.executable, "-m", "pip", *args[1:], "--no-build-isolation"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    wheels = sorted(p.name for p in (src / "dist").iterdir())
    (expected,) = re.findall(r"dist/(airflow_ckpt_provider-[^\"\[]+\.whl)\[spark\]", inline)
    assert wheels == [expected], f"the final stage installs {expected}, the wheel stage built {wheels}"
    with zipfile.ZipFile(src / "dist" / expected) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry_points = wheel.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "airflow_ckpt_provider/local/maven/kafka-broker/pom.xml" in names, "the POMs ship in the wheel"
    assert "Provides-Extra: spark" in metadata
    assert "[apache_airflow_provider]" in entry_points, "Airflow finds the provider through this entry point"


def kafka_image_properties(env: dict[str, Any]) -> dict[str, str]:
    """``server.properties`` entries the apache/kafka image makes of ``KAFKA_*`` variables: the
    prefix dropped, lower case, ``___`` -> ``-``, ``__`` -> ``_``, ``_`` -> ``.``."""
    props = {}
    for key, value in env.items():
        if key.startswith("KAFKA_"):
            name = key[len("KAFKA_"):].lower().replace("___", "-").replace("__", "\0").replace("_", ".")
            props[name.replace("\0", "_")] = str(value)
    return props


def test_compose_kafka_environment_is_real_broker_config(tmp_path: Path) -> None:
    """The kafka service's settings, translated as the image does and localized, start a real broker
    (the Kafka version of the broker's POM, the image's tag) that serves both the in-network and
    the host listener, and every setting is a broker config name the broker reports back."""
    from kafka import KafkaAdminClient

    from airflow_ckpt_provider.local.kafka import LocalKafka

    props = kafka_image_properties(compose_services()["kafka"]["environment"])
    listeners = dict(entry.split("://", 1) for entry in props["listeners"].split(","))
    ports = {name: free_port() for name in listeners}
    local_listeners = ",".join(f"{name}://{LOOPBACK}:{port}" for name, port in ports.items())
    advertised = ",".join(f"{entry.split('://')[0]}://{LOOPBACK}:{ports[entry.split('://')[0]]}"
                          for entry in props["advertised.listeners"].split(","))
    node_id, voter = props["controller.quorum.voters"].split("@")
    localized = {
        **props,
        "listeners": local_listeners,
        "advertised.listeners": advertised,
        "controller.quorum.voters": f"{node_id}@{LOOPBACK}:{ports[props['controller.listener.names']]}",
        "log.dirs": str(tmp_path / "data"),
    }
    assert voter.split(":")[-1] == listeners[props["controller.listener.names"]].split(":")[-1]
    broker = LocalKafka(tmp_path / "kafka", port=ports[props["inter.broker.listener.name"]],
                        controller_port=ports[props["controller.listener.names"]], broker_config=localized,
                        startup_timeout=START_LIMIT_S)
    broker.start()
    try:
        for name, port in ports.items():
            if name == props["controller.listener.names"]:
                continue
            admin = KafkaAdminClient(bootstrap_servers=f"{LOOPBACK}:{port}", request_timeout_ms=30000)
            try:
                assert admin.describe_cluster()["brokers"], name
            finally:
                admin.close()
        logged = broker.log_file.read_text(errors="replace")
        dump = logged[logged.index("KafkaConfig values:"):]
        reported = dict(re.findall(r"^\s+([a-z0-9._-]+) = (.*)$", dump, re.MULTILINE))
        unknown = sorted(set(props) - set(reported))
        assert not unknown, f"not broker config names (misspelt KAFKA_* variables?): {unknown}"
        for name in ("num.partitions", "offsets.topic.replication.factor", "transaction.state.log.min.isr",
                     "group.initial.rebalance.delay.ms", "process.roles"):
            assert reported[name].replace(" ", "").strip("[]") == props[name], (name, reported[name])
    finally:
        broker.stop()
