"""Per-file intervals: the cluster means by hand, and the cluster bootstrap against every
resample enumerated in the test (numpy's quantile on them)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from aah.report.stats import estimate
from experiments.pretrained.clusters import cluster_bootstrap, cluster_means, clustered_estimate


def test_cluster_means_weigh_each_file_once() -> None:
    values = [1.0, 3.0, 10.0, -2.0, 0.0, 4.0]
    files = ["a", "a", "b", "c", "c", "c"]
    assert cluster_means(values, files) == [2.0, 10.0, pytest.approx(2 / 3)]
    got = clustered_estimate(values, files)
    want = estimate([2.0, 10.0, 2 / 3])
    assert got.n == 3 and got.mean == pytest.approx(want.mean)
    assert got.ci == pytest.approx(want.ci) and got.p == pytest.approx(want.p)
    # one block per file: the same as the plain estimate over blocks
    plain = clustered_estimate(values, list(range(6)))
    assert plain.ci == pytest.approx(estimate(values).ci)


def test_the_bootstrap_matches_every_resample_enumerated() -> None:
    values = [0.5, 0.1, -0.3, 0.9, 0.2, -0.1, 0.4]
    files = ["a", "a", "b", "c", "c", "c", "d"]
    groups = {"a": [0.5, 0.1], "b": [-0.3], "c": [0.9, 0.2, -0.1], "d": [0.4]}
    means = []
    for pick in itertools.product(groups, repeat=4):  # 4^4 = 256 resamples
        chosen = [v for name in pick for v in groups[name]]
        means.append(sum(chosen) / len(chosen))
    want = tuple(np.quantile(means, [0.025, 0.975]))
    assert cluster_bootstrap(values, files, draws=256) == pytest.approx(want, abs=1e-12)
    # drawn resamples approach the enumerated interval
    drawn = cluster_bootstrap(values, files, draws=200, seed=3)
    assert drawn == pytest.approx(want, abs=0.15)
    assert drawn == cluster_bootstrap(values, files, draws=200, seed=3)


def test_the_bootstrap_is_wider_when_blocks_of_a_file_move_together() -> None:
    per_file = [0.3, -0.1, 0.2, 0.0, 0.25, -0.05]
    values = [v for v in per_file for _ in range(4)]  # four identical blocks per file
    files = [i for i in range(6) for _ in range(4)]
    clustered = cluster_bootstrap(values, files, draws=4000)
    naive = cluster_bootstrap(values, list(range(24)), draws=4000)
    assert clustered[1] - clustered[0] > 1.5 * (naive[1] - naive[0])
    assert not math.isnan(clustered_estimate(values, files).p)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="do not pair"):
        cluster_means([1.0, 2.0], ["a"])
    with pytest.raises(ValueError, match="level"):
        cluster_bootstrap([1.0, 2.0], ["a", "b"], level=1.5)
