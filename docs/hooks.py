"""Code from the repository in the docs pages, readable as plain files and never stale.

A line that is exactly ``<!-- dag-source SPEC -->`` is followed, in the page itself, by a fenced
Python block holding the part of ``dags/stream_upgrade.py`` that SPEC names (found with
:mod:`ast`, the DAG file has no markers of its own); ``<!-- source PATH SPEC -->`` does the
same for another Python file of the repository (PATH relative to the repository root, e.g.
``dags/jobs/stream_v1.py``). SPEC is:

``*``
    the whole file;
``NAME``
    the top-level function, class or assignment NAME (decorators and comments above it included);
``NAME.INNER``
    the statement in NAME's body (looking through ``with``/``if``/``for``/``try`` blocks) that
    defines or assigns INNER, e.g. ``build_stream_upgrade_dag.graceful_stop``;
``FIRST..LAST``
    from statement FIRST to statement LAST, both inclusive and in the same block; with LAST left
    out (``FIRST..``), to the end of FIRST's block;
``NAME:signature``
    a function's ``def`` line(s) and docstring, without the body.

``python docs/hooks.py`` (``make docs-sync``) rewrites every such block with the current source
(adding the block after a marker that has none). As an MkDocs hook, it fails the build when a
block differs from the source, or a marker names something that no longer exists;
``tests/unit/test_docs_sources.py`` checks the same in the fast tier.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DAG_FILE = REPO / "dags" / "stream_upgrade.py"
MARKER = re.compile(r"^<!-- (?:dag-source|source (?P<path>\S+)) (?P<spec>\S+) -->[ \t]*$", re.MULTILINE)


class DagSourceError(Exception):
    """A marker names a part of the DAG file that does not exist."""


def _names(node: ast.stmt) -> set[str]:
    """Names a statement defines: functions, classes, assignment targets (plain names only)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    found = set()
    for target in targets:
        for sub in ast.walk(target):
            if isinstance(sub, ast.Name):
                found.add(sub.id)
    return found


def _blocks(body: list[ast.stmt]) -> list[list[ast.stmt]]:
    """``body`` and every statement list nested in it through compound statements (not defs)."""
    blocks = [body]
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for attr in ("body", "orelse", "finalbody"):
            inner = getattr(node, attr, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                blocks += _blocks(inner)
        for handler in getattr(node, "handlers", []) or []:
            blocks += _blocks(handler.body)
    return blocks


def _find(body: list[ast.stmt], name: str) -> tuple[list[ast.stmt], int]:
    """(the block, the index in it) of the statement that defines ``name``."""
    for block in _blocks(body):
        for index, node in enumerate(block):
            if name in _names(node):
                return block, index
    raise DagSourceError(f"no {name!r} defined there")


def _resolve(tree: ast.Module, dotted: str) -> tuple[list[ast.stmt], int]:
    parts = dotted.split(".")
    body: list[ast.stmt] = tree.body
    block, index = _find(body, parts[0])
    for part in parts[1:]:
        node = block[index]
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            raise DagSourceError(f"{dotted!r}: {parts[0]!r} is not a function or class")
        block, index = _find(node.body, part)
    return block, index


def _start_line(node: ast.stmt, lines: list[str]) -> int:
    """First line (1-based) of ``node`` with its decorators and the comment lines right above."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    while first > 1 and lines[first - 2].strip().startswith("#"):
        first -= 1
    return first


def _text(lines: list[str], first: int, last: int) -> str:
    return textwrap.dedent("\n".join(lines[first - 1:last])).strip("\n")


def extract(spec: str, source: str | None = None) -> str:
    """The source text SPEC names (see the module docstring)."""
    source = DAG_FILE.read_text(encoding="utf-8") if source is None else source
    if spec == "*":
        return source.rstrip("\n")
    tree = ast.parse(source)
    lines = source.splitlines()
    if spec.endswith(":signature"):
        block, index = _resolve(tree, spec[: -len(":signature")])
        node = block[index]
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            raise DagSourceError(f"{spec!r}: not a function")
        body0 = node.body[0]
        has_doc = isinstance(body0, ast.Expr) and isinstance(getattr(body0, "value", None), ast.Constant) \
            and isinstance(body0.value.value, str)
        last = body0.end_lineno if has_doc else node.body[0].lineno - 1
        return _text(lines, _start_line(node, lines), last) + ("\n    ..." if has_doc else "")
    if ".." in spec:
        first_spec, _, last_name = spec.partition("..")
        block, first = _resolve(tree, first_spec)
        if last_name:
            later = [i for i in range(first, len(block)) if last_name in _names(block[i])]
            if not later:
                raise DagSourceError(f"{spec!r}: no {last_name!r} after {first_spec!r} in the same block")
            last = later[0]
        else:
            last = len(block) - 1
        return _text(lines, _start_line(block[first], lines), block[last].end_lineno or block[last].lineno)
    block, index = _resolve(tree, spec)
    node = block[index]
    return _text(lines, _start_line(node, lines), node.end_lineno or node.lineno)


def _read(rel: str | None) -> str:
    path = DAG_FILE if rel is None else (REPO / rel).resolve()
    if REPO not in path.parents:
        raise DagSourceError(f"{rel}: outside the repository")
    return path.read_text(encoding="utf-8")


FENCE = re.compile(r"\n```python\n(?P<code>.*?)\n```[ \t]*(?=\n|$)", re.DOTALL)


class StaleSource(DagSourceError):
    """A page's copy of a source part differs from the source."""


def _fenced(rel: str | None, spec: str) -> str:
    try:
        text = extract(spec, _read(rel))
    except DagSourceError as exc:
        raise DagSourceError(f"{rel or DAG_FILE.relative_to(REPO)}, {spec!r}: {exc}") from None
    return f"```python\n{text}\n```"


def _parts(markdown: str) -> list[tuple[re.Match[str], re.Match[str] | None]]:
    """Every marker with the fenced block right after it (``None`` when the next line is not one)."""
    return [(marker, FENCE.match(markdown, marker.end())) for marker in MARKER.finditer(markdown)]


def sync(markdown: str) -> str:
    """``markdown`` with the block after every marker set to the current source it names."""
    out, at = [], 0
    for marker, fence in _parts(markdown):
        out += [markdown[at:marker.end()], "\n", _fenced(marker["path"], marker["spec"])]
        at = fence.end() if fence else marker.end()
        if not fence and not markdown.startswith("\n", at):
            out.append("\n")
    return "".join(out) + markdown[at:]


def stale(markdown: str) -> list[str]:
    """The markers whose block is missing or differs from the current source, as ``line N: MARKER``."""
    found = []
    for marker, fence in _parts(markdown):
        if fence is None or fence.group(0).strip("\n") != _fenced(marker["path"], marker["spec"]):
            line = markdown.count("\n", 0, marker.start()) + 1
            found.append(f"line {line}: {marker.group(0).strip()}")
    return found


def render(markdown: str) -> str:
    """The page as MkDocs shows it: the markers' blocks must be current (:class:`StaleSource`)."""
    if problems := stale(markdown):
        raise StaleSource("code differs from the source at " + "; ".join(problems)
                          + ": run `make docs-sync` (python docs/hooks.py) and commit the pages")
    return markdown


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if "<!-- dag-source " not in markdown and "<!-- source " not in markdown:
        return markdown
    try:
        return render(markdown)
    except (DagSourceError, SyntaxError, OSError) as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_path}: {exc}") from exc


def main() -> int:
    """Rewrite the code blocks of every page under docs/src; prints the pages it changed."""
    for page in sorted((REPO / "docs" / "src").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        synced = sync(text)
        if synced != text:
            page.write_text(synced, encoding="utf-8")
            print(f"synced {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
