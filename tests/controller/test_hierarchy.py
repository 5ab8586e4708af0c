"""Clustering rules on hand-made feature sets with known answers, and partition properties.

The golden-fixture test (test_aahv3_golden.py) checks these rules against the reference on
seeded cases; here each rule is pinned by a case small enough to work out by hand.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aah.controller.clustering import (
    Closest,
    cluster_level0,
    cluster_upper,
    merge_small_groups,
    unit_rows,
)
from aah.controller.hierarchy import (
    GroupingRule,
    build,
    check_partition,
    from_topology,
    grow,
    passthrough,
)


def at(deg, norm=1.0, dims=4):
    """A vector at angle `deg` in the first plane (cosines between them are cos of the gap)."""
    v = torch.zeros(dims)
    v[0], v[1] = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    return v * norm


def test_two_clear_clusters_interleaved():
    feats = torch.stack([at(0), at(90), at(5), at(85), at(-3), at(92)])
    assert cluster_level0(feats, 0.72, 3) == [[0, 2, 4], [1, 3, 5]]


def test_margins_record_the_closest_call():
    # row 1 is 40 deg from row 0: cos 0.766 against the threshold 0.72; row 2 at 90 deg
    closest = Closest()
    assert cluster_level0(torch.stack([at(0), at(40), at(90)]), 0.72, 1, closest=closest)
    gaps = [math.cos(math.radians(40)) - 0.72, 0.72 - math.cos(math.radians(50))]
    assert closest.value == pytest.approx(min(gaps), abs=1e-6)
    # identical rows: the split's least similar pair is a tie, so the margin is ~0
    tie = Closest()
    cluster_level0(torch.stack([at(10)] * 4), 0.72, 1, closest=tie)
    assert tie.value < 1e-6
    assert Closest().value == math.inf


def test_collapse_splits_around_least_similar_pair():
    feats = torch.stack([at(0), at(10), at(20), at(30)])  # all within 30 deg: cos >= 0.866
    # least similar pair (0, 3); 10 deg is nearer 0, 20 deg nearer 30; anchors come first
    assert cluster_level0(feats, 0.72, 1) == [[0, 1], [3, 2]]


def test_identical_features_split_evenly():
    feats = torch.ones(5, 9)
    groups = cluster_level0(feats, 0.72, 3)
    assert sorted(len(g) for g in groups) == [2, 3] and check_partition(groups, 5)


def test_stickiness_moves_the_split_away_from_last_groups():
    feats = torch.stack([at(0), at(10), at(25), at(30)])
    # without it: least similar pair (0, 3) anchors the split
    assert cluster_level0(feats, 0.72, 1) == [[0, 1], [3, 2]]
    # 0 and 3 (and 1 and 2) were together: their pairs gain the bonus, (0, 2) anchors now
    sticky = cluster_level0(feats, 0.72, 1, previous=[0, 1, 1, 0], stickiness=0.5)
    assert sticky == [[0, 1], [2, 3]]


def test_small_group_merges_only_when_similar_and_more_than_two_groups():
    unit = unit_rows(torch.stack([at(0), at(2), at(4), at(60), at(62), at(64), at(10)]))
    groups = [[0, 1, 2], [3, 4, 5], [6]]
    assert merge_small_groups(groups, unit, 3, 0.72) == [[0, 1, 2, 6], [3, 4, 5]]
    assert merge_small_groups(groups, unit, 3, 0.999) == groups  # not similar enough
    assert merge_small_groups([[0, 1, 2], [6]], unit, 3, 0.72) == [[0, 1, 2], [6]]  # two left


def test_upper_levels_keep_levels_that_merge_nothing():
    # two level-0 groups far apart in norm: no upper level merges them, yet levels are added
    feats0 = torch.stack([at(0, 1.0, 9), at(5, 4.0, 9)])
    rule = GroupingRule(max_depth=4)
    hier = grow([[0, 1], [2, 3]], feats0, 4, rule)
    assert [len(level) for level in hier.levels] == [2, 2, 2, 2]
    # same norm and direction: the first upper clustering collapses, so growth stops there
    same = torch.stack([at(0, 1.0, 9), at(1, 1.0, 9)])
    assert [len(level) for level in grow([[0, 1], [2, 3]], same, 4, rule).levels] == [2]


def test_cosine_normdiff_penalises_the_norm_gap():
    # cos = 1, norm gap |1 - 2| / 2 = 0.5: similarity 1 - 16 * 0.5 < 0.76 -> two groups
    assert cluster_upper(torch.stack([at(0, 1.0), at(0, 2.0)]), 0.76, 1, 16.0) == [[0], [1]]
    # with a small penalty 1 - 0.5 * 0.5 = 0.75 < 0.76 still apart; 0.4 * 0.5 -> 0.8 joins
    assert cluster_upper(torch.stack([at(0, 1.0), at(0, 2.0)]), 0.76, 1, 0.4) == [[0, 1]]


def test_passthrough_and_frozen_topology():
    feats0 = torch.rand(2, 9)
    hier = passthrough([[1, 3], [0, 2]], feats0, 4, 3)
    assert hier.levels == [[[1, 3], [0, 2]], [[0], [1]], [[0], [1]]]
    assert all(torch.equal(f, feats0) for f in hier.feats)
    frozen = from_topology([[[0, 1], [2]], [[0, 1]]], torch.rand(2, 9), 3)
    assert frozen.heads() == [[[0, 1], [2]], [[0, 1, 2]]]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 16),
    seed=st.integers(0, 10_000),
    threshold=st.floats(0.3, 1.0),
    upper=st.floats(-2.0, 1.0),
    min_size=st.integers(1, 4),
    depth=st.integers(1, 5),
)
def test_every_level_partitions_the_level_below(n, seed, threshold, upper, min_size, depth):
    gen = torch.Generator().manual_seed(seed)
    feats = torch.rand(n, 9, generator=gen) * torch.rand(1, 9, generator=gen) * 4
    rule = GroupingRule(
        group_threshold=threshold, upper_threshold=upper, min_group_size=min_size, max_depth=depth
    )
    hier = build(feats, rule, None)
    assert 1 <= len(hier.levels) <= depth
    assert check_partition(hier.levels[0], n)
    if n >= 2:
        assert len(hier.levels[0]) >= 2  # a collapse is always split
    for below, level in zip(hier.levels, hier.levels[1:], strict=False):
        assert check_partition(level, len(below)) and len(level) > 1
    for level, feats_l in zip(hier.levels, hier.feats, strict=True):
        assert feats_l.shape == (len(level), 9)
