"""How much a within-layer shuffle can change: the room a shuffled twin has to differ.

The twins that move a regime's windows to other heads of the same layer (`budget-shuffled`,
`loss-ablation-shuffled`, `static-ablation-shuffled`, `shuffle`, `<regime>-replay-shuffled`)
keep each layer's multiset of windows. A layer whose heads all hold one window is the same
plan under any permutation, so the shuffle acts only in the layers and steps where the
regime's windows differ between heads. This module measures that share from the regime's
own plans.jsonl; a low share means the pair says little about which head gets which window,
whatever its seeds say.
"""

from __future__ import annotations

from aah.report import stats
from aah.report.comparisons import REPLAY_SUFFIX, REPLAYED
from aah.report.suite_data import CellRun, Record, Suite

#: (regime, twin): twins that permute each layer's windows across the layer's heads.
SHUFFLED_TWINS: tuple[tuple[str, str], ...] = (
    ("budget", "budget-shuffled"),
    ("static-ablation", "static-ablation-shuffled"),
    ("loss-ablation", "loss-ablation-shuffled"),
    ("aah-v3-full-adaptive", "shuffle"),
    *((r, r + REPLAY_SUFFIX) for r in REPLAYED),
)


def _after_warmup(plans: list[Record], seq_len: int) -> list[Record]:
    """The plans from the first one with a window below T (the warm-up's full plans dropped)."""
    for i, plan in enumerate(plans):
        if any(int(w) < seq_len for row in plan["windows"] for w in row):
            return plans[i:]
    return []


def spread_share(run: CellRun, seq_len: int) -> float | None:
    """Share of (layer, step) pairs after the warm-up in which the layer's heads hold more
    than one window size, each plan weighted by the steps it was in force (the last one until
    the run's last logged step). None when the run never planned a window below T."""
    plans = _after_warmup(run.plans, seq_len)
    if not plans:
        return None
    spread = total = 0
    for plan, span in run.plan_spans(plans):
        for row in plan["windows"]:
            total += span
            spread += span if len(set(row)) > 1 else 0
    return spread / total if total else None


def spread_lines(suite: Suite) -> list[str]:
    """One sentence on each shuffled twin pair of the suite: the regime's share of layer-steps
    a permutation can change (mean over seeds, and the range)."""
    seq_len = suite.seq_len
    twins: dict[str, list[str]] = {}
    for regime, twin in SHUFFLED_TWINS:
        if regime in suite.regimes and twin in suite.regimes:
            twins.setdefault(regime, []).append(twin)
    parts = []
    for regime, names in twins.items():
        shares = [s for run in suite.runs(regime) if (s := spread_share(run, seq_len)) is not None]
        if shares:
            spread = f"{min(shares):.0%}–{max(shares):.0%}" if len(shares) > 1 else "one seed"
            label = "twin" if len(names) == 1 else "twins"
            listed = ", ".join(f"`{n}`" for n in names)
            parts.append(f"`{regime}` {stats.mean(shares):.0%} ({spread}; {label} {listed})")
    if not parts:
        return []
    return [
        "A twin that moves a regime's windows to other heads of the same layer changes a plan "
        "only where that layer's heads hold different windows. Share of layer-steps after the "
        "warm-up in which they did (mean over seeds, range): " + "; ".join(parts) + ". The "
        "rest of the time the permutation leaves the regime's plan as it is, so a low share "
        "limits what the pair can show about which head gets which window.",
        "",
    ]
