"""How much a twin's permutation can change: the room a shuffled or scattered twin has to differ.

The twins that move a regime's windows to other heads of the same layer (`budget-shuffled`,
`loss-ablation-shuffled`, `static-ablation-shuffled`, `shuffle`, `<regime>-replay-shuffled`)
keep each layer's multiset of windows. A layer whose heads all hold one window is the same
plan under any permutation, so the shuffle acts only in the layers and steps where the
regime's windows differ between heads. This module measures that share from the regime's
own plans.jsonl; a low share means the pair says little about which head gets which window,
whatever its seeds say. A `<regime>-replay-scattered` twin keeps the model's multiset of
windows instead and can move context between layers only at steps where the layers hold
different windows; `split_share` measures that.
"""

from __future__ import annotations

from collections.abc import Callable

from aah.report import stats
from aah.report.comparisons import REPLAY_SUFFIX, REPLAYED, SCATTER_SUFFIX
from aah.report.suite_data import CellRun, Record, Suite

#: (regime, twin): twins that permute each layer's windows across the layer's heads.
SHUFFLED_TWINS: tuple[tuple[str, str], ...] = (
    ("budget", "budget-shuffled"),
    ("static-ablation", "static-ablation-shuffled"),
    ("loss-ablation", "loss-ablation-shuffled"),
    ("aah-v3-full-adaptive", "shuffle"),
    *((r, r + REPLAY_SUFFIX) for r in REPLAYED),
)
#: (regime, twin): twins that scatter a regime's windows over every head of every layer.
SCATTERED_TWINS: tuple[tuple[str, str], ...] = tuple((r, r + SCATTER_SUFFIX) for r in REPLAYED)


def _after_warmup(plans: list[Record], seq_len: int) -> list[Record]:
    """The plans from the first one with a window below T (the warm-up's full plans dropped)."""
    for i, plan in enumerate(plans):
        if any(int(w) < seq_len for row in plan["windows"] for w in row):
            return plans[i:]
    return []


def _spans(run: CellRun, seq_len: int) -> list[tuple[Record, int]]:
    """(plan, steps in force) of every plan after the warm-up (the last one until the run's
    last logged step); empty when the run never planned a window below T."""
    return run.plan_spans(_after_warmup(run.plans, seq_len))


def spread_share(run: CellRun, seq_len: int) -> float | None:
    """Share of (layer, step) pairs after the warm-up in which the layer's heads hold more
    than one window size (a layer with one window is the same under any shuffle). None when
    the run never planned a window below T."""
    spans = _spans(run, seq_len)
    total = sum(span * len(plan["windows"]) for plan, span in spans)
    spread = sum(span * sum(len(set(row)) > 1 for row in plan["windows"]) for plan, span in spans)
    return spread / total if total else None


def split_share(run: CellRun, seq_len: int) -> float | None:
    """Share of steps after the warm-up in which the layers hold different windows: only there
    can a scatter over every layer move context from one layer to another. None when the run
    never planned a window below T."""
    spans = _spans(run, seq_len)
    total = sum(span for _, span in spans)
    split = sum(
        span for plan, span in spans if len({tuple(sorted(row)) for row in plan["windows"]}) > 1
    )
    return split / total if total else None


def _parts(
    suite: Suite,
    pairs: tuple[tuple[str, str], ...],
    share: Callable[[CellRun, int], float | None],
) -> list[str]:
    """'`regime` mean% (min–max; twin(s) ...)' for each regime of the suite with a twin in it."""
    twins: dict[str, list[str]] = {}
    for regime, twin in pairs:
        if regime in suite.regimes and twin in suite.regimes:
            twins.setdefault(regime, []).append(twin)
    parts = []
    for regime, names in twins.items():
        shares = [s for run in suite.runs(regime) if (s := share(run, suite.seq_len)) is not None]
        if shares:
            spread = f"{min(shares):.0%}–{max(shares):.0%}" if len(shares) > 1 else "one seed"
            label = "twin" if len(names) == 1 else "twins"
            listed = ", ".join(f"`{n}`" for n in names)
            parts.append(f"`{regime}` {stats.mean(shares):.0%} ({spread}; {label} {listed})")
    return parts


def spread_lines(suite: Suite) -> list[str]:
    """One sentence on the suite's shuffled twin pairs (the regime's share of layer-steps a
    within-layer permutation can change) and one on its scattered twins (the share of steps a
    scatter can move context between layers); mean over seeds, and the range."""
    lines = []
    shuffled = _parts(suite, SHUFFLED_TWINS, spread_share)
    if shuffled:
        lines += [
            "A twin that moves a regime's windows to other heads of the same layer changes a "
            "plan only where that layer's heads hold different windows. Share of layer-steps "
            "after the warm-up in which they did (mean over seeds, range): "
            + "; ".join(shuffled)
            + ". The rest of the time the permutation leaves the regime's plan as it is, so a "
            "low share limits what the pair can show about which head gets which window.",
            "",
        ]
    scattered = _parts(suite, SCATTERED_TWINS, split_share)
    if scattered:
        lines += [
            "A twin that scatters a regime's windows over every layer can move context from "
            "one layer to another only where the layers hold different windows. Share of steps "
            "after the warm-up in which they did (mean over seeds, range): "
            + "; ".join(scattered)
            + ". Where they did not, the scatter changes only which heads hold the windows.",
            "",
        ]
    return lines
