"""Budgeted allocation: never over budget, and planted local heads get the small windows."""

import itertools

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from aah.attention import coverage
from aah.controller import ControllerConfig, make_policy
from aah.controller.budget import allocate_budget


@st.composite
def problems(draw):
    n = draw(st.integers(1, 10))
    t = draw(st.integers(2, 300))
    windows = sorted(set(draw(st.lists(st.integers(1, 2 * t), min_size=1, max_size=5))))
    raw = np.array(
        draw(st.lists(st.floats(0, 1), min_size=n * len(windows), max_size=n * len(windows)))
    ).reshape(n, len(windows))
    mass = -np.sort(-raw, axis=1)  # mass beyond never grows with the window
    budget = draw(st.floats(1e-3, 1.0))
    return mass, windows, t, budget


@settings(max_examples=150, deadline=None)
@given(problems())
def test_budget_never_exceeded(problem):
    mass, windows, t, budget = problem
    alloc = allocate_budget(mass, windows, t, budget)
    plan = [windows[i] for i in alloc.indices]
    smallest = coverage([windows[0]] * len(plan), t).causal
    assert alloc.exceeded == (smallest > budget)
    if alloc.exceeded:
        assert plan == [windows[0]] * len(plan)
    else:
        assert coverage(plan, t).causal <= budget
    # Greedy stops only when no single upgrade both fits and saves mass.
    if not alloc.exceeded:
        for h, cur in enumerate(alloc.indices):
            for j in range(cur + 1, len(windows)):
                trial = list(plan)
                trial[h] = windows[j]
                if mass[h, j] < mass[h, cur]:
                    assert coverage(trial, t).causal > budget


def test_greedy_matches_exhaustive_on_a_small_concave_case():
    windows, t, budget = [4, 16, 64], 64, 0.5
    mass = np.array([[0.9, 0.5, 0.0], [0.2, 0.1, 0.0], [0.6, 0.05, 0.0], [0.01, 0.0, 0.0]])
    alloc = allocate_budget(mass, windows, t, budget)
    best = min(
        (sum(mass[h, i] for h, i in enumerate(c)), c)
        for c in itertools.product(range(3), repeat=4)
        if coverage([windows[i] for i in c], t).causal <= budget
    )
    assert abs(alloc.lost_mass * 4 - best[0]) < 1e-12
    assert tuple(alloc.indices) == best[1]


def planted_qkv(t=256, d=8, n_head=8):
    """Even heads score keys by recency (p ~ exp(key position)): all mass on the last few keys.
    Odd heads score keys by age: all mass on key 0, far back for every row."""
    q = torch.zeros(1, n_head, t, d)
    k = torch.zeros(1, n_head, t, d)
    q[:, 0::2, :, 0] = 1.0
    q[:, 1::2, :, 0] = -1.0
    k[..., 0] = torch.arange(t, dtype=torch.float32) * (d**0.5)  # score = +-(key position)
    v = torch.randn(1, n_head, t, d, generator=torch.Generator().manual_seed(0))
    return q, k, v


def test_planted_local_heads_get_the_small_windows():
    t = 256
    cfg = ControllerConfig(
        policy="budget", windows=[16, 64, 128, 256], budget=0.58, warmup_steps=0, sample_queries=64
    )
    pol = make_policy(cfg, n_layer=2, n_head=8, n_kv_head=8, seq_len=t)
    assert pol.initial_plan() == [[t] * 8] * 2  # full attention before the first measurement
    plan = pol.update(0, [planted_qkv(t)] * 2)
    for row in plan:
        assert row[0::2] == [16] * 4  # recency heads: nothing lies beyond 16 keys
        assert row[1::2] == [256] * 4  # heads that read key 0 need everything
    rec = pol.record(0)
    assert rec["coverage"] <= 0.58 and not rec["budget_exceeded"]
    assert rec["expected_lost_mass"] < 1e-3


def test_budget_below_smallest_window_uses_smallest_and_says_so():
    cfg = ControllerConfig(policy="budget", windows=[64, 128], budget=0.01, warmup_steps=0)
    pol = make_policy(cfg, n_layer=1, n_head=8, n_kv_head=8, seq_len=256)
    plan = pol.update(0, [planted_qkv()])
    assert plan == [[64] * 8]
    assert pol.record(0)["budget_exceeded"] is True
