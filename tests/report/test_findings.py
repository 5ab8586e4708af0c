"""The suite report's verdicts: each regime against full, the Holm family, regimes that trained
the same model; and no verdict on the paper's findings (the project's own report adds those)."""

from __future__ import annotations

from pathlib import Path

import pytest
from suite_helpers import REGIMES, write_suite

from aah import records
from aah.cli import main
from aah.report.suite import REPORT, load_suite


def test_verdicts_classify_clear_and_noisy_regimes(results: Path, report: str) -> None:
    from aah.report import comparisons

    suite = load_suite(results / "screening.csv")
    evidence = comparisons.evidence(suite)
    against = {c.pair.regime: c for c in evidence.of(comparisons.AGAINST_FULL)}
    fixed, random, budget = against["fixed"], against["random"], against["budget"]
    # fixed is lower on every seed, yet 3 seeds are fewer than the 5 a verdict needs
    assert fixed.pair.estimate.mean == pytest.approx(-0.1) and fixed.pair.lower == 3
    assert fixed.verdict == "undecided" and 0 < fixed.detectable < float("inf")
    assert random.verdict == "undecided" and random.pair.lower == 1
    assert budget.pair.n == 2 and budget.pair.lower == 0 and budget.verdict == "undecided"
    assert budget.pair.estimate.mean == pytest.approx(0.21)
    # The report shows those numbers, each regime on its own line.
    lines = {line.split("`")[1]: line for line in report.splitlines() if line.startswith("- `")}
    for regime, comp in against.items():
        pair = comp.pair
        assert f"{abs(pair.estimate.mean):.4f}" in lines[regime]
        assert f"{pair.lower}/{pair.n} seeds lower" in lines[regime]
        assert comp.verdict.split()[0] in lines[regime]

    assert "paper's findings" not in report  # the package judges no paper's claims


def test_regimes_with_the_same_plans_on_every_seed_are_named(tmp_path: Path) -> None:
    from aah.report.findings import identical_regimes

    root = write_suite(tmp_path, "twins", ["full", "fixed", "random"])
    for seed in (0, 1, 2):
        plans = (root / "twins" / f"fixed-s{seed}" / records.PLANS).read_text()
        (root / "twins" / f"random-s{seed}" / records.PLANS).write_text(plans)
    suite = load_suite(root / "twins.csv")
    assert identical_regimes(suite) == [["fixed", "random"]]
    assert main(["report", str(root)]) == 0
    text = (root / REPORT).read_text()
    assert "`fixed`, `random` chose the same windows at every update on every seed" in text
    (root / "twins" / "random-s1" / records.PLANS).write_text('{"step": 0, "windows": [[1]]}\n')
    assert identical_regimes(load_suite(root / "twins.csv")) == []


def test_report_corrects_for_multiple_comparisons(results: Path, report: str) -> None:
    from aah.report import comparisons

    suite = load_suite(results / "screening.csv")
    comps = comparisons.evidence(suite).of(comparisons.AGAINST_FULL)
    assert len(comps) == 4 and all(c.family is comparisons.AGAINST_FULL for c in comps)
    raw = sorted(c.pair.estimate.p for c in comps)
    assert min(c.holm_p for c in comps) == pytest.approx(min(1.0, 4 * raw[0]))  # Holm over 4
    assert comparisons.family_size(comps, "with full") in report
    assert "chose the same windows" not in report


def test_a_comparison_without_a_p_value_is_not_counted_in_the_holm_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aah.report import comparisons

    monkeypatch.setitem(REGIMES, "budget", ({0: 0.20}, {0: 0.8}, 0.3, 4))  # one seed: no p
    root = write_suite(tmp_path, "partial", ["full", "fixed", "random", "budget"])
    assert main(["report", str(root)]) == 0
    report = (root / REPORT).read_text()
    comps = comparisons.evidence(load_suite(root / "partial.csv")).of(comparisons.AGAINST_FULL)
    tested = [c for c in comps if c.pair.n > 1]
    raw = sorted(c.pair.estimate.p for c in tested)
    assert len(tested) == 2 and min(c.holm_p for c in tested) == pytest.approx(2 * raw[0])
    assert comparisons.family_size(comps, "with full").startswith("2 comparisons with full")
    assert comparisons.family_size(comps, "with full") in report
