"""Turning logits into per-head window indices: top-down decisions and the window-index EMA."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aah.controller.clustering import Closest
from aah.controller.hierarchy import Hierarchy


def is_update_step(step: int, warmup_steps: int, interval: int) -> bool:
    """Control updates run after optimizer step `step` when past warm-up and on the interval."""
    return step >= warmup_steps and (step - warmup_steps) % interval == 0


def top_down(
    hier: Hierarchy,
    logits: list[torch.Tensor],
    parent_constraint: bool = True,
    closest: Closest | None = None,
) -> list[list[int]]:
    """Window index per group and level: argmax at the top; below, argmax then (with the
    constraint) min(child, parent), so no child is wider than its parent. Each argmax's
    margin over the runner-up goes to `closest`."""
    n_levels = len(logits)
    out: list[list[int]] = [[] for _ in range(n_levels)]
    for l in range(n_levels - 1, -1, -1):
        choice = [int(i) for i in logits[l].argmax(dim=-1).tolist()]
        if closest is not None:
            for row in logits[l]:
                closest.note_runner_up(row)
        parents = hier.parents(l)
        if parent_constraint and parents is not None:
            choice = [min(c, out[l + 1][parents[g]]) for g, c in enumerate(choice)]
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
    """Per-head float32 state, stepped once per forward: ema = decay ema + (1 - decay) proposal.

    The first step after warm-up sets the state to the proposal; the window index in force is
    round(ema) (half to even), clamped to the candidates. `decay = 0` disables it (index =
    proposal). Note: with 4 candidates and decay 0.15 the rounding always lands on the
    proposal (|0.15 (ema - proposal)| <= 0.45); it acts with more candidates or a larger decay.
    """

    decay: float
    n_windows: int
    state: torch.Tensor | None = None

    def step(self, proposal: list[int]) -> list[int]:
        if self.decay <= 0.0:
            return list(proposal)
        self.state = self._next(proposal)
        return self._round(self.state)

    def peek(self, proposal: list[int]) -> list[int]:
        """The index `step(proposal)` would give, without changing the state."""
        if self.decay <= 0.0:
            return list(proposal)
        return self._round(self._next(proposal))

    def _next(self, proposal: list[int]) -> torch.Tensor:
        prop = torch.tensor(proposal, dtype=torch.float32)
        if self.state is None or self.state.shape != prop.shape:
            return prop
        decay = min(1.0, self.decay)
        return decay * self.state + (1.0 - decay) * prop

    def _round(self, state: torch.Tensor) -> list[int]:
        return [int(i) for i in state.round().clamp(0, self.n_windows - 1).long().tolist()]

    def state_dict(self) -> dict:
        return {"state": None if self.state is None else self.state.clone()}

    def load_state_dict(self, state: dict) -> None:
        s = state["state"]
        self.state = None if s is None else s.detach().clone().float()
