"""Structural checks of docker-compose.yml, the stack for users who have Docker.

No Docker engine is needed: the file is parsed with PyYAML (which resolves the ``<<`` merge keys
the same way Compose does) and checked for the properties that make the stack start and stay
consistent. One extra test validates the file with ``docker compose config`` when that works
here, and is skipped otherwise.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML, in the dev extra: these checks must fail, not skip, without it

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"

REQUIRED_SERVICES = {
    "kafka",
    "spark-master",
    "spark-worker",
    "postgres",
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
ONE_SHOT_SERVICES = {"airflow-init"}
AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
LONG_RUNNING_AIRFLOW = AIRFLOW_SERVICES - ONE_SHOT_SERVICES
SPARK_SERVICES = {"spark-master", "spark-worker"}
CHECKPOINT_VOLUME = "checkpoints"
CHECKPOINT_MOUNT = "/data"
DAGS_MOUNT = "/opt/airflow/dags"
AIRFLOW_IMAGE = "airflow-ckpt-provider-airflow"

# An image reference "name:tag" (optionally "@sha256:..."), with a registry port allowed.
IMAGE_RE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9._/:-]*?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]*))?(?:@sha256:[0-9a-f]{64})?$")


# --------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    assert COMPOSE_FILE.is_file(), f"{COMPOSE_FILE} is missing"
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict), "docker-compose.yml must be a mapping"
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    svcs = compose.get("services")
    assert isinstance(svcs, dict) and svcs, "no services defined"
    return svcs


@pytest.fixture(scope="module")
def dockerfile(services: dict[str, dict[str, Any]]) -> str:
    build = services["airflow-init"].get("build")
    assert isinstance(build, dict), "the Airflow services must be built locally"
    text = build.get("dockerfile_inline")
    assert isinstance(text, str) and text.strip(), "build.dockerfile_inline is missing"
    # What Docker receives after Compose's interpolation: "$$" is a literal "$".
    return text.replace("$$", "$")


def split_image(ref: str) -> tuple[str, str | None]:
    match = IMAGE_RE.match(ref)
    assert match, f"not an image reference: {ref!r}"
    return match.group("name"), match.group("tag")


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def volume_mounts(service: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Map container path -> (source, mode) for the short and the long volume syntax."""
    mounts: dict[str, tuple[str, str]] = {}
    for item in service.get("volumes") or []:
        if isinstance(item, str):
            parts = item.split(":")
            source, target = parts[0], parts[1]
            mode = parts[2] if len(parts) > 2 else "rw"
        else:
            source, target = item.get("source", ""), item["target"]
            mode = "ro" if item.get("read_only") else "rw"
        mounts[target] = (source, mode)
    return mounts


def depends_on(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: {"condition": "service_started"} for name in deps}
    return deps


def command_list(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command")
    if isinstance(cmd, str):
        return cmd.split()
    return [str(part) for part in cmd or []]


def provider_version() -> str:
    text = (REPO_ROOT / "airflow_ckpt_provider" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__\s*=\s*"([^"]+)"', text, re.MULTILINE)
    assert match, "__version__ not found in airflow_ckpt_provider/__init__.py"
    return match.group(1)


def pip_pins(dockerfile: str) -> dict[str, str]:
    return dict(re.findall(r'"([A-Za-z0-9_.-]+)==([0-9][0-9A-Za-z.]*)"', dockerfile))


# --------------------------------------------------------------------------------------------
# services and images


def test_required_services_exist(services: dict[str, dict[str, Any]]) -> None:
    missing = REQUIRED_SERVICES - services.keys()
    assert not missing, f"missing services: {sorted(missing)}"


def test_no_zookeeper(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        assert "zookeeper" not in name.lower(), f"service {name} looks like ZooKeeper; Kafka runs KRaft"
        assert "zookeeper" not in str(svc.get("image", "")).lower()
        assert not any(k.startswith("KAFKA_ZOOKEEPER") for k in env_of(svc)), name


def test_every_image_is_pinned(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        assert "image" in svc, f"service {name} has no image (local builds must be tagged too)"
        image, tag = split_image(svc["image"])
        assert tag, f"service {name}: image {svc['image']!r} has no tag"
        assert tag != "latest", f"service {name}: image {svc['image']!r} uses 'latest'"


@pytest.mark.parametrize(
    ("service", "expected"),
    [
        ("kafka", "apache/kafka:3.9.1"),
        ("postgres", "postgres:16"),
    ],
)
def test_pinned_third_party_images(services: dict[str, dict[str, Any]], service: str, expected: str) -> None:
    assert services[service]["image"] == expected


def test_spark_images_are_one_pinned_4x_release(services: dict[str, dict[str, Any]]) -> None:
    images = {services[name]["image"] for name in SPARK_SERVICES}
    assert len(images) == 1, f"master and worker must run the same Spark: {images}"
    name, tag = split_image(images.pop())
    assert name == "apache/spark"
    assert tag and re.match(r"^4\.\d+\.\d+(-|$)", tag), f"Spark tag {tag!r} is not a pinned 4.x.y release"


def test_airflow_services_share_the_locally_built_image(services: dict[str, dict[str, Any]]) -> None:
    expected = f"{AIRFLOW_IMAGE}:{provider_version()}"
    for name in AIRFLOW_SERVICES:
        svc = services[name]
        assert svc.get("image") == expected, f"{name}: image {svc.get('image')!r}, expected {expected!r}"
        build = svc.get("build")
        assert isinstance(build, dict) and build.get("context") == ".", f"{name} must build from the repo root"
        assert build.get("dockerfile_inline") == services["airflow-init"]["build"]["dockerfile_inline"]


def test_dockerfile_base_is_a_pinned_airflow_3_image(dockerfile: str) -> None:
    froms = re.findall(r"^\s*FROM\s+(\S+)", dockerfile, re.MULTILINE | re.IGNORECASE)
    assert len(froms) == 1, f"expected one FROM, got {froms}"
    name, tag = split_image(froms[0])
    assert name == "apache/airflow"
    assert tag and tag != "latest"
    match = re.match(r"^(3\.\d+\.\d+)-python3\.\d+$", tag)
    assert match, f"base tag {tag!r} must pin an Airflow 3.x.y release and a Python version"
    major_minor = tuple(int(p) for p in match.group(1).split(".")[:2])
    assert major_minor >= (3, 1), "the provider needs Airflow >= 3.1"


def test_dockerfile_keeps_the_base_airflow_version(dockerfile: str) -> None:
    match = re.search(r"^\s*FROM\s+apache/airflow:(\d+\.\d+\.\d+)-", dockerfile, re.MULTILINE)
    assert match, "FROM apache/airflow:<x.y.z>-pythonX.Y not found"
    tag = match.group(1)
    assert pip_pins(dockerfile).get("apache-airflow") == tag, (
        "pip install must pin apache-airflow to the base image's version so pip cannot replace it"
    )


def test_dockerfile_installs_java_17(dockerfile: str) -> None:
    assert re.search(r"apt-get install\b[^\n]*\bopenjdk-17-jre-headless\b", dockerfile)
    assert re.search(r"^\s*ENV\s+JAVA_HOME=\S+", dockerfile, re.MULTILINE)


def test_dockerfile_installs_the_provider_with_spark_extra(dockerfile: str) -> None:
    src = "/opt/airflow-ckpt-provider"
    copies: dict[str, str] = {}
    for line in re.findall(r"^\s*COPY\s+(.+)$", dockerfile, re.MULTILINE):
        args = [a for a in line.split() if not a.startswith("--")]
        for source in args[:-1]:
            copies[source] = args[-1].rstrip("/")
    assert copies.get("setup.cfg") == src, copies
    assert copies.get("pyproject.toml") == src, copies
    assert copies.get("airflow_ckpt_provider") == f"{src}/airflow_ckpt_provider", copies
    assert re.search(r"\bpip install\b(?:[^\n]|\\\n)*\"" + re.escape(src) + r"\[spark\]\"", dockerfile), (
        f"pip install {src}[spark] not found"
    )


def test_pyspark_in_airflow_matches_the_cluster(services: dict[str, dict[str, Any]], dockerfile: str) -> None:
    _, tag = split_image(services["spark-master"]["image"])
    spark_version = re.match(r"^(\d+\.\d+\.\d+)", tag).group(1)
    pins = pip_pins(dockerfile)
    assert pins.get("pyspark") == spark_version, f"pyspark pin {pins.get('pyspark')} != cluster {spark_version}"
    if "pyspark-client" in pins:
        assert pins["pyspark-client"] == spark_version


def test_compose_interpolation_is_escaped(services: dict[str, dict[str, Any]]) -> None:
    """Compose rejects "$(" and other lone dollars; shell code must write "$$"."""
    raw = services["airflow-init"]["build"]["dockerfile_inline"]
    lone = re.findall(r"(?<!\$)\$(?![${A-Za-z_])", raw.replace("$$", ""))
    assert not lone, "unescaped '$' in dockerfile_inline"
    for name, svc in services.items():
        for part in command_list(svc):
            assert not re.search(r"\$(?![${A-Za-z_])", part.replace("$$", "")), f"{name}: unescaped '$' in command"


# --------------------------------------------------------------------------------------------
# healthchecks and dependencies


def test_every_long_running_service_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        if name in ONE_SHOT_SERVICES:
            continue
        hc = svc.get("healthcheck")
        assert isinstance(hc, dict), f"{name} has no healthcheck"
        assert not hc.get("disable"), f"{name} disables its healthcheck"
        test = hc.get("test")
        assert test, f"{name}: healthcheck without test"
        if isinstance(test, list):
            assert test[0] in {"CMD", "CMD-SHELL"}, f"{name}: test must start with CMD or CMD-SHELL"
            assert len(test) > 1 and all(str(x).strip() for x in test[1:]), f"{name}: empty test command"


@pytest.mark.parametrize(
    ("service", "job_type"),
    [
        ("airflow-scheduler", "SchedulerJob"),
        ("airflow-triggerer", "TriggererJob"),
        ("airflow-dag-processor", "DagProcessorJob"),
    ],
)
def test_airflow_job_healthchecks(services: dict[str, dict[str, Any]], service: str, job_type: str) -> None:
    test = " ".join(str(x) for x in services[service]["healthcheck"]["test"])
    assert "airflow jobs check" in test
    assert f"--job-type {job_type}" in test, test
    assert "--local" in test or "--hostname" in test, "check this container's job, not any job"


def test_apiserver_healthcheck_hits_the_version_endpoint(services: dict[str, dict[str, Any]]) -> None:
    svc = services["airflow-apiserver"]
    assert command_list(svc) == ["api-server"]
    test = " ".join(str(x) for x in svc["healthcheck"]["test"])
    assert "curl" in test and "--fail" in test and "http://localhost:8080/api/v2/version" in test


def test_postgres_healthcheck_uses_pg_isready(services: dict[str, dict[str, Any]]) -> None:
    test = services["postgres"]["healthcheck"]["test"]
    assert "pg_isready" in " ".join(str(x) for x in test)


def test_kafka_healthcheck_asks_the_broker(services: dict[str, dict[str, Any]]) -> None:
    test = " ".join(str(x) for x in services["kafka"]["healthcheck"]["test"])
    assert "kafka-broker-api-versions.sh" in test and "--bootstrap-server" in test


@pytest.mark.parametrize(("service", "port"), [("spark-master", "8080"), ("spark-worker", "8081")])
def test_spark_healthchecks_probe_their_ui(services: dict[str, dict[str, Any]], service: str, port: str) -> None:
    svc = services[service]
    test = " ".join(str(x) for x in svc["healthcheck"]["test"])
    assert f":{port}" in test or f"/{port}" in test, test
    cmd = command_list(svc)
    assert cmd[cmd.index("--webui-port") + 1] == port


def test_depends_on_references_existing_services_with_valid_conditions(
    services: dict[str, dict[str, Any]],
) -> None:
    valid = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, svc in services.items():
        for dep, spec in depends_on(svc).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            assert dep != name, f"{name} depends on itself"
            condition = (spec or {}).get("condition", "service_started")
            assert condition in valid, f"{name} -> {dep}: unknown condition {condition}"
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep} to be healthy, it has no healthcheck"
            if condition == "service_completed_successfully":
                assert dep in ONE_SHOT_SERVICES, f"{name} waits for long-running {dep} to complete"


def test_depends_on_has_no_cycle(services: dict[str, dict[str, Any]]) -> None:
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == 1:
            raise AssertionError(f"dependency cycle: {' -> '.join(path + [node])}")
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in depends_on(services[node]):
            visit(dep, path + [node])
        state[node] = 2

    for name in services:
        visit(name, [])


def test_airflow_startup_order(services: dict[str, dict[str, Any]]) -> None:
    init = depends_on(services["airflow-init"])
    assert init.get("postgres", {}).get("condition") == "service_healthy"
    for name in LONG_RUNNING_AIRFLOW:
        deps = depends_on(services[name])
        assert deps.get("postgres", {}).get("condition") == "service_healthy", name
        assert deps.get("airflow-init", {}).get("condition") == "service_completed_successfully", name
    for name in ("airflow-scheduler", "airflow-triggerer"):
        deps = depends_on(services[name])
        assert deps.get("kafka", {}).get("condition") == "service_healthy", name
        assert deps.get("spark-master", {}).get("condition") == "service_healthy", name


def test_airflow_init_migrates_the_database(services: dict[str, dict[str, Any]]) -> None:
    svc = services["airflow-init"]
    assert "airflow db migrate" in " ".join(command_list(svc)).replace("\n", " ")
    assert svc.get("restart") in (None, "no"), "a one-shot service must not restart"
    assert "healthcheck" not in svc or svc["healthcheck"].get("disable")


def test_long_running_airflow_commands(services: dict[str, dict[str, Any]]) -> None:
    expected = {
        "airflow-apiserver": ["api-server"],
        "airflow-scheduler": ["scheduler"],
        "airflow-dag-processor": ["dag-processor"],
        "airflow-triggerer": ["triggerer"],
    }
    for name, cmd in expected.items():
        assert command_list(services[name]) == cmd, name
        assert services[name].get("restart") in {"always", "unless-stopped", "on-failure"}, name


# --------------------------------------------------------------------------------------------
# Kafka


def test_kafka_runs_kraft_combined_single_node(services: dict[str, dict[str, Any]]) -> None:
    env = env_of(services["kafka"])
    roles = {r.strip() for r in env["KAFKA_PROCESS_ROLES"].split(",")}
    assert roles == {"broker", "controller"}
    node_id = env["KAFKA_NODE_ID"]
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert len(voters) == 1 and voters[0].startswith(f"{node_id}@"), voters
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] == "CONTROLLER"
    listeners = dict(entry.split("://", 1) for entry in env["KAFKA_LISTENERS"].split(","))
    assert "CONTROLLER" in listeners
    assert voters[0].split(":")[-1] == listeners["CONTROLLER"].split(":")[-1], "voter port != controller port"
    # A single broker cannot host replicated internal topics.
    assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"
    assert env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"] == "1"
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", env["CLUSTER_ID"]), "CLUSTER_ID must be a base64url uuid"


def test_kafka_listeners_for_network_and_host(services: dict[str, dict[str, Any]]) -> None:
    svc = services["kafka"]
    env = env_of(svc)
    protocol_map = dict(p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    listeners = dict(entry.split("://", 1) for entry in env["KAFKA_LISTENERS"].split(","))
    advertised = dict(entry.split("://", 1) for entry in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert set(listeners) <= set(protocol_map), "every listener needs a security protocol"
    assert "CONTROLLER" not in advertised, "the controller listener must not be advertised"
    assert set(advertised) <= set(listeners)
    assert "kafka:9092" in advertised.values(), "in-network clients must reach kafka:9092"
    host_listener = [name for name, addr in advertised.items() if addr.startswith("localhost:")]
    assert len(host_listener) == 1, advertised
    host_port = advertised[host_listener[0]].split(":")[1]
    assert listeners[host_listener[0]].endswith(f":{host_port}")
    published = {str(p).split(":")[-2] + ":" + str(p).split(":")[-1] for p in svc.get("ports", [])}
    assert f"{host_port}:{host_port}" in published, f"host listener port {host_port} is not published: {published}"
    assert env.get("KAFKA_INTER_BROKER_LISTENER_NAME", "PLAINTEXT") in listeners


def test_kafka_data_on_a_named_volume(services: dict[str, dict[str, Any]], compose: dict[str, Any]) -> None:
    svc = services["kafka"]
    log_dir = env_of(svc)["KAFKA_LOG_DIRS"]
    source, _ = volume_mounts(svc)[log_dir]
    assert source in (compose.get("volumes") or {}), f"Kafka log dir {log_dir} is not on a named volume"


# --------------------------------------------------------------------------------------------
# Spark


def test_spark_standalone_master_and_worker(services: dict[str, dict[str, Any]]) -> None:
    master = command_list(services["spark-master"])
    assert "org.apache.spark.deploy.master.Master" in master
    assert master[master.index("--port") + 1] == "7077"
    assert master[master.index("--host") + 1] == "spark-master"
    worker = command_list(services["spark-worker"])
    assert "org.apache.spark.deploy.worker.Worker" in worker
    assert worker[-1] == "spark://spark-master:7077"
    assert depends_on(services["spark-worker"]).get("spark-master", {}).get("condition") == "service_healthy"


def test_spark_services_mount_dags_read_only_and_checkpoints(services: dict[str, dict[str, Any]]) -> None:
    for name in SPARK_SERVICES:
        mounts = volume_mounts(services[name])
        assert mounts.get(CHECKPOINT_MOUNT) == (CHECKPOINT_VOLUME, "rw"), f"{name}: {mounts}"
        assert mounts.get(DAGS_MOUNT) == ("./dags", "ro"), f"{name}: {mounts}"


# --------------------------------------------------------------------------------------------
# Airflow


def test_airflow_services_mount_dags_and_checkpoints(services: dict[str, dict[str, Any]]) -> None:
    for name in AIRFLOW_SERVICES:
        mounts = volume_mounts(services[name])
        assert mounts.get(DAGS_MOUNT, ("", ""))[0] == "./dags", f"{name}: {mounts}"
        assert mounts.get(CHECKPOINT_MOUNT) == (CHECKPOINT_VOLUME, "rw"), f"{name}: {mounts}"


def test_airflow_and_spark_write_checkpoints_as_the_same_user(
    services: dict[str, dict[str, Any]], dockerfile: str
) -> None:
    users = {name: str(services[name].get("user", "")) for name in AIRFLOW_SERVICES | SPARK_SERVICES}
    assert len(set(users.values())) == 1 and "" not in users.values(), users
    uid = next(iter(users.values())).split(":")[0]
    assert uid == "50000", "the Airflow image's user owns /data in the image"
    assert re.search(r"chown\s+(-R\s+)?airflow:root\s+/data", dockerfile), "/data must belong to airflow in the image"
    assert "airflow-init" in depends_on(services["spark-master"]), "airflow-init must mount the volume first"


def test_airflow_common_environment(services: dict[str, dict[str, Any]]) -> None:
    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"].lower() == "false", name
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/", name
        conn = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert re.match(r"^postgresql(\+psycopg2)?://airflow:airflow@postgres(:5432)?/airflow$", conn), conn
        # Components sign and check each other's tokens: the keys must be set, and equal everywhere.
        assert env.get("AIRFLOW__API_AUTH__JWT_SECRET"), name
        assert env.get("AIRFLOW__API__SECRET_KEY"), name
    for key in ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY"):
        assert len({env_of(services[n])[key] for n in AIRFLOW_SERVICES}) == 1, key


def test_postgres_matches_the_airflow_connection(services: dict[str, dict[str, Any]]) -> None:
    env = env_of(services["postgres"])
    assert (env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]) == ("airflow", "airflow", "airflow")
    source, _ = volume_mounts(services["postgres"])["/var/lib/postgresql/data"]
    assert source == "postgres-db"


def test_default_connections(services: dict[str, dict[str, Any]]) -> None:
    env = env_of(services["airflow-scheduler"])
    kafka = json.loads(env["AIRFLOW_CONN_KAFKA_DEFAULT"])
    assert kafka["conn_type"] == "kafka"
    assert kafka["extra"]["bootstrap.servers"] == "kafka:9092"
    spark = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert spark["conn_type"] == "spark"
    assert f"{spark['host']}:{spark['port']}" == "spark://spark-master:7077"
    assert spark["extra"]["deploy-mode"] == "client", "PySpark apps cannot use cluster mode on standalone"


def test_apiserver_is_published_on_localhost(services: dict[str, dict[str, Any]]) -> None:
    ports = [str(p) for p in services["airflow-apiserver"].get("ports", [])]
    assert "127.0.0.1:8080:8080" in ports, ports


def test_published_host_ports_do_not_collide(services: dict[str, dict[str, Any]]) -> None:
    seen: dict[str, str] = {}
    for name, svc in services.items():
        for port in svc.get("ports", []):
            parts = str(port).split(":")
            host = ":".join(parts[:-1]) if len(parts) > 1 else parts[0]
            assert host not in seen, f"{name} and {seen.get(host)} both publish {host}"
            seen[host] = name


# --------------------------------------------------------------------------------------------
# volumes


def test_named_volumes_are_declared(services: dict[str, dict[str, Any]], compose: dict[str, Any]) -> None:
    declared = set((compose.get("volumes") or {}).keys())
    used: set[str] = set()
    for _name, svc in services.items():
        for source, _ in volume_mounts(svc).values():
            if source and not source.startswith((".", "/", "~", "$")):
                used.add(source)
    assert CHECKPOINT_VOLUME in used
    undeclared = used - declared
    assert not undeclared, f"named volumes used but not declared: {sorted(undeclared)}"
    unused = declared - used
    assert not unused, f"declared volumes nobody mounts: {sorted(unused)}"


# --------------------------------------------------------------------------------------------
# optional: Docker's own validation


def test_docker_compose_config_validates() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("docker CLI not installed")
    try:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:  # pragma: no cover - environment dependent
        pytest.skip(f"docker compose unavailable: {exc}")
    if probe.returncode != 0:
        reason = (probe.stderr or probe.stdout).strip().splitlines() or ["no output"]
        pytest.skip(f"docker compose unavailable: {reason[0][:200]}")
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr
