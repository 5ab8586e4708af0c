"""Budgeted allocation: per-head windows that keep the most attention mass under a coverage cap.

From each head's measured (EMA'd) mass beyond window m[h, w] (mass.py), choose one
candidate per head over ALL layers minimising sum_h m[h, w_h] subject to the plan's causal
coverage (aah.attention.coverage(plan, T).causal) <= budget: the one allocator
(`controller.allocate`, every head its own unit). If even all-smallest is over budget it is
used anyway and the record says so. No window-index EMA here: smoothing indices could break
the budget.

budget-shuffled, the matched-coverage control: the same allocation, then each layer's windows
permuted across its heads with a seeded draw at every update (`Shuffled`, built in
policies.py), so every layer's coverage is identical to budget's and only which head gets
which window differs.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aah.attention import coverage
from aah.attention.cost import causal_pairs, window_pairs
from aah.controller.allocate import Budget, allocate
from aah.controller.base import BasePolicy
from aah.controller.config import ControllerConfig
from aah.controller.ema import FeatureEMA
from aah.controller.options import BudgetOptions
from aah.controller.protocol import QKV
from aah.plan import Plan


@dataclass(frozen=True)
class BudgetAllocation:
    """Chosen candidate index per head, with its cost and expected loss."""

    indices: list[int]
    coverage: float  # causal coverage of the chosen plan
    lost_mass: float  # mean over heads of the chosen mass beyond window
    exceeded: bool  # True when even all-smallest is over the budget


def allocate_budget(
    mass: np.ndarray, windows: Sequence[int], seq_len: int, budget: float
) -> BudgetAllocation:
    """`allocate.allocate` on `mass` (heads, n_windows), every head its own unit under the
    coverage `budget` (module docstring)."""
    mass = np.asarray(mass, dtype=np.float64)
    n = mass.shape[0]
    alloc = allocate(mass[None], windows, Budget(seq_len, 1, n, coverage=budget))
    cur = np.zeros(n, dtype=np.int64) if alloc is None else np.array(alloc.indices)
    per = np.array([window_pairs(int(w), seq_len) for w in windows], dtype=np.int64)
    return BudgetAllocation(
        indices=[int(i) for i in cur],
        coverage=int(per[cur].sum()) / (n * causal_pairs(seq_len)),
        lost_mass=float(mass[np.arange(n), cur].mean()),
        exceeded=alloc is None,
    )


def allocated_plan(
    alloc: BudgetAllocation, windows: Sequence[int], n_layer: int, n_head: int
) -> Plan:
    """The plan of an allocation over every head of every layer (heads layer by layer)."""
    h = n_head
    return [[int(windows[i]) for i in alloc.indices[l * h : (l + 1) * h]] for l in range(n_layer)]


def allocation_record(
    alloc: BudgetAllocation, plan: Plan, seq_len: int, budget: float, expected: str
) -> dict[str, float | bool]:
    """The plans.jsonl fields of an allocation; `expected` names its objective's mean."""
    return {
        "budget": budget,
        "coverage": coverage(plan, seq_len).causal,
        expected: alloc.lost_mass,
        "budget_exceeded": alloc.exceeded,
    }


def budget_decision(
    policy: BasePolicy, costs: np.ndarray, budget: float, expected: str
) -> tuple[Plan, dict[str, float | bool]]:
    """A budgeted policy's plan from its (heads, n_windows) costs at coverage `budget`, and the
    plans.jsonl fields of that allocation (`expected` names its objective's mean)."""
    alloc = allocate_budget(costs, policy.windows, policy.seq_len, budget)
    plan = allocated_plan(alloc, policy.windows, policy.n_layer, policy.n_head)
    return plan, allocation_record(alloc, plan, policy.seq_len, budget, expected)


class BudgetPolicy(BasePolicy):
    """Full attention until the first update, then `allocate_budget` on EMA'd mass-beyond-window."""

    def __init__(self, cfg: ControllerConfig, **dims: int) -> None:
        super().__init__(cfg.policy, cfg, **dims)
        self.opts = cfg.options_as(BudgetOptions)
        self._ema = [
            FeatureEMA(self.opts.feature_ema, self.opts.use_feature_ema)
            for _ in range(self.n_layer)
        ]

    def wants_update(self, step: int) -> bool:
        return self._on_schedule(step)

    def update(self, step: int, qkv: QKV | None) -> Plan:
        if qkv is None:
            raise ValueError("the budget policy needs the step's Q/K/V")
        t0 = time.perf_counter()
        measured = self._mass_beyond(qkv)
        mass = [ema.update(m) for ema, m in zip(self._ema, measured, strict=True)]
        costs = np.concatenate([m.double().numpy() for m in mass])
        self._plan, self._extra = budget_decision(
            self, costs, self.opts.budget, "expected_lost_mass"
        )
        self.last_update_seconds = time.perf_counter() - t0
        return self.current_plan()

    def _state(self) -> dict:
        return {"mass_ema": [e.state_dict() for e in self._ema]}

    def _load(self, state: dict) -> None:
        for ema, s in zip(self._ema, state["mass_ema"], strict=True):
            ema.load_state_dict(s)
