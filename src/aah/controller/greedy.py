"""The allocator's greedy rule: a candidate per unit under a cap, by loss saved per unit of cost.

Model-agnostic: a unit is whatever holds one window (a head of the project's GPT, a KV head of
a transformers model), `loss[u, j]` what unit u is expected to lose at candidate j (attention
mass beyond the window, a measured loss rise, an output error), `cost[u, j]` what candidate j
costs it (attention pairs, KV bytes). `controller.allocate`, the one allocator of the searches,
post-hoc plans, training-time policies and studies, runs it.
"""

from __future__ import annotations

import numpy as np

from aah.attention.cost import causal_pairs


def pair_cap(budget: float, n_heads: int, seq_len: int) -> int:
    """Largest total of allowed pairs P with P / (n_heads * T(T+1)/2) <= budget in float math."""
    denom = n_heads * causal_pairs(seq_len)
    cap = int(budget * denom)
    while cap > 0 and cap / denom > budget:
        cap -= 1
    while (cap + 1) / denom <= budget:
        cap += 1
    return cap


def greedy(loss: np.ndarray, cost: np.ndarray, cap: int) -> np.ndarray | None:
    """(U,) candidate index per unit minimising sum loss[u, j_u] with sum cost[u, j_u] <= cap;
    None if the all-smallest choice is over the cap. Every unit starts at candidate 0; the
    upgrade with the most loss saved per unit of extra cost that still fits is taken until
    none fits or saves anything. `cost` (U, n_w) must not decrease along the candidates."""
    loss = np.asarray(loss, dtype=np.float64)
    cost = np.asarray(cost, dtype=np.int64)
    if loss.shape != cost.shape or loss.ndim != 2:
        raise ValueError(f"loss {loss.shape} and cost {cost.shape} must be one (U, n_w) shape")
    n, n_w = loss.shape
    cur = np.zeros(n, dtype=np.int64)
    rows, cols = np.arange(n), np.arange(n_w)
    total = int(cost[:, 0].sum())
    if total > cap:
        return None
    while True:
        gain = loss[rows, cur][:, None] - loss
        extra = cost - cost[rows, cur][:, None]
        ok = (cols[None, :] > cur[:, None]) & (gain > 0) & (total + extra <= cap)
        if not ok.any():
            return cur
        # Free upgrades first (two candidates >= T, or a sliding window, cost the same), then
        # the best loss saved per unit of cost.
        ratio = np.where(extra > 0, gain / np.maximum(extra, 1), np.inf)
        unit, j = divmod(int(np.argmax(np.where(ok, ratio, -np.inf))), n_w)
        total += int(extra[unit, j])
        cur[unit] = j
