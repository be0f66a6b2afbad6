"""The upgrade reports the report step stored (``ckpt report``, the own-job guide, the tests).

The report step writes ``upgrade-report.json``, ``.md`` and ``.html`` under
``<archive_root>/<stream>/<archive>/report/`` (or next to the upgrade journal,
``<archive_root>/<stream>/_upgrades/<id>/report/``, when the upgrade ended before its archive);
a later run of the same upgrade writes ``report/run-<n>/`` beside the first report, which is never
replaced. :func:`latest_report` finds the newest of a stream's reports by their ``created_at``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import InvalidUpgradeReport
from airflow_ckpt_provider.checkpoint.manifest import check_name
from airflow_ckpt_provider.storage.journal import JOURNAL_DIR
from airflow_ckpt_provider.storage.locations import open_location

REPORT_JSON = "upgrade-report.json"
REPORT_MARKDOWN = "upgrade-report.md"
#: Where report folders are, under ``<archive_root>/<stream>/``.
REPORT_FOLDERS = ("*/report", "*/report/run-*", f"{JOURNAL_DIR}/*/report", f"{JOURNAL_DIR}/*/report/run-*")


@dataclass(frozen=True)
class StoredReport:
    """One stored report: its folder (a path of the archive root's filesystem), its JSON
    (:meth:`~airflow_ckpt_provider.checkpoint.report.UpgradeReport.to_json`) and its Markdown
    (empty when that file is missing)."""

    folder: str
    data: Mapping[str, Any]
    markdown: str

    @property
    def outcome(self) -> str:
        """The upgrade's outcome (``upgraded``, ``rolled_back``, ...); empty when not recorded."""
        return str(self.data.get("outcome") or "")


def stored_reports(fs: AbstractFileSystem, root: str, stream: str) -> list[StoredReport]:
    """Every report stored for ``stream`` under the archive root ``root`` of ``fs``, oldest first.
    :class:`~airflow_ckpt_provider.checkpoint.errors.UnsafeStreamName` for a stream name that is not
    one safe path segment; :class:`InvalidUpgradeReport` naming the file for a report JSON that is
    not a JSON object."""
    base = f"{root.rstrip('/')}/{check_name(stream)}"
    paths = sorted({path for pattern in REPORT_FOLDERS for path in fs.glob(f"{base}/{pattern}/{REPORT_JSON}")})
    reports = []
    for path in paths:
        folder = path.rsplit("/", 1)[0]
        try:
            data = json.loads(fs.cat_file(path))
        except ValueError as exc:
            data = exc
        if not isinstance(data, dict):
            problem = str(data) if isinstance(data, ValueError) else f"a JSON {type(data).__name__}"
            raise InvalidUpgradeReport(found=problem,
                                       expected="the JSON object the report step wrote", path=path,
                                       action="Leave stored reports as the report step wrote them; move this file "
                                              "away to read the others.")
        markdown_path = f"{folder}/{REPORT_MARKDOWN}"
        markdown = fs.cat_file(markdown_path).decode("utf-8") if fs.exists(markdown_path) else ""
        reports.append(StoredReport(folder, data, markdown))
    return sorted(reports, key=lambda report: str(report.data.get("created_at", "")))


def latest_report(archive_root: str | Path, stream: str, **storage_options: Any) -> StoredReport | None:
    """The newest report stored for ``stream`` under ``archive_root`` (a path or fsspec URL, with
    its storage options); None when there is none yet. Raises as :func:`stored_reports` does."""
    fs, root = open_location(str(archive_root), **storage_options)
    reports = stored_reports(fs, root, stream)
    return reports[-1] if reports else None
