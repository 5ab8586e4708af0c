"""One layer's AAH-v3 control state machine, stepped once per forward as the method runs it.

`LayerController.forward(step, inputs)` returns the window index per head for forward
`step`, or None during warm-up (full attention). Inputs are that forward's Q/K/V and the
attention statistics of the forward before it (`head_stats`); they are read only at the
first warm-up forward and at decision forwards (`needs_inputs`).

Per regime (a decision runs at the first forward after warm-up, then every `interval`):
  full-adaptive   head features -> feature EMA -> level 0 by clustering (stickiness toward
                  the last level 0) -> upper levels grown -> scorer -> top-down decision
  shallow-freeze  the first decision as full-adaptive with depth 1; later ones keep that
                  topology and rescore it with features pooled from the current Q/K/V
  deep-reuse      level 0 cached at the first warm-up forward (untrained model, attention
                  features 0), upper levels regrown at every decision on features pooled
                  from the current Q/K/V
  grouping-off    head features (no EMA), one decision per head, no joint scorer
  fixed-random    two seeded random halves of the heads as level 0, then depth - 1
                  pass-through levels, rescored like deep-reuse
The first warm-up forward (regimes with grouping) also starts the feature EMA and caches
level 0. Without a warm-up, the first decision takes the full-adaptive path and fills the
caches. Every forward after warm-up steps the window-index EMA with the latest proposal.
`margins.value` is the smallest decision margin (aah.controller.clustering.Closest) of every
clustering and argmax since the controller was made or loaded: a decision that near a tie
can go either way on another CPU, in the reference as well.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from aah.controller.clustering import Closest
from aah.controller.decide import WindowIndexEMA, heads_from_level0, top_down
from aah.controller.head_stats import group_features, head_features, qkv_head_stats
from aah.controller.hierarchy import (
    GroupingRule,
    Hierarchy,
    build,
    from_topology,
    group_map,
    groups_of,
    grow,
    passthrough,
    singletons,
)
from aah.controller.scorer import Scorer, enriched_inputs

REGIMES = ("full-adaptive", "shallow-freeze", "deep-reuse", "grouping-off", "fixed-random")


@dataclass(frozen=True)
class Settings:
    """What a layer controller needs to know (from a ControllerConfig: adaptive.settings_for)."""

    regime: str
    rule: GroupingRule
    warmup_steps: int
    interval: int
    feature_ema: float
    window_ema: float
    parent_constraint: bool
    joint_scoring: bool
    grouping_seed: int


@dataclass
class LayerInputs:
    """One forward's q (B, Hq, T, D), k / v (B, Hkv, T, D) and the previous forward's
    attention statistics (Hq, 3), None when there was none (they count as 0)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    attn: torch.Tensor | None = None


@dataclass
class Decision:
    """What one decision saw and chose (for records and tests)."""

    hierarchy: Hierarchy
    logits: list[torch.Tensor]
    choice: list[list[int]]
    proposal: list[int]


def fixed_halves(n_heads: int, seed: int) -> list[int]:
    """Head -> group map of two seeded random halves (the first n // 2 of a permutation: 0)."""
    order = torch.randperm(n_heads, generator=torch.Generator().manual_seed(seed)).tolist()
    first = set(order[: n_heads // 2]) if n_heads > 1 else set(order)
    return [0 if h in first else 1 for h in range(n_heads)]


class LayerController:
    """See the module docstring. State: feature EMA, cached level 0 / topology, last proposal,
    window-index EMA and the forward it was last stepped at."""

    def __init__(self, settings: Settings, scorer: Scorer, n_heads: int) -> None:
        if settings.regime not in REGIMES:
            raise ValueError(f"unknown AAH-v3 regime {settings.regime!r}; one of {REGIMES}")
        self.settings, self.scorer, self.n_heads = settings, scorer, n_heads
        self.feature_ema: torch.Tensor | None = None
        self.head_map: list[int] | None = None
        self.topology: list | None = None
        self.proposal: list[int] | None = None
        self.last_update: int | None = None
        self.window_ema = WindowIndexEMA(settings.window_ema, scorer.n_windows)
        self.stepped_to: int | None = None  # last forward whose window EMA step is done
        self.in_force: list[int] | None = None
        self.last: Decision | None = None
        self.margins = Closest()
        self._fixed = (
            fixed_halves(n_heads, settings.grouping_seed)
            if settings.regime == "fixed-random"
            else None
        )

    # -- scheduling ------------------------------------------------------------------------
    def is_decision(self, step: int) -> bool:
        s = self.settings
        if step < s.warmup_steps:
            return False
        return self.last_update is None or step - self.last_update >= max(1, s.interval)

    def needs_inputs(self, step: int) -> bool:
        """True when `forward(step, ...)` reads its inputs."""
        warm_init = step < self.settings.warmup_steps and self._starts_in_warmup()
        return warm_init or self.is_decision(step)

    def windows_at(self, step: int) -> list[int] | None:
        """The indices `forward(step, None)` would give for a non-decision forward, unchanged."""
        if self.proposal is None or self.is_decision(step):
            return None
        ema = copy.deepcopy(self.window_ema)
        for _ in range(self._behind(step)):
            ema.step(self.proposal)
        return ema.peek(self.proposal)

    # -- the forward -----------------------------------------------------------------------
    def forward(self, step: int, inputs: LayerInputs | None) -> list[int] | None:
        if step < self.settings.warmup_steps:
            if self._starts_in_warmup():
                self._warmup_start(_need(inputs, step))
            return None
        if self.proposal is not None:  # forwards since the last call ran the cached branch
            for _ in range(self._behind(step)):
                self.window_ema.step(self.proposal)
        if self.is_decision(step):
            self.last = self._decide(_need(inputs, step))
            self.proposal, self.last_update = self.last.proposal, step
        assert self.proposal is not None
        self.in_force = self.window_ema.step(self.proposal)
        self.stepped_to = step
        return self.in_force

    def _behind(self, step: int) -> int:
        return 0 if self.stepped_to is None else max(0, step - self.stepped_to - 1)

    def _starts_in_warmup(self) -> bool:
        return self.settings.regime != "grouping-off" and self.head_map is None

    def _warmup_start(self, x: LayerInputs) -> None:
        feats = head_features(qkv_head_stats(x.q, x.k, x.v), x.attn)
        self._smooth(feats)
        assert self.feature_ema is not None
        hier = build(self.feature_ema, self.settings.rule, None, self.margins)
        self.head_map = hier.head_to_group()

    def _smooth(self, feats: torch.Tensor) -> None:
        decay = min(1.0, max(0.0, self.settings.feature_ema))
        if self.feature_ema is None or self.feature_ema.shape != feats.shape:
            self.feature_ema = feats.detach().float().clone()
        else:
            self.feature_ema = decay * self.feature_ema + (1.0 - decay) * feats.detach().float()

    def _hierarchy(self, x: LayerInputs) -> Hierarchy:
        s, n = self.settings, self.n_heads
        if s.regime == "grouping-off":
            return singletons(head_features(qkv_head_stats(x.q, x.k, x.v), x.attn))
        if s.regime == "fixed-random":
            assert self._fixed is not None
            level0 = groups_of(self._fixed)
            feats0 = group_features(x.q, x.k, x.v, level0, x.attn)
            return passthrough(level0, feats0, n, s.rule.max_depth)
        if s.regime == "shallow-freeze" and self.topology is not None:
            level0 = groups_of(group_map(self.topology[0], n))
            return from_topology(self.topology, group_features(x.q, x.k, x.v, level0, x.attn), n)
        if s.regime == "deep-reuse" and self.head_map is not None:
            level0 = groups_of(self.head_map)
            feats0 = group_features(x.q, x.k, x.v, level0, x.attn)
            return grow(level0, feats0, n, s.rule, self.margins)
        self._smooth(head_features(qkv_head_stats(x.q, x.k, x.v), x.attn))
        assert self.feature_ema is not None
        hier = build(self.feature_ema, s.rule, self.head_map, self.margins)
        if s.regime == "shallow-freeze":
            self.topology = hier.topology()
        return hier

    def _decide(self, x: LayerInputs) -> Decision:
        s = self.settings
        hier = self._hierarchy(x)
        if s.regime != "grouping-off":
            self.head_map = hier.head_to_group()
        joint = s.joint_scoring and s.regime != "grouping-off"
        logits = self.scorer.logits(hier, enriched_inputs(hier), joint)
        choice = top_down(hier, logits, s.parent_constraint, self.margins)
        proposal = heads_from_level0(hier.levels[0], choice[0], self.n_heads)
        return Decision(hier, logits, choice, proposal)

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return copy.deepcopy(
            {
                "feature_ema": self.feature_ema,
                "head_map": self.head_map,
                "topology": self.topology,
                "proposal": self.proposal,
                "last_update": self.last_update,
                "window_ema": self.window_ema.state_dict(),
                "stepped_to": self.stepped_to,
                "in_force": self.in_force,
                "fixed": self._fixed,
            }
        )

    def load_state_dict(self, state: dict) -> None:
        state = copy.deepcopy(state)
        for key in ("feature_ema", "head_map", "topology", "proposal", "last_update"):
            setattr(self, key, state[key])
        self.window_ema.load_state_dict(state["window_ema"])
        self.stepped_to, self.in_force = state["stepped_to"], state["in_force"]
        self._fixed = state["fixed"]


def _need(inputs: LayerInputs | None, step: int) -> LayerInputs:
    if inputs is None:
        raise ValueError(f"forward {step} needs this layer's Q/K/V and attention statistics")
    return inputs
