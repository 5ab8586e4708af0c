"""Small-sample statistics for a suite's seeds: mean, sd, Student-t tests, paired differences,
and the exact paired sign-flip permutation test.

Pure Python (math only): the report must not need scipy, and with 3 seeds per regime the
numbers are tiny. The Student-t distribution comes from the regularized incomplete beta
function, evaluated with its continued fraction (Numerical Recipes, section 6.4). The sign-flip
test enumerates every sign pattern of the per-seed differences (`sign_flip_p`), for bounded,
lumpy outcomes such as accuracy where a t interval would be wrong.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]
NAN = float("nan")
#: above this many degrees of freedom the t distribution is the normal one to ~1e-7.
NORMAL_DF = 1e7
_EPS = 1e-14
_TINY = 1e-300
_MAX_ITER = 10_000
#: up to this many values the sign-flip test enumerates all 2^n sign patterns (65,536)
MAX_EXACT = 16
#: beyond MAX_EXACT: this many sign patterns drawn at random (fixed seed), plus the observed one
SIGN_FLIP_DRAWS = 2**MAX_EXACT - 1
#: relative tolerance for "|pattern's sum| >= |observed sum|": float sums of the same numbers in
#: another order must tie, not miss by one rounding error
_TIE = 1e-9
#: values this close, relative to the largest, are equal (their sd is rounding error)
_EQUAL = 1e-12


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; nan for no values."""
    return math.fsum(values) / len(values) if values else NAN


def sd(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof = 1); nan for fewer than two values."""
    if len(values) < 2:
        return NAN
    m = mean(values)
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (len(values) - 1))


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of I_x(a, b) by the modified Lentz method."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _MAX_ITER + 1):
        m2 = 2 * m
        for aa in (
            m * (b - m) * x / ((a - 1.0 + m2) * (a + m2)),  # even step
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2)),  # odd step
        ):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + aa / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise ValueError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and x in [0, 1]."""
    if a <= 0 or b <= 0:
        raise ValueError(f"betainc needs a, b > 0, got a={a}, b={b}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc needs x in [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # The fraction converges fast only on this side of the mean; use the symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def _check_df(df: float) -> None:
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's T with `df` degrees of freedom."""
    _check_df(df)
    if math.isnan(t):
        return NAN
    if math.isinf(t):
        return 0.0
    if df > NORMAL_DF:
        return math.erfc(abs(t) / math.sqrt(2.0))
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's T with `df` degrees of freedom."""
    tail = t_two_sided_p(t, df) / 2.0
    return 1.0 - tail if t > 0 else tail


def t_critical(df: float, level: float = 0.95) -> float:
    """The t with P(|T| <= t) = level: the half-width multiplier of a `level` CI."""
    _check_df(df)
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    alpha = 1.0 - level
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > alpha:  # p falls with t: bracket, then bisect
        lo, hi = hi, 2.0 * hi
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) > alpha:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Estimate:
    """Mean of n values with its sd, 95% CI and the two-sided test of mean = 0.

    test = "t" (`estimate`): Student's t CI and t test. n = 1: sd, CI, t and p are nan (shown
    as "n/a"). All values equal: sd = 0, the CI is the point itself and t = +-inf; p is then
    not the t test's 0 but the sign-flip test's (`sign_flip_p`): 2 / 2^n, since only the
    observed signs and their mirror image reach the observed |mean| (p = 1, t = 0 if the
    values are all 0). n equal differences are evidence of a direction, but no more than n
    coin flips can give.

    test = "sign-flip" (`sign_flip_estimate`): p from the exact paired sign-flip permutation
    test and the CI from inverting it; t is nan (no t statistic).
    """

    n: int
    mean: float
    sd: float
    ci: tuple[float, float]
    t: float
    p: float
    test: str = "t"

    @property
    def distinguishable(self) -> bool:
        """The 95% CI excludes 0 (nan bounds never do)."""
        low, high = self.ci
        return low > 0 or high < 0


def estimate(values: Sequence[float], level: float = 0.95) -> Estimate:
    """Mean, sd, CI and one-sample t test (against 0) of `values`."""
    values = list(values)
    n, m, s = len(values), mean(values), sd(values)
    if n < 2:
        return Estimate(n, m, NAN, (NAN, NAN), NAN, NAN)
    se = s / math.sqrt(n)
    half = t_critical(n - 1, level) * se
    if m == 0 and se == 0:
        t, p = 0.0, 1.0
    elif _all_equal(values):  # the sign-flip p (2 / 2^n), never the t test's 0
        t, p = math.copysign(math.inf, m), equal_signs_p(n)
    else:
        t = m / se
        p = t_two_sided_p(t, n - 1)
    return Estimate(n, m, s, (m - half, m + half), t, p)


def _all_equal(values: Sequence[float]) -> bool:
    """Equal up to float rounding (0.1 three times has a mean of 0.10000000000000002 and an
    sd of 1.7e-17, which is no variance at all)."""
    return max(values) - min(values) <= _EQUAL * max(abs(v) for v in values)


def equal_signs_p(n: int) -> float:
    """The sign-flip p of n equal non-zero values: 2 / 2^n (floored at the smallest positive
    float, so it is never 0 however large n is)."""
    return max(math.ldexp(1.0, 1 - n), math.ulp(0.0))


def _patterns(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """(sum, size) of the values whose sign a pattern flips, for every pattern of the test:
    all 2^n subsets for n <= MAX_EXACT, else the empty one (the observed signs) and
    SIGN_FLIP_DRAWS subsets drawn at random with a fixed seed (the same on every call)."""
    n = len(values)
    if n <= MAX_EXACT:
        sums, sizes = [0.0], [0]
        for v in values:  # every subset without v, then each of them with v
            sums += [s + v for s in sums]
            sizes += [k + 1 for k in sizes]
        return sums, sizes
    rng = random.Random(0)
    sums, sizes = [0.0], [0]
    for _ in range(SIGN_FLIP_DRAWS):
        flipped = [v for v in values if rng.random() < 0.5]
        sums.append(math.fsum(flipped))
        sizes.append(len(flipped))
    return sums, sizes


def _flip_share(
    values: Sequence[float], sums: list[float], sizes: list[int], delta: float
) -> float:
    """Share of the patterns whose |sum of signed (value - delta)| is >= the observed one."""
    n = len(values)
    total = math.fsum(values) - n * delta
    tol = _TIE * (math.fsum(abs(v) for v in values) + n * abs(delta))
    observed = abs(total) - tol
    # flipping the set F turns the sum into total - 2 * (sum of F's values - |F| * delta)
    pairs = zip(sums, sizes, strict=True)
    hits = sum(abs(total - 2.0 * (s - k * delta)) >= observed for s, k in pairs)
    return hits / len(sums)


def sign_flip_p(values: Sequence[float], delta: float = 0.0) -> float:
    """Two-sided p of the paired sign-flip permutation test of mean(values) = delta.

    Under the null each (value - delta) is as likely to have either sign; p is the share of
    the 2^n sign patterns (the observed one counted) whose |mean| is at least the observed
    |mean|. So p >= 2 / 2^n > 0 (the observed signs and their mirror image always count) and
    p = 1 when the observed mean is delta. Exact for n <= MAX_EXACT; beyond it, the share of
    SIGN_FLIP_DRAWS patterns drawn with a fixed seed plus the observed one. nan for no values.
    """
    values = list(values)
    if not values:
        return NAN
    return _flip_share(values, *_patterns(values), delta)


def sign_flip_interval(
    values: Sequence[float], level: float = 0.95, bounds: tuple[float, float] | None = None
) -> tuple[float, float]:
    """The exact confidence interval of the sign-flip test: every delta the test of
    mean = delta does not reject at 1 - level (p >= 1 - level), clipped to `bounds`.

    Each pattern's "at least as extreme" holds on a half-line of delta, so p(delta) rises up
    to the mean and falls after it: the set is an interval, and its ends are means of subsets
    of the values (where a pattern starts to count), found by bisection over them. When even
    the most extreme delta is not rejected (2 / 2^n >= 1 - level: 5 values or fewer at 95%)
    the interval is unbounded and `bounds` (if any) are its ends. (nan, nan) for n < 2.
    """
    values = list(values)
    n = len(values)
    if n < 2:
        return (NAN, NAN)
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    alpha = 1.0 - level
    sums, sizes = _patterns(values)
    m, total = mean(values), math.fsum(values)
    ends = {m}
    for s, k in zip(sums, sizes, strict=True):
        if 0 < k < n:
            ends.add(s / k)
            ends.add((total - s) / (n - k))
    below = sorted(e for e in ends if e <= m)  # p rises along it, p(m) = 1
    above = sorted((e for e in ends if e >= m), reverse=True)  # p rises along it too

    def first_kept(candidates: list[float]) -> float:
        lo, hi = 0, len(candidates) - 1  # candidates[hi] (the mean) is always kept
        while lo < hi:
            mid = (lo + hi) // 2
            if _flip_share(values, sums, sizes, candidates[mid]) >= alpha:
                hi = mid
            else:
                lo = mid + 1
        return candidates[lo]

    spread = max(values) - min(values) + 1.0
    low, high = -math.inf, math.inf
    # a bounded end lies within the values (beyond them p = 2 / 2^n, rejected): the clamp
    # only removes the rounding of a subset mean computed as (total - sum) / size
    if _flip_share(values, sums, sizes, min(values) - spread) < alpha:
        low = max(first_kept(below), min(values))
    if _flip_share(values, sums, sizes, max(values) + spread) < alpha:
        high = min(first_kept(above), max(values))
    if bounds is not None:
        low, high = max(low, float(bounds[0])), min(high, float(bounds[1]))
    return (low, high)


def sign_flip_estimate(
    values: Sequence[float], level: float = 0.95, bounds: tuple[float, float] | None = None
) -> Estimate:
    """Mean, sd, the sign-flip interval (clipped to `bounds`) and the sign-flip p of `values`,
    for outcomes where Student's t does not hold (bounded, bimodal: accuracy differences).
    n = 1: CI and p are nan, as in `estimate`."""
    values = list(values)
    n, m, s = len(values), mean(values), sd(values)
    if n < 2:
        return Estimate(n, m, NAN, (NAN, NAN), NAN, NAN, "sign-flip")
    ci = sign_flip_interval(values, level, bounds)
    return Estimate(n, m, s, ci, NAN, sign_flip_p(values), "sign-flip")


@dataclass(frozen=True)
class Paired:
    """Per-seed differences regime - baseline on the seeds both have, and their estimate."""

    regime: str
    baseline: str
    seeds: tuple[int, ...]
    diffs: tuple[float, ...]
    estimate: Estimate

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def lower(self) -> int:
        """Seeds on which the regime's value is below the baseline's."""
        return sum(d < 0 for d in self.diffs)


def paired_by_seed(
    regime: str,
    values: dict[int, float],
    baseline: str,
    base: dict[int, float],
    test: str = "t",
    bounds: tuple[float, float] | None = None,
) -> Paired:
    """Pair `values` with `base` (both seed -> value) on their common seeds. test "t":
    `estimate` of the differences; "sign-flip": `sign_flip_estimate`, its interval clipped to
    `bounds` (the range a difference can take)."""
    seeds = tuple(sorted(set(values) & set(base)))
    diffs = tuple(values[s] - base[s] for s in seeds)
    if test == "t":
        est = estimate(diffs)
    elif test == "sign-flip":
        est = sign_flip_estimate(diffs, bounds=bounds)
    else:
        raise ValueError(f"unknown test {test!r}; known: t, sign-flip")
    return Paired(regime, baseline, seeds, diffs, est)


def regimes_of(rows: Iterable[Row]) -> list[str]:
    """Regime names in order of first appearance."""
    return list(dict.fromkeys(r["regime"] for r in rows))


def by_seed(rows: Iterable[Row], regime: str, metric: str) -> dict[int, float]:
    """seed -> `metric` of `regime`; a (regime, seed) seen twice raises ValueError."""
    out: dict[int, float] = {}
    for row in rows:
        if row["regime"] != regime:
            continue
        seed = int(row["seed"])
        if seed in out:
            raise ValueError(f"regime {regime!r} has seed {seed} twice")
        out[seed] = float(row[metric])
    return out


def _require_baseline(rows: list[Row], baseline: str) -> None:
    if baseline not in regimes_of(rows):
        raise ValueError(f"no rows of the baseline regime {baseline!r}")


def paired(rows: Sequence[Row], metric: str, baseline: str = "full") -> dict[str, Paired]:
    """regime -> paired differences of `metric` against `baseline`, for every other regime
    (n = 0 where a regime shares no seed with the baseline)."""
    rows = list(rows)
    _require_baseline(rows, baseline)
    base = by_seed(rows, baseline, metric)
    return {
        regime: paired_by_seed(regime, by_seed(rows, regime, metric), baseline, base)
        for regime in regimes_of(rows)
        if regime != baseline
    }


def speed_ratios(
    rows: Sequence[Row], baseline: str = "full", metric: str = "train_tokens_per_s"
) -> dict[str, dict[int, float]]:
    """regime -> {seed: regime's `metric` / baseline's on the same seed}, baseline included
    (all 1.0). Seeds the baseline lacks, or where it measured 0, are left out."""
    rows = list(rows)
    _require_baseline(rows, baseline)
    base = by_seed(rows, baseline, metric)
    out = {}
    for regime in regimes_of(rows):
        values = by_seed(rows, regime, metric)
        out[regime] = {s: v / base[s] for s, v in values.items() if base.get(s)}
    return out


Point = tuple[float, float]


def value_at(points: Sequence[Point], x: float) -> float:
    """y at `x` by linear interpolation along (x, y) points (sorted here by x).

    Before the first point: the first y (the first measurement at or after x). After the
    last: the last y (the run had finished by x, so its final value is what it reached).
    """
    if not points:
        raise ValueError("value_at needs at least one point")
    pts = sorted(points)
    if x <= pts[0][0]:
        return pts[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(pts):
        if x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return pts[-1][1]


def mean_curve(
    curves: Sequence[Sequence[Point]], n_grid: int = 50
) -> tuple[list[float], list[float]]:
    """Each curve interpolated onto one grid (`value_at`), then averaged point by point.

    The grid runs from the latest first x (no curve is extended backwards) to the latest
    last x: a curve that ends earlier keeps its last value, as `value_at` does for the
    equal-time table, so the plotted mean at t* is the tabulated one. ([], []) if empty.
    """
    curves = [sorted(c) for c in curves if c]
    if not curves:
        return [], []
    start = max(c[0][0] for c in curves)
    end = max(c[-1][0] for c in curves)
    if start == end or n_grid < 2:
        grid = [start]
    else:
        grid = [start + (end - start) * i / (n_grid - 1) for i in range(n_grid)]
    return grid, [mean([value_at(c, x) for c in curves]) for x in grid]
