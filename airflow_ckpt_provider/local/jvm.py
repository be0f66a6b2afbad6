"""Maven-resolved JVM artifacts of the local stack.

Each component is described by ``maven/<component>/pom.xml`` (pinned versions) and resolved
with ``mvn dependency:copy-dependencies`` into ``<jvm dir>/<component>/``. A stamp file holding
the POM's hash makes a second fetch a no-op. The JVM folder is ``$CKPT_JVM_DIR`` if set, else
``.jvm/`` in a source checkout, else ``~/.cache/airflow-ckpt-provider/jvm``.

Command line: ``python -m airflow_ckpt_provider.local.jvm fetch [--force] [COMPONENT ...]``. Without
components it fetches :data:`COMPONENTS`; the optional ones (:data:`OPTIONAL_COMPONENTS`: the
connectors of the other Sparks the tests run, the HDFS servers) only when named.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from airflow_ckpt_provider.local.errors import JarsMissing, LocalStackError, ToolMissing, VersionMismatch

log = logging.getLogger(__name__)

MAVEN_DIR = Path(__file__).parent / "maven"
KAFKA_BROKER = "kafka-broker"
SPARK_KAFKA = "spark-kafka"
#: Kafka connector of Spark 3.5 (Scala 2.12), for the pyspark 3.5 virtualenv (local/spark.py).
SPARK35_KAFKA = "spark35-kafka"
#: Kafka connector of Spark 4.0 (Scala 2.13), for the pyspark 4.0 virtualenv (local/spark.py).
SPARK40_KAFKA = "spark40-kafka"
#: A single-node HDFS (NameNode, DataNode) for the HDFS tier (local/hdfs.py, ``make test-hdfs``).
HDFS = "hdfs"
#: A single-node YARN (ResourceManager, NodeManager, the ``yarn`` command line) for the cluster-mode
#: tier (tests/harness/yarn.py, ``make yarn``).
YARN = "yarn"
#: Hadoop's S3A connector and the AWS SDK v2 modules it uses, for Spark writing to s3a:// (local/s3.py).
S3A = "s3a"
#: Delta Lake's Spark jars (delta-spark, delta-storage), for Delta sinks (local/spark.py ``delta_spark_conf``).
DELTA = "delta"
#: What ``make jvm`` (a fetch without components) resolves.
COMPONENTS = (KAFKA_BROKER, SPARK_KAFKA, S3A, DELTA)
#: Fetched only when named (``make spark35``, ``make spark40``, ``make hdfs``, ``make yarn``): not every user
#: needs them.
OPTIONAL_COMPONENTS = (SPARK35_KAFKA, SPARK40_KAFKA, HDFS, YARN)
_STAMP = ".resolved"


def jvm_dir() -> Path:
    """Folder that holds the resolved jars, one sub-folder per component."""
    configured = os.environ.get("CKPT_JVM_DIR")
    if configured:
        return Path(configured).expanduser().resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "setup.cfg").is_file() and (checkout / "airflow_ckpt_provider").is_dir():
        return checkout / ".jvm"
    return Path.home() / ".cache" / "airflow-ckpt-provider" / "jvm"


def pom_path(component: str) -> Path:
    known = COMPONENTS + OPTIONAL_COMPONENTS
    if component not in known:
        raise ValueError(f"unknown JVM component {component!r}; known: {', '.join(known)}")
    return MAVEN_DIR / component / "pom.xml"


def pom_property(component: str, name: str) -> str:
    """A ``<properties>`` value of a component's POM (for example ``spark.version``)."""
    text = pom_path(component).read_text()
    match = re.search(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", text)
    if not match:
        raise ValueError(f"{pom_path(component)} has no property {name}")
    return match.group(1).strip()


def require_tool(name: str, purpose: str, install_hint: str) -> str:
    """Path of ``name`` on PATH, or :class:`ToolMissing` naming what needs it and how to get it."""
    found = shutil.which(name)
    if not found:
        raise ToolMissing(
            found=f"no `{name}` on PATH",
            expected=f"`{name}` to {purpose}",
            action=install_hint,
        )
    return found


def require_java() -> str:
    return require_tool(
        "java",
        "run the Kafka broker and Spark (Java 17 or newer)",
        "Install a JDK 17+ (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`) "
        "or put its bin/ folder on PATH.",
    )


def check_spark_version() -> None:
    """Refuse connector jars whose Spark version differs from the installed pyspark."""
    pinned = pom_property(SPARK_KAFKA, "spark.version")
    try:
        installed = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return  # nothing to compare with; Spark code paths raise their own error
    if installed != pinned:
        raise VersionMismatch(
            found=f"pyspark {installed} installed",
            expected=f"pyspark {pinned}, the Spark version of {pom_path(SPARK_KAFKA)}",
            action=f"Install pyspark=={pinned} (`make venv`) or change spark.version in that POM.",
        )


def _pom_hash(component: str) -> str:
    return hashlib.sha256(pom_path(component).read_bytes()).hexdigest()


def is_resolved(component: str) -> bool:
    stamp = jvm_dir() / component / _STAMP
    return stamp.is_file() and stamp.read_text().strip() == _pom_hash(component)


def fetch(components: tuple[str, ...] = COMPONENTS, *, force: bool = False) -> dict[str, Path]:
    """Resolve the components' jars with Maven unless already resolved; return their folders.

    Raises :class:`ToolMissing` without Java or Maven, :class:`VersionMismatch` if the
    connector does not match pyspark, :class:`LocalStackError` if Maven fails (its output
    tail is in the message). A failed fetch leaves no stamp, so the next one retries.
    """
    if SPARK_KAFKA in components:
        check_spark_version()
    folders: dict[str, Path] = {}
    for component in components:
        target = jvm_dir() / component
        folders[component] = target
        if not force and is_resolved(component):
            log.info("%s jars already resolved in %s", component, target)
            continue
        require_java()
        mvn = require_tool(
            "mvn",
            "resolve the pinned Kafka and Spark connector jars from Maven Central",
            "Install Apache Maven 3.8+ (Debian/Ubuntu: `apt-get install maven`).",
        )
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        log.info("resolving %s jars with Maven into %s", component, target)
        cmd = [
            mvn, "--batch-mode", "--quiet", "-f", str(pom_path(component)),
            "dependency:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={target}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
            shutil.rmtree(target, ignore_errors=True)
            raise LocalStackError(
                found=f"`mvn dependency:copy-dependencies` exit code {proc.returncode} for {component}",
                expected="the pinned artifacts resolved from Maven Central",
                action="Check network access to Maven Central and ~/.m2/settings.xml, then retry.",
                detail=tail,
            )
        jars = sorted(target.glob("*.jar"))
        (target / _STAMP).write_text(_pom_hash(component))
        log.info("%s: %d jars, %d bytes", component, len(jars), sum(j.stat().st_size for j in jars))
    return folders


def jars(component: str) -> list[Path]:
    """The resolved jars of a component; :class:`JarsMissing` if they were never fetched."""
    folder = jvm_dir() / component
    found = sorted(folder.glob("*.jar")) if is_resolved(component) else []
    if not found:
        raise JarsMissing(
            found=f"no resolved jars in {folder}",
            expected=f"the jars of {pom_path(component)}",
            action="Run `make jvm` (or `python -m airflow_ckpt_provider.local.jvm fetch`).",
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_ckpt_provider.local.jvm")
    sub = parser.add_subparsers(dest="command", required=True)
    fetch_cmd = sub.add_parser("fetch", help="resolve the pinned jars with Maven")
    fetch_cmd.add_argument("--force", action="store_true", help="resolve again even if stamped")
    fetch_cmd.add_argument("components", nargs="*", metavar="COMPONENT",  # no choices=: 3.11 rejects an empty list
                           help=f"what to resolve (default: {' '.join(COMPONENTS)}; "
                                f"also: {' '.join(OPTIONAL_COMPONENTS)})")
    sub.add_parser("where", help="print the JVM folder")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "where":
        print(jvm_dir())
        return 0
    unknown = sorted(set(args.components) - set(COMPONENTS + OPTIONAL_COMPONENTS))
    if unknown:
        parser.error(f"unknown component(s) {', '.join(unknown)}; known: {', '.join(COMPONENTS + OPTIONAL_COMPONENTS)}")
    try:
        for component, folder in fetch(tuple(args.components) or COMPONENTS, force=args.force).items():
            print(f"{component}: {len(jars(component))} jars in {folder}")
    except LocalStackError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
