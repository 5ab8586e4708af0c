"""The suite report's verdicts: each regime against full, the Holm family, regimes that trained
the same model, replay twins kept out of the paper checks, and the paper's findings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from suite_helpers import REGIMES, write_suite

from aah import records
from aah.cli import main
from aah.report.suite import REPORT, load_suite


def test_verdicts_classify_clear_and_noisy_regimes(report: str) -> None:
    lines = {line.split("`")[1]: line for line in report.splitlines() if line.startswith("- `")}
    assert "lower val_bpb than full by 0.1000" in lines["fixed"]
    # clear on every seed, yet 3 seeds are fewer than the 5 a verdict needs
    assert "3/3 seeds lower): undecided with 3 seeds (it could decide |Δ| ≥" in lines["fixed"]
    assert "undecided with 3 seeds" in lines["random"]
    assert "1/3 seeds lower" in lines["random"]
    assert "higher val_bpb than full by 0.2100" in lines["budget"]
    assert "0/2 seeds lower): undecided with 2 seeds (it could decide" in lines["budget"]
    claims = {line[:2]: line for line in report.splitlines() if re.match(r"\d\. \*", line)}
    assert "**undecided at 3 seeds**" in claims["1."]  # fixed beats full, the others can't tell
    # every AAH regime against each control, one Holm family: never best-of after the fact
    assert "`aah-v3-shallow-freeze` vs `fixed`" in claims["2."]
    assert "`aah-v3-shallow-freeze` vs `random`" in claims["2."]
    assert "**undecided at 3 seeds**" in claims["2."]
    assert "**not measured by this suite**" in claims["3."] and "0.50× (95% CI" in claims["3."]


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


def test_report_corrects_for_multiple_comparisons(report: str) -> None:
    assert "The 4 comparisons with full are one family" in report
    assert "Holm p corrects for the 4 comparisons of this table" in report
    assert "chose the same windows" not in report


def test_a_comparison_without_a_p_value_is_not_counted_in_the_holm_family(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(REGIMES, "budget", ({0: 0.20}, {0: 0.8}, 0.3, 4))  # one seed: no p
    root = write_suite(tmp_path, "partial", ["full", "fixed", "random", "budget"])
    assert main(["report", str(root)]) == 0
    report = (root / REPORT).read_text()
    assert (
        "Holm p corrects for the 2 comparisons of this table that have a p-value "
        "(1 with one seed has none)" in report
    )
    assert "The 2 comparisons with full that have a p-value (1 with one seed" in report


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
    assert "**not measured by this suite**" in claim
    for regime in ratios:  # each regime's logged ratio is still shown, labelled
        assert f"`{regime}` logged" in claim and "cell timings, not a measurement" in claim
