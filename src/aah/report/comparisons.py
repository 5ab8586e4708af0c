"""The Holm families of a suite report, declared once, and the verdict rule.

Every p-value the report adjusts belongs to exactly one family declared here (`FAMILIES`, to
which a caller of `build_suite_report` may add its own), before any number is computed: a
family names the question it asks (which pairs), the metric it tests, the test, and the date
it was declared. `evidence` computes each comparison once, Holm-corrects it within its family,
and every table and finding of the report reads that same `Comparison`, so one comparison
(regime pair, metric) never shows two adjusted p-values. A pair that an earlier family already
tests on the same metric is not tested again by a later one.

A declared family is never edited: a family that must change (other pairs, another metric or
test) is a new family with a new name and date, and REPORT.md prints the name and date beside
each family's table.

A comparison is decided only with at least `MIN_SEEDS` seeds and a Holm-adjusted p below
`ALPHA`; everything else is "undecided", whatever its sign.

Why here and not in the suite's TOML: the report reads only the results directory (the CSV
and the cells' run directories, whose config.toml is a run config without the suite's tables),
and `aah sweep` rejects tables it does not know; one declaration in this module is what every
report of every suite, old results included, is built from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from aah.report import stats
from aah.report.suite_data import BASELINE, Suite

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


def detectable(
    e: stats.Estimate, family_size: int, alpha: float = 0.05, power: float = 0.8
) -> float:
    """The smallest |mean difference| this comparison decides with probability `power`, at
    its n and observed sd, when its Holm family has `family_size` tested comparisons.

    Holm's first step is Bonferroni's (p < alpha / m), so this is the bound for the pair
    that must clear it: (t_{1 - alpha / (2m), n-1} + t_{power, n-1}) * sd / sqrt(n), the usual
    normal-approximation power formula with t quantiles. For the sign-flip test it is inf
    when even n equal signs (p = 2 / 2^n) cannot reach alpha / m: no difference, however
    large, is decidable at that n. nan for n < 2 or an empty family.
    """
    if e.n < 2 or family_size < 1:
        return math.nan
    level = alpha / family_size
    if e.test == "sign-flip" and stats.equal_signs_p(e.n) >= level:
        return math.inf
    multiplier = stats.t_critical(e.n - 1, 1.0 - level) + stats.t_critical(
        e.n - 1, 2.0 * power - 1.0
    )
    return multiplier * e.sd / math.sqrt(e.n)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (nan stays nan and is not counted)."""
    order = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    out = [math.nan] * len(pvalues)
    running, m = 0.0, len(order)
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


Pairs = list[tuple[str, str]]


def _against_full(regimes: Sequence[str]) -> Pairs:
    return [(r, BASELINE) for r in regimes if r != BASELINE] if BASELINE in regimes else []


def _matched(regimes: Sequence[str]) -> Pairs:
    return [(r, c) for r, c in MATCHED if r in regimes and c in regimes]


@dataclass(frozen=True)
class Family:
    """One Holm family: a question (the pairs it compares, from the suite's regimes), the
    metric it tests and the test. Declared once, never edited: a change is a new family with
    a new name and date."""

    name: str
    date: str  # when it was declared (ISO date)
    question: str  # what it compares, in words
    metric: str  # the results-CSV column tested
    test: str  # "t" (Student's t over seeds) or "sign-flip" (exact permutation, stats.py)
    pairs: Callable[[Sequence[str]], Pairs] = field(repr=False, compare=False)
    keep_unpaired: bool = False  # list a pair with no common seed (shown as such, no p)
    bounds: tuple[float, float] | None = None  # the range a difference can take

    @property
    def label(self) -> str:
        """How the report names it beside its table."""
        return f"Holm family `{self.name}` (declared {self.date})"

    @property
    def heading(self) -> str:
        """The line the report prints above the family's table."""
        return (
            f"{self.label}: {self.question}; final `{self.metric}`, paired on seed; "
            f"{TESTS[self.test]}."
        )


TESTS = {
    "t": "95% CI and p from Student's t over the per-seed differences",
    "sign-flip": "p from the exact paired sign-flip permutation test over seeds (every sign "
    "pattern of the per-seed differences), 95% CI from inverting it",
}


DECLARED = "2026-12-03"
#: (a) every regime against full, on bits/byte.
AGAINST_FULL = Family(
    "against-full/val_bpb", DECLARED, "every regime against `full`", "val_bpb", "t",
    _against_full, keep_unpaired=True,
)  # fmt: skip
#: (b) the matched pairs (MATCHED), on bits/byte.
MATCHED_BPB = Family(
    "matched/val_bpb", DECLARED, "the matched pairs (a regime against the control that "
    "differs from it in one respect)", "val_bpb", "t", _matched,
)  # fmt: skip
#: (a) and (b) on a generated task's far-bucket accuracy, with the exact sign-flip test.
AGAINST_FULL_ACC = Family(
    "against-full/val_acc_far", DECLARED, "every regime against `full`", "val_acc_far",
    "sign-flip", _against_full, keep_unpaired=True, bounds=(-1.0, 1.0),
)  # fmt: skip
MATCHED_ACC = Family(
    "matched/val_acc_far", DECLARED, "the matched pairs", "val_acc_far", "sign-flip",
    _matched, bounds=(-1.0, 1.0),
)  # fmt: skip
#: Every family of the report, in the order that decides which family tests a pair two
#: questions share (the first one).
FAMILIES: tuple[Family, ...] = (AGAINST_FULL, MATCHED_BPB, AGAINST_FULL_ACC, MATCHED_ACC)


@dataclass(frozen=True)
class Comparison:
    """One paired comparison (pair.regime - pair.baseline) and its Holm-adjusted p within
    its family (None: a bare `family()` call, outside the declared families)."""

    pair: stats.Paired
    holm_p: float
    family: Family | None = None
    #: the smallest |Δ| this comparison would decide at 80% power (`detectable` above)
    detectable: float = math.nan

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


def family(pairs: Sequence[stats.Paired], declared: Family | None = None) -> list[Comparison]:
    """Holm over `pairs` (one family)."""
    adjusted = holm([p.estimate.p for p in pairs])
    tested = sum(not math.isnan(p.estimate.p) for p in pairs)
    return [
        Comparison(p, q, declared, detectable(p.estimate, tested))
        for p, q in zip(pairs, adjusted, strict=True)
    ]


def verdict_text(comp: Comparison) -> str:
    """The verdict, and beside "undecided" the smallest |Δ| the comparison could decide."""
    if comp.verdict != "undecided" or math.isnan(comp.detectable):
        return comp.verdict
    if math.isinf(comp.detectable):
        return f"undecided (nothing decidable at {comp.pair.n} seeds)"
    return f"undecided (detectable: |Δ| ≥ {comp.detectable:.4f})"


def power_line(comps: Collection[Comparison], unit: str) -> str:
    """One sentence: the range of differences the family could decide at 80% power, over
    its comparisons with the most seeds (a cell still running gives a pair fewer, whose bound
    is far wider and would say nothing about the suite)."""
    rated = [c for c in comps if not math.isnan(c.detectable)]
    if not rated:
        return ""
    n = max(c.pair.n for c in rated)
    found = [c.detectable for c in rated if c.pair.n == n]
    fewer = len(rated) - len(found)
    text = (
        f"Power: at {n} seeds and {len(rated)} Holm-corrected comparisons, a comparison is "
        "decided with 80% probability only when its true |Δ| is at least "
        "(t(1 − 0.05 / 2m) + t(0.8)) × sd / √n (Holm's first step; sd of its per-seed "
        "differences)"
    )
    finite = sorted(d for d in found if not math.isinf(d))
    if not finite:
        return text + f": no difference is decidable here at {n} seeds."
    text += f": {finite[0]:.4f} to {finite[-1]:.4f} {unit} over the {len(found)} with {n} seeds"
    text += f" (median {finite[len(finite) // 2]:.4f})" if len(finite) > 2 else ""
    if len(finite) < len(found):
        text += f"; {len(found) - len(finite)} cannot be decided at any size"
    if fewer:
        text += f"; {fewer} with fewer seeds need more"
    return text + ". An undecided comparison below its bound is no evidence of no effect."


def _has_metric(suite: Suite, metric: str) -> bool:
    return bool(suite.rows) and all(r.get(metric) is not None for r in suite.rows)


@dataclass(frozen=True)
class Evidence:
    """Every comparison of one suite's report, each computed once in its declared family."""

    families: dict[str, list[Comparison]]  # family name -> its comparisons, in pair order

    def of(self, declared: Family) -> list[Comparison]:
        return self.families.get(declared.name, [])

    def get(self, regime: str, other: str, metric: str) -> Comparison | None:
        """The comparison of regime - other on `metric`, from whichever family tests it."""
        for comps in self.families.values():
            for c in comps:
                if (c.pair.regime, c.pair.baseline) == (regime, other) and (
                    c.family is not None and c.family.metric == metric
                ):
                    return c
        return None


def evidence(suite: Suite, families: Sequence[Family] = FAMILIES) -> Evidence:
    """Each family's comparisons on `suite`, Holm-corrected within the family. A family whose
    metric some row lacks (accuracy on a text suite) is empty; a pair that an earlier family
    already tests on the same metric (in either direction) is left to that family."""
    tested: set[tuple[frozenset[str], str]] = set()
    out: dict[str, list[Comparison]] = {}
    for declared in families:
        pairs = []
        if _has_metric(suite, declared.metric):
            for regime, other in declared.pairs(suite.regimes):
                key = (frozenset((regime, other)), declared.metric)
                if key in tested:
                    continue
                pair = stats.paired_by_seed(
                    regime,
                    stats.by_seed(suite.rows, regime, declared.metric),
                    other,
                    stats.by_seed(suite.rows, other, declared.metric),
                    declared.test,
                    declared.bounds,
                )
                if pair.n or declared.keep_unpaired:
                    tested.add(key)
                    pairs.append(pair)
        out[declared.name] = family(pairs, declared)
    return Evidence(out)
