"""The one greedy allocator: the cap, the order of upgrades, and a brute-force optimum."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from aah.controller.greedy import greedy, pair_cap


def test_greedy_keeps_the_cap_and_spends_where_loss_is() -> None:
    loss = np.array([[0.9, 0.5, 0.0], [0.2, 0.1, 0.0]])
    cost = np.array([[1, 2, 4], [1, 2, 4]])
    assert greedy(loss, cost, 1) is None
    assert greedy(loss, cost, 2).tolist() == [0, 0]
    assert greedy(loss, cost, 5).tolist() == [2, 0]  # the heavy unit first
    assert greedy(loss, cost, 8).tolist() == [2, 2]


def test_greedy_matches_brute_force_on_convex_losses() -> None:
    # With convex losses along equal-cost steps, taking the best saving per cost is optimal.
    rng = np.random.default_rng(0)
    for _ in range(20):
        steps = rng.uniform(0.01, 1.0, size=(4, 3))
        loss = np.concatenate([np.zeros((4, 1)), -np.cumsum(np.sort(steps)[:, ::-1], 1)], 1)
        loss -= loss.min()
        cost = np.tile(np.arange(1, 5), (4, 1))
        cap = int(rng.integers(4, 17))
        chosen = greedy(loss, cost, cap)
        assert chosen is not None and cost[np.arange(4), chosen].sum() <= cap
        best = min(
            loss[np.arange(4), list(c)].sum()
            for c in itertools.product(range(4), repeat=4)
            if cost[np.arange(4), list(c)].sum() <= cap
        )
        assert loss[np.arange(4), chosen].sum() == pytest.approx(best)


def test_greedy_names_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match=r"loss \(2, 3\) and cost \(2, 2\)"):
        greedy(np.zeros((2, 3)), np.zeros((2, 2), dtype=np.int64), 4)


def test_pair_cap_is_the_largest_total_within_the_budget() -> None:
    for budget in (0.1, 0.25, 0.3, 1.0):
        cap = pair_cap(budget, 6, 64)
        denom = 6 * 64 * 65 // 2
        assert cap / denom <= budget < (cap + 1) / denom
