"""Intervals for paired differences when several blocks come from one file.

Blocks cut from one document share its style, topic and vocabulary, so their differences are
not independent: n blocks of k documents carry the information of somewhere between k and n
values. Two ways that treat a document as one unit:

- `clustered_estimate`: the mean of each document's blocks first, then the mean, Student's
  t interval and two-sided t test over the k document means (each document weighs the same).
  This is what the tables print and what Holm adjusts.
- `cluster_bootstrap`: the percentile interval of the block-weighted mean when whole documents
  are resampled with replacement; every one of the k^k resamples when there are at most
  `draws` of them, else `draws` seeded ones.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Hashable, Sequence

from aah.report.stats import Estimate, estimate


def _groups(values: Sequence[float], clusters: Sequence[Hashable]) -> list[list[float]]:
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values and {len(clusters)} cluster labels do not pair")
    if not values:
        raise ValueError("no values to estimate from")
    groups: dict[Hashable, list[float]] = {}
    for v, c in zip(values, clusters, strict=True):
        groups.setdefault(c, []).append(float(v))
    return list(groups.values())


def cluster_means(values: Sequence[float], clusters: Sequence[Hashable]) -> list[float]:
    """The mean of each cluster's values, clusters in first-seen order."""
    return [math.fsum(g) / len(g) for g in _groups(values, clusters)]


def clustered_estimate(
    values: Sequence[float], clusters: Sequence[Hashable], level: float = 0.95
) -> Estimate:
    """`estimate` over the cluster means (n = the number of clusters)."""
    return estimate(cluster_means(values, clusters), level)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between the order statistics (numpy's default)."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (pos - lo) * (sorted_values[hi] - sorted_values[lo])


def cluster_bootstrap(
    values: Sequence[float],
    clusters: Sequence[Hashable],
    *,
    level: float = 0.95,
    draws: int = 10_000,
    seed: int = 0,
) -> tuple[float, float]:
    """The cluster-bootstrap percentile interval of the mean over blocks (module docstring)."""
    if not 0 < level < 1 or draws < 1:
        raise ValueError(f"need 0 < level < 1 and draws >= 1, got {level}, {draws}")
    groups = _groups(values, clusters)
    sums = [math.fsum(g) for g in groups]
    sizes = [len(g) for g in groups]
    k = len(groups)
    if k**k <= draws:
        picks: Sequence[Sequence[int]] = list(itertools.product(range(k), repeat=k))
    else:
        rng = random.Random(seed)
        picks = [[rng.randrange(k) for _ in range(k)] for _ in range(draws)]
    means = sorted(math.fsum(sums[i] for i in p) / sum(sizes[i] for i in p) for p in picks)
    tail = (1 - level) / 2
    return _quantile(means, tail), _quantile(means, 1 - tail)
