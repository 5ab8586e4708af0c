"""Shuffled twins: a plan's windows permuted across heads, the control for "which head".

A twin keeps the windows and moves them to other heads. Permuted within each layer
(`scope="layer"`), every layer keeps its coverage and only which head holds which window
changes; permuted across every head of the model (`scope="model"`, flat index
layer * n_head + head), the model's coverage is kept and layers trade windows too.

`Shuffled` makes the twin of any training-time policy: it puts the wrapped policy's plans in
force permuted, with permutations drawn once (`redraw="once"`) or anew at each decision the
policy makes (`redraw="every-decision"`). `shuffled` permutes one plan (the post-hoc twins).
Every twin draws and applies its permutations here, so they all mean the same thing.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from aah.controller.base import BasePolicy
from aah.controller.protocol import QKV
from aah.plan import Plan

Scope = Literal["layer", "model"]
Redraw = Literal["once", "every-decision"]


def draw(gen: torch.Generator, n_layer: int, n_head: int, scope: Scope) -> list[list[int]]:
    """Seeded permutations: one of the heads per layer ("layer"), or one list permuting every
    head of the model ("model")."""
    if scope == "layer":
        return [torch.randperm(n_head, generator=gen).tolist() for _ in range(n_layer)]
    if scope == "model":
        return [torch.randperm(n_layer * n_head, generator=gen).tolist()]
    raise ValueError(f"scope must be 'layer' or 'model', got {scope!r}")


def permute(plan: Plan, perms: list[list[int]], scope: Scope) -> Plan:
    """`plan` with head h of each layer taking the window of head perms[layer][h] ("layer"),
    or flat head i taking the window of flat head perms[0][i] ("model")."""
    if scope == "layer":
        return [[row[p] for p in perm] for row, perm in zip(plan, perms, strict=True)]
    flat = [w for row in plan for w in row]
    moved = [flat[p] for p in perms[0]]
    n_head = len(plan[0])
    return [moved[i : i + n_head] for i in range(0, len(moved), n_head)]


def unpermute(plan: Plan, perms: list[list[int]], scope: Scope) -> Plan:
    """The plan that `permute(., perms, scope)` turns into `plan`."""
    inverse = [sorted(range(len(perm)), key=perm.__getitem__) for perm in perms]
    return permute(plan, inverse, scope)


def shuffled(plan: Plan, gen: torch.Generator, scope: Scope) -> Plan:
    """`plan` permuted by a fresh draw from `gen`."""
    return permute(plan, draw(gen, len(plan), len(plan[0]), scope), scope)


class Shuffled:
    """The twin of `policy`: its plans put in force with their windows permuted across heads.

    `redraw="once"` draws the permutations at construction, from `seed`, and applies them to
    every plan, the initial one too; "every-decision" draws anew at each update where the
    policy decides (`decides(step)`) and keeps them through the updates between decisions.
    The wrapped policy is told the plan the model runs (`run_as`), so what it measures under
    the plan in force is measured under the permuted one. Attributes other than the policy
    protocol's (e.g. `attach_probe`) are the wrapped policy's.
    """

    def __init__(self, policy: BasePolicy, *, scope: Scope, redraw: Redraw, seed: int) -> None:
        if redraw not in ("once", "every-decision"):
            raise ValueError(f"redraw must be 'once' or 'every-decision', got {redraw!r}")
        self.policy = policy
        self.name = policy.name
        self.scope, self.redraw = scope, redraw
        self._gen = torch.Generator().manual_seed(seed)
        self._perms = self._draw() if redraw == "once" else None
        self._plan = self._permuted(policy.current_plan())
        self._initial = self._permuted(policy.initial_plan())
        policy.run_as(self._plan)

    def __getattr__(self, name: str) -> Any:  # only reached for names not set here
        if "policy" not in self.__dict__:  # e.g. while copy or pickle rebuilds the object
            raise AttributeError(name)
        return getattr(self.__dict__["policy"], name)

    def _draw(self) -> list[list[int]]:
        return draw(self._gen, self.policy.n_layer, self.policy.n_head, self.scope)

    def _permuted(self, plan: Plan) -> Plan:
        return plan if self._perms is None else permute(plan, self._perms, self.scope)

    # -- the protocol (aah.controller.protocol.Policy) ------------------------------------
    def initial_plan(self) -> Plan:
        return [list(row) for row in self._initial]

    def current_plan(self) -> Plan:
        return [list(row) for row in self._plan]

    def wants_update(self, step: int) -> bool:
        return self.policy.wants_update(step)

    def wants_activations(self, step: int) -> bool:
        return self.policy.wants_activations(step)

    def update(self, step: int, qkv: QKV | None) -> Plan | None:
        decides = self.policy.decides(step)  # asked first: the update moves the schedule on
        plan = self.policy.update(step, qkv)
        if plan is None:
            return None
        if self._perms is None or (self.redraw == "every-decision" and decides):
            self._perms = self._draw()
        self._plan = self._permuted(plan)
        self.policy.run_as(self._plan)
        return self.current_plan()

    def record(self, step: int) -> dict[str, Any]:
        return {**self.policy.record(step), "windows": self.current_plan()}

    def state_dict(self) -> dict[str, Any]:
        perms = None if self._perms is None else [list(p) for p in self._perms]
        shuffle = {"plan": self.current_plan(), "perms": perms, "rng": self._gen.get_state()}
        return {**self.policy.state_dict(), "shuffle": shuffle}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = dict(state)
        if "shuffle" in state:
            shuffle = state.pop("shuffle")
        else:  # written before this wrapper: the plan in force and the draws sat in the policy
            shuffle = {
                "plan": state["plan"],
                "perms": state.get("perms"),
                "rng": state.get("shuffle_rng", state.get("aux_rng")),
            }
            if shuffle["perms"] is not None:
                state["plan"] = unpermute(state["plan"], shuffle["perms"], self.scope)
        perms = shuffle["perms"]
        if self.redraw == "once" and perms != self._perms:
            raise ValueError(
                f"{self.name}: the checkpoint's permutations differ from this config's "
                f"({perms} vs {self._perms}): resume with the same seed"
            )
        self.policy.load_state_dict(state)
        self._perms = perms
        if shuffle["rng"] is not None:
            self._gen.set_state(shuffle["rng"])
        self._plan = [[int(w) for w in row] for row in shuffle["plan"]]
        self.policy.run_as(self._plan)
