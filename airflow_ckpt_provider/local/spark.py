"""PySpark in local mode with the Maven-resolved Kafka connector, for the demo and the tests.

One source of truth for the Spark configuration: :func:`local_spark_conf` gives the conf that
:func:`local_spark_session` builds a session from and that :func:`spark_submit_conf_args` turns
into ``spark-submit --conf`` arguments, so an in-process query and a submitted job see the
same jars and settings. The connector goes through ``spark.jars`` (no Ivy at run time).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from airflow_ckpt_provider.local import jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL_MASTER = "local[2]"


def connector_jars() -> list[str]:
    """Paths of Spark's Kafka connector jars; :class:`JarsMissing` before ``make jvm``."""
    jvm.check_spark_version()
    return [str(path) for path in jvm.jars(jvm.SPARK_KAFKA)]


def local_spark_conf(
    app_name: str = "ckpt-local",
    *,
    master: str = LOCAL_MASTER,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Spark conf for a small machine: loopback only, no UI, 2 shuffle partitions, connector jars."""
    conf = {
        "spark.app.name": app_name,
        "spark.master": master,
        "spark.jars": ",".join(connector_jars()),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.streaming.metricsEnabled": "false",
        "spark.driver.memory": "1g",
    }
    conf.update(extra or {})
    return conf


def spark_submit_conf_args(conf: Mapping[str, str]) -> list[str]:
    """``["--conf", "k=v", ...]`` for spark-submit, master and app name excluded (own flags)."""
    args: list[str] = []
    for key, value in conf.items():
        if key in ("spark.master", "spark.app.name"):
            continue
        args += ["--conf", f"{key}={value}"]
    return args


def local_spark_session(
    app_name: str = "ckpt-local",
    *,
    master: str = LOCAL_MASTER,
    extra: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the SparkSession described by :func:`local_spark_conf`.

    Driver settings (memory, jars) only apply when this call starts the JVM; a session that
    already exists in this process is returned as it is.
    """
    jvm.require_java()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in local_spark_conf(app_name, master=master, extra=extra).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
