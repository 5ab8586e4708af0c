"""The AAH-v3 family: features -> EMA -> hierarchy -> frozen scorer -> top-down decisions.

Regimes (METHOD.md section 4.5) and the controls built on them:
  aah-v3-full-adaptive   rebuild every level at every update (stickiness vs the last level 0)
  aah-v3-shallow-freeze  level 0 only, topology frozen at the first update
  aah-v3-deep-reuse      level-0 map cached at the first update, upper levels rebuilt,
                         group features recomputed from current features
  aah-v3-grouping-off    one decision per head, no hierarchy, no joint scorer
  fixed-random-grouping  a seeded random level-0 map fixed at construction (groups of
                         min_group_size in a random head order, a short tail merged into the
                         group before it), then as deep-reuse
  shuffle                full-adaptive, then each layer's final windows permuted across heads
                         with a seeded permutation (drawn once; every update if random_resample)
Full attention until the first update; the window-index EMA starts from the full window's index.
"decisions" in the record are the per-level indices before the window EMA and the shuffle.
"""

from __future__ import annotations

import time

import torch

from aah.controller.base import QKV, Policy
from aah.controller.config import ControllerConfig
from aah.controller.decide import WindowIndexEMA, heads_from_level0, top_down
from aah.controller.ema import FeatureEMA
from aah.controller.hierarchy import (
    Groups,
    Hierarchy,
    build_hierarchy,
    level0_groups,
    singleton_hierarchy,
)
from aah.controller.plan import Plan
from aah.controller.scorer import Scorer, enriched_inputs

ADAPTIVE_POLICIES: dict[str, str] = {
    "aah-v3-full-adaptive": "full",
    "aah-v3-shallow-freeze": "shallow",
    "aah-v3-deep-reuse": "reuse",
    "aah-v3-grouping-off": "off",
    "fixed-random-grouping": "random-groups",
    "shuffle": "full",
}
# Keeps grouping / shuffle draws apart from the controller weights drawn with the same seed.
AUX_STREAM = 7919


def random_groups(n_heads: int, size: int, gen: torch.Generator) -> Groups:
    """A random partition of heads into groups of `size` (a short tail joins the previous group)."""
    order = torch.randperm(n_heads, generator=gen).tolist()
    groups = [order[i : i + size] for i in range(0, n_heads, size)]
    if len(groups) > 1 and len(groups[-1]) < size:
        tail = groups.pop()
        groups[-1] += tail
    return [sorted(g) for g in groups]


class AdaptivePolicy(Policy):
    """One of `ADAPTIVE_POLICIES`; see the module docstring."""

    def __init__(self, cfg: ControllerConfig, **dims: int) -> None:
        super().__init__(cfg, **dims)
        self.name = cfg.policy
        self.regime = ADAPTIVE_POLICIES[cfg.policy]
        gen = torch.Generator().manual_seed(cfg.seed)
        self._scorers = [Scorer.random(len(self.windows), gen) for _ in range(self.n_layer)]
        self._ema = [FeatureEMA(cfg.feature_ema, cfg.use_feature_ema) for _ in range(self.n_layer)]
        self._window_ema = WindowIndexEMA(cfg.window_ema, len(self.windows))
        # Per layer: last level-0 map (stickiness), cached map (reuse) or frozen levels (shallow).
        self._level0: list[Groups | None] = [None] * self.n_layer
        self._frozen: list[list[Groups] | None] = [None] * self.n_layer
        self._aux = torch.Generator().manual_seed(cfg.seed + AUX_STREAM)
        if self.regime == "random-groups":
            self._level0 = [
                random_groups(self.n_head, cfg.min_group_size, self._aux)
                for _ in range(self.n_layer)
            ]
        self._perms: list[list[int]] | None = None
        if cfg.policy == "shuffle":
            self._perms = self._draw_perms()

    def _draw_perms(self) -> list[list[int]]:
        return [
            torch.randperm(self.n_head, generator=self._aux).tolist() for _ in range(self.n_layer)
        ]

    def wants_update(self, step: int) -> bool:
        return self._on_schedule(step)

    def _hierarchy(self, layer: int, feats: torch.Tensor) -> Hierarchy:
        cfg = self.cfg
        kw = {
            "group_threshold": cfg.group_threshold,
            "upper_threshold": cfg.upper_threshold,
            "stickiness": cfg.stickiness,
            "min_group_size": cfg.min_group_size,
            "max_depth": cfg.max_depth,
            "norm_penalty": cfg.norm_penalty,
        }
        if self.regime == "off":
            return singleton_hierarchy(self.n_head)
        if self.regime == "shallow":
            if self._frozen[layer] is None:
                self._frozen[layer] = build_hierarchy(feats, **{**kw, "max_depth": 1}).levels
            return Hierarchy(levels=self._frozen[layer], n_heads=self.n_head)
        if self.regime in ("reuse", "random-groups"):
            if self._level0[layer] is None:
                self._level0[layer] = level0_groups(
                    feats,
                    threshold=cfg.group_threshold,
                    stickiness=cfg.stickiness,
                    min_size=cfg.min_group_size,
                )
            return build_hierarchy(feats, level0=self._level0[layer], **kw)
        hier = build_hierarchy(feats, previous=self._level0[layer], **kw)
        self._level0[layer] = hier.levels[0]
        return hier

    def update(self, step: int, qkv: QKV) -> Plan:
        t0 = time.perf_counter()
        feats = self._measure(qkv, base=True, mass=False)
        proposals, groups, decisions = [], [], []
        for layer, f in enumerate(feats):
            smoothed = self._ema[layer].update(f.base)
            hier = self._hierarchy(layer, smoothed)
            inputs = enriched_inputs(hier, hier.node_features(smoothed))
            joint = self.cfg.joint_scoring and self.regime != "off"
            logits = self._scorers[layer].logits(hier, inputs, joint)
            choice = top_down(hier, logits, self.cfg.parent_constraint)
            proposals.append(heads_from_level0(hier.levels[0], choice[0], self.n_head))
            groups.append(hier.heads())
            decisions.append(choice)
        idx = self._window_ema.step(proposals, start=self._index_in_force())
        if self._perms is not None:
            if self.cfg.random_resample:
                self._perms = self._draw_perms()
            idx = [[row[p] for p in perm] for row, perm in zip(idx, self._perms, strict=True)]
        self._plan = [[self.windows[i] for i in row] for row in idx]
        self._groups, self._decisions = groups, decisions
        self.last_update_seconds = time.perf_counter() - t0
        return self.current_plan()

    def _state(self) -> dict:
        return {
            "scorers": [s.state_dict() for s in self._scorers],
            "feature_ema": [e.state_dict() for e in self._ema],
            "window_ema": self._window_ema.state_dict(),
            "level0": self._level0,
            "frozen": self._frozen,
            "perms": self._perms,
            "aux_rng": self._aux.get_state(),
        }

    def _load(self, state: dict) -> None:
        self._scorers = [Scorer.from_state(s) for s in state["scorers"]]
        for ema, s in zip(self._ema, state["feature_ema"], strict=True):
            ema.load_state_dict(s)
        self._window_ema.load_state_dict(state["window_ema"])
        self._level0, self._frozen = state["level0"], state["frozen"]
        self._perms = state["perms"]
        self._aux.set_state(state["aux_rng"])
