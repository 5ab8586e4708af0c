"""Versions, commits and dates as the reports show them: what the runs recorded in their
summary.json (aah.training.provenance), and what generated the report."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

KEYS = ("aah_version", "torch_version", "git_commit", "date")


def recorded(summaries: Iterable[dict[str, Any]]) -> dict[str, list[str]]:
    """key -> the distinct values the summaries recorded, in first-seen order."""
    out: dict[str, list[str]] = {k: [] for k in KEYS}
    for summary in summaries:
        for key in KEYS:
            value = summary.get(key)
            if value and str(value) not in out[key]:
                out[key].append(str(value))
    return out


def run_summaries(run_dirs: Iterable[Path]) -> list[dict[str, Any]]:
    """The readable summary.json of each run directory (others are skipped)."""
    out = []
    for run_dir in run_dirs:
        try:
            out.append(json.loads((run_dir / "summary.json").read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return out


def suite_lines(run_dirs: Iterable[Path]) -> list[str]:
    """Markdown lines: what trained the cells, and what generated this report."""
    from aah.training.provenance import provenance

    seen = recorded(run_summaries(run_dirs))
    if any(seen.values()):
        dates = sorted(seen["date"])
        span = f"{dates[0]} to {dates[-1]}" if len(dates) > 1 else (dates or ["?"])[0]
        cells = (
            f"Cells trained with aah {', '.join(seen['aah_version']) or '?'}, torch "
            f"{', '.join(seen['torch_version']) or '?'}, commit "
            f"{', '.join(seen['git_commit']) or 'unknown'}; finished {span}."
        )
    else:
        cells = "Cells recorded no versions (they finished before summary.json held them)."
    now = provenance()
    made = (
        f"Report generated {now['date']} with aah {now['aah_version']}, torch "
        f"{now['torch_version']}, commit {now['git_commit'] or 'unknown'}."
    )
    return [cells, "", made, ""]
