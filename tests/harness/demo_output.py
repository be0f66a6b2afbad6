"""What ``make demo`` prints after its upgrade, and the README's excerpt of it, from the demo's
records alone (pure: no Airflow, no Spark).

The demo prints the Markdown report the DAG stored (``UpgradeReport.to_markdown``, the renderer of
``upgrade-report.md``), then :func:`proof_lines` of its ``demo-report.json``. The README shows
:func:`readme_excerpt` of a recorded run (``docs/samples/demo/``): the same two renderings, with
the table rules, the rows that name paths or the DAG run, the steps that did not run, the
per-batch tables, the timeline image and the notes left out. ``docs/hooks.py`` keeps the README's
block equal to it; ``tests/unit/test_docs_sources.py`` fails when they differ.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: The facts of the report the excerpt leaves out: they name paths or the DAG run.
LEFT_OUT_FACTS = ("DAG run", "old checkpoint", "new checkpoint", "archive")
#: The report's sections the excerpt leaves out (by the start of their heading).
LEFT_OUT_SECTIONS = ("## Input rows per batch", "## Notes")
_RULE = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+$")


def proof_lines(result: Mapping[str, Any]) -> list[str]:
    """The proof the demo prints after the report, from its ``demo-report.json`` (``result``):
    the sink's audit, the DAG run, and the stateful stream's check."""
    lines = ["## Proof from the sink", ""]
    lines += [f"- {key}: {result[key]}" for key in ("produced", "in_sink", "lost", "duplicated", "unexpected")]
    lines.append(f"- DAG run: {result['dag_state']}; outcome: {result['outcome']}; downtime: {result['downtime_s']} s")
    stateful = result["stateful"]
    seeded = stateful["state_wait_s"]
    export = stateful["export"]
    lines += ["", "## The stateful stream (running totals per customer)", "",
              f"- downtime {stateful['downtime_s'] or 0:.1f} s, of which the standby seeding the state "
              + (f"{seeded:.1f} s" if seeded is not None else "(not recorded)"),
              f"- state exported after the switch, outside the downtime, at batch {export.get('batch_id')}: "
              f"{export.get('rows')} rows, {export.get('seconds', 0):.1f} s",
              f"- purchases in Kafka: {stateful['purchases']}; customers: {stateful['customers']}",
              f"- customers whose total differs from Kafka's, after the upgrade: {stateful['mismatched']}",
              f"- the same upgrade without the state (carry_state off): {stateful['control_mismatched']} differ"]
    return lines


def verdict(ok: bool) -> str:
    """The demo's last line."""
    return "OK: every record reached the sink exactly once, and every customer's total is exact" if ok \
        else "FAILED: see above"


def report_excerpt(markdown: str) -> list[str]:
    """The lines of a stored ``upgrade-report.md`` the README shows (see the module doc)."""
    kept: list[str] = []
    section = ""  # the facts come before the first section
    for line in markdown.splitlines():
        if line.startswith("## "):
            section = line
        if section.startswith(LEFT_OUT_SECTIONS) or _RULE.match(line) or line.replace(" ", "") == "|||" \
                or line.startswith("!["):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")] if line.startswith("|") else []
        if cells and ((not section and cells[0] in LEFT_OUT_FACTS)
                      or (section == "## Steps" and cells[1:2] == ["not run"])):
            continue
        if line == "" and kept and kept[-1] == "":
            continue
        kept.append(line)
    while kept and kept[-1] == "":
        kept.pop()
    return kept


def demo_ok(result: Mapping[str, Any]) -> bool:
    """The demo's verdict on its ``demo-report.json``: the sink holds every record exactly once
    (nothing lost, duplicated or unexpected), the upgrade ended ``upgraded``, and so did the
    stateful stream's, whose every customer's total is exact while the control's (no state
    carried) are not."""
    stateful = result["stateful"]
    return (result["lost"] == result["duplicated"] == result["unexpected"] == 0 and result["outcome"] == "upgraded"
            and stateful["customers"] > 0 and stateful["mismatched"] == 0 and stateful["control_mismatched"] > 0
            and stateful["outcome"] == "upgraded")


def readme_excerpt(markdown: str, result: Mapping[str, Any]) -> str:
    """The README's excerpt of a demo run: its report's excerpt, its proof and its verdict."""
    return "\n".join([*report_excerpt(markdown), "", *proof_lines(result), "", verdict(demo_ok(result))])


__all__ = ["LEFT_OUT_FACTS", "LEFT_OUT_SECTIONS", "demo_ok", "proof_lines", "readme_excerpt", "report_excerpt", "verdict"]
