"""Top-down decisions, parent constraint, head mapping, window EMA and the schedule."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aah.controller.decide import WindowIndexEMA, heads_from_level0, is_update_step, top_down
from aah.controller.hierarchy import GroupingRule, Hierarchy, aggregate, build
from aah.controller.scorer import ENRICHED_DIM, Scorer, enriched_inputs, sibling_pairs


def two_level(feats=None):
    # level 0: groups {0,1}, {2}, {3,4}; level 1: {g0, g1}, {g2}
    levels = [[[0, 1], [2], [3, 4]], [[0, 1], [2]]]
    feats = torch.zeros(5, 9) if feats is None else feats
    rows = [aggregate(levels[0], feats)]
    rows.append(aggregate(levels[1], rows[0]))
    return Hierarchy(levels=levels, feats=rows, n_heads=5)


def onehot(rows, n=4):
    out = torch.full((len(rows), n), -1.0)
    for r, i in enumerate(rows):
        out[r, i] = 1.0
    return out


def test_top_down_known_answer():
    hier = two_level()
    logits = [onehot([3, 0, 2]), onehot([1, 3])]
    assert top_down(hier, logits, parent_constraint=True) == [[1, 0, 2], [1, 3]]
    assert top_down(hier, logits, parent_constraint=False) == [[3, 0, 2], [1, 3]]
    assert heads_from_level0(hier.levels[0], [1, 0, 2], 5) == [1, 1, 0, 2, 2]


def test_head_mapping_rejects_gaps_and_overlaps():
    import pytest

    with pytest.raises(ValueError, match="head 2"):
        heads_from_level0([[0, 1], [3]], [0, 1], 4)
    with pytest.raises(ValueError, match="head 1"):
        heads_from_level0([[0, 1], [1, 2, 3]], [0, 1], 4)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 12),
    seed=st.integers(0, 10_000),
    n_w=st.integers(2, 6),
    joint=st.booleans(),
    threshold=st.floats(0.3, 1.0),
    upper=st.floats(-2.0, 1.0),
)
def test_parent_constraint_always_holds(n, seed, n_w, joint, threshold, upper):
    gen = torch.Generator().manual_seed(seed)
    feats = torch.rand(n, 9, generator=gen) * torch.rand(1, 9, generator=gen) * 4
    rule = GroupingRule(group_threshold=threshold, upper_threshold=upper, min_group_size=1)
    hier = build(feats, rule, None)
    inputs = enriched_inputs(hier)
    assert all(x.shape == (len(g), ENRICHED_DIM) for x, g in zip(inputs, hier.levels, strict=True))
    logits = Scorer.random(n_w, gen).logits(hier, inputs, joint)
    choice = top_down(hier, logits, parent_constraint=True)
    for level in range(len(hier.levels) - 1):
        parents = hier.parents(level)
        assert parents is not None
        for g, idx in enumerate(choice[level]):
            assert 0 <= idx <= choice[level + 1][parents[g]]
    per_head = heads_from_level0(hier.levels[0], choice[0], n)
    assert len(per_head) == n and all(0 <= i < n_w for i in per_head)


def test_enriched_input_layout():
    feats = torch.arange(45, dtype=torch.float32).view(5, 9)
    hier = two_level(feats)
    x = enriched_inputs(hier)
    g0 = feats[[0, 1]].mean(0)
    parent = torch.stack([feats[[0, 1]].mean(0), feats[2]]).mean(0)
    level_mean = torch.stack([g0, feats[2], feats[[3, 4]].mean(0)]).mean(0)
    # size fraction: members / members of the level (heads at level 0: 2 of 5)
    expect = torch.cat([g0, torch.tensor([0.0]), g0 - parent, g0 - level_mean, torch.tensor([0.4])])
    torch.testing.assert_close(x[0][0], expect)
    top = x[1]
    assert torch.all(top[:, 9] == 1.0) and torch.all(top[:, 10:19] == 0)  # top: no parent
    # level 1 counts child groups: 2 of the 3 level-0 groups, then 1 of 3
    torch.testing.assert_close(top[:, 28], torch.tensor([2 / 3, 1 / 3]))


def test_sibling_pairs_follow_parents_in_index_order():
    # level 0 children of parent 0: groups 0, 2, 3 (not listed in that order by the parent)
    hier = Hierarchy(
        levels=[[[0], [1], [2], [3], [4]], [[3, 0, 2], [1, 4]]],
        feats=[torch.zeros(5, 9), torch.zeros(2, 9)],
        n_heads=5,
    )
    assert sibling_pairs(hier, 0) == [(0, 2), (1, 4)]  # 3 is the odd one out of parent 0
    assert sibling_pairs(hier, 1) == [(0, 1)]  # the top level is one family


def test_joint_scorer_replaces_sibling_pairs_only():
    gen = torch.Generator().manual_seed(0)
    scorer = Scorer.random(4, gen)
    feats = torch.rand(3, 9, generator=gen)
    hier = Hierarchy(
        levels=[[[0], [1], [2]], [[0, 1, 2]]], feats=[feats, feats.mean(0, keepdim=True)], n_heads=3
    )
    inputs = enriched_inputs(hier)
    own = scorer.logits(hier, inputs, joint=False)
    joint = scorer.logits(hier, inputs, joint=True)
    fa, fb = inputs[0][0], inputs[0][1]
    pair = scorer.joint(torch.cat([fa, fb, fa - fb, fb - fa]).unsqueeze(0))[0]
    torch.testing.assert_close(joint[0][0], pair[:4])
    torch.testing.assert_close(joint[0][1], pair[4:])
    torch.testing.assert_close(joint[0][2], own[0][2])  # odd one out keeps its own
    torch.testing.assert_close(joint[1], own[1])  # a lone top group has no sibling


@settings(max_examples=100, deadline=None)
@given(
    start=st.integers(0, 3),
    proposals=st.lists(st.lists(st.integers(0, 3), min_size=3, max_size=3), min_size=1, max_size=8),
)
def test_window_ema_015_with_four_windows_never_changes_the_outcome(start, proposals):
    ema = WindowIndexEMA(0.15, 4)
    ema.step([start] * 3)
    for prop in proposals:
        assert ema.step(prop) == prop


def test_window_ema_starts_at_the_first_proposal_and_can_lag():
    ema = WindowIndexEMA(0.30, 4)
    assert ema.step([3]) == [3]  # the first step after warm-up takes the proposal
    assert ema.step([0]) == [1]  # 0.3 * 3 = 0.9 rounds to 1
    assert ema.peek([0]) == [0]  # 0.27 would round to 0; peek leaves the state alone
    assert abs(float(ema.state[0]) - 0.9) < 1e-6
    assert ema.step([0]) == [0]


def test_window_ema_rounds_half_to_even_and_zero_disables_it():
    ema = WindowIndexEMA(0.5, 6)
    ema.step([0, 2])
    assert ema.step([1, 3]) == [0, 2]  # 0.5 -> 0 and 2.5 -> 2 (half to even)
    off = WindowIndexEMA(0.0, 4)
    assert off.step([3]) == [3] and off.step([0]) == [0] and off.state is None


def test_schedule():
    steps = [s for s in range(30) if is_update_step(s, 10, 5)]
    assert steps == [10, 15, 20, 25]
    assert [s for s in range(4) if is_update_step(s, 0, 1)] == [0, 1, 2, 3]
