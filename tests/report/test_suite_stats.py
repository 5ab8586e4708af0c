"""The statistics behind the suite report: mean, sd, Student t, paired differences over seeds,
interpolation at equal training time; on hand-computed values and the synthetic suite."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from suite_helpers import REGIMES, STEPS, TOKENS_PER_STEP, final_bpb, tps, val_bpb_at_step

from aah.report import stats
from aah.report.suite import equal_time, load_suite


def test_mean_and_sample_sd() -> None:
    assert stats.mean([1.0, 2.0, 3.0, 4.0]) == 2.5
    assert stats.sd([1.0, 2.0, 3.0, 4.0]) == pytest.approx(math.sqrt(5 / 3))
    assert math.isnan(stats.sd([1.0])) and math.isnan(stats.mean([]))


@pytest.mark.parametrize(
    ("t", "df"), [(12.706, 1), (4.303, 2), (3.182, 3), (2.776, 4), (2.228, 10), (1.960, 1e9)]
)
def test_t_two_sided_p_at_known_95_quantiles(t: float, df: float) -> None:
    assert stats.t_two_sided_p(t, df) == pytest.approx(0.05, abs=2e-4)
    assert stats.t_critical(df) == pytest.approx(t, abs=1e-3)


def test_t_cdf_shapes() -> None:
    assert stats.t_cdf(0.0, 3) == pytest.approx(0.5)
    assert stats.t_cdf(-1.0, 1) == pytest.approx(0.25)  # Cauchy: 1/2 + atan(t)/pi
    assert stats.t_cdf(1.0, 1) == pytest.approx(0.75)
    normal = 0.5 * math.erfc(-1.5 / math.sqrt(2))
    assert stats.t_cdf(1.5, 50_000) == pytest.approx(normal, abs=1e-5)  # large df: normal
    assert stats.betainc(2, 3, 0.4) == pytest.approx(0.5248)


def test_estimate_ci_and_single_value() -> None:
    e = stats.estimate([1.0, 2.0, 3.0, 4.0])
    half = 3.182446 * math.sqrt(5 / 3) / 2
    assert e.ci == pytest.approx((2.5 - half, 2.5 + half), abs=1e-5)
    assert e.t == pytest.approx(2.5 / (math.sqrt(5 / 3) / 2)) and e.p == pytest.approx(
        0.0305, abs=1e-4
    )
    one = stats.estimate([0.3])
    assert one.mean == 0.3 and math.isnan(one.sd) and not one.distinguishable


def test_paired_differences_and_seed_counts(results: Path) -> None:
    suite = load_suite(results / "screening.csv")
    pairs = stats.paired(suite.rows, "val_bpb")
    assert set(pairs) == set(REGIMES) - {"full"}
    for regime, pair in pairs.items():
        deltas = REGIMES[regime][0]
        assert pair.seeds == tuple(sorted(deltas))
        assert pair.diffs == pytest.approx([deltas[s] for s in sorted(deltas)], abs=1e-6)
    assert (pairs["fixed"].lower, pairs["fixed"].n) == (3, 3)
    assert (pairs["random"].lower, pairs["random"].n) == (1, 3)
    assert pairs["aah-v3-shallow-freeze"].lower == 2
    assert (pairs["budget"].lower, pairs["budget"].n) == (0, 2)
    fixed = pairs["fixed"].estimate
    assert fixed.mean == pytest.approx(-0.10, abs=1e-6) and fixed.sd == pytest.approx(
        0.01, abs=1e-6
    )
    assert fixed.ci[1] < 0 and fixed.distinguishable
    assert not pairs["random"].estimate.distinguishable
    ratios = stats.speed_ratios(suite.rows)
    assert ratios["aah-v3-shallow-freeze"] == pytest.approx({0: 0.5, 1: 0.52, 2: 0.48}, rel=1e-5)
    with pytest.raises(ValueError, match="'full'"):
        stats.paired([r for r in suite.rows if r["regime"] != "full"], "val_bpb")


def test_value_at_interpolates_and_clamps() -> None:
    points = [(3.0, 2.0), (1.0, 3.0), (7.0, 1.0)]  # unsorted on purpose
    assert stats.value_at(points, 2.0) == pytest.approx(2.5)
    assert stats.value_at(points, 5.0) == pytest.approx(1.5)
    assert stats.value_at(points, 0.5) == 3.0  # before the first eval: the first eval
    assert stats.value_at(points, 9.0) == 1.0  # after the last: the final value
    grid, values = stats.mean_curve([[(0.0, 1.0), (4.0, 3.0)], [(1.0, 0.0), (3.0, 0.0)]], 3)
    assert grid == [1.0, 2.5, 4.0] and values == pytest.approx([0.75, 1.125, 1.5])


def test_equal_time_budget_and_values(results: Path) -> None:
    eq = equal_time(load_suite(results / "screening.csv"))
    finals = {
        r: stats.mean([STEPS * TOKENS_PER_STEP / tps(r, s) for s in REGIMES[r][0]]) for r in REGIMES
    }
    assert eq.fastest == "fixed" and eq.t_star == pytest.approx(finals["fixed"])
    for seed in (0, 1, 2):  # val_bpb is linear in step, step linear in train_s: exact
        step = eq.t_star * tps("full", seed) / TOKENS_PER_STEP
        assert eq.values["full"][seed] == pytest.approx(val_bpb_at_step("full", seed, step))
    assert "fixed-s1" in eq.held  # its last eval (fastest seed) came before t*
    assert eq.values["fixed"][1] == pytest.approx(final_bpb("fixed", 1))
