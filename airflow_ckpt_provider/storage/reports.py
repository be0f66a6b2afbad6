"""The upgrade reports the report step stored, read through fsspec (``ckpt report``, the own-job
guide, the tests).

The report step writes ``upgrade-report.json``, ``.md`` and ``.html`` under
``<archive_root>/<stream>/<archive>/report/`` (or next to the upgrade journal,
``<archive_root>/<stream>/_upgrades/<id>/report/``, when the upgrade ended before its archive);
a later run of the same upgrade writes ``report/run-<n>/`` beside the first report, which is never
replaced. :func:`latest_report` finds the newest of a stream's reports by their ``created_at``;
each is decoded by the report's own codec
(:meth:`~airflow_ckpt_provider.checkpoint.report.UpgradeReport.from_json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fsspec import AbstractFileSystem

from airflow_ckpt_provider.checkpoint.errors import InvalidUpgradeReport
from airflow_ckpt_provider.checkpoint.manifest import check_name
from airflow_ckpt_provider.checkpoint.report import UpgradeReport
from airflow_ckpt_provider.storage.journal import JOURNAL_DIR
from airflow_ckpt_provider.storage.locations import open_location

REPORT_JSON = "upgrade-report.json"
REPORT_MARKDOWN = "upgrade-report.md"
#: Where report folders are, under ``<archive_root>/<stream>/``.
REPORT_FOLDERS = ("*/report", "*/report/run-*", f"{JOURNAL_DIR}/*/report", f"{JOURNAL_DIR}/*/report/run-*")


@dataclass(frozen=True)
class StoredReport:
    """One stored report: its folder (a path of the archive root's filesystem), the report
    (``upgrade-report.json``, decoded) and its Markdown (``upgrade-report.md``; empty when missing)."""

    folder: str
    report: UpgradeReport
    markdown: str

    @property
    def outcome(self) -> str:
        """The upgrade's outcome (``upgraded``, ``rolled_back``, ...)."""
        return self.report.outcome

    @property
    def data(self) -> dict[str, Any]:
        """The report as its JSON holds it (:meth:`UpgradeReport.to_dict`)."""
        return self.report.to_dict()


def stored_reports(fs: AbstractFileSystem, root: str, stream: str) -> list[StoredReport]:
    """Every report stored for ``stream`` under the archive root ``root`` of ``fs``, oldest first.
    :class:`~airflow_ckpt_provider.checkpoint.errors.UnsafeStreamName` for a stream name that is not
    one safe path segment; :class:`InvalidUpgradeReport` naming the file for a report JSON its codec
    refuses."""
    base = f"{root.rstrip('/')}/{check_name(stream)}"
    paths = sorted({path for pattern in REPORT_FOLDERS for path in fs.glob(f"{base}/{pattern}/{REPORT_JSON}")})
    reports = []
    for path in paths:
        folder = path.rsplit("/", 1)[0]
        try:
            report = UpgradeReport.from_json(fs.cat_file(path))
        except InvalidUpgradeReport as exc:
            raise InvalidUpgradeReport(found=exc.found, expected=exc.expected, path=path,
                                       action="Leave stored reports as the report step wrote them; move this file "
                                              "away to read the others.") from None
        markdown_path = f"{folder}/{REPORT_MARKDOWN}"
        markdown = fs.cat_file(markdown_path).decode("utf-8") if fs.exists(markdown_path) else ""
        reports.append(StoredReport(folder, report, markdown))
    return sorted(reports, key=lambda stored: stored.report.created_at)


def latest_report(archive_root: str | Path, stream: str, **storage_options: Any) -> StoredReport | None:
    """The newest report stored for ``stream`` under ``archive_root`` (a path or fsspec URL, with
    its storage options); None when there is none yet. Raises as :func:`stored_reports` does."""
    fs, root = open_location(str(archive_root), **storage_options)
    reports = stored_reports(fs, root, stream)
    return reports[-1] if reports else None
