"""Every module of the pure core (``checkpoint/``) and of the storage layer (``storage/``) is what its
docstring says it is, judged by its imports: a module that says it is pure imports nothing that
does I/O, a module that imports something that does I/O says so up front, and neither layer
imports Airflow, Spark or a Kafka client. (Which layer may import which: test_architecture.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_ckpt_provider"
CORE = PACKAGE / "checkpoint"
STORAGE = PACKAGE / "storage"
#: Top-level packages that reach files, processes, the network or the terminal.
IO = {"fsspec", "os", "pathlib", "shutil", "socket", "subprocess", "tempfile", "requests", "urllib", "http",
      "fcntl", "ctypes", "getpass", "pyarrow", "matplotlib", "multiprocessing", "sqlite3"}
#: What the core never imports (the outer rings: docs "Architecture").
OUTER = {"airflow", "pyspark", "kafka", "confluent_kafka", "py4j"}
#: How a first paragraph names the I/O its module does.
SAYS_IO = re.compile(r"fsspec|local disk")


def imported(module: Path) -> set[str]:
    """Top-level names of every absolute import in ``module``, at any depth (imports inside
    functions and ``TYPE_CHECKING`` blocks too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def first_paragraph(module: Path) -> str:
    docstring = ast.get_docstring(ast.parse(module.read_text()))
    assert docstring, f"{module.name} has no module docstring"
    return " ".join(docstring.split("\n\n", 1)[0].lower().split())


MODULES = sorted([*CORE.glob("*.py"), *STORAGE.glob("*.py")])


def _id(module: Path) -> str:
    return str(module.relative_to(PACKAGE))


@pytest.mark.parametrize("module", MODULES, ids=_id)
def test_the_core_imports_no_outer_ring(module: Path) -> None:
    assert not imported(module) & OUTER, f"{module.name} imports {sorted(imported(module) & OUTER)}"


@pytest.mark.parametrize("module", MODULES, ids=_id)
def test_a_module_that_says_it_is_pure_imports_no_io(module: Path) -> None:
    first, io = first_paragraph(module), sorted(imported(module) & IO)
    if SAYS_IO.search(first):
        return
    assert re.search(r"\bpure\b", first), f"{module.name} says neither pure nor what I/O it does: {first!r}"
    assert not io, f"{module.name} says it is pure but imports {io} (say what it reads or writes, or move the I/O out)"


def test_the_import_rule_sees_lazy_imports(tmp_path: Path) -> None:
    """The rule reads imports inside functions too (a lazy ``import fsspec`` is still I/O)."""
    module = tmp_path / "lazy.py"
    module.write_text('"""Pure."""\n\ndef f():\n    import fsspec.core\n    from os import path\n    from . import x\n')
    assert imported(module) == {"fsspec", "os"}
