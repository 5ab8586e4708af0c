"""Per-head loss ablation against a recompute with the post-hoc scorer, one head at a time."""

import math

import numpy as np
import pytest
import torch

from aah.eval.head_ablation import loss_ablation
from aah.model import GPT, GPTConfig
from aah.posthoc.analysis import bits_per_byte
from aah.posthoc.plans import budgeted_plan

T = 16
CANDIDATES = [1, 4, 8, T]


@pytest.fixture(scope="module")
def model_and_windows():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_kv_head=2, d_model=16, max_seq_len=T)).eval()
    return model, torch.randint(0, 256, (3, T + 1))


def test_costs_equal_a_recompute_raised_to_wider_windows(model_and_windows):
    model, windows = model_and_windows
    model.set_window_plan([[T, 3], [T, T]])  # restored afterwards
    cost = loss_ablation(model, windows, CANDIDATES, batch_size=2)
    assert model.window_plan() == [[T, 3], [T, T]]
    full = [[T, T], [T, T]]
    model.set_window_plan(full)
    base = bits_per_byte(model, windows, 3) * math.log(2)
    raw = np.zeros_like(cost)
    for l in range(2):
        for h in range(2):
            for c, w in enumerate(CANDIDATES):
                plan = [row[:] for row in full]
                plan[l][h] = w
                model.set_window_plan(plan)
                raw[l, h, c] = max(0.0, bits_per_byte(model, windows, 3) * math.log(2) - base)
    expected = np.maximum.accumulate(raw[..., ::-1], axis=-1)[..., ::-1]
    assert cost == pytest.approx(expected, abs=1e-5)
    assert (cost[..., -1] == 0).all() and (np.diff(cost, axis=-1) <= 0).all()


def test_loss_ablation_plan_keeps_the_costly_head_wide():
    loss = np.zeros((2, 2, len(CANDIDATES)))
    loss[1, 0, :3] = 5.0  # cutting layer 1 head 0 below T costs a lot; nothing else matters
    mass = np.zeros_like(loss)
    plan = budgeted_plan("loss-ablation", mass, CANDIDATES, T, 0.4, 0, loss)
    assert plan[1][0] == T and max(plan[0] + [plan[1][1]]) < T
    with pytest.raises(ValueError, match="loss ablation"):
        budgeted_plan("loss-ablation", mass, CANDIDATES, T, 0.3, 0)
