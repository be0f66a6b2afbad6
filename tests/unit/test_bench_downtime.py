"""``bench/downtime.py``'s scenario choice (the scenarios themselves need the embedded stack: run the bench)."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    """``bench/downtime.py`` as a module (its dataclasses need it in sys.modules while it loads)."""
    name = "bench_downtime"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "downtime.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.mark.parametrize(("given", "chosen"), [
    ("bare,switchover", ("bare", "switchover")),
    ("switchover, bare", ("bare", "switchover")),  # in the bench's order, spaces ignored
    ("standby,bare,switchover,cold", ("bare", "cold", "standby", "switchover")),
    ("bare,bare", ("bare",)),
])
def test_scenarios_are_read_in_the_bench_order(given: str, chosen: tuple[str, ...]) -> None:
    assert _bench()._scenarios(given) == chosen


@pytest.mark.parametrize(("given", "says"), [
    ("bare,warm", "unknown scenario(s) warm"),
    ("standby,switchover", "include bare"),  # the ratios need the baseline of the same run
])
def test_scenarios_refused(given: str, says: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(says)):
        _bench()._scenarios(given)
