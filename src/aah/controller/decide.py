"""Turning logits into per-head window indices (METHOD.md section 4, steps 8-9)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aah.controller.hierarchy import Hierarchy


def is_update_step(step: int, warmup_steps: int, interval: int) -> bool:
    """Control updates run after optimizer step `step` when past warm-up and on the interval."""
    return step >= warmup_steps and (step - warmup_steps) % interval == 0


def top_down(
    hier: Hierarchy, logits: list[torch.Tensor], parent_constraint: bool = True
) -> list[list[int]]:
    """Window index per group and level: argmax at the top; below, argmax then (with the
    constraint) min(child, parent), so no child is wider than its parent."""
    n_levels = len(logits)
    out: list[list[int]] = [[] for _ in range(n_levels)]
    for l in range(n_levels - 1, -1, -1):
        choice = [int(i) for i in logits[l].argmax(dim=-1).tolist()]
        if parent_constraint and l < n_levels - 1:
            parent = hier.parents(l)
            choice = [min(c, out[l + 1][parent[g]]) for g, c in enumerate(choice)]
        out[l] = choice
    return out


def heads_from_level0(level0: list[list[int]], choice: list[int], n_heads: int) -> list[int]:
    """Per-head window index from the level-0 groups' indices; every head must be covered once."""
    out = [-1] * n_heads
    for g, heads in enumerate(level0):
        for h in heads:
            if out[h] != -1:
                raise ValueError(f"head {h} is in more than one level-0 group")
            out[h] = choice[g]
    if -1 in out:
        raise ValueError(f"head {out.index(-1)} is in no level-0 group")
    return out


@dataclass
class WindowIndexEMA:
    """Float state per head: ema = decay * ema + (1 - decay) * proposal; index = round(ema).

    Rounding is half-up. The state starts at `start` (the index in force before the first
    update, e.g. the widest for a full-attention warm-up).
    """

    decay: float
    n_windows: int
    state: torch.Tensor | None = None

    def step(self, proposal: list[list[int]], start: float) -> list[list[int]]:
        prop = torch.tensor(proposal, dtype=torch.float64)
        if self.state is None or self.state.shape != prop.shape:
            self.state = torch.full_like(prop, float(start))
        self.state = self.decay * self.state + (1.0 - self.decay) * prop
        rounded = [
            [min(self.n_windows - 1, max(0, math.floor(x + 0.5))) for x in row]
            for row in self.state.tolist()
        ]
        return rounded

    def state_dict(self) -> dict:
        return {"state": None if self.state is None else self.state.clone()}

    def load_state_dict(self, state: dict) -> None:
        s = state["state"]
        self.state = None if s is None else s.detach().clone().double()
