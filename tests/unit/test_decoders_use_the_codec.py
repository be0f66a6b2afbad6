"""No decoder outside the codec (:mod:`airflow_ckpt_provider.records.codec`): an AST scan of the
package. Every ``from_json`` / ``from_dict`` decodes through a codec, and JSON text is parsed only by
the codec or at the few edges listed below, each with the reason it parses raw JSON. A new decoder
that checks keys by hand, or a new ``json.loads``, fails here until it goes through a codec (or is
added below with its reason, which a review reads)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_ckpt_provider"
#: the codec's own layer: the one place that parses a record's JSON
CODEC_LAYER = PACKAGE / "records"
DECODER_NAMES = frozenset({"from_json", "from_dict"})
#: calls that parse JSON text: ``json.loads``, the driver side's bounded ``json_limits.loads`` and the
#: core's ``load_json`` and the codec's ``load_json_text`` (all within the size and depth limits)
RAW_PARSERS = frozenset({("json", "loads"), ("json_limits", "loads")})
RAW_PARSER_NAMES = frozenset({"load_json", "load_json_text"})

#: Decoders that do not decode a record of the provider, so they have no codec (module, Class.method).
NOT_RECORDS: dict[tuple[str, str], str] = {
    ("checkpoint/offsets.py", "KafkaOffsets.from_json"):
        "Spark's and Kafka's startingOffsets JSON ({topic: {partition: offset}}): a format the provider reads "
        "and does not own (no format number), parsed strictly by the core's offsets parser",
    ("checkpoint/spark_settings.py", "SparkSettings.from_json"):
        "a DAG param a person types, checked key by key with InvalidSparkSettings: input, not a record",
}

#: Where JSON text is parsed outside the codec (module, enclosing function) and why.
RAW_JSON_EDGES: dict[tuple[str, str], str] = {
    # the parser itself, for what is not a record
    ("checkpoint/jsonin.py", "load_json"): "the core's parser (the codec's load_json_text with the core's error)",
    ("json_limits.py", "loads"): "the driver side's bounded parser (standard library only)",
    # formats of Spark, Kafka, Delta and the Spark master, which carry no format number of the provider
    ("checkpoint/checksums.py", "SparkChecksum.parse"): "Spark's state checksum files",
    ("checkpoint/logs.py", "_json_line"): "the lines of Spark's offset and commit logs",
    ("checkpoint/offsets.py", "parse_json"): "Kafka offsets JSON as Spark writes and takes it",
    ("spark/kafka.py", "read_kafka"): "the startingOffsets JSON the job is given (Spark's format)",
    ("spark/delta.py", "checkpoint_query_id"): "Spark's checkpoint metadata file ({\"id\": ...})",
    ("spark/state_export.py", "_state_variables"): "Spark's state metadata properties",
    ("sinks/delta.py", "DeltaLog.commit_txns"): "Delta's transaction log lines",
    ("sinks/delta.py", "DeltaLog._checkpoint_txns"): "Delta's checkpoint JSON lines",
    ("jobs/standalone.py", "_http_json"): "the Spark standalone master's REST answer",
    ("jobs/http.py", "_answer"): "a cluster manager's REST answer (YARN ResourceManager and NodeManager, the "
                                 "Kubernetes API server), bounded, read by the core's decisions",
    # what a person or the environment gives, refused with a typed error when it is not what it should be
    ("checkpoint/launch.py", "_redact_extra"): "a recorded command line (a JSON argument list) to mask its secrets",
    ("checkpoint/spark_settings.py", "SparkSettings.from_json"): "the Spark settings DAG param",
    ("operators/handover.py", "start_choice"): "the start param's text; its object is decoded by StartChoice's codec",
    ("sinks/spec.py", "SinkSpec.from_value"): "the sink declaration DAG param",
    ("cli/common.py", "storage_options"): "a command-line option's value",
    ("local/audit.py", "json_fields_match"): "a Kafka record's value (the user's JSON) for the audit's field filter",
    ("jobs/supervise.py", "_control"): "storage options the launcher passes in the environment",
    # what this process just encoded itself, read back to embed or mask it (no input)
    ("checkpoint/report.py", "UpgradeReport.to_dict"): "the report's own JSON, with credentials masked in the text",
    ("cli/journal.py", "_journal"): "journals this command read through their codec, shown as one JSON document",
}


def _files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not p.is_relative_to(CODEC_LAYER))


def _codec_names(tree: ast.Module) -> set[str]:
    """Module-level names bound to a ``Codec(...)``."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call) \
                and isinstance(node.value.func, ast.Name) and node.value.func.id == "Codec":
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def decoders_without_codec(source: str) -> list[str]:
    """``Class.method`` of each ``from_json`` / ``from_dict`` in ``source`` that neither uses a
    module-level codec nor its record's own (``cls.codec()``)."""
    tree = ast.parse(source)
    codecs = _codec_names(tree)
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for method in cls.body:
            if not isinstance(method, ast.FunctionDef) or method.name not in DECODER_NAMES:
                continue
            names = {n.id for n in ast.walk(method) if isinstance(n, ast.Name)}
            own = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "codec"
                      for n in ast.walk(method))
            if not (names & codecs or own):
                found.append(f"{cls.name}.{method.name}")
    return found


def raw_parses(source: str) -> Iterator[tuple[str, int]]:
    """(enclosing ``Class.function``, line) of each call that parses JSON text in ``source``."""
    def walk(node: ast.AST, scope: tuple[str, ...]) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            inner = (*scope, child.name) if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                              ast.ClassDef)) else scope
            if isinstance(child, ast.Call):
                func = child.func
                if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                        and (func.value.id, func.attr) in RAW_PARSERS) \
                        or (isinstance(func, ast.Name) and func.id in RAW_PARSER_NAMES):
                    yield ".".join(scope) or "<module>", child.lineno
            yield from walk(child, inner)
    return walk(ast.parse(source), ())


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def test_every_decoder_goes_through_a_codec() -> None:
    found = {(_rel(p), name) for p in _files() for name in decoders_without_codec(p.read_text())}
    assert found - set(NOT_RECORDS) == set(), "decode through a codec (airflow_ckpt_provider.records.codec)"
    assert set(NOT_RECORDS) <= found, "an exemption that no longer applies: remove it"


def test_json_text_is_parsed_only_by_the_codec_and_the_listed_edges() -> None:
    found = {(_rel(p), scope) for p in _files() for scope, _ in raw_parses(p.read_text())}
    assert found - set(RAW_JSON_EDGES) == set(), "parse through a codec, or list the edge with its reason"
    assert set(RAW_JSON_EDGES) <= found, "an exemption that no longer applies: remove it"


@pytest.mark.parametrize(("source", "bad"), [
    ("class A:\n    @classmethod\n    def from_json(cls, d):\n        return cls(**json.loads(d))\n", ["A.from_json"]),
    ("class A:\n    def from_dict(cls, d):\n        return cls(d['x'])\n", ["A.from_dict"]),
    ("_C = Codec('a', E, {})\nclass A:\n    def from_json(cls, d):\n        return cls(**_C.decode(d))\n", []),
    ("class A(_ControlRecord):\n    def from_json(cls, d):\n        return cls(**cls.codec().present(d))\n", []),
    ("class A:\n    def to_json(self):\n        return '{}'\n", []),
])
def test_the_decoder_scan_tells_codec_backed_from_hand_written(source: str, bad: list[str]) -> None:
    assert decoders_without_codec(source) == bad


@pytest.mark.parametrize(("source", "found"), [
    ("import json\ndef f(t):\n    return json.loads(t)\n", [("f", 3)]),
    ("class A:\n    def g(self, t):\n        return load_json(t)\n", [("A.g", 3)]),
    ("x = json_limits.loads('1')\n", [("<module>", 1)]),
    ("def f(t):\n    return _C.decode(t)\n", []),
    ("def f(t):\n    return json.dumps(t)\n", []),
])
def test_the_parse_scan_finds_every_raw_parse(source: str, found: list[tuple[str, int]]) -> None:
    assert list(raw_parses(source)) == found
