"""Aggregate buffers to user columns: the positional mapping and its refusals (no Spark needed)."""

from __future__ import annotations

import json

import pytest

from airflow_ckpt_provider.spark.state import StateMappingError, _mapping


def entry(*fields: tuple[str, str]) -> dict:
    return {"operator_id": 0, "store_name": "default",
            "value_schema": {"type": "struct", "fields": [{"name": n, "type": t} for n, t in fields]}}


def test_every_mappable_function_in_order() -> None:
    state = entry(("sum", "long"), ("count", "long"), ("min", "long"), ("max", "long"), ("sum", "double"),
                  ("count", "long"))
    mapped = _mapping(state, [("t", "sum"), ("n", "count"), ("lo", "min"), ("hi", "max"), ("m", "avg")])
    assert mapped == [("t", "sum", [0]), ("n", "count", [1]), ("lo", "min", [2]), ("hi", "max", [3]),
                      ("m", "avg", [4, 5])]


def test_a_decimal_sum_skips_its_is_empty_buffer() -> None:
    state = entry(("sum", "decimal(20,2)"), ("isEmpty", "boolean"), ("count", "long"))
    assert _mapping(state, [("t", "sum"), ("n", "count")]) == [("t", "sum", [0]), ("n", "count", [2])]


@pytest.mark.parametrize(("aggregates", "message"), [
    ([("x", "collect_list")], "collect_list"),
    ([("x", "approx_count_distinct")], "sketches"),
    ([("n", "count"), ("t", "sum")], "expected 'count' at position 0"),
    ([("t", "sum")], "List every aggregation"),
    ([("t", "sum"), ("n", "count"), ("z", "max")], "expected 'max' at position 2"),
])
def test_refusals_say_what_the_state_holds(aggregates: list[tuple[str, str]], message: str) -> None:
    with pytest.raises(StateMappingError, match=message) as caught:
        _mapping(entry(("sum", "long"), ("count", "long")), aggregates)
    assert "sum, count" in str(caught.value) or "collect_list" in message or "sketches" in message


class Files:
    """The session's Hadoop files at the boundary: what ``FILES`` holds by path."""

    FILES: dict[str, bytes] = {}

    def __init__(self, spark: object, root: str) -> None:
        self.root = root.rstrip("/")

    def read(self, name: str) -> bytes | None:
        return self.FILES.get(f"{self.root}/{name}")


def test_the_driver_reads_the_state_manifest_through_its_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_ckpt_provider.checkpoint.errors import StateExportCorrupt
    from airflow_ckpt_provider.spark import graceful_stop
    from airflow_ckpt_provider.spark.state import StateNotExported, read_state_manifest
    from tests.unit.test_result_codecs import STATE_MANIFEST

    monkeypatch.setattr(graceful_stop, "HadoopFiles", Files)
    monkeypatch.setattr(Files, "FILES", {"/exp/state-manifest.json": STATE_MANIFEST.encode(),
                                         "/bad/state-manifest.json": json.dumps({**json.loads(STATE_MANIFEST), "batch_id": "41"}).encode()})
    manifest = read_state_manifest(None, "/exp/")  # type: ignore[arg-type]
    assert manifest == {**json.loads(STATE_MANIFEST), "location": "/exp"}
    with pytest.raises(StateExportCorrupt) as refused:
        read_state_manifest(None, "/bad")  # type: ignore[arg-type]
    assert refused.value.path == "/bad/state-manifest.json" and "'batch_id' of JSON string" in refused.value.found
    with pytest.raises(StateNotExported, match="no state-manifest.json under /none"):
        read_state_manifest(None, "/none")  # type: ignore[arg-type]
