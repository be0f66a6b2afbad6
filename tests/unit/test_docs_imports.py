"""What the docs tell a user to run needs only the installed package: no ```python or ```bash block of a
docs page (the blocks the own-job page's test runs, and their like on every page) imports the
repository's test tree (``tests.``: the harness is not in the wheel)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs" / "src").rglob("*.md"))
FENCE = re.compile(r"^```(?P<lang>[a-z]*)[^\n]*\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
RUN = {"python", "bash"}
#: ``from tests...``, ``import tests...``, ``python -m tests.x`` (also inside ``python -c '...'``)
TESTS_IMPORT = re.compile(r"(?:^|[\s;'\"(])(?:from\s+tests(?:\.|\s)|import\s+tests\b|-m\s+tests\.)", re.MULTILINE)


def imports_of_tests(markdown: str) -> list[str]:
    """``line N: TEXT`` of every run block's line that imports the test tree."""
    found = []
    for block in FENCE.finditer(markdown):
        if block["lang"] not in RUN:
            continue
        first = markdown.count("\n", 0, block.start("body")) + 1
        found += [f"line {first + n}: {line.strip()}" for n, line in enumerate(block["body"].splitlines())
                  if TESTS_IMPORT.search(line)]
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_no_run_block_imports_the_test_tree(page: Path) -> None:
    assert imports_of_tests(page.read_text(encoding="utf-8")) == [], (
        f"{page.relative_to(REPO)}: a block a user runs imports the repository's tests/, which the wheel does not "
        "ship; use the package's API (airflow_ckpt_provider.local, ckpt)")


@pytest.mark.parametrize("block", [
    "```python\nfrom tests.harness.audit import audit\n```\n",
    "```python\nimport os\nimport tests.harness\n```\n",
    "```bash\npython -m tests.harness.demo\n```\n",
    "```bash\npython -c 'from tests.harness import x'\n```\n",
])
def test_an_import_of_the_test_tree_is_found(block: str) -> None:
    assert len(imports_of_tests("text\n" + block)) == 1


@pytest.mark.parametrize("block", [
    "```python\nfrom airflow_ckpt_provider.local.audit import audit\n```\n",
    "```bash\npytest tests/unit -q\n```\n",
    "```text\nfrom tests.harness import shown_only\n```\n",
    "```shell\npython -m tests.harness.demo\n```\n",
])
def test_other_text_is_not_an_import_of_the_test_tree(block: str) -> None:
    assert imports_of_tests(block) == []
