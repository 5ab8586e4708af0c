"""Allocation by measured loss: cut each head alone to each candidate window, see what it costs.

Attention mass beyond a window (mass.py, and the AAH-v3 features) is a proxy for what a head
loses when it is cut; a head that retrieves a few far answers puts little mass far away on
average yet carries those answers. `cut_costs` measures the cost itself: the rise of the
mean next-byte loss on fixed calibration data when one head is cut to a candidate window
while every other head keeps full attention. One forward pass per (head, candidate < T).

`loss-ablation` (training time): at every scheduled update, the costs of the model as it
stands (EMA'd like budget's mass), then the same greedy budgeted allocation as `budget`.
`loss-ablation-shuffled`, its matched-coverage control: the same windows permuted across the
heads of each layer at every update (`Shuffled`, built in policies.py).

The controller never touches the model: the loop hands the policy a `LossProbe`, a function
from a plan to the mean loss under it (aah.eval.cut_probe.CutProbe). A probe that also
`ProbesCuts` measures all single-head cuts at once, sharing what the cuts leave unchanged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from aah.controller.base import BasePolicy
from aah.controller.budget import budget_decision
from aah.controller.config import ControllerConfig
from aah.controller.ema import FeatureEMA
from aah.controller.options import AblationOptions
from aah.controller.protocol import QKV
from aah.plan import Plan, full_plan

#: mean next-byte loss (nats) of the model under a plan, on fixed calibration data.
LossProbe = Callable[[Plan], float]


@runtime_checkable
class ProbesCuts(Protocol):
    """A loss probe that also measures single-head cuts in one go (e.g. reusing the forward
    prefix that a cut leaves unchanged): the mean loss with every head at full attention,
    and with each (layer, head, window) cut alone."""

    def __call__(self, plan: Plan) -> float: ...

    def cut_losses(
        self,
        cuts: Sequence[tuple[int, int, int]],
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[float, list[float]]: ...


def losses_plan_by_plan(
    probe: LossProbe,
    full: Plan,
    cuts: Sequence[tuple[int, int, int]],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[float, list[float]]:
    """(loss under `full`, [loss under `full` with each (layer, head, window) cut]): one
    probe call per plan."""
    base, losses = probe(full), []
    for done, (layer, head, window) in enumerate(cuts):
        plan = [row[:] for row in full]
        plan[layer][head] = window
        losses.append(probe(plan))
        if progress is not None:
            progress(done + 1, len(cuts))
    return base, losses


def single_cuts(
    n_layer: int,
    n_unit: int,
    candidates: Sequence[int],
    below: int,
    only: Sequence[tuple[int, int, int]] | None = None,
) -> list[tuple[int, int, int]]:
    """Every (layer, unit, candidate index) whose candidate is < `below` (a wider window cuts
    nothing), layer by layer; only those in `only` when it is given. A unit is a head here and
    a KV head on a transformers model (`aah.integrations.hf.search.cut_loss`)."""
    wanted = None if only is None else set(only)
    return [
        (layer, unit, j)
        for layer in range(n_layer)
        for unit in range(n_unit)
        for j, c in enumerate(candidates)
        if c < below and (wanted is None or (layer, unit, j) in wanted)
    ]


def monotone_in_window(raw: np.ndarray, candidates: Sequence[int]) -> np.ndarray:
    """(..., n_candidates) measured loss rises floored at 0, each then raised to the largest
    value of any wider candidate (a wider window never costs more; this also absorbs noise)."""
    out = np.maximum(np.asarray(raw, dtype=np.float64), 0.0)
    order = np.argsort(np.asarray(candidates))
    # running max from the widest candidate down: cost(w) = max over w' >= w of measured
    out[..., order] = np.maximum.accumulate(out[..., order][..., ::-1], axis=-1)[..., ::-1]
    return out


def cut_costs(
    probe: LossProbe,
    n_layer: int,
    n_head: int,
    seq_len: int,
    candidates: Sequence[int],
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """(n_layer, n_head, n_candidates) loss rise (nats, >= 0) when that head alone is cut to
    each candidate, every other head at full attention, made non-increasing in the window
    (`monotone_in_window`); candidates >= T cost 0 and take no pass."""
    full = full_plan(n_layer, n_head, seq_len)
    raw = np.zeros((n_layer, n_head, len(candidates)), dtype=np.float64)
    todo = single_cuts(n_layer, n_head, candidates, seq_len)
    cuts = [(l, h, int(candidates[c])) for l, h, c in todo]
    if isinstance(probe, ProbesCuts):
        base, losses = probe.cut_losses(cuts, progress)
    else:
        base, losses = losses_plan_by_plan(probe, full, cuts, progress)
    for (l, h, c), loss in zip(todo, losses, strict=True):
        raw[l, h, c] = loss - base
    return monotone_in_window(raw, candidates)


class AblationPolicy(BasePolicy):
    """Full attention until the first update, then `allocate_budget` on EMA'd cut costs."""

    def __init__(self, cfg: ControllerConfig, **dims: int) -> None:
        super().__init__(cfg.policy, cfg, **dims)
        self.opts = cfg.options_as(AblationOptions)
        self._ema = FeatureEMA(self.opts.feature_ema, self.opts.use_feature_ema)
        self._probe: LossProbe | None = None

    def attach_probe(self, probe: LossProbe) -> None:
        """The loss of the model under a plan; needed before the first update."""
        self._probe = probe

    def wants_update(self, step: int) -> bool:
        return self._on_schedule(step)

    def wants_activations(self, step: int) -> bool:
        return False

    def update(self, step: int, qkv: QKV | None) -> Plan:
        if self._probe is None:
            raise ValueError(f"the {self.name} policy needs a loss probe (attach_probe)")
        t0 = time.perf_counter()
        measured = cut_costs(self._probe, self.n_layer, self.n_head, self.seq_len, self.windows)
        flat = torch.from_numpy(measured.reshape(self.n_layer * self.n_head, -1))
        cost = self._ema.update(flat).double().numpy()
        self._plan, self._extra = budget_decision(
            self, cost, self.opts.budget, "expected_loss_rise"
        )
        self.last_update_seconds = time.perf_counter() - t0
        return self.current_plan()

    def _state(self) -> dict:
        return {"cost_ema": self._ema.state_dict()}

    def _load(self, state: dict) -> None:
        self._ema.load_state_dict(state["cost_ema"])
