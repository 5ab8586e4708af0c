"""The exact paired sign-flip test (stats.sign_flip_p) and its interval, against brute-force
enumeration written here; and the t-based estimate's p when every difference is equal."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from aah.report import comparisons, stats


def brute_force_p(diffs: list[float], delta: float = 0.0) -> float:
    """Every sign pattern, the observed one counted: share with |mean| >= the observed."""
    x = [d - delta for d in diffs]
    observed = abs(sum(x) / len(x))
    hits = 0
    for signs in itertools.product((1, -1), repeat=len(x)):
        flipped = abs(sum(s * v for s, v in zip(signs, x, strict=True)) / len(x))
        hits += flipped >= observed - 1e-12
    return hits / 2 ** len(x)


def _samples() -> list[list[float]]:
    rng = random.Random(1)
    out = [
        [0.3, -0.1, 0.2],
        [0.5, 0.5, -0.5, 0.5],  # ties in |value|
        [0.0, 0.2, -0.2, 0.4, 0.1],  # a zero difference
        [-0.86, -0.86, -0.87, 0.0, -0.1, 0.02],
        [1.0, -1.0],
        [0.25],
    ]
    for n in range(1, 11):  # accuracy-like: multiples of 1/32, bimodal
        out.append([rng.choice((-1, 1)) * rng.randrange(0, 33) / 32 for _ in range(n)])
        out.append([rng.gauss(0.1, 0.2) for _ in range(n)])
    return out


@pytest.mark.parametrize("diffs", _samples())
def test_sign_flip_p_is_the_brute_force_enumeration(diffs: list[float]) -> None:
    assert stats.sign_flip_p(diffs) == pytest.approx(brute_force_p(diffs), abs=1e-12)
    shifted = stats.mean(diffs) / 2
    assert stats.sign_flip_p(diffs, shifted) == pytest.approx(brute_force_p(diffs, shifted))


@pytest.mark.parametrize("n", range(1, 17))
def test_n_equal_differences_give_two_over_two_to_the_n(n: int) -> None:
    for value in (0.1, -0.37, 2.0):  # 0.1 * n has rounding error: still "all equal"
        assert stats.sign_flip_p([value] * n) == pytest.approx(2 / 2**n)
        if n >= 2:
            e = stats.estimate([value] * n)
            assert e.p == pytest.approx(2 / 2**n) and e.t == math.copysign(math.inf, value)
            assert e.mean == pytest.approx(value)  # the rest of the estimate as before
    if n >= 2:
        assert stats.estimate([0.0] * n).p == 1.0  # all zero: no difference at all


def test_p_is_never_zero() -> None:
    for diffs in _samples():
        assert stats.sign_flip_p(diffs) > 0
        assert stats.sign_flip_p(diffs) >= 2 / 2 ** len(diffs) - 1e-15
        if len(diffs) >= 2:
            assert stats.estimate(diffs).p > 0
            assert stats.sign_flip_estimate(diffs).p > 0
    assert stats.estimate([1e-3] * 40).p == pytest.approx(2 / 2**40)  # no t-test 0
    assert stats.estimate([1.0] * 5000).p > 0  # 2 / 2^5000 underflows: floored, not 0
    many = [0.01 * (i % 7) + 0.005 for i in range(20)]  # beyond exact enumeration: drawn
    assert 0 < stats.sign_flip_p(many) <= 2 / (stats.SIGN_FLIP_DRAWS + 1)


def test_estimate_is_unchanged_where_the_differences_vary() -> None:
    e = stats.estimate([1.0, 2.0, 3.0, 4.0])
    assert e.p == pytest.approx(0.0305, abs=1e-4) and e.test == "t"


@pytest.mark.parametrize("diffs", [d for d in _samples() if len(d) >= 2])
def test_sign_flip_interval_inverts_the_test(diffs: list[float]) -> None:
    low, high = stats.sign_flip_interval(diffs, bounds=(-5.0, 5.0))
    p = stats.sign_flip_p(diffs)
    assert low <= stats.mean(diffs) <= high
    assert (low > 0 or high < 0) == (p < 0.05)  # the CI excludes 0 exactly when p < 0.05
    if 2 / 2 ** len(diffs) >= 0.05:  # 5 seeds or fewer: no delta is ever rejected at 5%
        assert (low, high) == (-5.0, 5.0)
        return
    eps = 1e-9
    assert brute_force_p(diffs, low) >= 0.05 and brute_force_p(diffs, high) >= 0.05
    assert brute_force_p(diffs, low - eps) < 0.05 and brute_force_p(diffs, high + eps) < 0.05
    assert min(diffs) <= low and high <= max(diffs)


def test_sign_flip_estimate_of_accuracy_differences() -> None:
    e = stats.sign_flip_estimate([-0.86, -0.85, -0.87], bounds=(-1.0, 1.0))
    assert (e.n, e.test, e.p) == (3, "sign-flip", 0.25) and math.isnan(e.t)
    assert e.ci == (-1.0, 1.0)  # 3 seeds cannot reject any difference at 5%
    assert e.mean == pytest.approx(-0.86)
    one = stats.sign_flip_estimate([0.3])
    assert math.isnan(one.p) and math.isnan(one.ci[0])
    paired = stats.paired_by_seed("a", {0: 0.1, 1: 0.2}, "b", {0: 0.3, 1: 0.5}, "sign-flip")
    assert paired.estimate.test == "sign-flip" and paired.estimate.p == 0.5
    with pytest.raises(ValueError, match="unknown test"):
        stats.paired_by_seed("a", {0: 0.1}, "b", {0: 0.3}, "wilcoxon")


def test_detectable_difference_from_textbook_t_quantiles() -> None:
    # five paired values of sd 1: t(0.975, 4) = 2.7764, t(0.80, 4) = 0.9410 (tables)
    e = stats.estimate([1.0, 2.0, 3.0, 4.0, 5.0])  # sd = sqrt(2.5)
    sd = math.sqrt(2.5)
    assert comparisons.detectable(e, 1) == pytest.approx(
        (2.7764 + 0.9410) * sd / math.sqrt(5), rel=1e-3
    )
    # a family of 10 tests at 0.05: alpha / m = 0.005, t(0.9975, 4) = 5.5976
    assert comparisons.detectable(e, 10) == pytest.approx(
        (5.5976 + 0.9410) * sd / math.sqrt(5), rel=1e-3
    )
    # the sign-flip test at five seeds cannot go below p = 2 / 2^5 = 0.0625: nothing decidable
    assert math.isinf(comparisons.detectable(stats.sign_flip_estimate([0.5] * 5), 1))
    assert math.isnan(comparisons.detectable(stats.estimate([1.0]), 3))


def test_power_line_rates_the_pairs_with_the_most_seeds() -> None:
    def pair(name: str, diffs: list[float]) -> stats.Paired:
        seeds = tuple(range(len(diffs)))
        return stats.Paired(name, "full", seeds, tuple(diffs), stats.estimate(diffs))

    pairs = [pair("a", [0.01, 0.02, 0.03, 0.02, 0.01]), pair("b", [0.1, -0.1, 0.05, 0.0, 0.02]),
             pair("c", [0.5, -0.4])]  # fmt: skip
    family = comparisons.family(pairs)
    line = comparisons.power_line(family, "bits/byte")
    five = sorted(c.detectable for c in family[:2])
    assert f"{five[0]:.4f} to {five[1]:.4f} bits/byte over the 2 with 5 seeds" in line
    assert "1 with fewer seeds need more" in line and "3 Holm-corrected" in line
    assert family[2].detectable > five[1]  # two seeds: a far wider bound, kept out of the range
