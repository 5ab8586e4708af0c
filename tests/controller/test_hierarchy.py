"""Clustering steps on hand-made feature sets with known answers."""

import math

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aah.controller.hierarchy import (
    build_hierarchy,
    check_partition,
    cosine_normdiff,
    greedy_cluster,
    level0_groups,
    merge_small_groups,
    split_collapsed,
    upper_levels,
)


def at(deg, norm=1.0, dims=4):
    """A vector at angle `deg` in the first plane (cosines between them are cos of the gap)."""
    v = torch.zeros(dims, dtype=torch.float64)
    v[0], v[1] = math.cos(math.radians(deg)), math.sin(math.radians(deg))
    return v * norm


def test_two_clear_clusters_interleaved():
    feats = torch.stack([at(0), at(90), at(5), at(85), at(-3), at(92)])
    assert level0_groups(feats, min_size=3) == [[0, 2, 4], [1, 3, 5]]


def test_collapse_splits_around_least_similar_pair():
    feats = torch.stack([at(0), at(10), at(20), at(30)])  # all within 30 deg: cos >= 0.866
    assert greedy_cluster(feats, 0.72) == [[0, 1, 2, 3]]
    # least similar pair (0, 3); 10 deg is nearer 0, 20 deg nearer 30
    assert level0_groups(feats, min_size=1) == [[0, 1], [2, 3]]
    assert split_collapsed(feats, [[0, 1, 2, 3]]) == [[0, 1], [2, 3]]


def test_identical_features_still_split_in_two():
    feats = torch.ones(5, 3, dtype=torch.float64)
    groups = level0_groups(feats, min_size=3)
    assert len(groups) == 2 and check_partition(groups, 5)


def test_small_group_merges_into_most_similar_neighbour():
    feats = torch.stack([at(0), at(2), at(-2), at(1), at(60), at(180), at(178), at(182)])
    assert greedy_cluster(feats, 0.72) == [[0, 1, 2, 3], [4], [5, 6, 7]]
    assert level0_groups(feats, min_size=3) == [[0, 1, 2, 3, 4], [5, 6, 7]]
    # With min size 1 the outlier keeps its own group.
    assert level0_groups(feats, min_size=1) == [[0, 1, 2, 3], [4], [5, 6, 7]]


def test_merge_order_smallest_first():
    feats = torch.stack([at(0), at(1), at(2), at(40), at(100), at(101)])
    merged = merge_small_groups(feats, [[0, 1, 2], [3], [4, 5]], min_size=2)
    assert merged == [[0, 1, 2, 3], [4, 5]]


def test_stickiness_changes_a_borderline_assignment():
    theta = math.degrees(math.acos(0.71))  # cosine 0.71: just under the 0.72 threshold
    feats = torch.stack([at(0, dims=3), at(theta, dims=3), torch.tensor([0.0, 0.0, 1.0])])
    assert level0_groups(feats, min_size=1) == [[0], [1], [2]]
    together = [[0, 1], [2]]
    assert level0_groups(feats, min_size=1, previous=together) == [[0, 1], [2]]
    assert level0_groups(feats, min_size=1, previous=together, stickiness=0.0) == [[0], [1], [2]]
    assert level0_groups(feats, min_size=1, previous=[[0], [1, 2]]) == [[0], [1], [2]]


def test_cosine_normdiff_known_values():
    a, b = torch.tensor([3.0, 4.0]), torch.tensor([6.0, 8.0])
    assert math.isclose(cosine_normdiff(a, b), 1.0 - 16.0 * 5.0 / 10.0)
    assert math.isclose(cosine_normdiff(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])), -8.0)
    assert math.isclose(cosine_normdiff(a, a), 1.0)
    assert math.isclose(cosine_normdiff(a, b, penalty=1.0), 0.5)
    assert cosine_normdiff(torch.zeros(2), torch.zeros(2)) == 0.0


def test_upper_levels_merge_same_norm_and_direction_only():
    same = torch.stack([at(0), at(3), at(1, norm=1.001)])
    assert upper_levels(same) == [[[0, 1, 2]]]
    # A 10% norm gap costs 16 * 0.1 = 1.6: never merged; a level that merges nothing is dropped.
    apart = torch.stack([at(0), at(0, norm=1.1), at(0, norm=1.21)])
    assert upper_levels(apart) == []
    pairs = torch.stack([at(0), at(1), at(30), at(31)])
    assert upper_levels(pairs, threshold=0.95) == [[[0, 1], [2, 3]]]
    # The centroid of 0, 1 and 30 degrees is shorter than a unit vector (norm 0.97), so the
    # last item pays 16 * 0.03 on top of a 20 degree gap and stays alone; the next level
    # cannot merge the two either and is dropped.
    assert upper_levels(pairs, threshold=0.80) == [[[0, 1, 2], [3]]]


def test_depth_limit_and_head_sets():
    feats = torch.stack([at(0), at(1), at(2), at(90), at(91), at(92)])
    hier = build_hierarchy(feats, max_depth=4)
    assert hier.levels[0] == [[0, 1, 2], [3, 4, 5]]
    assert hier.heads()[0] == [[0, 1, 2], [3, 4, 5]]
    assert build_hierarchy(feats, max_depth=1).levels == [[[0, 1, 2], [3, 4, 5]]]


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    threshold=st.floats(0.0, 1.0),
    upper=st.floats(-1.0, 1.0),
    min_size=st.integers(1, 4),
    depth=st.integers(1, 4),
)
def test_every_level_partitions_the_level_below(n, seed, threshold, upper, min_size, depth):
    feats = torch.rand(n, 9, generator=torch.Generator().manual_seed(seed)) + 0.01
    hier = build_hierarchy(
        feats,
        group_threshold=threshold,
        upper_threshold=upper,
        min_group_size=min_size,
        max_depth=depth,
    )
    assert len(hier.levels) <= depth
    assert check_partition(hier.levels[0], n)
    for below, level in zip(hier.levels, hier.levels[1:], strict=False):
        assert check_partition(level, len(below))
        assert len(level) < len(below)
    for groups in hier.heads():
        assert check_partition(groups, n)
    if n >= 2:
        assert len(hier.levels[0]) >= 2
