"""The suite report's verdicts: each regime against full, the Holm family, regimes that trained
the same model, replay twins kept out of the paper checks, and the paper's findings."""

from __future__ import annotations

from pathlib import Path

import pytest
from suite_helpers import REGIMES, write_suite

from aah import records
from aah.cli import main
from aah.report.suite import REPORT, load_suite


def test_verdicts_classify_clear_and_noisy_regimes(results: Path, report: str) -> None:
    from aah.report import comparisons, stats
    from aah.report.findings import claims

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

    ratios = stats.speed_ratios(suite.rows)
    found = {c.number: c for c in claims(suite, ratios, evidence)}
    assert found[1].verdict == "undecided at 3 seeds"  # fixed beats full; the others can't tell
    assert {c.pair.regime for c in found[1].comps} == {"fixed", "random", "aah-v3-shallow-freeze"}
    # every AAH regime against each control, one comparison each: never best-of after the fact
    assert {(c.pair.regime, c.pair.baseline) for c in found[2].comps} == {
        ("aah-v3-shallow-freeze", "fixed"), ("aah-v3-shallow-freeze", "random")}  # fmt: skip
    assert found[2].verdict == "undecided at 3 seeds"
    assert found[3].verdict == "not measured by this suite" and not found[3].comps
    for claim in found.values():
        assert claim.render() in report


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


@pytest.mark.parametrize("suffix", ["-replay-shuffled", "-replay-scattered"])
def test_a_replay_twin_is_a_control_not_an_aah_regime_in_the_paper_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    twin = "aah-v3-shallow-freeze" + suffix
    monkeypatch.setitem(REGIMES, twin, REGIMES["aah-v3-shallow-freeze"])
    root = write_suite(
        tmp_path, "twins", ["full", "fixed", "random", "aah-v3-shallow-freeze", twin]
    )
    assert main(["report", str(root)]) == 0
    claims = [x for x in (root / REPORT).read_text().splitlines() if x[:3] in ("1. ", "2. ", "3. ")]
    assert len(claims) == 3 and all("`aah-v3-shallow-freeze`" in x for x in claims)
    assert not any(twin in x for x in claims)
    matched = (root / REPORT).read_text().split("### Matched controls")[1]
    assert f"| `aah-v3-shallow-freeze` | `{twin}` |" in matched  # the pair it was run for


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


@pytest.mark.parametrize(
    "ratios",
    [
        {"aah-v3-a": [0.9, 0.91, 0.92], "aah-v3-b": [1.1, 1.11, 1.12]},
        {"aah-v3-a": [0.9, 0.91, 0.92], "aah-v3-b": [0.8, 0.81, 0.82]},
        {"aah-v3-a": [1.2, 1.21, 1.22], "aah-v3-b": [0.8, 1.3, 1.0]},
    ],
)
def test_speed_claim_is_never_decided_from_cell_timings(ratios: dict[str, list[float]]) -> None:
    from aah.report.findings import _claim_speed

    per_seed = {r: dict(enumerate(v)) for r, v in ratios.items()}
    claim = _claim_speed(list(ratios), per_seed)
    assert claim.verdict == "not measured by this suite" and not claim.comps
    for regime in ratios:  # each regime's logged ratio is still shown, labelled
        assert any(f"`{regime}` logged" in d and "cell timings" in d for d in claim.details)
