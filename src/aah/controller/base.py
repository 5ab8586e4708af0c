"""`BasePolicy`: what the policies share (the plan in force, its record, the state every
policy checkpoints, the update schedule and the mass-beyond-window measurement).

Subclasses pass their name and starting plan to `__init__`, then add their own state, and
override `wants_update` / `wants_activations` / `update` plus the `_state` / `_load` hooks.
The contract itself is `aah.controller.protocol.Policy`.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from aah.controller.config import ControllerConfig
from aah.controller.decide import is_update_step
from aah.controller.mass import mass_beyond
from aah.controller.options import BudgetOptions, Scheduled
from aah.controller.protocol import QKV
from aah.plan import Plan, full_plan


class BasePolicy:
    """A static plan (`plan`, or full attention when None) that never updates.

    Attributes:
        name: the policy name as in `POLICIES`.
        windows: candidate windows, ascending (index order = width order).
        last_update_seconds: wall time of the last `update` (0.0 before any).
    """

    def __init__(
        self,
        name: str,
        cfg: ControllerConfig,
        *,
        n_layer: int,
        n_head: int,
        n_kv_head: int,
        seq_len: int,
        plan: Plan | None = None,
    ) -> None:
        self.name = name
        self.cfg = cfg
        self.n_layer, self.n_head = n_layer, n_head
        self.n_kv_head, self.seq_len = n_kv_head, seq_len
        self.windows = cfg.resolved_windows(seq_len)
        self.last_update_seconds = 0.0
        self._initial = plan if plan is not None else full_plan(n_layer, n_head, seq_len)
        self._plan: Plan = [list(row) for row in self._initial]
        self._running: Plan | None = None  # the plan the model runs, when a twin moved ours
        self._groups: list[Any] | None = None
        self._decisions: list[Any] | None = None
        self._extra: dict[str, Any] = {}
        # Seed of the sampled query rows; kept in the state so a loaded policy samples alike.
        self._sample_seed = cfg.seed

    # -- the protocol (aah.controller.protocol.Policy) ------------------------------------
    def initial_plan(self) -> Plan:
        """The plan in force at step 0 (full attention for regimes with a warm-up)."""
        return [list(row) for row in self._initial]

    def wants_update(self, step: int) -> bool:
        """True when `update` should run after optimizer step `step`; never for static plans."""
        return False

    def wants_activations(self, step: int) -> bool:
        """True when that update reads step `step`'s Q/K/V (otherwise it gets None)."""
        return self.wants_update(step)

    def update(self, step: int, qkv: QKV | None) -> Plan | None:
        """The plan in force from step + 1 (also kept as current), or None when this update
        only took measurements and the plan stays as it is."""
        return self.current_plan()

    def current_plan(self) -> Plan:
        return [list(row) for row in self._plan]

    def decides(self, step: int) -> bool:
        """True when the update at `step`, asked before it runs, makes a new decision (a twin
        that redraws at each decision draws then), False when it only smooths the last one;
        every update here."""
        return True

    def run_as(self, plan: Plan) -> None:
        """Note that the model runs `plan` instead of this policy's own (a `Shuffled` twin
        permutes it), so that measurements under the plan in force read the real one."""
        self._running = [list(row) for row in plan]

    def plan_in_force(self) -> Plan:
        """The plan the model runs: this policy's own, or the one given to `run_as`."""
        return [list(row) for row in (self._plan if self._running is None else self._running)]

    def record(self, step: int) -> dict[str, Any]:
        """One plans.jsonl object for the plan now in force."""
        groups = self._groups
        if groups is None:  # non-hierarchical: one level, one head per group
            groups = [[[[h] for h in range(self.n_head)]] for _ in range(self.n_layer)]
        return {
            "step": int(step),
            "windows": self.current_plan(),
            "groups": copy.deepcopy(groups),
            "decisions": copy.deepcopy(self._decisions),
            "policy": self.name,
            **copy.deepcopy(self._extra),
        }

    def state_dict(self) -> dict[str, Any]:
        state = {
            "plan": self._plan,
            "groups": self._groups,
            "decisions": self._decisions,
            "extra": self._extra,
            "sample_seed": self._sample_seed,
            "last_update_seconds": self.last_update_seconds,
        }
        state.update(self._state())
        return copy.deepcopy(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        state = copy.deepcopy(state)
        self._plan = [[int(w) for w in row] for row in state["plan"]]
        self._groups, self._decisions = state["groups"], state["decisions"]
        self._extra = state["extra"]
        self._sample_seed = int(state["sample_seed"])
        self.last_update_seconds = float(state.get("last_update_seconds", 0.0))
        self._load(state)

    # -- hooks and helpers for subclasses ------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {}

    def _load(self, state: dict[str, Any]) -> None:
        return None

    def _on_schedule(self, step: int) -> bool:
        interval = self.cfg.options_as(Scheduled).interval
        return is_update_step(step, self.cfg.warmup_steps, interval)

    def _mass_beyond(self, qkv: QKV) -> list[torch.Tensor]:
        """Per layer (Hq, n_windows): measured attention mass beyond each candidate window."""
        if len(qkv) != self.n_layer:
            raise ValueError(f"expected (q, k, v) for {self.n_layer} layers, got {len(qkv)}")
        out = []
        for layer, (q, k, v, *_) in enumerate(qkv):
            if q.dim() != 4 or q.shape[1] != self.n_head or k.shape[1] != self.n_kv_head:
                raise ValueError(
                    f"layer {layer}: q {tuple(q.shape)} / k {tuple(k.shape)} do not "
                    f"match n_head={self.n_head}, n_kv_head={self.n_kv_head}"
                )
            out.append(
                mass_beyond(
                    q.detach(),
                    k.detach(),
                    v.detach(),
                    self.windows,
                    sample_queries=self.cfg.options_as(BudgetOptions).sample_queries,
                    seed=self._sample_seed,
                )
            )
        return out
