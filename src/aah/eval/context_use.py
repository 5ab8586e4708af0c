"""Context-use curve: the trained model scored with every head cut to each window at test time.

If quality barely moves when every head is cut to w, the model does not use context beyond
w, and no allocation of windows wider than w can matter for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aah.model import GPT

Score = Callable[[], dict[str, Any]]


def cut_window_curve(model: GPT, score: Score, cuts: Sequence[int]) -> list[dict[str, Any]]:
    """Rows for the plan in force, each cut w (every head min(w, T)) and full attention.

    `score()` evaluates the model as it stands (e.g. bits/byte, recall accuracy); the plan
    in force is restored afterwards.
    """
    seq_len = model.config.max_seq_len
    in_force = model.window_plan()
    n_layer, n_head = len(in_force), len(in_force[0])
    rows = [{"cut": "plan in force", "window": None, **score()}]
    try:
        for w in [*sorted(set(cuts)), seq_len]:
            model.set_window_plan([[min(int(w), seq_len)] * n_head for _ in range(n_layer)])
            label = "full" if w >= seq_len else str(w)
            rows.append({"cut": label, "window": min(int(w), seq_len), **score()})
    finally:
        model.set_window_plan(in_force)
    return rows


def parse_cuts(text: str) -> list[int]:
    """'32,64,128' -> [32, 64, 128]; ValueError naming --cut-windows otherwise."""
    try:
        cuts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError as err:
        raise ValueError(f"--cut-windows: expected a comma list of ints, got {text!r}") from err
    if not cuts or any(w < 1 for w in cuts):
        raise ValueError(f"--cut-windows: windows must be ints >= 1, got {text!r}")
    return cuts
