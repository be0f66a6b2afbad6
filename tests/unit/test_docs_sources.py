"""The code in the docs pages is the repository's current source (docs/hooks.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted((REPO / "docs" / "src").rglob("*.md"))


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hooks = _hooks()


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_page_shows_the_current_source(page: Path) -> None:
    assert hooks.stale(page.read_text(encoding="utf-8")) == [], "run `make docs-sync` and commit the pages"


def test_the_pages_do_show_source() -> None:
    marked = [p.name for p in PAGES if "<!-- dag-source " in p.read_text() or "<!-- source " in p.read_text()]
    assert {"reference-dag.md", "example-dag.md", "spark-side.md"} <= set(marked)


def test_sync_adds_a_missing_block_and_is_idempotent() -> None:
    page = "intro\n<!-- dag-source manual -->\nafter\n"
    synced = hooks.sync(page)
    assert synced.startswith("intro\n<!-- dag-source manual -->\n```python\n")
    assert "manual, cold, switchover, on_artifact = build_reference_dags(" in synced and synced.endswith("```\nafter\n")
    assert hooks.sync(synced) == synced and hooks.stale(synced) == []


def test_a_changed_copy_is_stale_and_fails_the_build() -> None:
    synced = hooks.sync("<!-- dag-source manual -->\n")
    edited = synced.replace("stream_upgrade", "stream", 1)
    assert hooks.stale(edited) == ["line 1: <!-- dag-source manual -->"]
    assert hooks.stale("x\n<!-- dag-source manual -->\nno block\n") == ["line 2: <!-- dag-source manual -->"]
    with pytest.raises(hooks.StaleSource, match="make docs-sync"):
        hooks.render(edited)


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(hooks.DagSourceError, match="no 'no_such_task'"):
        hooks.sync("<!-- source airflow_ckpt_provider/dags/stream_upgrade.py build_stream_upgrade_dag.no_such_task -->\n")


def test_the_cli_page_documents_every_command() -> None:
    from airflow_ckpt_provider.cli import build_parser

    page = (REPO / "docs" / "src" / "cli.md").read_text(encoding="utf-8")
    commands = next(a for a in build_parser()._actions if a.dest == "command").choices
    assert commands, "no ckpt subcommands registered"
    missing = [name for name in commands if f"### ckpt {name}\n" not in page]
    assert missing == [], f"docs/src/cli.md has no section for: {missing}"
    usage = page[page.index("usage: ckpt [-h] [-v]"):].split("```")[0]
    assert "{" + ",".join(commands) + "}" in "".join(usage.split()), "update the usage line of docs/src/cli.md"


def test_the_readme_links_pages_that_exist() -> None:
    import re

    links = re.findall(r"\]\(((?:docs|dags|bench|tests)/[^)#]+)", (REPO / "README.md").read_text(encoding="utf-8"))
    assert links, "the README links no docs page"
    assert [link for link in links if not (REPO / link).exists()] == []


def test_the_operators_page_lists_the_kinds_each_operator_serves() -> None:
    """The table of step kinds on the operators page is each class's STEP_KINDS, in order."""
    from airflow_ckpt_provider.operators.archive import CheckpointArchiveOperator, CheckpointRestoreOperator
    from airflow_ckpt_provider.operators.handover import CheckpointHandoverOperator, RollbackHandoverOperator
    from airflow_ckpt_provider.operators.launch import (
        HandoverVerifyOperator,
        StandbyReleaseOperator,
        StreamLaunchOperator,
    )
    from airflow_ckpt_provider.operators.state import StateExportOperator
    from airflow_ckpt_provider.operators.stop import GracefulStopOperator
    from airflow_ckpt_provider.operators.switchover import StandbySwitchoverOperator

    page = (REPO / "docs" / "src" / "operators.md").read_text(encoding="utf-8")
    for cls in (GracefulStopOperator, CheckpointHandoverOperator, RollbackHandoverOperator, StateExportOperator,
                CheckpointArchiveOperator, CheckpointRestoreOperator, StreamLaunchOperator, StandbyReleaseOperator,
                StandbySwitchoverOperator, HandoverVerifyOperator):
        row = f"| `{cls.__name__}` | " + ", ".join(f"`{kind}`" for kind in cls.STEP_KINDS) + " |"
        assert row in page, row
