"""The recall-accuracy part of a suite report (generated tasks only).

On `synthetic:recall` / `synthetic:passkey` the question a window policy answers is whether
its heads still reach far answers, so the outcome compared is the accuracy in the farthest
distance bucket (`val_acc_far`, a results-CSV column), decided in advance rather than picked
from the buckets afterwards. The comparisons are the two accuracy families declared in
comparisons.py (`against-full/val_acc_far`, `matched/val_acc_far`), with the same verdict rule
as bits/byte.

Accuracy is bounded and, across seeds, often bimodal (a seed learns the far answers or does
not), so Student's t does not describe it. Each paired difference is tested instead with the
exact paired sign-flip permutation test over seeds (stats.sign_flip_p: all 2^n sign patterns,
p >= 2 / 2^n), and its 95% CI is the exact interval from inverting that test
(stats.sign_flip_interval), clipped to [-1, 1], the range a difference of accuracies can
take. Inverting the test, rather than a percentile bootstrap, keeps the CI and the p in
agreement (the CI excludes 0 exactly when p < 0.05) and keeps its coverage at 95% with few
seeds, where a bootstrap's is lower. The price is stated in the report: with n seeds no p is
below 2 / 2^n (0.0625 at 5 seeds), so at 5 seeds or fewer no accuracy comparison can be
decided and the 95% CI is the whole range [-1, 1].
"""

from __future__ import annotations

from aah.report import comparisons, stats
from aah.report.markdown import ci_text, fmt, p_text, pm, table
from aah.report.suite_data import Suite

METRIC = comparisons.AGAINST_FULL_ACC.metric  # "val_acc_far"
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
            f"{comp.pair.lower}/{comp.pair.n}", comparisons.verdict_text(comp),
            coverage_gap_cell(suite, comp.pair.regime, comp.pair.baseline),
        ])  # fmt: skip
    return out


def _regime_row(suite: Suite, regime: str) -> list[str]:
    return [
        f"`{regime}`", str(len(suite.values(regime, METRIC))),
        pm(suite.values(regime, "val_acc"), ".3f"), pm(suite.values(regime, METRIC), ".3f"),
        fmt(stats.mean(suite.values(regime, "causal_coverage")), ".3f"),
    ]  # fmt: skip


def _smallest_p_line(families: list[list[comparisons.Comparison]]) -> str:
    """What the sign-flip test can show with the suite's seeds."""
    ns = sorted({c.pair.n for f in families for c in f if c.pair.n >= 2})
    if not ns:
        return ""
    n = ns[0]
    text = f"With n paired seeds the sign-flip p is at least 2 / 2^n ({2 / 2**n:.4g} at {n} seeds)"
    if 2 / 2**n >= comparisons.ALPHA:
        text += (
            f": at {n} seeds no accuracy comparison can reach p < {comparisons.ALPHA}, "
            "before or after Holm, so none is decided and every 95% CI is the whole range "
            "[-1, 1]; only more seeds can decide one."
        )
    else:
        text += "."
    return text


def accuracy_section(suite: Suite, evidence: comparisons.Evidence, verdict_rule: str) -> list[str]:
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
    for declared, name in (
        (comparisons.AGAINST_FULL_ACC, "against full"),
        (comparisons.MATCHED_ACC, "matched controls"),
    ):
        family = evidence.of(declared)
        if family:
            families.append(family)
            lines += [
                declared.heading,
                "",
                f"Paired on seed, {name} (Δ = regime − the other; Holm over the "
                f"{comparisons.family_size(family)}):",
                "",
                *table(PAIRED.format(far=far).split(" | "), _rows(suite, family)),
                "",
            ]
    if families:
        lines += [verdict_rule, _smallest_p_line(families), COVERAGE_GAP_RULE, ""]
    return lines
