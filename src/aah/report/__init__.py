"""Reports over a run directory: matplotlib figures (plots) and one self-contained HTML page."""

from __future__ import annotations

from aah.report.html import build_report

__all__ = ["build_report"]
