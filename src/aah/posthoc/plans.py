"""Window plans imposed on a trained full-attention model at a matched causal coverage.

Every policy gets the same candidate windows and the same coverage cap c, so that only the
*allocation* differs (the setting of MoA / DuoAttention):

  budget           per-head windows keeping the most measured attention mass under c
  budget-shuffled  budget's windows permuted across the heads of each layer (same coverage
                   per layer, random assignment)
  random           budget's windows permuted across all heads of all layers (same coverage,
                   same windows, random assignment anywhere)
  uniform          one window w for every head, the largest integer w with coverage <= c
  uniform-layer    one window per layer, allocated like budget on each layer's mean mass
  loss-ablation    per-head windows allocated like budget, on the measured loss increase of
                   cutting each head alone to each window (aah.eval.head_ablation) instead
                   of the attention mass
  loss-ablation-shuffled
                   loss-ablation's windows permuted across the heads of each layer (its
                   matched control: does the head or only the layer matter?)
  aah-v3           the AAH-v3 controller's first decision (full-adaptive; grouping-off as
                   "aah-v3-grouping-off") on the model's own Q/K/V and attention features;
                   it takes no coverage target, so it is one point at its own coverage.
  aah-v3-shuffled, aah-v3-grouping-off-shuffled
                   that decision's windows permuted across the heads of each layer (its
                   matched twin: does AAH-v3 pick the right heads within a layer?)

`mass` is (n_layer, n_head, n_candidates) attention mass beyond each candidate window
(aah.controller.mass), averaged over calibration batches.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from aah.controller import ControllerConfig, make_policy
from aah.controller.aahv3 import LayerInputs
from aah.controller.adaptive import AdaptivePolicy
from aah.controller.allocate import Budget, allocate
from aah.controller.allocate import uniform_window as allocate_uniform
from aah.controller.head_stats import attention_stats
from aah.controller.shuffle import shuffled
from aah.plan import Plan

BUDGETED = (
    "budget",
    "budget-shuffled",
    "random",
    "uniform",
    "uniform-layer",
    "loss-ablation",
    "loss-ablation-shuffled",
)
#: the policies that need the measured per-head loss ablation
NEEDS_ABLATION = ("loss-ablation", "loss-ablation-shuffled")
AAH = ("aah-v3", "aah-v3-grouping-off", "aah-v3-shuffled", "aah-v3-grouping-off-shuffled")
#: a plan's twin: the same windows per layer on other heads of the layer
SHUFFLED_SUFFIX = "-shuffled"
POLICIES = BUDGETED + AAH


def budget_plan(costs: np.ndarray, windows: Sequence[int], seq_len: int, cap: float) -> Plan:
    """Per-head windows (`controller.allocate`, every head its own unit) at coverage `cap`;
    every head at the smallest window when even that is over the cap."""
    n_layer, n_head, _ = costs.shape
    alloc = allocate(costs, windows, Budget(seq_len, n_layer, n_head, coverage=cap))
    return [[windows[0]] * n_head for _ in range(n_layer)] if alloc is None else alloc.windows


def uniform_window(seq_len: int, cap: float) -> int:
    """The largest w in [1, T] whose causal coverage is <= cap (1 if none is)."""
    return allocate_uniform(Budget(seq_len, 1, 1, coverage=cap)) or 1


def layer_plan(mass: np.ndarray, windows: Sequence[int], seq_len: int, cap: float) -> Plan:
    """One window per layer: the budget allocation over layers on the heads' mean mass."""
    n_head = mass.shape[1]
    plan = budget_plan(mass.mean(axis=1)[:, None, :], windows, seq_len, cap)
    return [row * n_head for row in plan]


def budgeted_plan(
    policy: str,
    mass: np.ndarray,
    windows: Sequence[int],
    seq_len: int,
    cap: float,
    seed: int,
    loss: np.ndarray | None = None,
) -> Plan:
    """One of BUDGETED at coverage cap `cap` (see the module docstring); `loss` is the
    (n_layer, n_head, n_candidates) ablation cost that `loss-ablation` needs."""
    gen = torch.Generator().manual_seed(seed)
    if policy in NEEDS_ABLATION:
        if loss is None:
            raise ValueError(f"policy {policy!r} needs the measured per-head loss ablation")
        plan = budget_plan(loss, windows, seq_len, cap)
        return plan if policy == "loss-ablation" else shuffled(plan, gen, "layer")
    if policy == "uniform":
        return [[uniform_window(seq_len, cap)] * mass.shape[1] for _ in range(mass.shape[0])]
    if policy == "uniform-layer":
        return layer_plan(mass, windows, seq_len, cap)
    plan = budget_plan(mass, windows, seq_len, cap)
    if policy == "budget":
        return plan
    if policy in ("budget-shuffled", "random"):
        return shuffled(plan, gen, "model" if policy == "random" else "layer")
    raise ValueError(f"unknown post-hoc policy {policy!r}; choose one of {', '.join(POLICIES)}")


def aah_plan(
    policy: str, qkv: Sequence[tuple[torch.Tensor, ...]], windows: Sequence[int], seed: int
) -> Plan:
    """The AAH-v3 controller's first decision on these Q/K/V (attention under full windows),
    or, for a `-shuffled` name, that decision permuted within each layer (seeded)."""
    if policy not in AAH:
        raise ValueError(f"unknown post-hoc policy {policy!r}; choose one of {', '.join(AAH)}")
    if policy.endswith(SHUFFLED_SUFFIX):
        plan = aah_plan(policy.removesuffix(SHUFFLED_SUFFIX), qkv, windows, seed)
        return shuffled(plan, torch.Generator().manual_seed(seed), "layer")
    name = {"aah-v3": "aah-v3-full-adaptive", "aah-v3-grouping-off": "aah-v3-grouping-off"}
    q0, k0 = qkv[0][0], qkv[0][1]
    seq_len = q0.shape[2]
    cfg = ControllerConfig(policy=name[policy], windows=list(windows), warmup_steps=0, seed=seed)
    pol = make_policy(
        cfg, n_layer=len(qkv), n_head=q0.shape[1], n_kv_head=k0.shape[1], seq_len=seq_len
    )
    assert isinstance(pol, AdaptivePolicy)  # the aah-v3 names build one
    rows = []
    for ctl, (q, k, v, *_) in zip(pol.layers, qkv, strict=True):
        attn = attention_stats(q, k, v, [seq_len] * q.shape[1])
        idx = ctl.forward(0, LayerInputs(q, k, v, attn))
        assert idx is not None
        rows.append([pol.windows[i] for i in idx])
    return rows
