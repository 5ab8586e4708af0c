"""Families of paired comparisons with a Holm correction, and the verdict rule of the report.

A suite makes two families of comparisons on final val_bpb, each pair matched on seed:
every regime against `full`, and the matched controls named in `MATCHED` (a controller
against the control that differs from it in one respect). Within a family, Holm's
step-down correction adjusts the p-values (Student's t over the per-seed differences). A
comparison is decided only with at least `MIN_SEEDS` seeds and a Holm-adjusted p below
`ALPHA`; everything else is "undecided", whatever its sign.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from aah.report import stats
from aah.report.suite_data import Suite

ALPHA = 0.05
MIN_SEEDS = 5
#: (regime, control) -> what differs between them; the pairs a suite's report compares.
MATCHED_WHY: dict[tuple[str, str], str] = {
    ("budget", "budget-shuffled"): "the same windows per layer on random heads",
    ("static-ablation", "static-ablation-shuffled"): "the same windows per layer on random heads",
    ("static-ablation", "budget"): "a plan from the loss ablation of the trained full model vs "
    "allocation by attention mass, at the same coverage cap",
    ("loss-ablation", "loss-ablation-shuffled"): "the same windows per layer on random heads",
    ("loss-ablation", "budget"): "allocation by the measured loss of each cut vs by attention "
    "mass, at the same coverage cap (each on the decision interval its suite file sets)",
    ("aah-v3-full-adaptive", "random"): "random windows from the same candidates, same warm-up",
    ("aah-v3-shallow-freeze", "random"): "random windows from the same candidates, same warm-up",
    ("aah-v3-deep-reuse", "random"): "random windows from the same candidates, same warm-up",
    ("aah-v3-grouping-off", "random"): "random windows from the same candidates, same warm-up",
    ("aah-v3-full-adaptive", "fixed-random-grouping"): "random halves instead of the learned "
    "grouping",
    ("aah-v3-full-adaptive", "shuffle"): "the same windows per layer on other heads (one "
    "permutation per layer, drawn once)",
}
#: the regimes whose replay twin a suite may run, as the variant `<regime>-replay-shuffled`
#: (policy replay-shuffled on that regime's cell of the same seed).
REPLAYED = (
    "budget", "loss-ablation", "aah-v3-full-adaptive", "aah-v3-shallow-freeze",
    "aah-v3-deep-reuse", "aah-v3-grouping-off",
)  # fmt: skip
REPLAY_SUFFIX = "-replay-shuffled"
MATCHED_WHY.update(
    {
        (r, r + REPLAY_SUFFIX): "its own logged windows at every step moved to other heads "
        "of each layer (one permutation per layer, drawn once): the same coverage per layer "
        "at every step"
        for r in REPLAYED
    }
)
#: the twin that scatters the same windows over every head of the model (policy
#: replay-scattered): the choice of layers, where `-replay-shuffled` tests the heads.
SCATTER_SUFFIX = "-replay-scattered"
MATCHED_WHY.update(
    {
        (r, r + SCATTER_SUFFIX): "its own logged windows at every step scattered over every "
        "head of every layer (one permutation, drawn once): the same coverage at every step, "
        "split between layers at random"
        for r in REPLAYED
    }
)
#: suffixes of the regimes that replay another cell's plans: controls, not controllers.
TWIN_SUFFIXES = (REPLAY_SUFFIX, SCATTER_SUFFIX)
MATCHED: tuple[tuple[str, str], ...] = tuple(MATCHED_WHY)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (nan stays nan and is not counted)."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    out = [math.nan] * len(pvalues)
    running, m = 0.0, len(order)
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


@dataclass(frozen=True)
class Comparison:
    """One paired comparison (pair.regime - pair.baseline) and its Holm-adjusted p."""

    pair: stats.Paired
    holm_p: float

    @property
    def verdict(self) -> str:
        """ "lower" / "higher" (regime vs baseline) when decided, else "undecided"."""
        if self.pair.n < MIN_SEEDS or math.isnan(self.holm_p) or self.holm_p >= ALPHA:
            return "undecided"
        return "lower" if self.pair.estimate.mean < 0 else "higher"


def family_size(comps: Collection[Comparison], where: str = "of this table") -> str:
    """'N comparisons of this table', N counting only those with a p-value: a pair with one
    seed has none, and Holm's correction does not count it."""
    tested = sum(not math.isnan(c.pair.estimate.p) for c in comps)
    text = f"{tested} comparisons {where}"
    if tested < len(comps):
        untested = len(comps) - tested
        verb = "has" if untested == 1 else "have"
        text += f" that have a p-value ({untested} with one seed {verb} none)"
    return text


def family(pairs: Sequence[stats.Paired]) -> list[Comparison]:
    adjusted = holm([p.estimate.p for p in pairs])
    return [Comparison(p, q) for p, q in zip(pairs, adjusted, strict=True)]


def against_full(suite: Suite, metric: str = "val_bpb") -> dict[str, Comparison]:
    """regime -> its comparison with full (one family over every regime)."""
    pairs = stats.paired(suite.rows, metric)
    regimes = [r for r in suite.regimes[1:] if r in pairs]
    return dict(zip(regimes, family([pairs[r] for r in regimes]), strict=True))


def matched(suite: Suite, metric: str = "val_bpb") -> list[Comparison]:
    """The MATCHED pairs present in the suite (one family), in MATCHED order."""
    pairs = []
    for regime, control in MATCHED:
        if regime in suite.regimes and control in suite.regimes:
            mine = stats.by_seed(suite.rows, regime, metric)
            theirs = stats.by_seed(suite.rows, control, metric)
            pair = stats.paired_by_seed(regime, mine, control, theirs)
            if pair.n:
                pairs.append(pair)
    return family(pairs)
