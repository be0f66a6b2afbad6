"""docs/src/versioning.md says what setup.cfg, .ci/constraints.txt, the Makefile, the POMs and the
record codecs say: its version statements and its table of record formats are checked against them."""

from __future__ import annotations

import configparser
import importlib
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

import airflow_ckpt_provider
from airflow_ckpt_provider.records import control
from airflow_ckpt_provider.records.codec import UNVERSIONED, Codec

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "src" / "versioning.md").read_text(encoding="utf-8")
MAVEN = REPO / "airflow_ckpt_provider" / "local" / "maven"


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return config


def requirement_lines(text: str) -> list[str]:
    """The requirement lines of a setup.cfg list (comments and blank lines left out)."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / ".ci" / "constraints.txt").read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep:
            pins[name.strip().lower()] = version.strip()
    return pins


def pom_property(component: str, name: str) -> str:
    (value,) = re.findall(rf"<{re.escape(name)}>([^<]+)</{re.escape(name)}>", (MAVEN / component / "pom.xml").read_text())
    return value


def row(first_cell: str) -> list[str]:
    """The cells of the page's table row whose first cell is ``first_cell``."""
    for line in PAGE.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == first_cell:
            return cells
    raise AssertionError(f"docs/src/versioning.md has no table row {first_cell!r}")


def test_the_python_row_is_what_setup_cfg_claims_and_the_makefile_checks() -> None:
    requires = setup_cfg()["options"]["python_requires"]
    floor = requires.removeprefix(">=")
    major, minor = (int(part) for part in floor.split("."))
    assert f"sys.version_info < ({major}, {minor})" in (REPO / "Makefile").read_text()
    assert row("Python")[1:] == [f"`python_requires = {requires}`",
                                 f"{floor} (the Makefile refuses a `python3` older than {floor})"]


@pytest.mark.parametrize(("component", "name"), [
    ("Apache Airflow", "apache-airflow"),
    ("Airflow's Spark provider", "apache-airflow-providers-apache-spark"),
    ("Airflow's standard provider (the approval)", "apache-airflow-providers-standard"),
    ("kafka-python", "kafka-python"),
    ("fsspec", "fsspec"),
])
def test_a_dependency_row_quotes_setup_cfg_and_the_constraints(component: str, name: str) -> None:
    (claim,) = [line for line in requirement_lines(setup_cfg()["options"]["install_requires"])
                if re.split(r"[<>=!~ ]", line)[0] == name]
    assert row(component)[1:] == [f"`{claim}`", f"`{name}=={constraints()[name]}`"]


def test_the_pyspark_row_quotes_the_spark_extra_and_the_constraints() -> None:
    (claim,) = [line for line in requirement_lines(setup_cfg()["options.extras_require"]["spark"])
                if line.startswith("pyspark")]
    assert row("PySpark (the `spark` extra)")[1:] == [f"`{claim}`", f"`pyspark=={constraints()['pyspark']}`"]


def test_every_requirement_the_page_quotes_is_in_setup_cfg_or_the_constraints() -> None:
    config = setup_cfg()
    claimed = set(requirement_lines(config["options"]["install_requires"]))
    for extra in config["options.extras_require"].values():
        claimed |= set(requirement_lines(extra))
    pinned = {f"{name}=={version}" for name, version in constraints().items()}
    quoted = re.findall(r"`([A-Za-z0-9_.-]+(?:==|>=|<=|~=)[^`\s]+)`", PAGE)
    assert quoted, "the page quotes no requirement"
    assert [spec for spec in quoted if spec not in claimed | pinned] == []


def test_the_spark_and_kafka_rows_are_the_poms_versions() -> None:
    old35, old40 = pom_property("spark35-kafka", "spark.version"), pom_property("spark40-kafka", "spark.version")
    own = pom_property("spark-kafka", "spark.version")
    assert own == constraints()["pyspark"], "the connector's Spark is the provider's pyspark"
    assert f"jobs on Spark {old35} and {old40} upgraded to Spark {own}" in row("Spark of the jobs being upgraded")[2]
    assert row("Kafka brokers")[2].startswith(f"Apache Kafka {pom_property('kafka-broker', 'kafka.version')} (KRaft)")


def versioned_codecs() -> dict[str, Codec]:
    """Every module-level codec of the package that writes a format number, by the name its errors use."""
    found: dict[str, Codec] = {}
    for module in pkgutil.walk_packages(airflow_ckpt_provider.__path__, "airflow_ckpt_provider."):
        if module.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, Codec) and value.version is not None:
                found[value.what] = value
    return found


def format_rows() -> dict[str, list[str]]:
    """The record-format table: each record name of a row's first cell -> the row's cells."""
    rows = {}
    for line in PAGE.split("## Record formats", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and not set(cells[0]) <= {"-", " "}:
            rows.update({name: cells for name in re.findall(r"`([^`]+)`", cells[0])})
    return rows


def read_also(codec: Codec) -> str:
    older = sorted(codec.versions - {codec.version})
    return ", ".join(str(v) for v in older) if older else "none"


def test_the_record_format_table_is_every_versioned_record_as_its_codec_reads_it() -> None:
    codecs, rows = versioned_codecs(), format_rows()
    assert {"upgrade journal", "StopResult", "HandoverResult", "ArchiveManifest"} <= set(codecs)
    missing = sorted(set(codecs) - set(rows))
    assert missing == [], f"docs/src/versioning.md's record formats table names no row for {missing}"
    for what, codec in codecs.items():
        cells = rows[what]
        assert cells[2] == str(codec.version), (what, cells)
        assert cells[3].split(":")[0].split(" (")[0] == read_also(codec), (what, cells)
    assert UNVERSIONED not in codecs["upgrade journal"].versions and "JournalOfAnotherRelease" in rows["upgrade journal"][3]


def test_the_control_files_row_is_every_control_record() -> None:
    def records(cls: type[Any]) -> list[type[Any]]:
        return [sub for direct in cls.__subclasses__() for sub in (direct, *records(direct))]

    importlib.import_module("airflow_ckpt_provider.spark.switchover")  # the driver side's control records
    found = records(control._ControlRecord)
    assert {c.__name__ for c in found} >= {"Heartbeat", "StopRequest", "StopAck", "SwitchoverRelease"}
    (cells,) = {tuple(cells) for name, cells in format_rows().items() if name.endswith(" control file")}
    for cls in found:
        codec = cls.codec()
        assert (cells[2], cells[3]) == (str(codec.version), read_also(codec)), cls
        assert codec.unknown_keys == "ignore", "the page says control files ignore a key a newer release adds"
