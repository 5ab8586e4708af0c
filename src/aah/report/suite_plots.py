"""Figures for one suite (regimes x seeds): validation curves, ACR, quality against coverage,
quality at equal training time, and window heatmaps.

Inputs are plain data (regime -> per-seed metrics records, or precomputed numbers), so this
module knows nothing of the results layout. matplotlib is imported only when a figure is
drawn. Each function writes one PNG and returns its path. A regime has one colour in every
figure of every suite (`regime_colors`); legends sit outside the axes, never over a line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aah.controller.config import POLICIES
from aah.report import stats
from aah.report.plots import _pyplot, _save, legend_outside, window_snapshots

Record = dict[str, Any]
BASELINE = "full"
__all__ = [
    "acr_curves",
    "equal_time",
    "quality_vs_coverage",
    "regime_colors",
    "val_curves",
    "window_snapshots",
]


#: tab20 indices: the ten saturated colours first, then their light twins.
_PALETTE_ORDER = [*range(0, 20, 2), *range(1, 20, 2)]


def regime_color(regime: str) -> Any:
    """The regime's colour, fixed across figures and suites: the baseline black, each known
    policy its own tab20 colour, any other name a colour picked by a stable hash of it."""
    if regime == BASELINE:
        return "black"
    known = [p for p in POLICIES if p != BASELINE]
    if regime in known:
        slot = known.index(regime)
    else:
        digest = int.from_bytes(hashlib.blake2b(regime.encode(), digest_size=4).digest(), "big")
        slot = len(known) + digest % (len(_PALETTE_ORDER) - len(known))
    return _pyplot().get_cmap("tab20")(_PALETTE_ORDER[slot])


def regime_colors(regimes: Sequence[str]) -> dict[str, Any]:
    """regime -> `regime_color(regime)`."""
    return {regime: regime_color(regime) for regime in regimes}


def _style(regime: str) -> dict[str, Any]:
    """The baseline is drawn thick, on top: every other line is read against it."""
    return {"linewidth": 2.8, "zorder": 5} if regime == BASELINE else {"linewidth": 1.3}


def _by_step(runs: Sequence[Sequence[Record]], key: str) -> dict[int, list[float]]:
    """step -> the `key` values of the seeds that logged it at that step."""
    out: dict[int, list[float]] = {}
    for records in runs:
        for r in records:
            if r.get(key) is not None:
                out.setdefault(int(r["step"]), []).append(float(r[key]))
    return dict(sorted(out.items()))


def _finish(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**legend_outside())


def val_curves(runs: dict[str, list[list[Record]]], path: Path, title: str) -> Path:
    """val_bpb against step per regime: mean over seeds, shaded between their min and max."""
    plt = _pyplot()
    colors = regime_colors(list(runs))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for regime, records in runs.items():
        points = _by_step(records, "val_bpb")
        if not points:
            continue
        steps = list(points)
        ax.plot(
            steps,
            [stats.mean(v) for v in points.values()],
            "o-",
            markersize=3,
            color=colors[regime],
            label=regime,
            **_style(regime),
        )
        lows, highs = [min(v) for v in points.values()], [max(v) for v in points.values()]
        ax.fill_between(steps, lows, highs, color=colors[regime], alpha=0.12, linewidth=0)
    _finish(ax, "step", "validation bits per byte", title)
    return _save(fig, path)


def acr_curves(runs: dict[str, list[list[Record]]], path: Path, title: str) -> Path:
    """ACR (attended fraction of the causal triangle) against step, mean over seeds."""
    plt = _pyplot()
    colors = regime_colors(list(runs))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for regime, records in runs.items():
        points = _by_step(records, "acr")
        if points:
            ax.plot(
                list(points),
                [stats.mean(v) for v in points.values()],
                color=colors[regime],
                label=regime,
                **_style(regime),
            )
    ax.set_ylim(0, 1.05)
    _finish(ax, "step", "ACR: mean of min(w, T) / T over heads", title)
    return _save(fig, path)


def quality_vs_coverage(
    points: dict[str, tuple[float, float, float]], path: Path, title: str
) -> Path:
    """One labelled point per regime: (mean causal coverage, mean val_bpb +- sd).

    `points` maps regime -> (coverage, val_bpb mean, val_bpb sd); a nan sd (one seed) draws
    no error bar.
    """
    plt = _pyplot()
    colors = regime_colors(list(points))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    labels = []
    for regime, (coverage, bpb, spread) in points.items():
        yerr = None if spread != spread else spread  # nan != nan
        ax.errorbar(
            coverage,
            bpb,
            yerr=yerr,
            fmt="o",
            capsize=3,
            color=colors[regime],
            markersize=7 if regime == BASELINE else 5,
        )
        style = {"fontsize": 8, "color": colors[regime]}
        labels.append(
            ax.annotate(regime, (coverage, bpb), textcoords="offset points", xytext=(6, 4), **style)
        )
    ax.set_xlim(0, 1.08)
    _finish(ax, "causal coverage (mean over seeds)", "final validation bits per byte", title)
    for label in spread_labels(fig, labels):  # a moved label points back at its marker
        ax.annotate(label.get_text(), label.xy, textcoords="offset points", xytext=label.xyann,
                    fontsize=8, color=label.get_color(),
                    arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.5})  # fmt: skip
        label.remove()
    return _save(fig, path)


def spread_labels(fig: Any, labels: list[Any], *, step: float = 4.0, tries: int = 60) -> list[Any]:
    """Move point labels apart until no two overlap: from the top down, each label slides
    down, then up, in `step`-point steps from its place. Returns the labels that moved."""
    renderer = fig.canvas.get_renderer()
    placed: list[Any] = []
    moved = []
    for label in sorted(labels, key=lambda a: -a.xy[1]):
        dx, dy = label.xyann
        for i in range(tries):
            shift = (i + 1) // 2 * step * (-1 if i % 2 else 1)
            label.xyann = (dx, dy + shift)
            box = label.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed):
                break
        if label.xyann != (dx, dy):
            moved.append(label)
        placed.append(label.get_window_extent(renderer))
    return moved


def equal_time(
    curves: dict[str, list[list[stats.Point]]],
    t_star: float,
    path: Path,
    title: str,
) -> Path:
    """val_bpb against cumulative training seconds per regime (each seed's eval points
    interpolated onto a common grid, then averaged), with the equal-time budget t* marked.

    `curves` maps regime -> per-seed lists of (train_s, val_bpb); see `stats.mean_curve`.
    """
    plt = _pyplot()
    colors = regime_colors(list(curves))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for regime, per_seed in curves.items():
        grid, values = stats.mean_curve(per_seed)
        if grid:
            ax.plot(grid, values, color=colors[regime], label=regime, **_style(regime))
    ax.axvline(t_star, color="grey", linestyle="--", linewidth=1)
    ax.annotate(
        f"t* = {t_star:,.0f} s" if t_star >= 100 else f"t* = {t_star:.1f} s",
        (t_star, 1),
        xycoords=("data", "axes fraction"),
        xytext=(3, -12),
        textcoords="offset points",
        fontsize=8,
        color="grey",
    )
    _finish(ax, "training seconds (cumulative, excl. eval)", "validation bits per byte", title)
    return _save(fig, path)
