"""Figures for one run: loss curves, coverage over training, window heatmaps, final window map,
and for generated tasks recall accuracy over training and the context-use curve.

matplotlib (a dependency) is imported inside each function, never at import time.
Each function writes one PNG and returns its path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

Record = dict[str, Any]
MAX_SNAPSHOTS = 6
DPI = 160  # print quality; a 6-inch figure is ~960 px wide
#: font sizes that stay readable when a figure is shown at page width.
STYLE = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 8,
}


def _pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend, else a ValueError saying how."""
    try:
        import matplotlib
    except ImportError as err:
        raise ValueError("plots need matplotlib: pip install matplotlib") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    return plt


def _series(records: list[Record], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the records that carry `key`."""
    rows = [(int(r["step"]), float(r[key])) for r in records if r.get(key) is not None]
    return [s for s, _ in rows], [v for _, v in rows]


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, format="png", dpi=DPI, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def loss_curve(metrics: list[Record], path: Path) -> Path:
    """Train and validation loss (nats) against step."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, style in (("train_loss", "-"), ("val_loss", "o-")):
        steps, values = _series(metrics, key)
        if steps:
            ax.plot(steps, values, style, label=key, markersize=4)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/byte)")
    ax.set_title("loss")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**legend_outside())
    return _save(fig, path)


def coverage_curve(metrics: list[Record], path: Path) -> Path:
    """ACR and causal coverage against step (both in [0, 1])."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key, label in (("acr", "ACR"), ("causal_coverage", "causal coverage")):
        steps, values = _series(metrics, key)
        if steps:
            ax.plot(steps, values, "o-", label=label, markersize=4)
    ax.set_xlabel("step")
    ax.set_ylabel("fraction of full attention")
    ax.set_ylim(0, 1.05)
    ax.set_title("attention coverage")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**legend_outside())
    return _save(fig, path)


def snapshot_indices(n: int, k: int = MAX_SNAPSHOTS) -> list[int]:
    """Up to `k` evenly spaced indices into n items, always the first and the last."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _log2_grid(windows: list[list[int]], seq_len: int) -> list[list[float]]:
    """log2 of each window, capped at T (w >= T means full causal)."""
    return [[math.log2(max(1, min(int(w), seq_len))) for w in row] for row in windows]


def window_levels(plans: list[list[list[int]]], seq_len: int) -> tuple[int, int]:
    """(lowest, highest) power-of-two level of the windows shown: the palette spans only
    these, so neighbouring windows such as 32 and 64 get clearly different colours."""
    low = min(min(int(w), seq_len) for plan in plans for row in plan for w in row)
    return math.floor(math.log2(max(1, low))), math.ceil(math.log2(seq_len))


def window_palette(levels: tuple[int, int]) -> tuple[Any, Any]:
    """(cmap, norm): one discrete viridis colour per power of two from levels[0] to [1]."""
    plt = _pyplot()
    from matplotlib.colors import BoundaryNorm

    low, high = levels
    bounds = [level - 0.5 for level in range(low, high + 2)]
    cmap = plt.get_cmap("viridis", high - low + 1)
    return cmap, BoundaryNorm(bounds, cmap.N)


def _heatmap(
    ax: Any,
    windows: list[list[int]],
    seq_len: int,
    title: str,
    annotate: bool,
    levels: tuple[int, int],
) -> Any:
    cmap, norm = window_palette(levels)
    image = ax.imshow(_log2_grid(windows, seq_len), cmap=cmap, norm=norm, aspect="auto")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("head", fontsize=9)
    ax.set_ylabel("layer", fontsize=9)
    n_layer, n_head = len(windows), max(len(row) for row in windows)
    ax.set_xticks(range(n_head))
    ax.set_yticks(range(n_layer))
    ax.tick_params(labelsize=8)
    if annotate:  # dark text on the light (wide) end of viridis, white on the dark end
        light = levels[0] + 0.6 * (levels[1] - levels[0])
        for layer, row in enumerate(windows):
            for head, w in enumerate(row):
                shown = min(int(w), seq_len)
                color = "black" if math.log2(max(shown, 1)) >= light else "white"
                ax.text(head, layer, str(shown), ha="center", va="center", color=color, fontsize=8)
    return image


def _colorbar(fig: Any, image: Any, axes: Any, seq_len: int, levels: tuple[int, int]) -> None:
    bar = fig.colorbar(image, ax=axes, shrink=0.8)
    ticks = list(range(levels[0], levels[1] + 1))
    bar.set_ticks(ticks)
    bar.set_ticklabels([str(min(2**i, seq_len)) for i in ticks])
    bar.ax.tick_params(labelsize=8)
    bar.set_label("window w (tokens, log2 scale)")


def window_snapshots(plans: list[Record], seq_len: int, path: Path) -> Path:
    """A grid of layer x head window heatmaps for up to six records, first and last included."""
    if not plans:
        raise ValueError("window snapshots need at least one plans.jsonl record")
    plt = _pyplot()
    picked = [plans[i] for i in snapshot_indices(len(plans))]
    cols = min(3, len(picked))
    rows = math.ceil(len(picked) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False, layout="constrained"
    )
    image = None
    levels = window_levels([r["windows"] for r in picked], seq_len)
    for ax, record in zip(axes.flat, picked, strict=False):
        title = f"step {record.get('step')}"
        image = _heatmap(ax, record["windows"], seq_len, title, False, levels)
    for ax in list(axes.flat)[len(picked) :]:
        ax.axis("off")
    _colorbar(fig, image, axes, seq_len, levels)
    fig.suptitle("windows over training")
    return _save(fig, path)


def final_window_map(windows: list[list[int]], seq_len: int, path: Path) -> Path:
    """The final plan: one annotated layer x head heatmap."""
    if not windows:
        raise ValueError("the final window map needs a non-empty plan")
    plt = _pyplot()
    n_head = max(len(row) for row in windows)
    fig, ax = plt.subplots(
        figsize=(1.5 + 0.6 * n_head, 1.2 + 0.5 * len(windows)), layout="constrained"
    )
    levels = window_levels([windows], seq_len)
    image = _heatmap(ax, windows, seq_len, f"final windows (T = {seq_len})", True, levels)
    _colorbar(fig, image, ax, seq_len, levels)
    return _save(fig, path)


def recall_curve(metrics: list[Record], path: Path) -> Path:
    """Recall accuracy against step, overall and per distance bucket (generated tasks)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    evals = [r for r in metrics if r.get("val_acc_by_distance")]
    labels = list(evals[-1]["val_acc_by_distance"]) if evals else []
    for i, label in enumerate(labels):
        rows = [(r["step"], r["val_acc_by_distance"].get(label)) for r in evals]
        rows = [(s, v) for s, v in rows if v is not None]
        if rows:
            shade = plt.cm.viridis(i / max(len(labels) - 1, 1))
            ax.plot([s for s, _ in rows], [v for _, v in rows], "-", color=shade, label=label)
    steps, values = _series(metrics, "val_acc")
    if steps:
        ax.plot(steps, values, "k--", label="all answers", linewidth=2)
    ax.set_xlabel("step")
    ax.set_ylabel("accuracy at answer bytes")
    ax.set_ylim(0, 1.05)
    ax.set_title("recall accuracy by distance")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(title="distance", **legend_outside())
    return _save(fig, path)


def cut_window_curve(rows: list[Record], path: Path) -> Path:
    """Bits/byte (and recall accuracy, if present) with every head cut to w, against w; the
    plan in force as horizontal reference lines."""
    plt = _pyplot()
    cuts = [r for r in rows if r.get("window") is not None]
    in_force = next((r for r in rows if r.get("window") is None), None)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = [r["window"] for r in cuts]
    ax.plot(xs, [r["val_bpb"] for r in cuts], "o-", label="bits/byte", markersize=4)
    if in_force is not None:
        ax.axhline(in_force["val_bpb"], color="C0", linestyle=":", label="plan in force")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("window every head is cut to (test time)")
    ax.set_ylabel("bits/byte")
    ax.set_title("context use")
    ax.grid(alpha=0.3)
    if any(r.get("val_acc") is not None for r in cuts):
        acc = ax.twinx()
        acc.plot(xs, [r.get("val_acc") for r in cuts], "s--", color="C1", label="recall, all")
        far = list(cuts[-1].get("val_acc_by_distance") or {})[-1:]
        if far:
            far_acc = [(r.get("val_acc_by_distance") or {}).get(far[0]) for r in cuts]
            acc.plot(xs, far_acc, "^--", color="C3", label=f"recall, distance {far[0]}")
        acc.set_ylabel("recall accuracy (fraction)")
        acc.set_ylim(0, 1.05)
        # One legend for both axes, outside them: it never hides a line.
        handles = ax.get_legend_handles_labels()[0] + acc.get_legend_handles_labels()[0]
        ax.legend(handles=handles, **legend_outside(offset=1.15))
    else:
        ax.legend(**legend_outside())
    return _save(fig, path)


def legend_outside(offset: float = 1.02) -> dict[str, Any]:
    """Legend keywords that put it right of the axes, top-aligned (outside the data)."""
    return {"loc": "upper left", "bbox_to_anchor": (offset, 1.0), "borderaxespad": 0.0}


def stream_curve(
    series: dict[str, list[tuple[int, float]]], path: Path, positions: int, title: str
) -> Path:
    """Perplexity per chunk against position (log scale) for each stream, the model's
    positions marked: where a cache that does not roll must stop."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for name, points in series.items():
        ax.plot([p for p, _ in points], [v for _, v in points], "-", label=name, linewidth=1.2)
    ax.axvline(positions, color="0.4", linestyle=":", linewidth=1)
    ax.text(positions, 0.98, " model's positions", transform=ax.get_xaxis_transform(),
            va="top", fontsize=8, color="0.3")  # fmt: skip
    ax.set_yscale("log")
    ax.set_xlabel("tokens streamed")
    ax.set_ylabel("chunk perplexity")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(**legend_outside())
    return _save(fig, path)
