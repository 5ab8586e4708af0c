"""Allocation by measured loss: cut costs against a probe with a known answer, the policy's
budget and choices, its shuffled control, its state, and a training run that resumes exactly."""

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from aah.attention import coverage
from aah.controller import ControllerConfig, make_policy
from aah.controller.ablation import cut_costs
from aah.controller.protocol import ProbesLoss

sys.path.insert(0, str(Path(__file__).parents[1] / "train"))
from train_helpers import assert_resume_is_bit_for_bit

L, H, T = 2, 4, 64
CANDIDATES = [8, 16, 32, T]


def weight(l, h):
    return l * H + h + 1


def toy_loss(plan):
    """Head (l, h) costs weight(l, h) per unit of context it loses: a known answer."""
    return sum(weight(l, h) * (T - w) / T for l, row in enumerate(plan) for h, w in enumerate(row))


def policy(name="loss-ablation", probe=toy_loss, **kw):
    cfg = ControllerConfig(policy=name, warmup_steps=0, interval=1, **kw)
    pol = make_policy(cfg, n_layer=L, n_head=H, n_kv_head=H, seq_len=T)
    if probe is not None:
        pol.attach_probe(probe)
    return pol


def test_cut_costs_equal_the_known_answer_with_one_pass_per_cut():
    calls = []

    def probe(plan):
        calls.append(plan)
        return toy_loss(plan)

    cost = cut_costs(probe, L, H, T, CANDIDATES)
    for l in range(L):
        for h in range(H):
            expected = [weight(l, h) * (T - w) / T for w in CANDIDATES]
            assert cost[l, h] == pytest.approx(expected, abs=1e-12)
    # the full plan once, then each head alone at each candidate below T
    assert len(calls) == 1 + L * H * 3
    assert calls[0] == [[T] * H] * L
    assert all(sum(w < T for row in plan for w in row) == 1 for plan in calls[1:])


def test_cut_costs_are_non_negative_and_non_increasing_in_the_window():
    rng = np.random.default_rng(0)
    noise = {}

    def noisy(plan):  # measured rises that are noisy and sometimes negative
        key = json.dumps(plan)
        noise.setdefault(key, float(rng.normal(0, 0.5)))
        return toy_loss(plan) * 0.1 + noise[key]

    cost = cut_costs(noisy, L, H, T, CANDIDATES)
    assert (cost >= 0).all() and (np.diff(cost, axis=-1) <= 0).all()
    assert (cost[..., -1] == 0).all()


def test_policy_needs_a_probe_and_no_activations():
    pol = policy(probe=None)
    assert isinstance(pol, ProbesLoss)
    assert pol.wants_update(0) and not pol.wants_activations(0)
    with pytest.raises(ValueError, match="loss-ablation policy needs a loss probe"):
        pol.update(0, None)


@pytest.mark.parametrize("budget", [0.3, 0.5, 0.7])
def test_policy_keeps_the_budget_and_widens_the_costliest_heads(budget):
    pol = policy(budget=budget, windows=CANDIDATES)
    plan = pol.update(0, None)
    assert coverage(plan, T).causal <= budget + 1e-12
    flat = [w for row in plan for w in row]  # head order = weight order
    assert flat == sorted(flat) and flat[-1] > flat[0]
    rec = pol.record(0)
    assert rec["coverage"] == pytest.approx(coverage(plan, T).causal)
    assert rec["budget"] == budget and rec["expected_loss_rise"] >= 0
    assert not rec["budget_exceeded"]


def test_shuffled_control_permutes_windows_within_each_layer():
    plain = policy(windows=CANDIDATES).update(0, None)
    seen = set()
    for seed in range(6):
        a = policy("loss-ablation-shuffled", windows=CANDIDATES, seed=seed)
        b = policy("loss-ablation-shuffled", windows=CANDIDATES, seed=seed)
        plans = [a.update(s, None) for s in range(3)]
        assert plans == [b.update(s, None) for s in range(3)]  # seeded
        for plan in plans:
            assert [sorted(r) for r in plan] == [sorted(r) for r in plain]
            seen.add(json.dumps(plan))
    assert len(seen) > 1  # the permutations really differ


def test_state_round_trip_continues_the_cost_ema():
    a = policy("loss-ablation-shuffled", windows=CANDIDATES)
    a.update(0, None)
    b = policy("loss-ablation-shuffled", windows=CANDIDATES)
    b.load_state_dict(torch.load(_saved(a.state_dict()), weights_only=True))
    assert a.update(1, None) == b.update(1, None)
    assert a.state_dict()["cost_ema"]["value"].equal(b.state_dict()["cost_ema"]["value"])


def _saved(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return buf


def test_training_with_loss_ablation_resumes_bit_for_bit(tmp_path, tiny_corpus):
    extra = {
        "controller.policy": "loss-ablation",
        "train.decay_steps": "16",  # the schedule of the whole run, in both halves
        "controller.warmup_steps": "3",
        "controller.interval": "4",
        "controller.ablation_windows": "3",
        "train.log_interval": "4",
        "train.eval_interval": "6",
    }
    records = assert_resume_is_bit_for_bit(tmp_path, tiny_corpus, extra, total=16, first=12)
    assert [r["step"] for r in records] == [0, 3, 7, 11, 15]
    assert all(r["coverage"] <= 0.3 + 1e-12 for r in records[1:])
