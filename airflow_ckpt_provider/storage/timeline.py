"""The upgrade report's timeline as a picture: input rows per batch of the old and the new query
against commit time, the downtime shaded. Writes a PNG file to the local disk (matplotlib, when
installed); the report itself is the pure core's, :mod:`airflow_ckpt_provider.checkpoint.report`.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from airflow_ckpt_provider.checkpoint.report import UpgradeReport


def render_timeline_png(report: UpgradeReport, path: str) -> bool:
    """Draw input rows per batch (old and new query) against commit time, the downtime (old query's
    last commit to the new query's first) shaded and labelled; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    for label, batches, colour in (("old query", report.old_batches, "#888888"),
                                   ("new query", report.new_batches, "#1f77b4")):
        points = [(b.committed_at, b.input_rows) for b in batches
                  if b.committed_at is not None and b.input_rows is not None]
        if points:
            xs: list[Any] = [datetime.fromtimestamp(t, timezone.utc) for t, _ in points]  # matplotlib takes dates
            ax.plot(xs, [r for _, r in points], marker="o", linestyle="-", color=colour, label=label)
    window = report.window()
    if window is not None and window[1] >= window[0]:
        start, end = (datetime.fromtimestamp(t, timezone.utc) for t in window)
        ax.axvspan(start, end, color="#d62728", alpha=0.15, label=f"downtime {window[1] - window[0]:.1f} s")  # type: ignore[arg-type]
    ax.set_ylabel("input rows per batch")
    ax.set_title(f"{report.stream}: {report.outcome}")
    if ax.get_legend_handles_labels()[0]:  # no batches (an upgrade that ended early): no legend
        ax.legend(loc="upper left")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return True
