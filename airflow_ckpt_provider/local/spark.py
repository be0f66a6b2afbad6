"""PySpark in local mode with the Maven-resolved Kafka connector, for the demo and the tests.

One source of truth for the Spark configuration: :func:`local_spark_conf` gives the conf that
:func:`local_spark_session` builds a session from and that :func:`spark_submit_conf_args` turns
into ``spark-submit --conf`` arguments, so an in-process query and a submitted job see the
same jars and settings. The connector goes through ``spark.jars`` (no Ivy at run time).

Three Spark versions, for Spark upgrades (:class:`SparkInstall`, :func:`spark_install`):
``"4.2"``, the pyspark of this interpreter (the provider's own Spark, the NEW version of the
Spark-upgrade tests, and the Spark whose checkpoint formats, offsets v2, commits v2/v3 and state
file checksums, the format tests write); the OLD versions in virtualenvs of their own:
``"3.5"`` (``.venv-spark35`` of the checkout, or ``$CKPT_SPARK35_VENV``, with the connector jars
of :data:`jvm.SPARK35_KAFKA`) and ``"4.0"`` (``.venv-spark40``, ``$CKPT_SPARK40_VENV``,
:data:`jvm.SPARK40_KAFKA`). :func:`install` creates such a virtualenv (``make spark35``,
``make spark40``); its drivers import this checkout's ``airflow_ckpt_provider`` through a
``.pth`` file, so they run the code under test with nothing but pyspark and py4j installed (no
Airflow).

Command line: ``python -m airflow_ckpt_provider.local.spark install 3.5|4.0`` | ``where 3.5``.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import venv
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.local import jvm
from airflow_ckpt_provider.local.errors import LocalStackError, SparkNotInstalled, VersionMismatch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

LOCAL_MASTER = "local[2]"


#: The Spark of this interpreter (the provider's own pyspark, the NEW version of the tests).
SPARK42 = "4.2"
#: The old Sparks of the tests, each in its own virtualenv.
SPARK35 = "3.5"
SPARK40 = "4.0"
#: The provider's own Spark: the default of every function here.
OWN = SPARK42
VERSIONS = (SPARK42, SPARK35, SPARK40)
_CONNECTORS = {SPARK42: jvm.SPARK_KAFKA, SPARK35: jvm.SPARK35_KAFKA, SPARK40: jvm.SPARK40_KAFKA}
_VENV_ENV = {SPARK35: "CKPT_SPARK35_VENV", SPARK40: "CKPT_SPARK40_VENV"}
_PTH = "airflow-ckpt-provider-checkout.pth"


@dataclass(frozen=True)
class SparkInstall:
    """One local Spark: its version, ``SPARK_HOME``, the Python its drivers run and its Kafka
    connector (a :mod:`jvm` component)."""

    version: str
    spark_home: Path
    python: Path
    connector: str

    @property
    def spark_submit(self) -> Path:
        return self.spark_home / "bin" / "spark-submit"

    def connector_jars(self) -> list[str]:
        """Paths of the connector jars; :class:`JarsMissing` before they were fetched."""
        return [str(path) for path in jvm.jars(self.connector)]

    def job_conf(self) -> dict[str, str]:
        """The conf a spark-submitted job needs on this Spark: its connector jars and its Python."""
        python = str(self.python)
        return {"spark.jars": ",".join(self.connector_jars()), "spark.pyspark.python": python,
                "spark.pyspark.driver.python": python}

    def dag_settings(self) -> dict[str, Any]:
        """This Spark as the reference DAG's ``old_spark`` / ``new_spark`` param."""
        return {"spark_home": str(self.spark_home), "spark_submit": str(self.spark_submit), "conf": self.job_conf()}


def spark_venv_dir(version: str = SPARK35) -> Path:
    """The virtualenv of a Spark version other than this interpreter's: ``$CKPT_SPARK35_VENV``
    (``$CKPT_SPARK40_VENV``), else ``.venv-spark35`` (``.venv-spark40``) of the source checkout,
    else under ``~/.cache/airflow-ckpt-provider``."""
    if version not in _VENV_ENV:
        raise ValueError(f"Spark {version} has no virtualenv of its own; versions with one: {', '.join(_VENV_ENV)}")
    configured = os.environ.get(_VENV_ENV[version])
    name = f".venv-spark{version.replace('.', '')}"
    if configured:
        return Path(configured).expanduser().absolute()
    checkout = _checkout()
    return checkout / name if checkout else Path.home() / ".cache" / "airflow-ckpt-provider" / name.lstrip(".")


def _checkout() -> Path | None:
    """The source checkout holding this package, None for an installed wheel."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "setup.cfg").is_file() and (root / "airflow_ckpt_provider").is_dir() else None


def _site_packages(venv_dir: Path) -> Path | None:
    found = sorted(venv_dir.glob("lib/python*/site-packages"))
    return found[0] if found else None


def _installed_pyspark(venv_dir: Path) -> str | None:
    site = _site_packages(venv_dir)
    if site is None:
        return None
    versions = [d.version for d in metadata.distributions(path=[str(site)]) if d.metadata["Name"] == "pyspark"]
    return versions[0] if versions else None


def spark_install(version: str = OWN) -> SparkInstall:
    """The local Spark ``version`` ("4.2", "3.5" or "4.0"), checked: its pyspark is the version its
    connector POM pins. Raises :class:`SparkNotInstalled` (3.5 before ``make spark35``, 4.0 before
    ``make spark40``) or
    :class:`VersionMismatch`; the jars are checked when asked for (:class:`JarsMissing`)."""
    if version not in VERSIONS:
        raise ValueError(f"unknown local Spark {version!r}; known: {', '.join(VERSIONS)}")
    connector = _CONNECTORS[version]
    if version == OWN:
        jvm.check_spark_version()
        import pyspark

        return SparkInstall(metadata.version("pyspark"), Path(pyspark.__file__).parent, Path(sys.executable),
                            connector)
    pinned = jvm.pom_property(connector, "spark.version")
    venv_dir = spark_venv_dir(version)
    installed = _installed_pyspark(venv_dir)
    if installed is None:
        raise SparkNotInstalled(found=f"no pyspark in {venv_dir}", expected=f"pyspark {pinned} installed there",
                                action=f"Run `make {_make_target(version)}`.")
    if installed != pinned:
        raise VersionMismatch(found=f"pyspark {installed} in {venv_dir}",
                              expected=f"pyspark {pinned}, the Spark version of {jvm.pom_path(connector)}",
                              action=f"Run `make {_make_target(version)}` (it installs the pinned version).")
    site = _site_packages(venv_dir)
    assert site is not None  # a pyspark was found in it
    return SparkInstall(installed, site / "pyspark", venv_dir / "bin" / "python", connector)


def _make_target(version: str) -> str:
    return f"spark{version.replace('.', '')}"


def install(version: str = SPARK35) -> SparkInstall:
    """Create the virtualenv of Spark ``version`` with the pinned pyspark (the connector POM's
    ``spark.version``), make this checkout's package importable in it (a ``.pth`` file: nothing
    else is installed, so a driver that needed Airflow would fail), and fetch its connector jars.
    Idempotent: what is in place is kept. Raises :class:`LocalStackError` when pip fails (its
    output tail in the message) or this package is not a source checkout."""
    connector = _CONNECTORS[version]
    pinned = jvm.pom_property(connector, "spark.version")
    venv_dir = spark_venv_dir(version)
    checkout = _checkout()
    if checkout is None:
        raise LocalStackError(found=f"airflow_ckpt_provider installed in {Path(__file__).parents[2]}",
                              expected="a source checkout (the tests' second Spark runs its code)",
                              action="Run this from a clone of the repository.")
    python = venv_dir / "bin" / "python"
    if not python.exists():
        log.info("creating the Spark %s virtualenv %s", version, venv_dir)
        venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
    if _installed_pyspark(venv_dir) != pinned:
        log.info("installing pyspark %s into %s (about 300 MB)", pinned, venv_dir)
        _pip(python, "install", "--quiet", f"pyspark=={pinned}")
    site = _site_packages(venv_dir)
    assert site is not None
    (site / _PTH).write_text(f"{checkout}\n")
    jvm.fetch((connector,))
    return spark_install(version)


def _pip(python: Path, *args: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise LocalStackError(found=f"`pip {' '.join(args)}` exit code {proc.returncode}",
                              expected="the pinned pyspark installed from PyPI",
                              action="Check network access to PyPI (and pip's configuration), then retry.",
                              detail=tail)


def connector_jars(version: str = OWN) -> list[str]:
    """Paths of Spark's Kafka connector jars; :class:`JarsMissing` before ``make jvm``
    (``make spark35`` for "3.5", ``make spark40`` for "4.0")."""
    if version == OWN:
        jvm.check_spark_version()
        return [str(path) for path in jvm.jars(jvm.SPARK_KAFKA)]
    return spark_install(version).connector_jars()


def local_spark_conf(
    app_name: str = "ckpt-local",
    *,
    master: str = LOCAL_MASTER,
    extra: Mapping[str, str] | None = None,
    version: str = OWN,
) -> dict[str, str]:
    """Spark conf for a small machine: loopback only, no UI, 2 shuffle partitions, the connector
    jars of Spark ``version``; ``extra`` overrides, except that its ``spark.jars`` are added to
    the connector's (for example the S3A jars the S3 tests add)."""
    conf = {
        "spark.app.name": app_name,
        "spark.master": master,
        "spark.jars": ",".join(connector_jars(version)),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.streaming.metricsEnabled": "false",
        "spark.driver.memory": "1g",
    }
    extra = dict(extra or {})
    jars = extra.pop("spark.jars", "")
    conf.update(extra)
    if jars:
        conf["spark.jars"] = ",".join(j for j in (conf["spark.jars"], jars) if j)
    return conf


def delta_spark_conf() -> dict[str, str]:
    """The conf of a session that writes Delta tables: Delta's jars (``make jvm`` resolves them; as
    ``extra`` of :func:`local_spark_conf` they are added to the connector's) and Delta's session
    extension and catalog, without which Delta refuses to write."""
    return {
        "spark.jars": ",".join(str(path) for path in jvm.jars(jvm.DELTA)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    }


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
    """Get or create the SparkSession described by :func:`local_spark_conf`, its Python workers
    (pandas UDFs, transformWithStateInPandas) on this interpreter.

    Driver settings (memory, jars) only apply when this call starts the JVM; a session that
    already exists in this process is returned as it is.
    """
    jvm.require_java()
    from pyspark.sql import SparkSession

    # an in-process SparkContext takes its workers' Python from the environment, not the conf
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.config("spark.pyspark.python", sys.executable)
    for key, value in local_spark_conf(app_name, master=master, extra=extra).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_ckpt_provider.local.spark")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, text in (("install", "create the version's virtualenv and fetch its jars"),
                       ("where", "print the version's SPARK_HOME, Python and jars")):
        choices = list(_VENV_ENV) if name == "install" else list(VERSIONS)
        sub.add_parser(name, help=text).add_argument("version", choices=choices)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        found = install(args.version) if args.command == "install" else spark_install(args.version)
        print(f"Spark {found.version}: SPARK_HOME {found.spark_home}, python {found.python}, "
              f"{len(found.connector_jars())} connector jars")
    except LocalStackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
