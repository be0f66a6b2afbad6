"""Every module of the checkpoint core says up front whether it is pure or does I/O."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "airflow_ckpt_provider" / "checkpoint"


@pytest.mark.parametrize("module", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_first_paragraph_says_pure_or_io(module: Path) -> None:
    docstring = ast.get_docstring(ast.parse(module.read_text()))
    assert docstring, f"{module.name} has no module docstring"
    first = docstring.split("\n\n", 1)[0].lower()
    assert re.search(r"\bpure\b|fsspec|local disk", first), f"{module.name}: {first!r}"
