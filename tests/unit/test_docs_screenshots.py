"""The docs' screenshots name only tasks the reference DAGs have: every task named in a
screenshot's alt text, in its file name, or in the paragraph right before or after it is a task of
the DAGs :func:`~airflow_ckpt_provider.dags.stream_upgrade.build_reference_dags` builds, so a
renamed task fails here until the screenshot's text (and the screenshot: the browser test takes
them, see docs "Development") is redone. Every image under ``docs/src/img`` is shown by a page.

A task is named as ``X task`` / ``task X`` (X bare or in backticks, not an article), or as a
backticked identifier, which may also be one of the DAGs' params; a file name names a task when a
part of it is snake_case (``approval_gate.png``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "src"
PAGES = [*sorted(DOCS.rglob("*.md")), REPO / "README.md"]
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+\.(?:png|jpe?g|gif|svg|webp))\)", re.DOTALL)
FENCED = re.compile(r"^```.*?^```[ \t]*$", re.MULTILINE | re.DOTALL)
_NAME = r"[a-z][a-z0-9_]*"
#: ``the approve task``, ``approve task's``, ``task `approve```, ``tasks `a` and `b```
TASK_WORD = re.compile(rf"`?\b(?P<before>{_NAME})`?\s+tasks?(?:'s)?\b|\btasks?\s+`?(?P<after>{_NAME})\b`?")
CODE_NAME = re.compile(rf"`(?P<name>{_NAME})`")
#: words before or after "task" that are not task ids
NOT_NAMES = frozenset({"a", "an", "the", "this", "that", "each", "every", "its", "one", "same", "other", "which",
                       "airflow", "first", "last", "next", "of", "and", "or", "is", "runs",
                       "id", "ids", "log", "logs", "state", "states", "group"})


@dataclass(frozen=True)
class Shot:
    """A screenshot shown on a page: its page, file, alt text and the paragraphs beside it."""

    page: Path
    src: str
    alt: str
    beside: str

    @property
    def file(self) -> Path:
        return (self.page.parent / self.src).resolve()


def paragraphs(text: str) -> list[str]:
    return [p for p in re.split(r"\n[ \t]*\n", text) if p.strip()]


def shots(page: Path) -> list[Shot]:
    """The page's images with the paragraph right before and right after each (code blocks left out)."""
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    found = []
    parts = paragraphs(text)
    for index, part in enumerate(parts):
        for image in IMAGE.finditer(part):
            beside = [parts[i] for i in (index - 1, index + 1) if 0 <= i < len(parts)]
            rest = IMAGE.sub("", part)
            found.append(Shot(page, image["src"], image["alt"], "\n\n".join([rest, *beside])))
    return found


def task_words(text: str) -> set[str]:
    """The task ids ``text`` names as ``X task`` / ``task X``."""
    named = {m["before"] or m["after"] for m in TASK_WORD.finditer(" ".join(text.split()))}
    return {name for name in named if name not in NOT_NAMES}


def code_names(text: str) -> set[str]:
    """The backticked identifiers of ``text``."""
    return {m["name"] for m in CODE_NAME.finditer(text)}


def file_names(src: str) -> set[str]:
    """The parts of a file name that are snake_case identifiers (``approval_gate.png``)."""
    return {part for part in re.split(r"[-.]", Path(src).stem) if "_" in part and re.fullmatch(_NAME, part)}


@cache
def reference_dags() -> tuple[frozenset[str], frozenset[str]]:
    """(every task id, every param name) of the reference DAGs."""
    from airflow.sdk import Asset

    from airflow_ckpt_provider.dags.stream_upgrade import build_reference_dags

    built = build_reference_dags(doc_md=None, artifact=Asset(name="screenshots", uri="file:///tmp/v2.py"))
    dags = [built.manual, built.cold, built.switchover, built.on_artifact]
    return (frozenset(t.task_id for dag in dags for t in dag.tasks),
            frozenset(name for dag in dags for name in dag.params))


ALL_SHOTS = [shot for page in PAGES for shot in shots(page) if "/img/" in f"/{shot.src}"]


def unknown_names(shot: Shot) -> list[str]:
    """What ``shot`` names that is not a task of the reference DAGs (or, backticked, a param)."""
    tasks, params = reference_dags()
    named = task_words(shot.alt) | task_words(shot.beside) | file_names(shot.src)
    coded = code_names(shot.alt) | code_names(shot.beside)
    return sorted({n for n in named if n not in tasks} | {n for n in coded if n not in tasks | params})


def test_every_screenshot_is_shown_and_every_shown_screenshot_exists() -> None:
    shown = {shot.file for shot in ALL_SHOTS}
    stored = {p.resolve() for p in (DOCS / "img").iterdir() if p.is_file()}
    assert stored, "no screenshots under docs/src/img"
    assert sorted(p.name for p in stored - shown) == [], "a screenshot no page shows: remove it or show it"
    assert sorted(str(p) for p in shown - stored) == [], "a page shows a screenshot that is not there"


@pytest.mark.parametrize("shot", ALL_SHOTS, ids=lambda s: f"{s.page.name}:{s.src}")
def test_a_screenshot_names_only_tasks_the_reference_dags_have(shot: Shot) -> None:
    assert unknown_names(shot) == [], (
        f"{shot.page.relative_to(REPO)} names tasks beside {shot.src} that the reference DAGs do not have: "
        "rename them in the text, and take the screenshot again with the browser test (docs 'Development')")


def test_the_approval_screenshot_names_the_approval_task() -> None:
    (approval,) = [shot for shot in ALL_SHOTS if shot.src.endswith("approval.png")]
    assert "approve" in task_words(approval.alt) and "approve" in reference_dags()[0]


@pytest.mark.parametrize(("alt", "src", "unknown"), [
    ("The approval_gate task's Required Action tab", "img/approval.png", ["approval_gate"]),
    ("The approve task's tab", "img/approval_gate.png", ["approval_gate"]),
    ("the tasks `rollback_gate` and `approve`", "img/approval.png", ["rollback_gate"]),
    ("after `rollback_gate` the `approve` task waits", "img/approval.png", ["rollback_gate"]),
    ("With `require_approval` on, the approve task waits", "img/approval.png", []),
    ("the task's Required Action tab", "img/upgrade-report.png", []),
])
def test_a_renamed_task_beside_a_screenshot_is_found(alt: str, src: str, unknown: list[str]) -> None:
    assert unknown_names(Shot(DOCS / "reference-dag.md", src, alt, "")) == unknown
