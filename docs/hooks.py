"""Code from the repository in the docs pages, readable as plain files and never stale.

A line that is exactly ``<!-- dag-source SPEC -->`` is followed, in the page itself, by a fenced
Python block holding the part of ``dags/stream_upgrade.py`` that SPEC names (found with
:mod:`ast`, the DAG file has no markers of its own); ``<!-- source PATH SPEC -->`` does the
same for another Python file of the repository (PATH relative to the repository root, e.g.
``dags/jobs/stream_v1.py``). SPEC is:

``*``
    the whole file;
``NAME``
    the top-level function, class, assignment or import of NAME (decorators and comments above it
    included);
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

A line that is exactly ``<!-- demo-output FOLDER PART -->`` is followed by a fenced ``text``
block holding what ``make demo`` printed in a recorded run: FOLDER (relative to the repository
root, ``docs/samples/demo``) holds that run's ``upgrade-report.json`` (the report the DAG stored)
and ``demo-report.json`` (the demo's record of its proof); the block is rendered from them by the
renderers the demo prints with (``UpgradeReport.to_markdown`` and
:mod:`tests.harness.demo_output`): PART ``all`` is the README's excerpt, ``report`` the report's
excerpt alone, ``proof`` the proof and the verdict. ``python docs/hooks.py --record-demo
[DEMO_REPORT]`` records the last ``make demo`` run there (its ``demo-report.json``, the report
stored in the archive it names and the report's ``timeline.png``), then syncs the pages.

The pages are every Markdown file under ``docs/src`` and the repository's ``README.md``.

A line that is exactly ``<!-- api-reference -->`` is replaced, when the site is built (the page
file keeps the marker), by the API reference generated from the code: for every operator, hook
and trigger class of the modules ``get_provider_info()`` lists, its extra links, and every DAG
factory of ``airflow_ckpt_provider.dags`` (a function of a module's ``__all__`` that returns a
``DAG``): the import path, the signature and the docstring. A public class or factory without a
docstring fails the build. The reference is read in a child Python (``python docs/hooks.py
--api-reference OUT``) with a temporary ``AIRFLOW_HOME``: importing Airflow creates folders in its
home and sets up logging, which the MkDocs process keeps free of.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DAG_FILE = REPO / "dags" / "stream_upgrade.py"
MARKER = re.compile(r"^<!-- (?:dag-source|source (?P<path>\S+)) (?P<spec>\S+) -->[ \t]*$", re.MULTILINE)
DEMO_MARKER = re.compile(r"^<!-- demo-output (?P<folder>\S+) (?P<part>all|report|proof) -->[ \t]*$", re.MULTILINE)
#: The recorded ``make demo`` run the pages quote, and its two records.
DEMO_SAMPLE = "docs/samples/demo"
DEMO_REPORT, DEMO_RESULT, DEMO_TIMELINE = "upgrade-report.json", "demo-report.json", "timeline.png"


class DagSourceError(Exception):
    """A marker names a part of a source file that does not exist, or a recorded demo run that is
    not there."""


def _names(node: ast.stmt) -> set[str]:
    """Names a statement defines: functions, classes, assignment targets (plain names only), and
    the names an import binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {alias.asname or alias.name.split(".")[0] for alias in node.names}
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
        has_doc = ast.get_docstring(node, clean=False) is not None
        last = (body0.end_lineno or body0.lineno) if has_doc else body0.lineno - 1
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
TEXT_FENCE = re.compile(r"\n```text\n(?P<code>.*?)\n```[ \t]*(?=\n|$)", re.DOTALL)


class StaleSource(DagSourceError):
    """A page's copy of a source part differs from the source."""


def _fenced(rel: str | None, spec: str) -> str:
    try:
        text = extract(spec, _read(rel))
    except DagSourceError as exc:
        raise DagSourceError(f"{rel or DAG_FILE.relative_to(REPO)}, {spec!r}: {exc}") from None
    return f"```python\n{text}\n```"


def demo_output(folder: str, part: str) -> str:
    """What a recorded ``make demo`` run in ``folder`` printed, PART ``all``, ``report`` or
    ``proof`` (see the module docstring); :class:`DagSourceError` when its records are missing or
    are not what the demo writes."""
    base = (REPO / folder).resolve()
    if REPO not in base.parents:
        raise DagSourceError(f"{folder}: outside the repository")
    if str(REPO) not in sys.path:  # run as a script (make docs-sync): the harness is the checkout's
        sys.path.insert(0, str(REPO))
    from airflow_ckpt_provider.checkpoint.report import UpgradeReport
    from airflow_ckpt_provider.records.codec import TypedError
    from tests.harness import demo_output as printed

    try:
        report = UpgradeReport.from_json((base / DEMO_REPORT).read_text(encoding="utf-8"))
        result = json.loads((base / DEMO_RESULT).read_text(encoding="utf-8"))
        markdown = report.to_markdown(DEMO_TIMELINE)
        if part == "report":
            return "\n".join(printed.report_excerpt(markdown))
        if part == "proof":
            return "\n".join([*printed.proof_lines(result), "", printed.verdict(printed.demo_ok(result))])
        return printed.readme_excerpt(markdown, result)
    except (OSError, ValueError, KeyError, TypeError, TypedError) as exc:
        raise DagSourceError(f"{folder}: not a recorded demo run ({DEMO_REPORT} and {DEMO_RESULT}): {exc}") from None


def _parts(markdown: str) -> list[tuple[re.Match[str], re.Match[str] | None, Callable[[], str]]]:
    """Every marker with the fenced block right after it (``None`` when the next line is not one)
    and the block it must be, in page order."""
    found = [(m, FENCE.match(markdown, m.end()), lambda m=m: _fenced(m["path"], m["spec"]))
             for m in MARKER.finditer(markdown)]
    found += [(m, TEXT_FENCE.match(markdown, m.end()),
               lambda m=m: f"```text\n{demo_output(m['folder'], m['part'])}\n```")
              for m in DEMO_MARKER.finditer(markdown)]
    return sorted(found, key=lambda part: part[0].start())


def sync(markdown: str) -> str:
    """``markdown`` with the block after every marker set to the current source it names."""
    out, at = [], 0
    for marker, fence, block in _parts(markdown):
        out += [markdown[at:marker.end()], "\n", block()]
        at = fence.end() if fence else marker.end()
        if not fence and not markdown.startswith("\n", at):
            out.append("\n")
    return "".join(out) + markdown[at:]


def stale(markdown: str) -> list[str]:
    """The markers whose block is missing or differs from the current source, as ``line N: MARKER``."""
    found = []
    for marker, fence, block in _parts(markdown):
        if fence is None or fence.group(0).strip("\n") != block():
            line = markdown.count("\n", 0, marker.start()) + 1
            found.append(f"line {line}: {marker.group(0).strip()}")
    return found


def render(markdown: str) -> str:
    """The page as MkDocs shows it: the markers' blocks must be current (:class:`StaleSource`)."""
    if problems := stale(markdown):
        raise StaleSource("code differs from the source at " + "; ".join(problems)
                          + ": run `make docs-sync` (python docs/hooks.py) and commit the pages")
    return markdown


# -- the API reference ------------------------------------------------------------------------------

API_MARKER = re.compile(r"^<!-- api-reference -->[ \t]*$", re.MULTILINE)
#: the sections of the reference: the key of ``get_provider_info()`` listing the modules, the
#: heading, and the Airflow base class (dotted) whose subclasses the modules define
API_KINDS: tuple[tuple[str, str, str], ...] = (
    ("operators", "Operators", "airflow.sdk.BaseOperator"),
    ("hooks", "Hooks", "airflow.sdk.BaseHook"),
    ("triggers", "Triggers", "airflow.triggers.base.BaseTrigger"),
)
DAGS_PACKAGE = "airflow_ckpt_provider.dags"
#: Return annotations of the factories that build several DAGs at once
DAG_SETS = ("ReferenceDags",)
#: Sphinx roles in the docstrings (``:class:`~a.b.C``` and the like), shown as code
_ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj|const):`(~?)([^`]+)`")
_PARAM = re.compile(r"^:param (\w+): ?(.*)$")
_PARAM_ITEM = re.compile(r"^- `\w+`: ")


class ApiReferenceError(DagSourceError):
    """The API reference cannot be generated: a public class without a docstring, a listed module
    that does not import, or the child Python failed."""


def _imported(dotted: str) -> Any:  # noqa: ANN401 - a module attribute
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def api_objects() -> Iterator[tuple[str, list[tuple[str, Any]]]]:
    """Each section of the reference with its ``(import path, object)`` pairs, in the order
    ``get_provider_info()`` lists the modules (classes in the order their module defines them)."""
    from airflow_ckpt_provider import get_provider_info

    info = get_provider_info()
    for key, heading, base in API_KINDS:
        base_class = _imported(base)
        modules = [name for entry in info.get(key, []) for name in entry["python-modules"]]
        found = []
        for name in modules:
            module = importlib.import_module(name)
            found += [(f"{name}.{attr}", value) for attr, value in vars(module).items()
                      if inspect.isclass(value) and value.__module__ == name and not attr.startswith("_")
                      and issubclass(value, base_class)]
        # the public mixins of these modules that they derive from (their arguments come with them)
        mixins = {f"{c.__module__}.{c.__name__}": c for _, value in found for c in value.__mro__
                  if c.__module__ in modules and not c.__name__.startswith("_") and not issubclass(c, base_class)}
        yield heading, found + sorted(mixins.items())
    yield "Extra links", [(dotted, _imported(dotted)) for dotted in info.get("extra-links", [])]
    dag_class = _imported("airflow.sdk.DAG")
    factories = []
    for sub in pkgutil.iter_modules(importlib.import_module(DAGS_PACKAGE).__path__, f"{DAGS_PACKAGE}."):
        module = importlib.import_module(sub.name)
        for attr in getattr(module, "__all__", ()):
            value = getattr(module, attr)
            returns = inspect.signature(value).return_annotation if inspect.isfunction(value) else None
            if returns in ("DAG", dag_class) or returns in DAG_SETS:
                factories.append((f"{sub.name}.{attr}", value))
    yield "DAG factories", factories


def _annotation(annotation: Any) -> str:  # noqa: ANN401 - an annotation as written or evaluated
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def signature_text(name: str, target: Callable[..., Any]) -> str:
    """``name(...)`` with ``target``'s parameters one per line, as written (annotations as text)."""
    signature = inspect.signature(target)
    lines: list[str] = []
    kinds = [p.kind for p in signature.parameters.values()]
    for index, param in enumerate(signature.parameters.values()):
        if param.kind is param.KEYWORD_ONLY and inspect.Parameter.VAR_POSITIONAL not in kinds \
                and (index == 0 or kinds[index - 1] is not param.KEYWORD_ONLY):
            lines.append("*")
        text = ("*" if param.kind is param.VAR_POSITIONAL else "**" if param.kind is param.VAR_KEYWORD else "") \
            + param.name
        if param.annotation is not param.empty:
            text += f": {_annotation(param.annotation)}"
        if param.default is not param.empty:
            default = param.default
            shown = f"{type(default).__name__}.{default.name}" if isinstance(default, enum.Enum) else repr(default)
            text += f"{' = ' if param.annotation is not param.empty else '='}{shown}"
        lines.append(text)
        if param.kind is param.POSITIONAL_ONLY and (index + 1 == len(kinds)
                                                    or kinds[index + 1] is not param.POSITIONAL_ONLY):
            lines.append("/")
    returns = "" if inspect.isclass(target) or signature.return_annotation is signature.empty \
        else f" -> {_annotation(signature.return_annotation)}"
    if not lines:
        return f"{name}(){returns}"
    return f"{name}(\n" + "".join(f"    {line},\n" for line in lines) + f"){returns}"


def docstring_markdown(text: str) -> str:
    """A docstring as Markdown: its paragraphs as they are, each ``:param NAME: text`` line (and its
    indented continuation) a list item, Sphinx roles as code."""
    lines: list[str] = []
    for line in inspect.cleandoc(text).splitlines():
        param = _PARAM.match(line)
        if param:
            if lines and lines[-1].strip() and not _PARAM_ITEM.match(lines[-1]) and not lines[-1].startswith(" "):
                lines.append("")  # a Markdown list starts after a blank line
            line = f"- `{param[1]}`: {param[2]}"
        lines.append(line)
    return _ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", "\n".join(lines))


def _section(dotted: str, value: Any, shown: set[str]) -> str:  # noqa: ANN401 - a class or function
    module, _, name = dotted.rpartition(".")
    doc = value.__dict__.get("__doc__") if inspect.isclass(value) else value.__doc__
    if not isinstance(doc, str) or not doc.strip():
        raise ApiReferenceError(f"{dotted} has no docstring: the API reference shows each public class's own")
    parts = [f"### {name}", "", "```python", f"from {module} import {name}", "", signature_text(name, value), "```"]
    if inspect.isclass(value):
        bases = [f"[`{b.__name__}`](#{b.__name__.lower()})" if b.__name__ in shown else f"`{b.__module__}.{b.__name__}`"
                 for b in value.__bases__ if b is not object]
        if bases:
            parts += ["", "Bases: " + ", ".join(bases)]
    parts += ["", docstring_markdown(doc)]
    init = value.__dict__.get("__init__") if inspect.isclass(value) else None
    if inspect.isfunction(init) and init.__doc__:  # the arguments, when the class documents them there
        parts += ["", docstring_markdown(init.__doc__)]
    return "\n".join([*parts, ""])


def api_markdown() -> str:
    """The API reference (see the module doc), imported in this process."""
    sections = list(api_objects())
    shown = {value.__name__ for _, found in sections for _, value in found}
    out = []
    for heading, found in sections:
        if found:
            out += [f"## {heading}", ""] + [_section(dotted, value, shown) for dotted, value in found]
    return "\n".join(out).rstrip("\n") + "\n"


def api_reference() -> str:
    """:func:`api_markdown` from a child Python with a temporary ``AIRFLOW_HOME``
    (:class:`ApiReferenceError` with its output when it fails)."""
    with tempfile.TemporaryDirectory(prefix="ckpt-docs-") as tmp:
        out = Path(tmp) / "reference.md"
        env = {**os.environ, "AIRFLOW_HOME": str(Path(tmp) / "airflow"),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))}
        done = subprocess.run([sys.executable, __file__, "--api-reference", str(out)], cwd=REPO, env=env,
                              capture_output=True, text=True, check=False, timeout=300)
        if done.returncode != 0 or not out.is_file():
            raise ApiReferenceError(f"the API reference could not be generated (exit {done.returncode}): "
                                    + (done.stderr.strip() or done.stdout.strip())[-2000:])
        return out.read_text(encoding="utf-8")


def with_api_reference(markdown: str) -> str:
    """``markdown`` with its ``<!-- api-reference -->`` line replaced by the API reference."""
    if not API_MARKER.search(markdown):
        return markdown
    reference = api_reference().rstrip("\n")
    return API_MARKER.sub(lambda _: reference, markdown)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    has_source = any(marker in markdown for marker in ("<!-- dag-source ", "<!-- source ", "<!-- demo-output "))
    if not has_source and not API_MARKER.search(markdown):
        return markdown
    try:
        return with_api_reference(render(markdown) if has_source else markdown)
    except (DagSourceError, SyntaxError, OSError, subprocess.SubprocessError) as exc:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_path}: {exc}") from exc


def pages() -> list[Path]:
    """The pages whose markers are kept current: every page under docs/src, and the README."""
    return [*sorted((REPO / "docs" / "src").rglob("*.md")), REPO / "README.md"]


def record_demo(demo_report: Path, target: Path = REPO / DEMO_SAMPLE) -> list[Path]:
    """Copy the ``make demo`` run that wrote ``demo_report`` into ``target`` (:data:`DEMO_SAMPLE`):
    its ``demo-report.json``, and the report and timeline stored in the archive it names; returns
    the files written. :class:`DagSourceError` when the run's records are not there."""
    try:
        archive = json.loads(demo_report.read_text(encoding="utf-8"))["archive"]
    except (OSError, ValueError, KeyError) as exc:
        raise DagSourceError(f"{demo_report}: not a demo's record (run `make demo` first): {exc}") from None
    stored = Path(str(archive)) / "report"
    if not (stored / DEMO_REPORT).is_file():
        raise DagSourceError(f"{stored / DEMO_REPORT}: the demo's report is not there (its work folder was removed?)")
    target.mkdir(parents=True, exist_ok=True)
    written = [Path(shutil.copyfile(demo_report, target / DEMO_RESULT)),
               Path(shutil.copyfile(stored / DEMO_REPORT, target / DEMO_REPORT))]
    if (stored / DEMO_TIMELINE).is_file():
        written.append(Path(shutil.copyfile(stored / DEMO_TIMELINE, target / DEMO_TIMELINE)))
    return written


def main() -> int:
    """Rewrite the marked blocks of every page (:func:`pages`); prints the pages it changed. With
    ``--record-demo [DEMO_REPORT]`` (default ``demo-report.json``), first record that demo run."""
    if sys.argv[1:2] == ["--record-demo"]:
        for path in record_demo(Path(sys.argv[2]) if len(sys.argv) > 2 else REPO / "demo-report.json"):
            print(f"recorded {path.relative_to(REPO)}")
    for page in pages():
        text = page.read_text(encoding="utf-8")
        synced = sync(text)
        if synced != text:
            page.write_text(synced, encoding="utf-8")
            print(f"synced {page.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--api-reference"] and len(sys.argv) == 3:  # the child Python of api_reference()
        Path(sys.argv[2]).write_text(api_markdown(), encoding="utf-8")
        raise SystemExit(0)
    raise SystemExit(main())
