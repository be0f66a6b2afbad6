"""airflow_ckpt_provider/upgrade/ is the upgrade as recorded state: it imports neither Airflow nor
fsspec (nor Spark, a Kafka client, the storage layer or the Airflow ring of this provider), so the
record, its codec and its planner run and are tested anywhere."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UPGRADE = REPO / "airflow_ckpt_provider" / "upgrade"
#: Packages the upgrade layer never imports (top-level names).
FORBIDDEN = {"airflow", "fsspec", "pyspark", "py4j", "kafka", "confluent_kafka"}
#: This provider's modules that hold Airflow, I/O or the driver side (``storage`` reads and writes
#: the record; the record itself does no I/O).
FORBIDDEN_OWN = ("hooks", "operators", "triggers", "cli", "local", "jobs", "sinks", "spark", "storage")


def imports_of(module: Path) -> set[str]:
    """Every absolute module name ``module`` imports, at any depth (lazy imports too); relative
    imports resolved against the package."""
    names: set[str] = set()
    package = "airflow_ckpt_provider.upgrade"
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                names.add(f"{base}.{node.module}" if node.module else base)
            elif node.module:
                names.add(node.module)
    return names


MODULES = sorted(UPGRADE.glob("*.py"))


def test_there_are_modules_to_check() -> None:
    assert {p.name for p in MODULES} >= {"__init__.py", "record.py"}


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_no_airflow_no_fsspec_no_outer_ring(module: Path) -> None:
    names = imports_of(module)
    assert not {n.split(".")[0] for n in names} & FORBIDDEN, sorted(names)
    own = sorted(n for n in names if n.split(".")[:2][-1] in FORBIDDEN_OWN and n.startswith("airflow_ckpt_provider."))
    assert not own, f"{module.name} imports {own}"


def test_importing_the_layer_loads_no_airflow() -> None:
    """The transitive rule, in a fresh interpreter: nothing the record imports pulls in Airflow,
    fsspec, Spark or a Kafka client (the core and the codec it imports are pure).
    test_architecture.py imports every module of the layer the same way."""
    code = ("import sys, airflow_ckpt_provider.upgrade.record; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'airflow', 'fsspec', 'pyspark', 'py4j', 'kafka'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_rule_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    import fsspec\n    from . import codec\n    from .codec import Codec\n")
    assert imports_of(module) == {"fsspec", "airflow_ckpt_provider.upgrade", "airflow_ckpt_provider.upgrade.codec"}
