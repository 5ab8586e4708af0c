"""What holds at this scale: each regime against full, and the paper's findings checked one by
one. Sentences only classify what the comparisons show, and every comparison they cite is the
one of the report's tables (comparisons.evidence: one family, one adjusted p per pair)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from aah.report import comparisons, stats
from aah.report.markdown import ci_text, fmt, p_text, seeds_text, threads_text
from aah.report.suite_data import BASELINE, Suite


def _status(comp: comparisons.Comparison, yes_if_lower: bool) -> str:
    """'yes' / 'no' when the comparison is decided lower / higher (swapped if not
    yes_if_lower), '?' when it is undecided (see comparisons.py)."""
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


def _ratio_text(ratios: dict[int, float]) -> tuple[str, stats.Estimate]:
    """'0.93× (95% CI [...]; per seed ...)' and the estimate of ratio - 1."""
    e = stats.estimate([r - 1.0 for r in ratios.values()])
    ci = "n/a" if math.isnan(e.ci[0]) else f"[{1 + e.ci[0]:.2f}, {1 + e.ci[1]:.2f}]"
    seeds = ", ".join(f"{r:.2f}" for _, r in sorted(ratios.items()))
    return f"{1 + e.mean:.2f}× (95% CI {ci}; per seed {seeds})", e


def _regime_sentence(comp: comparisons.Comparison, ratios: dict[int, float]) -> str:
    pair = comp.pair
    if pair.n == 0:
        return f"- `{pair.regime}`: no seed in common with full, no comparison."
    e = pair.estimate
    if e.mean == 0:
        text = "the same mean val_bpb as full"
    else:
        text = f"{'lower' if e.mean < 0 else 'higher'} val_bpb than full by {abs(e.mean):.4f}"
    verdict = {
        "lower": "lower than full after the Holm correction",
        "higher": "higher than full after the Holm correction",
        "undecided": f"undecided with {seeds_text(pair.n)}",
    }[comp.verdict]
    if comp.verdict == "undecided" and math.isfinite(comp.detectable):
        verdict += f" (it could decide |Δ| ≥ {comp.detectable:.4f} at 80% power)"
    sentence = (
        f"- `{pair.regime}`: {text} (95% CI {ci_text(e.ci)}, Holm p {p_text(comp.holm_p)}, "
        f"{pair.lower}/{pair.n} seeds lower): {verdict}."
    )
    if ratios:
        sentence += (
            f" Logged training speed {_ratio_text(ratios)[0]} of full's tokens/s (cells timed "
            "one by one: not a speed measurement)."
        )
    return sentence


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
    if not suite.has_baseline:
        return _claim(1, text, "not testable", ["Needs `full` and a local regime"], rule)
    comps = [
        c
        for r in local
        if (c := evidence.get(r, BASELINE, declared.metric)) is not None and c.pair.n
    ]
    if not comps:
        return _claim(1, text, "not testable", ["Needs `full` and a local regime"], rule)
    statuses = [_status(c, True) for c in comps]
    details = [
        f"`{c.pair.regime}` {fmt(c.pair.estimate.mean, '+.4f')} {ci_text(c.pair.estimate.ci)} "
        f"{_cite(c)}"
        for c in comps
    ]
    details[0] = "Δ val_bpb vs full, mean [95% CI]: " + details[0]
    verdict = _overall(statuses, min(c.pair.n for c in comps))
    return _claim(1, text, verdict, details, rule, comps)


def _claim_controls(suite: Suite, aah: list[str], evidence: comparisons.Evidence) -> Claim:
    text = "simple fixed/random controls were about as good as the adaptive hierarchy"
    metric = comparisons.PAPER_CONTROLS_BPB.metric
    rule = (
        "every AAH regime against each control (fixed, random), paired on seed, each pair's "
        f"comparison from the family that tests it (AAH vs random: {comparisons.MATCHED_BPB.label}"
        f"; AAH vs fixed: {comparisons.PAPER_CONTROLS_BPB.label}), "
        f">= {comparisons.MIN_SEEDS} seeds; does not hold if any AAH regime is decided lower "
        "than a control; otherwise undecided (equivalence is not tested)"
    )
    controls = [r for r in comparisons.PAPER_CONTROLS if r in suite.regimes]
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
        f"cell timings, not a measurement: `{regime}` logged {_ratio_text(per_seed)[0]} of "
        "full's tokens/s"
        for regime, per_seed in speeds
    ]
    return _claim(3, text, "not measured by this suite", details, rule)


def claims(
    suite: Suite, ratios: dict[str, dict[int, float]], evidence: comparisons.Evidence
) -> list[Claim]:
    """The paper's findings (as the paper reports them), each checked against this suite."""
    aah = comparisons.aah_regimes(suite.regimes)  # replay twins are controls, not AAH-v3
    local = [r for r in suite.regimes if r in comparisons.PAPER_CONTROLS] + aah
    return [
        _claim_local(suite, local, evidence),
        _claim_controls(suite, aah, evidence),
        _claim_speed(aah, ratios),
    ]


def findings(
    suite: Suite, ratios: dict[str, dict[int, float]], evidence: comparisons.Evidence
) -> list[str]:
    lines = ["### What holds at this scale", ""]
    comps = evidence.of(comparisons.AGAINST_FULL)
    family = {c.pair.regime: c for c in comps}
    if suite.regimes == [BASELINE]:
        lines.append("Only `full` in this suite: nothing to compare it with.")
    elif suite.has_baseline:
        lines.append(
            "Final val_bpb of each regime against full, paired on seed; "
            f"{comparisons.AGAINST_FULL.label}, as in the table above:"
        )
        lines.append("")
        lines += [_regime_sentence(family[r], ratios.get(r, {})) for r in suite.regimes[1:]]
    else:
        lines.append("No `full` regime in this suite: no comparison against full.")
    for group in identical_regimes(suite):
        names = ", ".join(f"`{r}`" for r in group)
        lines += [
            "",
            f"{names} chose the same windows at every update on every seed, so they trained "
            "identical models here (their quality numbers are equal by construction; their "
            "speed differences are timing noise).",
        ]
    if suite.has_baseline and len(suite.regimes) > 2:
        size = comparisons.family_size(family.values(), "with full")
        lines += [
            "",
            f"The {size} are one family: their p-values are Holm-corrected, and none counts "
            "without at least "
            f"{comparisons.MIN_SEEDS} seeds.",
        ]
    lines += ["", "The paper's findings (as the paper reports them), checked on this suite:", ""]
    return [*lines, *(c.render() for c in claims(suite, ratios, evidence)), ""]


def identical_regimes(suite: Suite) -> list[list[str]]:
    """Groups of 2+ regimes whose cells logged the same plan sequence on every seed (and ran
    the same seeds), in the suite's regime order."""
    signature: dict[str, tuple] = {}
    for regime in suite.regimes:
        runs = suite.runs(regime)
        if runs:
            signature[regime] = tuple(
                (run.seed, tuple((p.get("step"), repr(p.get("windows"))) for p in run.plans))
                for run in runs
            )
    groups: dict[tuple, list[str]] = {}
    for regime, sig in signature.items():
        groups.setdefault(sig, []).append(regime)
    return [g for g in groups.values() if len(g) > 1]


def caveats(suite: Suite) -> list[str]:
    train = suite.config.get("train", {})
    seq_len = suite.seq_len
    counts = sorted({len(suite.values(r, "val_bpb")) for r in suite.regimes})
    seeds = ", ".join(map(str, suite.seeds))
    n = seeds_text(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]} seeds"
    text = [f"{n} per regime (seeds {seeds})"]
    wide = [f"±{stats.t_critical(k - 1):.2f} (n = {k})" for k in counts if k >= 2]
    if wide:
        text[0] += (
            f": a 95% CI over n paired seeds spans {', '.join(wide)} standard errors, so "
            '"not distinguishable" means these runs cannot tell the regimes apart, not that '
            "they are equal"
        )
    if counts[0] < 2:
        text.append("a regime with one seed has no confidence interval at all")
    tokens = sorted({int(r["tokens"]) for r in suite.rows})
    text.append(f"each cell trained on {'/'.join(f'{t:,}' for t in tokens)} tokens")
    if {"eval_batches", "batch_size"} <= set(train):
        val = int(train["eval_batches"]) * int(train["batch_size"]) * seq_len
        text.append(
            f"each evaluation used {train['eval_batches']} × {train['batch_size']} × "
            f"{seq_len} = {val:,} validation tokens"
        )
    text.append(
        "timings (train tok/s, wall s, train_s, so the speed ratios and the equal-time "
        "comparison) came from a shared machine with other runs alongside "
        f"({threads_text(train.get('threads', 0))} per cell)"
    )
    text.append(
        "the paper's numbers come from a 1B-parameter model at T = 4096, so the checks "
        "above compare directions, not magnitudes"
    )
    paragraph = "; ".join(text)
    return ["### Caveats", "", paragraph[0].upper() + paragraph[1:] + ".", ""]
