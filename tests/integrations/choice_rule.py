"""The plan search's choice rule recomputed from a plan's record, for tests that check which
candidate a search returned without repeating the library's code."""

from __future__ import annotations

from typing import Any


def expected_choice(choice: dict[str, Any]) -> str:
    """The candidate the record's scores call for: the lowest, unless it is not a one-window
    candidate (named "uniform, ...") and is not below the best of those by the recorded
    relative margin; then that window."""
    scores: dict[str, float] = choice["scores"]
    lowest = min(scores, key=scores.__getitem__)
    windows = {name: score for name, score in scores.items() if name.startswith("uniform")}
    if not windows or lowest in windows:
        return lowest
    window = min(windows, key=windows.__getitem__)
    return lowest if scores[lowest] < windows[window] * (1 - choice["margin"]) else window
