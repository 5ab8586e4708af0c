"""What holds at this scale: each regime against full, regimes that trained the same model, and
the caveats of a suite. Sentences only classify what the comparisons show, and every comparison
they cite is the one of the report's tables (comparisons.evidence: one family, one adjusted p
per pair)."""

from __future__ import annotations

import math

from aah.report import comparisons, stats
from aah.report.markdown import ci_text, p_text, seeds_text, threads_text
from aah.report.suite_data import BASELINE, Suite


def ratio_text(ratios: dict[int, float]) -> tuple[str, stats.Estimate]:
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
            f" Logged training speed {ratio_text(ratios)[0]} of full's tokens/s (cells timed "
            "one by one: not a speed measurement)."
        )
    return sentence


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
    return [*lines, ""]


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
    paragraph = "; ".join(text)
    return ["### Caveats", "", paragraph[0].upper() + paragraph[1:] + ".", ""]
