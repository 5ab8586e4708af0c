"""Figures for one run: loss curves, coverage over training, window heatmaps, final window map,
and for generated tasks recall accuracy over training and the context-use curve.

matplotlib is an extra (`aah[plots]`): it is imported inside each function, never at import time.
Each function writes one PNG and returns its path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

Record = dict[str, Any]
MAX_SNAPSHOTS = 6


def _pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend, else a ValueError saying how."""
    try:
        import matplotlib
    except ImportError as err:
        raise ValueError("plots need matplotlib: pip install 'aah[plots]'") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(records: list[Record], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the records that carry `key`."""
    rows = [(int(r["step"]), float(r[key])) for r in records if r.get(key) is not None]
    return [s for s, _ in rows], [v for _, v in rows]


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, format="png", dpi=100, bbox_inches="tight")
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
    ax.set_ylabel("loss (nats)")
    ax.set_title("loss")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
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
    ax.set_ylabel("fraction")
    ax.set_ylim(0, 1.05)
    ax.set_title("attention coverage")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    return _save(fig, path)


def snapshot_indices(n: int, k: int = MAX_SNAPSHOTS) -> list[int]:
    """Up to `k` evenly spaced indices into n items, always the first and the last."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def _log2_grid(windows: list[list[int]], seq_len: int) -> list[list[float]]:
    """log2 of each window, capped at T (w >= T means full causal)."""
    return [[math.log2(max(1, min(int(w), seq_len))) for w in row] for row in windows]


def _heatmap(ax: Any, windows: list[list[int]], seq_len: int, title: str, annotate: bool) -> Any:
    image = ax.imshow(
        _log2_grid(windows, seq_len), vmin=0, vmax=math.log2(seq_len), cmap="viridis", aspect="auto"
    )
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("head", fontsize=8)
    ax.set_ylabel("layer", fontsize=8)
    n_layer, n_head = len(windows), max(len(row) for row in windows)
    ax.set_xticks(range(n_head))
    ax.set_yticks(range(n_layer))
    ax.tick_params(labelsize=7)
    if annotate:
        for layer, row in enumerate(windows):
            for head, w in enumerate(row):
                ax.text(head, layer, str(min(int(w), seq_len)), ha="center", va="center",
                        color="white", fontsize=7)  # fmt: skip
    return image


def _colorbar(fig: Any, image: Any, axes: Any, seq_len: int) -> None:
    bar = fig.colorbar(image, ax=axes, shrink=0.8)
    top = int(math.log2(seq_len))
    bar.set_ticks(list(range(top + 1)))
    bar.set_ticklabels([str(2**i) for i in range(top + 1)])
    bar.set_label("window (log2 scale)")


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
    for ax, record in zip(axes.flat, picked, strict=False):
        image = _heatmap(ax, record["windows"], seq_len, f"step {record.get('step')}", False)
    for ax in list(axes.flat)[len(picked) :]:
        ax.axis("off")
    _colorbar(fig, image, axes, seq_len)
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
    image = _heatmap(ax, windows, seq_len, f"final windows (T = {seq_len})", True)
    _colorbar(fig, image, ax, seq_len)
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
        ax.legend(fontsize="small", title="distance", ncol=2)
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
        acc.set_ylabel("recall accuracy")
        acc.set_ylim(0, 1.05)
        acc.legend(loc="upper center", fontsize="small")
    ax.legend(loc="upper right", fontsize="small")
    return _save(fig, path)
