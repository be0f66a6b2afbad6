"""Static checks of docker-compose.yml, the stack for users who have Docker.

No Docker engine is needed. The file is parsed with PyYAML (which resolves the ``<<`` merge keys
the same way Compose does) and checked for the properties that make the stack start and stay
consistent, and every version in it is cross-checked against the provider's pins: Airflow and
pyspark against ``.ci/constraints.txt``, Python against the tested 3.11 and ``python_requires``,
Kafka against the broker's POM. The file is also loaded by the Compose specification's own
loader (``tests/compose/check``, a Go program on compose-go, as ``docker compose config`` loads
it: schema validation, interpolation, the project resolved); that test needs Go and fails
without it in CI (``CI`` set), and skips without it elsewhere. The Spark services' start
commands, the image's wheel stage and the Kafka settings run outside containers in
``tests/integration/test_compose_commands.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML, in the dev extra: these checks must fail, not skip, without it

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
CONSTRAINTS_FILE = REPO_ROOT / ".ci" / "constraints.txt"
KAFKA_BROKER_POM = REPO_ROOT / "airflow_ckpt_provider" / "local" / "maven" / "kafka-broker" / "pom.xml"
COMPOSE_CHECK_DIR = REPO_ROOT / "tests" / "compose" / "check"
# The Python the provider is tested with (the virtualenv `make venv` builds, the constraints'
# interpreter); the image's Python must be this one.
TESTED_PYTHON = "3.11"

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
IMAGE_SERVICES = AIRFLOW_SERVICES | SPARK_SERVICES
CHECKPOINT_VOLUME = "checkpoints"
CHECKPOINT_MOUNT = "/data"
DAGS_MOUNT = "/opt/airflow/dags"
AIRFLOW_IMAGE = "airflow-ckpt-provider-airflow"
PROVIDER_SRC = "/opt/airflow-ckpt-provider"

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


def constraint_pins() -> dict[str, str]:
    """``name==version`` lines of .ci/constraints.txt, names lower-cased."""
    pins: dict[str, str] = {}
    for line in CONSTRAINTS_FILE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^\s*([A-Za-z0-9_.-]+)==([^\s;#]+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def pom_property(pom: Path, name: str) -> str:
    match = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", pom.read_text(encoding="utf-8"))
    assert match, f"<{name}> not found in {pom}"
    return match.group(1).strip()


def stages(dockerfile: str) -> list[tuple[str, str | None, str]]:
    """The build stages: (base image, stage name or None, the stage's text)."""
    found = list(re.finditer(r"^\s*FROM\s+(\S+)(?:\s+AS\s+(\S+))?\s*$", dockerfile, re.MULTILINE | re.IGNORECASE))
    bounds = [m.start() for m in found] + [len(dockerfile)]
    return [(m.group(1), m.group(2), dockerfile[bounds[i]:bounds[i + 1]]) for i, m in enumerate(found)]


def run_instructions(stage_text: str) -> list[str]:
    """Each RUN instruction of a stage as one line (continuations joined, comments dropped)."""
    runs: list[str] = []
    current: list[str] | None = None
    for raw in stage_text.splitlines():
        line = raw.strip()
        if current is None:
            if not re.match(r"^RUN\s", line):
                continue
            current = []
            line = line[4:]
        if line.startswith("#"):
            continue
        current.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            runs.append(" ".join(current))
            current = None
    return runs


def wheel_name() -> str:
    return f"airflow_ckpt_provider-{provider_version()}-py3-none-any.whl"


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


def test_kafka_image_is_the_brokers_pinned_version(services: dict[str, dict[str, Any]]) -> None:
    kafka_version = pom_property(KAFKA_BROKER_POM, "kafka.version")
    assert services["kafka"]["image"] == f"apache/kafka:{kafka_version}", (
        f"the kafka service must run the broker version the provider is tested with ({kafka_version}, "
        f"{KAFKA_BROKER_POM.relative_to(REPO_ROOT)})"
    )


def test_postgres_image(services: dict[str, dict[str, Any]]) -> None:
    assert services["postgres"]["image"] == "postgres:16"


def test_airflow_and_spark_services_share_the_locally_built_image(services: dict[str, dict[str, Any]]) -> None:
    expected = f"{AIRFLOW_IMAGE}:{provider_version()}"
    for name in IMAGE_SERVICES:
        svc = services[name]
        assert svc.get("image") == expected, f"{name}: image {svc.get('image')!r}, expected {expected!r}"
        build = svc.get("build")
        assert isinstance(build, dict) and build.get("context") == ".", f"{name} must build from the repo root"
        assert build.get("dockerfile_inline") == services["airflow-init"]["build"]["dockerfile_inline"]


def test_dockerfile_stages_are_the_tested_airflow_and_python(dockerfile: str) -> None:
    airflow = constraint_pins()["apache-airflow"]
    expected = f"apache/airflow:{airflow}-python{TESTED_PYTHON}"
    found = stages(dockerfile)
    assert len(found) == 2, f"expected a wheel stage and the final stage, got {[(b, n) for b, n, _ in found]}"
    for base, _, _ in found:
        assert base == expected, f"base image {base!r}, expected {expected!r} (.ci/constraints.txt's Airflow)"
    assert found[0][1], "the wheel stage must be named, for COPY --from"
    assert found[1][1] is None, "the final stage is the image"


def test_tested_python_is_allowed_by_python_requires() -> None:
    setup_cfg = (REPO_ROOT / "setup.cfg").read_text(encoding="utf-8")
    match = re.search(r"^python_requires\s*=\s*>=\s*(\d+)\.(\d+)\s*$", setup_cfg, re.MULTILINE)
    assert match, "python_requires = >=X.Y not found in setup.cfg"
    floor = (int(match.group(1)), int(match.group(2)))
    tested = tuple(int(p) for p in TESTED_PYTHON.split("."))
    assert tested >= floor, f"the image's Python {TESTED_PYTHON} is below python_requires >={floor[0]}.{floor[1]}"


def test_wheel_stage_builds_the_provider_wheel_from_the_context(dockerfile: str) -> None:
    _, name, text = stages(dockerfile)[0]
    copies: dict[str, str] = {}
    for line in re.findall(r"^\s*COPY\s+(.+)$", text, re.MULTILINE):
        args = [a for a in line.split() if not a.startswith("--")]
        for source in args[:-1]:
            copies[source] = args[-1].rstrip("/")
    # what setup.cfg needs to build: the metadata files, the long description, the license and the package
    for source in ("pyproject.toml", "setup.cfg", "README.md", "LICENSE"):
        assert copies.get(source) == PROVIDER_SRC, f"{source} is not copied to {PROVIDER_SRC}: {copies}"
    assert copies.get("airflow_ckpt_provider") == f"{PROVIDER_SRC}/airflow_ckpt_provider", copies
    assert f"install -d -o airflow -g root {PROVIDER_SRC}" in run_instructions(text), (
        "setuptools writes next to the sources: the folder must be airflow's"
    )
    users = re.findall(r"^\s*USER\s+(\S+)", text, re.MULTILINE)
    assert users and users[-1] == "airflow", f"the image runs pip as airflow only: {users}"
    wheel_runs = [run for run in run_instructions(text) if "pip wheel" in run]
    assert len(wheel_runs) == 1, run_instructions(text)
    args = wheel_runs[0].split()
    assert "--no-deps" in args, "the wheel stage builds the provider's wheel only"
    assert args[args.index("--wheel-dir") + 1] == f"{PROVIDER_SRC}/dist"
    assert args[-1] == PROVIDER_SRC
    final = stages(dockerfile)[1][2]
    assert re.search(rf"^\s*COPY\s+--from={re.escape(str(name))}\s.*\s{re.escape(PROVIDER_SRC)}/dist\s", final + "\n",
                     re.MULTILINE), "the final stage must copy the built wheel from the wheel stage"


def test_final_stage_installs_the_wheel_constrained_by_the_ci_constraints(dockerfile: str) -> None:
    final = stages(dockerfile)[1][2]
    assert re.search(rf"^\s*COPY\s+(--\S+\s+)*\.ci/constraints\.txt\s+{re.escape(PROVIDER_SRC)}/constraints\.txt\s*$",
                     final, re.MULTILINE), "the final stage must copy .ci/constraints.txt in"
    installs = [run for run in run_instructions(final) if "pip install" in run]
    assert installs, "no pip install in the final stage"
    install = installs[-1]
    pins = constraint_pins()
    first = install.split(";")[1] if install.startswith("set ") else install
    assert f"--constraint {PROVIDER_SRC}/constraints.txt" in first, first
    assert f'"{PROVIDER_SRC}/dist/{wheel_name()}[spark]"' in first, (
        f"the wheel {wheel_name()} (the provider's version) must be installed with the [spark] extra: {first}"
    )
    in_dockerfile = pip_pins(first)
    assert in_dockerfile.get("apache-airflow") == pins["apache-airflow"], "pin the base image's Airflow"
    assert in_dockerfile.get("pyspark") == pins["pyspark"], "full pyspark at the constraints' version"
    assert "pip check" in install


def test_full_pyspark_wins_over_pyspark_client(dockerfile: str) -> None:
    """As the Makefile does: reinstall full pyspark, without dependencies, when pyspark-client's files won."""
    install = [run for run in run_instructions(stages(dockerfile)[1][2]) if "pip install" in run][-1]
    assert re.search(r"pyspark\.__file__\).parent / \"jars\"\).is_dir\(\)\)' \|\| pip install", install), install
    fallback = install.split("||", 1)[1].split(";")[0]
    for flag in ("--no-deps", "--force-reinstall", f"--constraint {PROVIDER_SRC}/constraints.txt"):
        assert flag in fallback, f"{flag} missing in {fallback}"
    assert pip_pins(fallback) == {"pyspark": constraint_pins()["pyspark"]}, fallback
    assert "command -v spark-class" in install, "the build must fail when pyspark's spark-class is not on PATH"


def test_dockerfile_installs_java_17(dockerfile: str) -> None:
    final = stages(dockerfile)[1][2]
    assert re.search(r"apt-get install\b[^\n]*\bopenjdk-17-jre-headless\b", final)
    assert re.search(r"^\s*ENV\s+JAVA_HOME=\S+", final, re.MULTILINE)
    users = re.findall(r"^\s*USER\s+(\S+)", final, re.MULTILINE)
    assert users and users[-1] == "airflow", f"the image must end as the airflow user: {users}"


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
    """The image has curl (the API server's check uses it too); the UI's JSON answers once the daemon serves."""
    svc = services[service]
    assert svc["healthcheck"]["test"] == [
        "CMD", "curl", "--fail", "--silent", "--output", "/dev/null", f"http://127.0.0.1:{port}/json/",
    ]
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

def test_airflow_starts_without_kafka_and_spark(services: dict[str, dict[str, Any]]) -> None:
    """Only the database and its migration gate Airflow: no Airflow service waits, even through
    another service, on Kafka or Spark."""

    def reachable(name: str) -> set[str]:
        seen: set[str] = set()
        todo = list(depends_on(services[name]))
        while todo:
            dep = todo.pop()
            if dep not in seen:
                seen.add(dep)
                todo.extend(depends_on(services[dep]))
        return seen

    for name in AIRFLOW_SERVICES:
        gates = reachable(name) & (SPARK_SERVICES | {"kafka"})
        assert not gates, f"{name} waits for {sorted(gates)} to start"


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
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"], master
    assert master[master.index("--port") + 1] == "7077"
    assert master[master.index("--host") + 1] == "spark-master" == services["spark-master"]["hostname"]
    worker = command_list(services["spark-worker"])
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"], worker
    assert worker[worker.index("--host") + 1] == "spark-worker" == services["spark-worker"]["hostname"]
    assert worker[-1] == "spark://spark-master:7077"
    assert depends_on(services["spark-worker"]).get("spark-master", {}).get("condition") == "service_healthy"


def test_spark_services_run_pysparks_spark_class_without_the_airflow_entrypoint(
    services: dict[str, dict[str, Any]],
) -> None:
    """The image's entrypoint would run the command as an Airflow subcommand: Spark replaces it with
    the image's init (dumb-init forwards signals, so `docker compose stop` stops the JVM)."""
    for name in SPARK_SERVICES:
        assert services[name].get("entrypoint") == ["/usr/bin/dumb-init", "--"], name


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
    """Every container that mounts the checkpoints volume runs the one image as its airflow user,
    and /data belongs to that user in the image: whichever container mounts the empty volume
    first, Docker copies that /data into it."""
    on_volume = {name for name, svc in services.items() if volume_mounts(svc).get(CHECKPOINT_MOUNT)}
    assert on_volume == IMAGE_SERVICES, sorted(on_volume)
    assert {services[name]["image"] for name in on_volume} == {f"{AIRFLOW_IMAGE}:{provider_version()}"}
    users = {name: str(services[name].get("user", "")) for name in on_volume}
    assert set(users.values()) == {"50000:0"}, f"uid 50000 is the image's airflow user (in /etc/passwd): {users}"
    final = stages(dockerfile)[1][2]
    assert re.search(r"chown\s+(-R\s+)?airflow:root\s+/data", final), "/data must belong to airflow in the image"
    assert re.search(r"mkdir -p /data/checkpoints /data/archive /data/output", final)


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
# the Compose specification's own loader (compose-go, as `docker compose config`)


def go_binary() -> str | None:
    return shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if os.access(p, os.X_OK)), None)


def run_compose_check(compose_file: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run tests/compose/check on ``compose_file``; fails in CI without Go, skips elsewhere."""
    go = go_binary()
    if go is None:
        message = ("Go is not installed: expected `go` on PATH (or /usr/local/go/bin/go) to validate "
                   "docker-compose.yml with compose-go; install Go 1.24+ from https://go.dev/dl/")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW_JWT", "AIRFLOW_API", "COMPOSE_"))}
    return subprocess.run(
        [go, "run", ".", str(compose_file)], cwd=COMPOSE_CHECK_DIR, capture_output=True, text=True,
        env={**base, **(env or {})},
    )


@pytest.fixture(scope="module")
def normalized() -> dict[str, Any]:
    result = run_compose_check(COMPOSE_FILE)
    assert result.returncode == 0, f"compose-go rejects docker-compose.yml:\n{result.stderr}"
    project = json.loads(result.stdout)
    assert isinstance(project, dict)
    return project


def test_compose_spec_loader_accepts_the_file(normalized: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    assert normalized["name"] == "airflow-ckpt"
    assert set(normalized["services"]) == set(services)
    for name, svc in normalized["services"].items():
        assert svc.get("image") == services[name]["image"], name
        if services[name].get("command") is not None:
            # interpolation turns "$$" into "$"
            assert svc.get("command") == [part.replace("$$", "$") for part in command_list(services[name])], name
        if name in IMAGE_SERVICES:
            assert svc["build"]["context"] == str(REPO_ROOT), "the build context is the repository root"
            assert svc["user"] == "50000:0", name
    assert set(normalized["volumes"]) == {"kafka-data", "postgres-db", "checkpoints"}


def test_compose_spec_loader_interpolates_the_secrets(normalized: dict[str, Any]) -> None:
    env = normalized["services"]["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == "ckpt-local-stack-jwt-secret-change-me"
    overridden = run_compose_check(COMPOSE_FILE, {"AIRFLOW_JWT_SECRET": "from-the-environment"})
    assert overridden.returncode == 0, overridden.stderr
    for name in AIRFLOW_SERVICES:
        env = json.loads(overridden.stdout)["services"][name]["environment"]
        assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == "from-the-environment", name


def test_compose_spec_loader_keeps_the_dollar_of_the_dockerfile(normalized: dict[str, Any]) -> None:
    """"$$" in the file reaches the Dockerfile as "$": the shell inside the build sees $(...)."""
    inline = normalized["services"]["airflow-init"]["build"]["dockerfile_inline"]
    assert '"$(dirname "$(dirname' in inline and "$$" not in inline


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda text: text.replace("    hostname: spark-master\n", "    hostname: spark-master\n    hostnme: x\n", 1),
         "hostnme"),
        (lambda text: text.replace("      spark-master:\n        condition: service_healthy",
                                   "      spark-mastr:\n        condition: service_healthy", 1),
         "spark-mastr"),
        (lambda text: text.replace('      - "127.0.0.1:8091:8081"', '      - "127.0.0.1:8091:8081:9"', 1), "8091"),
    ],
    ids=["unknown-key", "unknown-dependency", "bad-port"],
)
def test_compose_spec_loader_rejects_a_broken_file(tmp_path: Path, change: Any, message: str) -> None:
    """The check can fail: a misspelt key, a dependency on no service, a malformed port."""
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    broken = change(text)
    assert broken != text, "the mutation did not apply"
    target = tmp_path / "docker-compose.yml"
    target.write_text(broken, encoding="utf-8")
    (tmp_path / "dags").mkdir()
    result = run_compose_check(target)
    assert result.returncode == 1, result.stdout[:500]
    assert message in result.stderr, result.stderr


def test_compose_check_fails_in_ci_without_go(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="Go is not installed"):
        run_compose_check(COMPOSE_FILE)
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="Go is not installed"):
        run_compose_check(COMPOSE_FILE)


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
