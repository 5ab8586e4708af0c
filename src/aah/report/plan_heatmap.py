"""A layer x head heatmap of a window plan (matplotlib, imported only when drawing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def save_heatmap(plan: Any, path: str | Path, *, title: str | None = None) -> None:
    """A layer x head heatmap PNG of the plan's windows (log2 colour scale, values written in).

    Needs matplotlib: ImportError naming `pip install matplotlib` when it is missing.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("the plan heatmap needs matplotlib: pip install matplotlib") from err
    windows = getattr(plan, "windows", plan)  # [layer][head], or a plan object's .windows
    grid = torch.tensor(windows, dtype=torch.float64)
    n_layer, n_head = grid.shape
    # Figure directly (no pyplot): no global state, no display backend needed.
    fig = Figure(figsize=(max(4.0, 0.5 * n_head + 2), max(3.0, 0.35 * n_layer + 1.5)))
    ax = fig.add_subplot()
    logw = grid.log2()
    image = ax.imshow(logw.numpy(), aspect="auto", cmap="viridis", interpolation="nearest")
    if n_layer * n_head <= 400:
        lo, hi = float(logw.min()), float(logw.max())
        for layer in range(n_layer):
            for head in range(n_head):
                # Dark text on the bright (wide) end of viridis, light text on the dark end.
                bright = hi > lo and (float(logw[layer, head]) - lo) / (hi - lo) > 0.6
                ax.text(
                    head,
                    layer,
                    str(windows[layer][head]),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if bright else "white",
                )
    ax.set_xticks(range(n_head))
    ax.set_yticks(range(n_layer))
    ax.set_xlabel("query head")
    ax.set_ylabel("layer")
    ax.set_title(title or "window per head")
    fig.colorbar(image, ax=ax, label="log2 window")
    fig.tight_layout()
    fig.savefig(str(path), dpi=120)
