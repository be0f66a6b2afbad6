"""What the wheel holds: the package and its data, never the tests or the test harness, and the
modules the Makefile runs with ``python -m`` exist where it names them."""

from __future__ import annotations

import configparser
import importlib.util
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from setuptools import find_namespace_packages

REPO = Path(__file__).resolve().parents[2]


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    return config


def shipped_packages() -> list[str]:
    found = setup_cfg()["options.packages.find"]
    return find_namespace_packages(str(REPO), include=found["include"].split(), exclude=found["exclude"].split())


def test_the_wheel_holds_the_package_and_nothing_of_the_tests() -> None:
    packages = shipped_packages()
    assert {"airflow_ckpt_provider", "airflow_ckpt_provider.checkpoint", "airflow_ckpt_provider.storage",
            "airflow_ckpt_provider.local"} <= set(packages)
    assert all(p == "airflow_ckpt_provider" or p.startswith("airflow_ckpt_provider.") for p in packages), packages
    assert not any(p.startswith("tests") for p in packages)


def test_the_harness_is_not_in_the_package() -> None:
    """The demo, the state audit and the test servers live in tests/harness/; the package's local/ keeps
    what the command line, the Makefile and the own-job guide need (Maven fetch, dev-stack broker, local
    Spark, the local Airflow home, the sink audit, and the errors of that stack), moved there from the
    harness, not copied."""
    local = {p.stem for p in (REPO / "airflow_ckpt_provider" / "local").glob("*.py")}
    assert local == {"__init__", "errors", "jvm", "kafka", "processes", "spark", "airflow_home", "audit"}
    harness = {p.stem for p in (REPO / "tests" / "harness").glob("*.py")}
    assert "upgrade_demo" in harness and not harness & {"airflow_home", "audit"}, harness


def test_every_package_data_pattern_names_files() -> None:
    for package, patterns in setup_cfg()["options.package_data"].items():
        root = REPO / package.replace(".", "/")
        for pattern in (p.strip() for p in patterns.split(",")):
            assert list(root.glob(pattern)), f"setup.cfg package_data {package}: {pattern} matches no file"


MAKEFILE_MODULES = sorted(set(re.findall(r"-m ((?:airflow_ckpt_provider|tests)(?:\.\w+)+)",
                                         (REPO / "Makefile").read_text())))


def test_the_makefile_runs_modules() -> None:
    assert "tests.harness.demo" in MAKEFILE_MODULES  # make demo
    assert "airflow_ckpt_provider.local.jvm" in MAKEFILE_MODULES  # make jvm


@pytest.mark.parametrize("module", MAKEFILE_MODULES)
def test_a_module_the_makefile_runs_exists(module: str) -> None:
    assert importlib.util.find_spec(module) is not None, f"the Makefile runs `python -m {module}`: no such module"


def test_the_wheel_builds_without_warnings_and_holds_the_package_data(tmp_path: Path) -> None:
    """A wheel built from the files git tracks (as `make dist` builds it): no setuptools warning (the
    Maven POM folders are package data), the POMs, ``py.typed`` and the license inside, and nothing
    of the tests, the harness or the repository's DAG folder."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    source = tmp_path / "source"
    for name in filter(None, tracked.decode().split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    assert "warning" not in (built.stdout + built.stderr).lower(), built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("airflow_ckpt_provider-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "airflow_ckpt_provider/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
    poms = {str(p.relative_to(REPO)) for p in (REPO / "airflow_ckpt_provider" / "local" / "maven").glob("*/pom.xml")}
    assert poms and poms <= names
    assert not [n for n in names if n.split("/")[0] in ("tests", "dags", "bench", "docs")]
    assert not [n for n in names if "__pycache__" in n]


def _constraint(name: str) -> str:
    for line in (REPO / ".ci" / "constraints.txt").read_text().splitlines():
        found, sep, version = line.partition("==")
        if sep and found.strip().lower() == name:
            return version.strip()
    raise AssertionError(f".ci/constraints.txt pins no {name}")


def test_the_claimed_airflow_floor_is_the_airflow_ci_runs() -> None:
    """setup.cfg claims only what CI tests: its Airflow floor is the one version the constraints pin
    (an older floor needs a tier that installs it)."""
    requires = setup_cfg()["options"]["install_requires"]
    (floor,) = re.findall(r"^\s*apache-airflow>=(\S+)\s*$", requires, re.MULTILINE)
    assert floor == _constraint("apache-airflow")


def test_the_claimed_python_floor_is_the_one_the_makefile_checks_and_this_run_meets() -> None:
    floor = setup_cfg()["options"]["python_requires"].removeprefix(">=")
    major, minor = (int(part) for part in floor.split("."))
    assert f"sys.version_info < ({major}, {minor})" in (REPO / "Makefile").read_text()
    assert sys.version_info[:2] >= (major, minor)
    classifiers = setup_cfg()["metadata"]["classifiers"]
    assert f"Programming Language :: Python :: {floor}" in classifiers
