"""Where each regime put its context: causal coverage per layer, averaged over training.

The quality table gives one coverage per regime, the mean over every head of every layer.
Two regimes at the same mean can spend it very differently (one layer long and the other
short, or both alike), and a controller can split it differently on each seed. This table
shows that split from the cells' own plans.jsonl; it describes, it does not test.
"""

from __future__ import annotations

from aah.attention.cost import coverage
from aah.report import stats
from aah.report.markdown import fmt, table
from aah.report.suite_data import CellRun, Suite


def layer_coverage(run: CellRun, seq_len: int) -> list[float] | None:
    """Causal coverage of each layer's heads, each plan weighted by the steps it was in force
    (warm-up included, like the quality table's coverage over training). None without plans."""
    spans = run.plan_spans()
    total = sum(span for _, span in spans)
    if not total:
        return None
    n_layers = len(spans[0][0]["windows"])
    sums = [0.0] * n_layers
    for plan, span in spans:
        windows = plan["windows"]
        if len(windows) != n_layers:
            raise ValueError(
                f"{run.name}: plan at step {plan['step']} has {len(windows)} layers, "
                f"the first plan {n_layers}"
            )
        for layer, row in enumerate(windows):  # training plans carry no sinks
            sums[layer] += span * coverage(row, seq_len).causal
    return [s / total for s in sums]


def _cell(values: list[float]) -> str:
    if len(values) == 1:
        return fmt(values[0], ".2f")
    return f"{fmt(stats.mean(values), '.2f')} ({fmt(min(values), '.2f')}–{fmt(max(values), '.2f')})"


def layer_coverage_section(suite: Suite) -> list[str]:
    """A table regime x layer of coverage over training (mean over seeds and the range), for
    the regimes whose windows differ between layers or seeds; empty for one-layer models or
    when every regime is uniform across layers on every seed."""
    seq_len = suite.seq_len
    per_regime: dict[str, list[list[float]]] = {}
    for regime in suite.regimes:
        layers = [c for run in suite.runs(regime) if (c := layer_coverage(run, seq_len))]
        if layers:
            per_regime[regime] = layers
    n_layers = max((len(cells[0]) for cells in per_regime.values()), default=0)
    if n_layers < 2:
        return []

    def uneven(cells: list[list[float]]) -> bool:
        flat = [c for layers in cells for c in layers]
        return max(flat) - min(flat) > 0.005

    shown = {r: cells for r, cells in per_regime.items() if uneven(cells)}
    if not shown:
        return []
    rows = [
        [f"`{regime}`", str(len(cells))]
        + [_cell([layers[i] for layers in cells]) for i in range(n_layers)]
        for regime, cells in shown.items()
    ]
    header = ["regime", "n", *(f"layer {i}" for i in range(n_layers))]
    return [
        "### Coverage per layer",
        "",
        *table(header, rows),
        "",
        "Causal coverage of each layer's heads averaged over training (warm-up included, each "
        "plan weighted by the steps it was in force): mean over seeds (min–max). Regimes whose "
        "every layer held the same coverage on every seed are left out. A wide range means "
        "the regime gives context to different layers on different seeds.",
        "",
    ]
