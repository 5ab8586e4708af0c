"""Holm's correction and the verdict rule, against hand-computed values."""

import math

from aah.report import comparisons, stats


def test_holm_known_values():
    # sorted p: 0.01, 0.02, 0.04 with m = 3 -> 0.03, 0.04, max(0.04, 0.04) = 0.04
    assert comparisons.holm([0.04, 0.01, 0.02]) == [0.04, 0.03, 0.04]
    # monotone: a later smaller product cannot undercut an earlier adjusted value
    assert comparisons.holm([0.001, 0.5, 0.011]) == [0.003, 0.5, 0.022]
    adjusted = comparisons.holm([0.3, math.nan])
    assert adjusted[0] == 0.3 and math.isnan(adjusted[1])


def _pair(diffs):
    seeds = tuple(range(len(diffs)))
    return stats.Paired("a", "full", seeds, tuple(diffs), stats.estimate(diffs))


def test_verdict_needs_five_seeds_and_a_corrected_p():
    clear5 = _pair([-0.10, -0.11, -0.09, -0.10, -0.12])
    clear4 = _pair([-0.10, -0.11, -0.09, -0.10])
    noisy5 = _pair([0.05, -0.06, 0.02, -0.01, 0.03])
    fam = comparisons.family([clear5, clear4, noisy5])
    assert fam[0].verdict == "lower" and fam[0].holm_p < 0.05
    assert fam[1].verdict == "undecided"  # p is small but only 4 seeds
    assert fam[2].verdict == "undecided"
    assert fam[0].holm_p == min(1.0, 3 * clear5.estimate.p) or fam[0].holm_p > clear5.estimate.p
    worse = comparisons.family([_pair([0.2, 0.21, 0.19, 0.2, 0.22])])[0]
    assert worse.verdict == "higher"
