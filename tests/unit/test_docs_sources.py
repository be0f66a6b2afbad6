"""The code in the docs pages and the README is the repository's current source, and the demo
output they quote is rendered from a recorded run by the demo's own renderers (docs/hooks.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [*sorted((REPO / "docs" / "src").rglob("*.md")), REPO / "README.md"]
README = (REPO / "README.md").read_text(encoding="utf-8")


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
    assert {"reference-dag.md", "example-dag.md", "spark-side.md", "README.md"} <= set(marked)
    quoting = [p.name for p in PAGES if "<!-- demo-output " in p.read_text()]
    assert {"README.md", "quickstart.md", "reference-dag.md"} <= set(quoting)
    assert [p.name for p in PAGES] == [p.name for p in hooks.pages()], "make docs-sync syncs the pages checked here"


def _block_after(marker: str, text: str = README) -> str:
    """The fenced block right after the line ``marker`` of ``text``."""
    at = text.index(marker + "\n") + len(marker) + 1
    fence = text[at:].split("\n", 1)[0]
    assert fence.startswith("```"), f"no block after {marker}"
    return text[at + len(fence) + 1:].split("\n```", 1)[0]


def test_the_readme_shows_the_dag_file_a_team_copies_as_it_is_below_its_docstring() -> None:
    import ast

    source = hooks.DAG_FILE.read_text(encoding="utf-8")
    docstring = ast.parse(source).body[0]
    assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)
    below = "\n".join(source.splitlines()[docstring.end_lineno:]).strip("\n")
    assert _block_after("<!-- dag-source annotations..manual -->") == below
    assert "build_reference_dags(" in below


def test_the_readme_s_excerpt_is_the_recorded_demo_run_as_the_demo_prints_it() -> None:
    import json

    from airflow_ckpt_provider.checkpoint.report import UpgradeReport
    from tests.harness import demo_output

    sample = REPO / hooks.DEMO_SAMPLE
    report = UpgradeReport.from_json((sample / hooks.DEMO_REPORT).read_text(encoding="utf-8"))
    result = json.loads((sample / hooks.DEMO_RESULT).read_text(encoding="utf-8"))
    shown = _block_after(f"<!-- demo-output {hooks.DEMO_SAMPLE} all -->")
    assert shown == demo_output.readme_excerpt(report.to_markdown(hooks.DEMO_TIMELINE), result)
    # the figures the README states are the recorded run's, not typed in
    assert f"| downtime | {report.downtime_s:.1f} s |" in shown
    assert f"- produced: {result['produced']}" in shown and f"- in_sink: {result['in_sink']}" in shown
    assert report.outcome == result["outcome"] == "upgraded" and report.archive == result["archive"], \
        "the report and the proof are of the same run"
    assert shown.endswith(demo_output.verdict(True))
    stored_rows = [line for line in report.to_markdown().splitlines() if line.startswith("| switchover |")]
    assert stored_rows and stored_rows[0] in shown


def test_a_changed_figure_in_a_demo_excerpt_is_stale_and_a_missing_sample_is_refused() -> None:
    marker = f"<!-- demo-output {hooks.DEMO_SAMPLE} report -->"
    synced = hooks.sync(f"intro\n{marker}\n")
    assert synced.startswith(f"intro\n{marker}\n```text\n# Upgrade report: ") and hooks.stale(synced) == []
    edited = synced.replace("| downtime | ", "| downtime | 1", 1)
    assert edited != synced and hooks.stale(edited) == [f"line 2: {marker}"]
    with pytest.raises(hooks.DagSourceError, match="not a recorded demo run"):
        hooks.sync("<!-- demo-output docs/samples/no-such-run all -->\n")
    with pytest.raises(hooks.DagSourceError, match="outside the repository"):
        hooks.sync("<!-- demo-output ../elsewhere all -->\n")


def test_record_demo_copies_a_run_s_records_and_refuses_a_run_without_them(tmp_path: Path) -> None:
    import json
    import shutil

    archive = tmp_path / "work" / "archive" / "demo-events" / "20261207T014918Z-up-1"
    (archive / "report").mkdir(parents=True)
    sample = REPO / hooks.DEMO_SAMPLE
    for name in (hooks.DEMO_REPORT, hooks.DEMO_TIMELINE):
        shutil.copyfile(sample / name, archive / "report" / name)
    record = json.loads((sample / hooks.DEMO_RESULT).read_text())
    demo_report = tmp_path / "demo-report.json"
    demo_report.write_text(json.dumps({**record, "archive": str(archive)}))
    written = hooks.record_demo(demo_report, tmp_path / "sample")
    assert sorted(p.name for p in written) == sorted([hooks.DEMO_RESULT, hooks.DEMO_REPORT, hooks.DEMO_TIMELINE])
    assert (tmp_path / "sample" / hooks.DEMO_REPORT).read_bytes() == (sample / hooks.DEMO_REPORT).read_bytes()
    demo_report.write_text(json.dumps({**record, "archive": str(tmp_path / "gone")}))
    with pytest.raises(hooks.DagSourceError, match="not there"):
        hooks.record_demo(demo_report, tmp_path / "other")
    with pytest.raises(hooks.DagSourceError, match="run `make demo` first"):
        hooks.record_demo(tmp_path / "missing.json", tmp_path / "other")


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
