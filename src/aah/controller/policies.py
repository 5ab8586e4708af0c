"""All window policies by name (`POLICIES`) and the factory `make_policy`.

full / fixed / static: one plan for the whole run. random: seeded uniform draws from the
candidate windows. The adaptive (AAH) family lives in adaptive.py, the budgeted allocation
in budget.py.
"""

from __future__ import annotations

import torch

from aah.controller.adaptive import ADAPTIVE_POLICIES, AdaptivePolicy
from aah.controller.base import QKV, Policy
from aah.controller.budget import BudgetPolicy
from aah.controller.config import ControllerConfig
from aah.controller.plan import Plan, check_plan, load_plan

# Keeps the random-window stream apart from other seeded draws of the same seed.
RANDOM_STREAM = 1_000_003


class StaticPolicy(Policy):
    """A fixed plan: `full` (every head T), `fixed` (every head one window), `static` (a file)."""

    def __init__(self, name: str, cfg: ControllerConfig, plan: Plan, **dims: int) -> None:
        super().__init__(cfg, plan=plan, **dims)
        self.name = name


class RandomPolicy(Policy):
    """Each head's window drawn uniformly from the candidates with a seeded generator.

    Drawn once at construction (the plan in force from step 0); with `random_resample`,
    drawn again at every scheduled update (the q/k/v passed to `update` are not used).
    """

    name = "random"

    def __init__(self, cfg: ControllerConfig, **dims: int) -> None:
        self._gen = torch.Generator().manual_seed(cfg.seed + RANDOM_STREAM)
        super().__init__(cfg, **dims)
        self._initial = self._draw()
        self._plan = [list(row) for row in self._initial]

    def _draw(self) -> Plan:
        idx = torch.randint(len(self.windows), (self.n_layer, self.n_head), generator=self._gen)
        return [[self.windows[i] for i in row] for row in idx.tolist()]

    def wants_update(self, step: int) -> bool:
        return self.cfg.random_resample and self._on_schedule(step)

    def update(self, step: int, qkv: QKV) -> Plan:
        if self.cfg.random_resample:
            self._plan = self._draw()
        return self.current_plan()

    def _state(self) -> dict:
        return {"rng": self._gen.get_state(), "initial": self._initial}

    def _load(self, state: dict) -> None:
        self._gen.set_state(state["rng"])
        self._initial = state["initial"]


def make_policy(
    cfg: ControllerConfig, *, n_layer: int, n_head: int, n_kv_head: int, seq_len: int
) -> Policy:
    """Build the policy `cfg.policy` for a model of these dimensions (validates `cfg` first)."""
    cfg.validate(seq_len)
    for name, value in (("n_layer", n_layer), ("n_head", n_head), ("n_kv_head", n_kv_head)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if n_head % n_kv_head != 0:
        raise ValueError(f"n_head ({n_head}) must be a multiple of n_kv_head ({n_kv_head})")
    dims = {"n_layer": n_layer, "n_head": n_head, "n_kv_head": n_kv_head, "seq_len": seq_len}
    if cfg.policy == "full":
        return StaticPolicy("full", cfg, [[seq_len] * n_head for _ in range(n_layer)], **dims)
    if cfg.policy == "fixed":
        w = cfg.resolved_fixed_window(seq_len)
        return StaticPolicy("fixed", cfg, [[w] * n_head for _ in range(n_layer)], **dims)
    if cfg.policy == "static":
        try:
            plan = check_plan(load_plan(str(cfg.static_plan)), n_layer, n_head)
        except (OSError, ValueError) as err:
            raise ValueError(f"controller.static_plan {cfg.static_plan!r}: {err}") from err
        return StaticPolicy("static", cfg, plan, **dims)
    if cfg.policy == "random":
        return RandomPolicy(cfg, **dims)
    if cfg.policy == "budget":
        return BudgetPolicy(cfg, **dims)
    if cfg.policy in ADAPTIVE_POLICIES:
        return AdaptivePolicy(cfg, **dims)
    raise ValueError(f"controller.policy: unknown policy {cfg.policy!r}")
