"""What may import what (docs/src/architecture.md): the layers of the package and dags/, each
with the layers of this provider and the outside packages it may import, checked on every
import statement (ast: lazy imports inside functions too, relative ones resolved). The table is
today's rule; a change to it is a change of the architecture, made here and on the page."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_ckpt_provider"
#: The modules at the top of the package (clock, enums, json_limits, ...): helpers every layer may
#: import, themselves held to the "helpers" rule (no layer, no watched outside package).
HELPERS = {p.stem for p in PACKAGE.glob("*.py")}
#: The package's modules and subpackages (a name imported from the package that is none of them is
#: defined by its ``__init__``, like ``__version__``).
TOP_NAMES = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
#: Outside packages whose reach the table limits (anything else is not checked). ``tests`` is the
#: repository's test tree with the test harness (``tests/harness``): it is not shipped in the wheel,
#: so no layer may import it.
WATCHED = {"airflow", "pyspark", "py4j", "fsspec", "kafka", "confluent_kafka", "tests"}

#: The layers below every other (but the helpers): the versioned strict records, the one codec every
#: layer decodes through, the driver side (spark/) too. Every layer but the helpers may import them.
FOUNDATION = {"records"}

#: layer -> (layers of this provider it may import besides HELPERS, watched outside packages it may import)
RULES: dict[str, tuple[set[str], set[str]]] = {
    # the standard-library-only modules at the package's top
    "helpers": (set(), set()),
    # the versioned strict records (the codec): below every layer but the helpers (FOUNDATION)
    "records": (set(), set()),
    # in the user's Spark driver: pyspark and the pure core (standard library only: the driver reads
    # a checkpoint with the provider's own reader); nothing of the Airflow side, fsspec or storage/
    "spark": ({"checkpoint"}, {"pyspark", "py4j"}),
    # the pure core: parsers over bytes and JSON, value objects, decisions, typed errors; no I/O
    # library, nothing of the Airflow side, not even the storage layer, nor the driver side (the
    # control-file protocol is a record: records.control)
    "checkpoint": (set(), set()),
    # what lists, reads, writes, copies and locks files through fsspec: the core, the upgrade record
    # it reads and writes (storage.journal) and fsspec, never Airflow, Spark or a Kafka client
    "storage": ({"checkpoint", "upgrade"}, {"fsspec"}),
    # the upgrade as recorded state (the journal's record, its codec, the planner, the step table):
    # pure like the core; no Airflow, no fsspec, not even the storage layer that reads and writes it
    "upgrade": ({"checkpoint"}, set()),
    # what a sink holds: read through fsspec
    "sinks": ({"checkpoint", "storage"}, {"fsspec"}),
    # where drivers run and whether they live (pyspark only to find a SPARK_HOME)
    "jobs": ({"checkpoint", "spark", "storage"}, {"fsspec", "pyspark"}),
    # one external client each
    "hooks": ({"checkpoint", "jobs", "spark", "storage"}, {"airflow", "fsspec", "kafka", "pyspark"}),
    "triggers": ({"checkpoint", "hooks", "jobs", "spark", "storage"}, {"airflow", "fsspec"}),
    # the upgrade steps
    "operators": ({"checkpoint", "hooks", "jobs", "sinks", "spark", "storage", "triggers", "upgrade"},
                  {"airflow", "fsspec"}),
    # the command line: the core and the hooks' clients, never an operator, nor Airflow directly
    "cli": ({"checkpoint", "hooks", "jobs", "local", "spark", "storage", "triggers"}, {"fsspec"}),
    # the embedded stack the command line and the Makefile need: Maven fetch, the dev stack's broker
    # (a Kafka client to wait for it and to read topics for the sink audit), the local Spark conf and
    # virtualenvs, the local Airflow home; the test harness built on it is tests/harness, outside the package
    "local": ({"checkpoint"}, {"kafka", "pyspark"}),
    # the reference DAG: operators, the core's value types and the step table (upgrade.steps)
    "dags": ({"checkpoint", "operators", "upgrade"}, {"airflow"}),
    # the demo jobs the DAG upgrades: Spark jobs like a user's
    "dags/jobs": ({"spark"}, {"pyspark"}),
}


def layer_of(path: Path) -> str:
    if path.is_relative_to(REPO / "dags" / "jobs"):
        return "dags/jobs"
    if path.is_relative_to(REPO / "dags"):
        return "dags"
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else "helpers"


def imports_of(path: Path) -> Iterator[str]:
    """Absolute names of every module ``path`` imports (``from airflow_ckpt_provider import x``
    counts as ``airflow_ckpt_provider.x``)."""
    parts = path.relative_to(REPO).with_suffix("").parts
    package = ".".join(parts[:-1])  # a module's package; an __init__'s own package
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            if module == "airflow_ckpt_provider":
                yield from (f"{module}.{alias.name}" for alias in node.names)
            else:
                yield module


def target(name: str) -> str | None:
    """The layer (or watched outside package) an imported name belongs to; None when unwatched."""
    parts = name.split(".")
    if parts[0] != "airflow_ckpt_provider":
        return parts[0] if parts[0] in WATCHED else None
    if len(parts) == 1 or parts[1] in HELPERS or parts[1] not in TOP_NAMES:
        return None  # a helper, or a name the package's __init__ defines (__version__)
    return parts[1]


def violations(path: Path) -> list[str]:
    layer = layer_of(path)
    own, outside = RULES[layer]
    found = []
    for name in imports_of(path):
        hit = target(name)
        if hit is None or hit.split(".")[0] == layer or hit in outside:
            continue
        if hit in own or (hit in FOUNDATION and layer != "helpers"):
            continue
        found.append(name)
    return sorted(set(found))


FILES = sorted([*PACKAGE.rglob("*.py"), *(REPO / "dags").rglob("*.py")])


def test_every_layer_has_a_rule() -> None:
    assert {layer_of(p) for p in FILES} <= set(RULES)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_imports_follow_the_layers(path: Path) -> None:
    wrong = violations(path)
    assert not wrong, (f"{path.relative_to(REPO)} ({layer_of(path)}) imports {wrong}: see docs/src/architecture.md "
                       "for what this layer may import")


@pytest.mark.parametrize(("layer", "source", "wrong"), [
    ("checkpoint", "import airflow", ["airflow"]),
    ("checkpoint", "def f():\n    from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook",
     ["airflow_ckpt_provider.hooks.storage"]),
    ("checkpoint", "from airflow_ckpt_provider.spark import graceful_stop", ["airflow_ckpt_provider.spark"]),
    ("checkpoint", "from airflow_ckpt_provider.records.control import Heartbeat", []),
    ("checkpoint", "from airflow_ckpt_provider import clock", []),
    ("checkpoint", "import fsspec", ["fsspec"]),
    ("checkpoint", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fsspec import AbstractFileSystem",
     ["fsspec"]),
    ("checkpoint", "from airflow_ckpt_provider.storage.reader import CheckpointReader",
     ["airflow_ckpt_provider.storage.reader"]),
    ("checkpoint", "from airflow_ckpt_provider import storage", ["airflow_ckpt_provider.storage"]),
    ("checkpoint", "from airflow_ckpt_provider.local.errors import PortInUse", ["airflow_ckpt_provider.local.errors"]),
    ("checkpoint", "from airflow_ckpt_provider.jobs.base import LaunchedJob", ["airflow_ckpt_provider.jobs.base"]),
    ("checkpoint", "from airflow_ckpt_provider.triggers.stop import GracefulStopTrigger",
     ["airflow_ckpt_provider.triggers.stop"]),
    ("checkpoint", "from airflow_ckpt_provider.operators.stop import GracefulStopOperator",
     ["airflow_ckpt_provider.operators.stop"]),
    ("checkpoint", "from airflow_ckpt_provider.checkpoint.offsets import KafkaOffsets", []),
    ("checkpoint", "from airflow_ckpt_provider.upgrade.record import JournalRecord",
     ["airflow_ckpt_provider.upgrade.record"]),
    ("checkpoint", "def f():\n    from airflow_ckpt_provider import upgrade", ["airflow_ckpt_provider.upgrade"]),
    ("checkpoint", "import pyspark.sql", ["pyspark.sql"]),
    ("checkpoint", "from airflow_ckpt_provider.records.codec import Codec", []),
    ("records", "from airflow_ckpt_provider.checkpoint.errors import CheckpointError",
     ["airflow_ckpt_provider.checkpoint.errors"]),
    ("records", "from airflow_ckpt_provider.upgrade import record", ["airflow_ckpt_provider.upgrade"]),
    ("records", "from ..spark import graceful_stop", ["airflow_ckpt_provider.spark"]),
    ("records", "import pyspark", ["pyspark"]),
    ("records", "from airflow_ckpt_provider import clock, json_limits", []),
    ("storage", "import fsspec\nfrom airflow_ckpt_provider.checkpoint.logs import batch_ids", []),
    ("storage", "from airflow_ckpt_provider.records.control import CONTROL_DIR", []),
    ("storage", "from airflow.sdk import BaseHook", ["airflow.sdk"]),
    ("storage", "from airflow_ckpt_provider.hooks.storage import CheckpointStorageHook",
     ["airflow_ckpt_provider.hooks.storage"]),
    ("storage", "from airflow_ckpt_provider.upgrade.record import JournalRecord", []),
    ("spark", "from airflow_ckpt_provider.checkpoint.errors import CheckpointError", []),
    ("spark", "from airflow_ckpt_provider.checkpoint.snapshot_reader import SnapshotReader", []),
    ("spark", "from airflow_ckpt_provider.storage.reader import CheckpointReader",
     ["airflow_ckpt_provider.storage.reader"]),
    ("spark", "import fsspec", ["fsspec"]),
    ("spark", "from airflow.sdk import BaseHook", ["airflow.sdk"]),
    ("spark", "from airflow_ckpt_provider.upgrade.record import JournalRecord", ["airflow_ckpt_provider.upgrade.record"]),
    ("upgrade", "import fsspec", ["fsspec"]),
    ("upgrade", "from airflow.sdk import BaseOperator", ["airflow.sdk"]),
    ("upgrade", "from airflow_ckpt_provider.storage.journal import JournalRecord",
     ["airflow_ckpt_provider.storage.journal"]),
    ("upgrade", "from airflow_ckpt_provider import storage", ["airflow_ckpt_provider.storage"]),
    ("upgrade", "from airflow_ckpt_provider.checkpoint.errors import JournalCorrupt", []),
    ("upgrade", "from .record import JournalRecord", []),
    ("hooks", "from ..operators.stop import GracefulStopOperator", ["airflow_ckpt_provider.operators.stop"]),
    ("cli", "from tests.harness.upgrade_demo import UpgradeDemo", ["tests.harness.upgrade_demo"]),
    ("local", "def f():\n    from tests.harness import audit", ["tests.harness"]),
])
def test_the_rule_catches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: str, source: str,
                          wrong: list[str]) -> None:
    """The checker itself: a planted module in ``layer`` is judged as its imports say."""
    fake_repo = tmp_path
    module = fake_repo / "airflow_ckpt_provider" / layer / "planted.py"
    module.parent.mkdir(parents=True)
    module.write_text(source + "\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", fake_repo)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake_repo / "airflow_ckpt_provider")
    assert violations(module) == wrong


def layer_graph(files: list[Path]) -> dict[str, set[str]]:
    """Which of the package's layers (subpackages) imports which, over ``files``."""
    graph: dict[str, set[str]] = {}
    for path in files:
        layer = layer_of(path)
        if layer == "helpers" or not path.is_relative_to(PACKAGE):
            continue
        for name in imports_of(path):
            hit = target(name)
            if hit is not None and hit in TOP_NAMES and hit != layer:
                graph.setdefault(layer, set()).add(hit)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of layers that import each other, directly or through others (the strongly
    connected components of more than one layer, Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_two_subpackages_import_each_other() -> None:
    """The layers form no cycle, direct or through others (lazy imports count: a cycle broken only
    by importing inside a function is still one)."""
    assert cycles(layer_graph(FILES)) == []


def test_the_cycle_check_sees_direct_and_longer_cycles() -> None:
    assert cycles({"checkpoint": {"records", "upgrade"}, "upgrade": {"checkpoint"}}) == [["checkpoint", "upgrade"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"spark": {"checkpoint", "records"}, "checkpoint": {"records"}}) == []


def test_the_records_layer_is_below_every_other_and_the_core_above_it_only() -> None:
    """The codec imports nothing of the provider (helpers aside) and nothing watched; the core
    imports none of the provider's layers but the records, neither Airflow nor Spark; every other
    layer may use the records."""
    assert RULES["records"] == (set(), set())
    own, outside = RULES["checkpoint"]
    assert own <= FOUNDATION and not outside, RULES["checkpoint"]
    assert all(layer == "helpers" or "records" not in RULES[layer][0] for layer in RULES), "FOUNDATION says it once"


def test_importing_the_records_layer_loads_nothing_else_of_the_provider() -> None:
    """In a fresh interpreter: importing every module of ``records/`` loads no other layer of the
    provider (only the standard-library helpers at its top) and no outside package the table watches."""
    modules = sorted(p.stem for p in (PACKAGE / "records").glob("*.py") if p.stem != "__init__")
    assert modules, "no modules in records/"
    code = ("import sys\n"
            f"for name in {modules!r}:\n"
            "    __import__('airflow_ckpt_provider.records.' + name)\n"
            f"own = sorted(m for m in sys.modules if m.startswith('airflow_ckpt_provider.') and m.split('.')[1] not in "
            f"{sorted(HELPERS | {'records'})!r})\n"
            f"watched = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(WATCHED)!r})\n"
            "print(own + watched)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


#: What the two pure layers, the core (``checkpoint/``) and the upgrade record (``upgrade/``), may
#: never reach, by the table: no I/O library, no Airflow, and none of the layers that do I/O or
#: hold Airflow.
PURE_NEVER = ({"storage", "hooks", "operators", "triggers", "jobs", "local", "sinks", "cli"},
              {"fsspec", "airflow", "pyspark", "py4j", "kafka", "confluent_kafka"})
PURE_LAYERS = ("checkpoint", "upgrade")


def test_the_table_keeps_the_pure_layers_pure_and_storage_free_of_airflow() -> None:
    """The table's rows for the inner layers say what docs/src/architecture.md promises (a change
    that widens them is a change of the architecture, not of a row)."""
    for layer in PURE_LAYERS:
        own, outside = RULES[layer]
        assert not own & PURE_NEVER[0] and not outside & PURE_NEVER[1], (layer, RULES[layer])
    own, outside = RULES["storage"]
    assert "airflow" not in outside and not own & {"hooks", "operators", "triggers", "jobs", "local", "cli"}


@pytest.mark.parametrize("layer", PURE_LAYERS)
def test_importing_a_pure_layer_loads_no_io_library_and_no_outer_layer(layer: str) -> None:
    """The transitive rule, in a fresh interpreter: importing every module of the core, or every
    module of the upgrade record (and what those import: the core imports the records, the upgrade
    record imports the core) loads neither fsspec, Airflow, Spark nor a Kafka client, nor
    any module of the storage layer or the Airflow side."""
    modules = sorted(p.stem for p in (PACKAGE / layer).glob("*.py") if p.stem != "__init__")
    assert modules, f"no modules in {layer}/"
    outer = sorted(PURE_NEVER[0])
    code = ("import sys\n"
            f"for name in {modules!r}:\n"
            f"    __import__('airflow_ckpt_provider.{layer}.' + name)\n"
            f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(PURE_NEVER[1])!r}"
            f" or m.split('.')[:2] in [['airflow_ckpt_provider', o] for o in {outer!r}])\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


#: What the driver side (``spark/``) may never load, not even through the core it imports: the
#: user's Spark driver has no Airflow and no fsspec, and reads a checkpoint through Hadoop.
DRIVER_NEVER = ({"storage", "hooks", "operators", "triggers", "jobs", "local", "sinks", "cli"},
                {"fsspec", "airflow", "kafka", "confluent_kafka"})


def test_the_table_keeps_the_driver_side_free_of_airflow_fsspec_and_storage() -> None:
    own, outside = RULES["spark"]
    assert not own & DRIVER_NEVER[0] and not outside & DRIVER_NEVER[1], RULES["spark"]


def test_importing_the_driver_side_loads_no_airflow_fsspec_nor_storage() -> None:
    """In a fresh interpreter: importing every module of ``spark/`` (the checkpoint reader over
    Hadoop imports the pure core) loads neither Airflow, fsspec nor a Kafka client, nor any module
    of the storage layer or the Airflow side."""
    modules = sorted(p.stem for p in (PACKAGE / "spark").glob("*.py") if p.stem != "__init__")
    outer = sorted(DRIVER_NEVER[0])
    code = ("import sys\n"
            f"for name in {modules!r}:\n"
            "    __import__('airflow_ckpt_provider.spark.' + name)\n"
            f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {sorted(DRIVER_NEVER[1])!r}"
            f" or m.split('.')[:2] in [['airflow_ckpt_provider', o] for o in {outer!r}])\n"
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                         check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
