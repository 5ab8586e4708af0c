"""Quality against KV memory per method: one line per method over the KV budgets run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aah.report.plots import DPI, _pyplot
from experiments.pretrained.table import Row


def plot_quality_vs_kv(table: Sequence[Row], full_loss: float, path: Path) -> Path:
    """Held-out loss against the KV fraction each plan holds, one line per method (nudged
    sideways so the bars at one budget stay apart), error bars the 95% interval of its paired
    difference from full; full attention as a dotted line."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    methods = list(dict.fromkeys(r.method for r in table))
    span = max(r.kv_fraction for r in table) - min(r.kv_fraction for r in table)
    step = 0.006 * (span or 1.0)  # methods side by side at one budget, not on top of each other
    for i, method in enumerate(methods):
        mine = sorted((r for r in table if r.method == method), key=lambda r: r.kv_fraction)
        xs = [r.kv_fraction + (i - (len(methods) - 1) / 2) * step for r in mine]
        ys = [r.loss for r in mine]
        err = [(r.vs_full.ci[1] - r.vs_full.ci[0]) / 2 for r in mine]
        style = "--" if method.endswith("-shuffled") else "-"
        ax.errorbar(xs, ys, yerr=err, marker="o", ms=4, capsize=3, ls=style, label=method)
    ax.axhline(full_loss, color="black", ls=":", lw=1, label="full")
    ax.set_xlabel("KV cache held (fraction of the full cache, sinks included)")
    ax.set_ylabel("held-out loss (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend(ncol=2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
