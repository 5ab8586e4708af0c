"""A per-layer x per-head window map as a small text grid with a compact shading column."""

from __future__ import annotations

import math

#: one shade per halving of the window: T, T/2, T/4, T/8, shorter.
SHADES = "█▓▒░·"
LEGEND = "█ T  ▓ T/2  ▒ T/4  ░ T/8  · shorter"


def shade(window: int, seq_len: int) -> str:
    """One character per halving below full context (log scale: windows are powers-of-two-ish)."""
    halvings = math.log2(seq_len / min(window, seq_len))
    return SHADES[min(len(SHADES) - 1, round(halvings))]


def window_map(plan: list[list[int]], seq_len: int) -> str:
    """Rows L0.., columns h0.., window values (w >= T shown as T), then a shading column."""
    if not plan:
        return "(empty plan)"
    n_head = max(len(row) for row in plan)
    width = max(4, len(str(seq_len)) + 1)
    header = "    " + "".join(f"h{h}".rjust(width) for h in range(n_head)) + "   shade"
    lines = [header]
    for layer, row in enumerate(plan):
        cells = "".join(str(min(w, seq_len)).rjust(width) for w in row)
        shades = "".join(shade(w, seq_len) for w in row)
        lines.append(f"L{layer}".ljust(4) + cells + f"   {shades}")
    lines.append(f"(T = {seq_len}; shade: {LEGEND})")
    return "\n".join(lines)
