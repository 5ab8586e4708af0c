"""The recall-accuracy part of a suite report (generated tasks only).

On `synthetic:recall` / `synthetic:passkey` the question a window policy answers is whether
its heads still reach far answers, so the outcome compared is the accuracy in the farthest
distance bucket (`val_acc_far`, a results-CSV column), decided in advance rather than picked
from the buckets afterwards. The comparisons are two Holm families of their own (against
`full`, and the matched controls), with the same verdict rule as bits/byte.
"""

from __future__ import annotations

from aah.report import comparisons, stats
from aah.report.markdown import ci_text, fmt, p_text, pm, table
from aah.report.suite_data import Suite

METRIC = "val_acc_far"
HEADER = "regime | n | accuracy mean ± sd | accuracy at {far} mean ± sd | causal coverage"
PAIRED = (
    "regime | vs | Δ accuracy at {far} | 95% CI | p | Holm p | seeds lower | verdict | "
    "Δ causal coverage"
)
#: A paired comparison whose mean coverages differ by more than this is flagged: the regime
#: may reach more (or fewer) far answers because it computes more, not because it allocates
#: better.
COVERAGE_GAP = 0.05


def is_task_suite(suite: Suite) -> bool:
    """Every finished cell scored answers (the suite runs on a generated task)."""
    return bool(suite.rows) and all(r.get(METRIC) is not None for r in suite.rows)


COVERAGE_GAP_RULE = (
    "Δ causal coverage: the regime's final coverage minus the other's, mean over the paired "
    f"seeds; beyond ±{COVERAGE_GAP} the pair is flagged as not matched in coverage, and a "
    "difference may come from computing more context rather than from allocating it better."
)


def coverage_gap(suite: Suite, regime: str, other: str) -> float:
    """Final causal coverage of `regime` minus that of `other`, averaged over the seeds both
    finished: the pair's Δ is taken on those seeds, so its coverage gap must be too."""
    pair = stats.paired_by_seed(
        regime,
        stats.by_seed(suite.rows, regime, "causal_coverage"),
        other,
        stats.by_seed(suite.rows, other, "causal_coverage"),
    )
    return stats.mean(pair.diffs)


def coverage_gap_cell(suite: Suite, regime: str, other: str) -> str:
    """The gap as a table cell, flagged when the pair is not matched in coverage."""
    gap = coverage_gap(suite, regime, other)
    return fmt(gap, "+.3f") + (" (not matched)" if abs(gap) > COVERAGE_GAP else "")


def _rows(suite: Suite, family: list[comparisons.Comparison]) -> list[list[str]]:
    out = []
    for comp in family:
        e = comp.pair.estimate
        out.append([
            f"`{comp.pair.regime}`", f"`{comp.pair.baseline}`", fmt(e.mean, "+.3f"),
            ci_text(e.ci, "+.3f"), p_text(e.p), p_text(comp.holm_p),
            f"{comp.pair.lower}/{comp.pair.n}", comp.verdict,
            coverage_gap_cell(suite, comp.pair.regime, comp.pair.baseline),
        ])  # fmt: skip
    return out


def _regime_row(suite: Suite, regime: str) -> list[str]:
    return [
        f"`{regime}`", str(len(suite.values(regime, METRIC))),
        pm(suite.values(regime, "val_acc"), ".3f"), pm(suite.values(regime, METRIC), ".3f"),
        fmt(stats.mean(suite.values(regime, "causal_coverage")), ".3f"),
    ]  # fmt: skip


def accuracy_section(suite: Suite, verdict_rule: str) -> list[str]:
    """Markdown lines, or [] when the suite is not on a generated task."""
    if not is_task_suite(suite):
        return []
    far = str(suite.rows[0].get("far_bucket") or "the farthest bucket")
    rows = [_regime_row(suite, regime) for regime in suite.regimes]
    lines = [
        "### Recall accuracy",
        "",
        "Accuracy = argmax prediction at the answer bytes of the validation stream (chance: "
        f"one over the value alphabet). The outcome compared is the accuracy at distances {far}"
        ", the answers only heads with long windows can reach.",
        "",
        *table(HEADER.format(far=far).split(" | "), rows),
        "",
    ]
    families = []
    if suite.has_baseline and suite.regimes != ["full"]:
        families.append(("against full", list(comparisons.against_full(suite, METRIC).values())))
    matched = comparisons.matched(suite, METRIC)
    if matched:
        families.append(("matched controls", matched))
    for name, family in families:
        lines += [
            f"Paired on seed, {name} (Δ = regime − the other; Holm over the "
            f"{comparisons.family_size(family)}):",
            "",
            *table(PAIRED.format(far=far).split(" | "), _rows(suite, family)),
            "",
        ]
    if families:
        lines += [verdict_rule, COVERAGE_GAP_RULE, ""]
    return lines
