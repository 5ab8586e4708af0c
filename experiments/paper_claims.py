"""The AAH-v3 paper's findings, checked one by one on a suite of this project's regimes.

The package's suite report (`aah report RESULTS_DIR`) says what each regime did against full
and its matched controls; whether that agrees with what the paper reports is this project's
question, so its sentences and its one extra Holm family (each AAH-v3 regime against the
paper's `fixed` control) live here. `python -m experiments.suite_report RESULTS_DIR` builds
the package's report with these added (`FAMILIES`, `paper_section`).

Sentences only classify what the comparisons show, and every comparison they cite is the one
of the report's tables (`comparisons.evidence`: one family, one adjusted p per pair).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aah.report import comparisons
from aah.report.findings import ratio_text
from aah.report.markdown import ci_text, fmt, p_text, seeds_text
from aah.report.suite_data import BASELINE, Suite

AAH_PREFIX = "aah-v3-"
#: the simple controls of the paper's second finding
PAPER_CONTROLS = ("fixed", "random")


def aah_regimes(regimes: Sequence[str]) -> list[str]:
    """The AAH-v3 controllers among `regimes`: a replay twin carries the prefix but replays
    logged plans, so it is a control, not AAH-v3."""
    twins = comparisons.TWIN_SUFFIXES
    return [r for r in regimes if r.startswith(AAH_PREFIX) and not r.endswith(twins)]


def _aah_vs_controls(regimes: Sequence[str]) -> comparisons.Pairs:
    controls = [c for c in PAPER_CONTROLS if c in regimes]
    return [(r, c) for r in aah_regimes(regimes) for c in controls]


#: the paper's second finding: each AAH-v3 regime against fixed and random. Its pairs against
#: `random` are matched pairs, tested once in the package's `matched/val_bpb`; what is left is
#: AAH vs fixed.
PAPER_CONTROLS_BPB = comparisons.Family(
    "paper-controls/val_bpb", comparisons.DECLARED, "each AAH-v3 regime against `fixed` and "
    "`random` (a pair already in an earlier family is tested there)", "val_bpb", "t",
    _aah_vs_controls,
)  # fmt: skip
#: the package's families, then this one (a pair an earlier family tests stays there)
FAMILIES = (*comparisons.FAMILIES, PAPER_CONTROLS_BPB)


@dataclass(frozen=True)
class Claim:
    """One of the paper's findings checked on a suite: its verdict ("holds", "does not hold",
    "undecided at N seeds", "not testable", "not measured by this suite"), the comparisons it
    rests on (`comps`: the report's own, one adjusted p each) and the sentences showing them."""

    number: int
    text: str
    verdict: str
    details: tuple[str, ...]
    rule: str
    comps: tuple[comparisons.Comparison, ...] = ()

    def render(self) -> str:
        details = "; ".join(self.details)
        return f"{self.number}. *{self.text}* — **{self.verdict}**. {details}. Rule: {self.rule}."


def _claim(
    number: int, claim: str, verdict: str, details: list[str], rule: str,
    comps: list[comparisons.Comparison] | None = None,
) -> Claim:  # fmt: skip
    return Claim(number, claim, verdict, tuple(details), rule, tuple(comps or ()))


def _status(comp: comparisons.Comparison, yes_if_lower: bool) -> str:
    """'yes' / 'no' when the comparison is decided lower / higher (swapped if not
    yes_if_lower), '?' when it is undecided."""
    if comp.verdict == "undecided":
        return "?"
    return "yes" if (comp.verdict == "lower") == yes_if_lower else "no"


def _overall(statuses: list[str], n: int) -> str:
    """holds if every comparison supports the claim, does not hold if any contradicts it."""
    if any(s == "no" for s in statuses):
        return "does not hold"
    if statuses and all(s == "yes" for s in statuses):
        return "holds"
    return f"undecided at {seeds_text(n)}"


def _cite(c: comparisons.Comparison, name_family: bool = False) -> str:
    """'(Holm p 0.071, undecided)', naming the comparison's family when asked."""
    where = f" in `{c.family.name}`" if name_family and c.family is not None else ""
    return f"(Holm p {p_text(c.holm_p)}{where}, {c.verdict})"


def _claim_local(suite: Suite, local: list[str], evidence: comparisons.Evidence) -> Claim:
    text = "local windows (fixed, random, AAH regimes) matched or beat full in val loss"
    declared = comparisons.AGAINST_FULL
    rule = (
        "holds if every one is decided lower than full, does not hold if any is decided "
        f"higher, else undecided; each is its comparison in {declared.label}: Holm over "
        f"every regime against full, >= {comparisons.MIN_SEEDS} seeds, on val_bpb (= val_loss "
        "/ ln 2, the same test)"
    )
    comps = [
        c
        for r in local
        if (c := evidence.get(r, BASELINE, declared.metric)) is not None and c.pair.n
    ]
    if not suite.has_baseline or not comps:
        return _claim(1, text, "not testable", ["Needs `full` and a local regime"], rule)
    details = [
        f"`{c.pair.regime}` {fmt(c.pair.estimate.mean, '+.4f')} {ci_text(c.pair.estimate.ci)} "
        f"{_cite(c)}"
        for c in comps
    ]
    details[0] = "Δ val_bpb vs full, mean [95% CI]: " + details[0]
    verdict = _overall([_status(c, True) for c in comps], min(c.pair.n for c in comps))
    return _claim(1, text, verdict, details, rule, comps)


def _claim_controls(suite: Suite, aah: list[str], evidence: comparisons.Evidence) -> Claim:
    text = "simple fixed/random controls were about as good as the adaptive hierarchy"
    metric = PAPER_CONTROLS_BPB.metric
    rule = (
        "every AAH regime against each control (fixed, random), paired on seed, each pair's "
        f"comparison from the family that tests it (AAH vs random: {comparisons.MATCHED_BPB.label}"
        f"; AAH vs fixed: {PAPER_CONTROLS_BPB.label}), "
        f">= {comparisons.MIN_SEEDS} seeds; does not hold if any AAH regime is decided lower "
        "than a control; otherwise undecided (equivalence is not tested)"
    )
    controls = [r for r in PAPER_CONTROLS if r in suite.regimes]
    if not aah or not controls:
        needs = ["Needs an aah-v3-* regime and fixed or random"]
        return _claim(2, text, "not testable", needs, rule)
    comps = [
        c
        for regime in aah
        for control in controls
        if (c := evidence.get(regime, control, metric)) is not None and c.pair.n
    ]
    if not comps:
        return _claim(2, text, "not testable", ["No AAH regime shares a seed with a control"], rule)
    details = ["Δ val_bpb (AAH − control) mean [95% CI]"] + [
        f"`{c.pair.regime}` vs `{c.pair.baseline}` {fmt(c.pair.estimate.mean, '+.4f')} "
        f"{ci_text(c.pair.estimate.ci)} {_cite(c, name_family=True)}"
        for c in comps
    ]
    contradicted = any(c.verdict == "lower" for c in comps)
    n = min(c.pair.n for c in comps)
    verdict = "does not hold" if contradicted else f"undecided at {seeds_text(n)}"
    return _claim(2, text, verdict, details, rule, comps)


def _claim_speed(aah: list[str], ratios: dict[str, dict[int, float]]) -> Claim:
    """Not decided from the suite: its cells are timed one after another (or beside other
    cells) on a shared machine, so their tokens/s differ by load as much as by attention work.
    A speed verdict needs timings taken side by side in one process (A B A B), which
    `aah bench` does; the cells' ratios are listed as what they are."""
    text = "the paper's AAH ran slower than full attention"
    rule = (
        "speed is decided only from timings taken side by side in one process (A B A B: "
        "`aah bench`), never from suite cells timed one by one on a shared machine"
    )
    speeds = [(r, ratios[r]) for r in aah if ratios.get(r)]
    if not speeds:
        return _claim(3, text, "not testable", ["Needs `full` and an aah-v3-* regime"], rule)
    details = [
        f"cell timings, not a measurement: `{regime}` logged {ratio_text(per_seed)[0]} of "
        "full's tokens/s"
        for regime, per_seed in speeds
    ]
    return _claim(3, text, "not measured by this suite", details, rule)


def claims(
    suite: Suite, ratios: dict[str, dict[int, float]], evidence: comparisons.Evidence
) -> list[Claim]:
    """The paper's findings (as the paper reports them), each checked against this suite."""
    aah = aah_regimes(suite.regimes)
    local = [r for r in suite.regimes if r in PAPER_CONTROLS] + aah
    return [
        _claim_local(suite, local, evidence),
        _claim_controls(suite, aah, evidence),
        _claim_speed(aah, ratios),
    ]


def paper_section(
    suite: Suite, ratios: dict[str, dict[int, float]], evidence: comparisons.Evidence
) -> list[str]:
    """The report section: each claim with its verdict, and what the checks can say."""
    return [
        "### The paper's findings",
        "",
        "The paper's findings (as the paper reports them), checked on this suite:",
        "",
        *(c.render() for c in claims(suite, ratios, evidence)),
        "",
        "The paper's numbers come from a 1B-parameter model at T = 4096, so these checks "
        "compare directions, not magnitudes.",
        "",
    ]
