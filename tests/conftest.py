"""Shared fixtures: the embedded local stack (real Kafka, real Spark, real Airflow on SQLite).

The Airflow environment is set here, at import time, before any test imports ``airflow``.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_ckpt_provider.local.airflow_home import airflow_env
from tests.harness.upgrade_demo import UpgradeDemo, stop_jobs_under

REPO = Path(__file__).resolve().parents[1]
AIRFLOW_HOME = Path(os.environ.get("CKPT_TEST_AIRFLOW_HOME", REPO / ".airflow" / "tests"))
TEST_DAGS = REPO / "tests" / "dags"
os.environ.update(airflow_env(AIRFLOW_HOME, REPO / "dags", {"test-dags": TEST_DAGS}))
logging.getLogger("py4j").setLevel(logging.WARNING)  # its shutdown chatter hits closed streams
logging.getLogger("kafka").setLevel(logging.WARNING)


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """A migrated SQLite Airflow home (migrated once, reused by later runs)."""
    from airflow_ckpt_provider.local.airflow_home import prepare_airflow_home

    prepare_airflow_home(AIRFLOW_HOME, REPO / "dags")
    return AIRFLOW_HOME


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real single-node KRaft broker on 127.0.0.1, shared by the session."""
    from airflow_ckpt_provider.local.kafka import LocalKafka

    broker = LocalKafka(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real S3-compatible server (moto in server mode, its own virtualenv) on 127.0.0.1, shared by
    the session; tests create their own buckets."""
    from tests.harness.s3 import LocalS3

    server = LocalS3(tmp_path_factory.mktemp("s3"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A real local-mode SparkSession with the Maven-resolved Kafka connector and Delta Lake."""
    from airflow_ckpt_provider.local.spark import delta_spark_conf, local_spark_session

    session = local_spark_session("ckpt-tests", extra=delta_spark_conf())
    yield session
    session.stop()


@pytest.fixture
def new_topic(kafka) -> Callable[[int], str]:  # noqa: ANN001
    """Create a fresh topic with the given partition count and return its name."""

    def create(partitions: int, config: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        kafka.create_topic(name, partitions, config)
        return name

    return create


def _installed_spark(version: str) -> object:
    """The local Spark ``version`` (this interpreter's, or that of its `make spark<version>`
    virtualenv); fails (never skips) with what to do when it is missing: `make test` installs it."""
    from airflow_ckpt_provider.local.errors import LocalStackError
    from airflow_ckpt_provider.local.spark import spark_install

    try:
        return spark_install(version)
    except LocalStackError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def spark35() -> object:
    """Spark 3.5 (`make spark35`): the OLD version of the Spark-upgrade tests."""
    return _installed_spark("3.5")


@pytest.fixture(scope="session")
def spark40() -> object:
    """Spark 4.0 (`make spark40`): the other OLD version of the Spark-upgrade tests."""
    return _installed_spark("4.0")


@pytest.fixture(scope="session")
def spark42() -> object:
    """Spark 4.2, the provider's own (this interpreter's pyspark): the NEW version of the
    Spark-upgrade tests, and the Spark that writes checkpoints in Spark 4.1/4.2's formats."""
    return _installed_spark("4.2")


@pytest.fixture
def make_demo(kafka, tmp_path: Path) -> Iterator[Callable[..., UpgradeDemo]]:  # noqa: ANN001
    """``make_demo(**options)``: an :class:`UpgradeDemo` on the session's broker (a fresh topic,
    producer, sink and checkpoints; v1 not started yet). Every Spark job running on its checkpoints
    is killed at the end (a failed test leaves none). Its standbys skip their rehearsal (a few
    seconds of each launch, before the stop) unless ``rehearsal=True``: these tests measure no
    downtime; the stateful switchover's system test and the standby's integration tests rehearse."""
    from airflow_ckpt_provider.records.control import CONF_STANDBY_REHEARSAL

    made: list[UpgradeDemo] = []

    def make(*, rehearsal: bool = False, **options: Any) -> UpgradeDemo:
        if not rehearsal:
            options["conf"] = {CONF_STANDBY_REHEARSAL: "false", **(options.get("conf") or {})}
        stack = UpgradeDemo(tmp_path / ("demo" if not made else f"demo-{len(made)}"), kafka=kafka, **options)
        made.append(stack)
        return stack

    yield make
    for stack in made:
        stack.close()
        stop_jobs_under(stack.work)  # the versions the DAG launched, whatever the test's outcome


@pytest.fixture
def demo(make_demo: Callable[..., UpgradeDemo]) -> UpgradeDemo:
    """The demo stream: a steady trickle (80 records/s) on a 1 s processing-time trigger."""
    return make_demo(rate=80.0)
