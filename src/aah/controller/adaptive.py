"""The AAH-v3 family as training-loop policies: one `LayerController` per layer.

Policies and their regime (aahv3.py): aah-v3-full-adaptive, aah-v3-shallow-freeze,
aah-v3-deep-reuse, aah-v3-grouping-off, fixed-random-grouping, and shuffle (full-adaptive,
run by its `Shuffled` twin: each layer's windows permuted across heads with a seeded
permutation, drawn once; at every decision with `random_resample`; policies.py builds it).

Timing. The method decides inside forward s, from that forward's Q/K/V and the attention of
forward s - 1, and uses the windows at once. Here the loop hands `update(s, qkv)` the Q/K/V
captured in forward s after the optimizer step, so the same decision is in force from step
s + 1: the whole decision sequence runs one step late, on identical inputs. The attention
statistics of forward s - 1 come from an extra capture at s - 1 (`wants_activations`).
Between decisions the window-index EMA still steps once per forward; the policy asks for an
update only at the steps where its rounding changes the plan.
"""

from __future__ import annotations

import time

import torch

from aah.controller.aahv3 import LayerController, LayerInputs, Settings
from aah.controller.base import BasePolicy
from aah.controller.config import ControllerConfig
from aah.controller.head_stats import attention_stats, sample_rows
from aah.controller.hierarchy import GroupingRule
from aah.controller.options import AdaptiveOptions
from aah.controller.protocol import QKV
from aah.controller.scorer import Scorer
from aah.plan import Plan

ADAPTIVE_POLICIES: dict[str, str] = {
    "aah-v3-full-adaptive": "full-adaptive",
    "aah-v3-shallow-freeze": "shallow-freeze",
    "aah-v3-deep-reuse": "deep-reuse",
    "aah-v3-grouping-off": "grouping-off",
    "fixed-random-grouping": "fixed-random",
    "shuffle": "full-adaptive",
}


def settings_for(cfg: ControllerConfig) -> Settings:
    regime = ADAPTIVE_POLICIES[cfg.policy]
    opts = cfg.options_as(AdaptiveOptions)
    return Settings(
        regime=regime,
        rule=GroupingRule(
            group_threshold=opts.group_threshold,
            upper_threshold=opts.upper_threshold,
            stickiness=opts.stickiness,
            min_group_size=opts.min_group_size,
            max_depth=1 if regime == "shallow-freeze" else opts.max_depth,
            norm_penalty=opts.norm_penalty,
        ),
        warmup_steps=cfg.warmup_steps,
        interval=opts.interval,
        feature_ema=opts.feature_ema if opts.use_feature_ema else 0.0,
        window_ema=opts.window_ema,
        parent_constraint=opts.parent_constraint,
        joint_scoring=opts.joint_scoring,
        grouping_seed=cfg.seed if opts.grouping_seed is None else opts.grouping_seed,
    )


class AdaptivePolicy(BasePolicy):
    """One of `ADAPTIVE_POLICIES`; see the module docstring."""

    def __init__(self, cfg: ControllerConfig, **dims: int) -> None:
        super().__init__(cfg.policy, cfg, **dims)
        self.opts = cfg.options_as(AdaptiveOptions)
        gen = torch.Generator().manual_seed(cfg.seed)
        settings = settings_for(cfg)
        self._layers = [
            LayerController(settings, Scorer.random(len(self.windows), gen), self.n_head)
            for _ in range(self.n_layer)
        ]
        # Attention statistics of the forward before the next decision, per layer (Hq, 3).
        self._pending: list[torch.Tensor] | None = None

    @property
    def layers(self) -> list[LayerController]:
        """The per-layer controllers (read-only use: e.g. one decision outside training)."""
        return self._layers

    # -- scheduling ------------------------------------------------------------------------
    def decides(self, step: int) -> bool:
        """True at the controller's decisions (the other updates step the window EMA)."""
        return self._layers[0].is_decision(step)

    def wants_update(self, step: int) -> bool:
        if self.wants_activations(step):
            return True
        return any(
            (w := ctl.windows_at(step)) is not None and w != ctl.in_force for ctl in self._layers
        )

    def wants_activations(self, step: int) -> bool:
        """Q/K/V at decisions, at the first warm-up forward, and the step before a decision."""
        first = self._layers[0]
        return first.needs_inputs(step) or first.is_decision(step + 1)

    # -- the update ------------------------------------------------------------------------
    def update(self, step: int, qkv: QKV | None) -> Plan | None:
        t0 = time.perf_counter()
        if qkv is not None and len(qkv) != self.n_layer:
            raise ValueError(f"expected (q, k, v) for {self.n_layer} layers, got {len(qkv)}")
        in_force = self.plan_in_force()
        decides = self.decides(step)
        rows = []
        for layer, ctl in enumerate(self._layers):
            inputs = None
            if qkv is not None and ctl.needs_inputs(step):
                q, k, v = (t.detach() for t in qkv[layer][:3])
                attn = None if self._pending is None else self._pending[layer]
                if attn is None and step > 0:  # no capture before (e.g. an old checkpoint)
                    attn = self._attention((q, k, v), in_force[layer])
                inputs = LayerInputs(q, k, v, attn)
            rows.append(ctl.forward(step, inputs))
        if qkv is not None and self.decides(step + 1):
            # This forward's attention, under the plan it ran with, for the next decision.
            self._pending = [self._attention(t, w) for t, w in zip(qkv, in_force, strict=True)]
        elif decides:
            self._pending = None
        self.last_update_seconds = time.perf_counter() - t0
        if rows[0] is None:  # warm-up: full attention stays in force
            return None
        plan = [[self.windows[i] for i in row] for row in rows]  # type: ignore[union-attr]
        if decides:
            last = [ctl.last for ctl in self._layers]
            self._groups = [d.hierarchy.heads() for d in last if d is not None]
            self._decisions = [d.choice for d in last if d is not None]
        elif plan == self._plan:
            return None
        self._plan = plan
        return self.current_plan()

    def _attention(self, acts: tuple[torch.Tensor | None, ...], windows: list[int]) -> torch.Tensor:
        q, k, v = (t.detach() for t in acts[:3])  # type: ignore[union-attr]
        rows = None
        if self.opts.feature_rows:
            rows = sample_rows(q.shape[2], self.opts.feature_rows, self._sample_seed)
        # The forward's own output saves half the pass; in float32 only, so that mixed
        # precision training measures the same statistics as the float32 pass would.
        out = acts[3] if len(acts) > 3 else None
        if out is not None and out.dtype != torch.float32:
            out = None
        return attention_stats(q, k, v, windows, rows=rows, usage=self.opts.usage, out=out)

    # -- state -----------------------------------------------------------------------------
    def _state(self) -> dict:
        return {
            "scorers": [ctl.scorer.state_dict() for ctl in self._layers],
            "layers": [ctl.state_dict() for ctl in self._layers],
            "pending": self._pending,
        }

    def _load(self, state: dict) -> None:
        for ctl, s, layer in zip(self._layers, state["scorers"], state["layers"], strict=True):
            ctl.scorer = Scorer.from_state(s)
            ctl.load_state_dict(layer)
        self._pending = state["pending"]
