"""All window policies by name (`POLICIES`) and the factory `make_policy`.

full / fixed / static: one plan for the whole run (after the warm-up). random: seeded uniform
draws from the candidate windows. The adaptive (AAH) family lives in adaptive.py, the
budgeted allocation in budget.py, the allocation by measured loss in ablation.py, a finished
run's plans replayed as they were in replay.py. Every `-shuffled` twin (and `shuffle` and
`replay-scattered`) is its policy run by the `Shuffled` wrapper (shuffle.py), built here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from aah.controller.ablation import AblationPolicy
from aah.controller.adaptive import ADAPTIVE_POLICIES, AdaptivePolicy
from aah.controller.base import BasePolicy
from aah.controller.budget import BudgetPolicy
from aah.controller.config import ControllerConfig
from aah.controller.options import RandomOptions, ShuffleOptions, StaticOptions
from aah.controller.protocol import QKV, Policy
from aah.controller.replay import ReplayPolicy
from aah.controller.shuffle import Redraw, Scope, Shuffled
from aah.plan import Plan, WindowPlan, check_plan

# Keep each seeded stream apart from the others drawn with the same seed: the random windows,
# the permutations of the allocation and replay twins, and those of the adaptive `shuffle`.
RANDOM_STREAM = 1_000_003
TWIN_STREAM = 104_729
SHUFFLE_STREAM = 7919


class StaticPolicy(BasePolicy):
    """A fixed plan: `full` (every head T), `fixed` (every head one window), `static` (a file).

    Like every windowed policy, the plan takes over after `warmup_steps` of full attention
    (in force from step warmup + 1, as the controllers' first decision), unless
    `windowed_from_start` (or no warm-up) puts it in force from step 0.
    """

    def __init__(self, name: str, cfg: ControllerConfig, plan: Plan, **dims: int) -> None:
        from_start = getattr(cfg.options, "windowed_from_start", False) or cfg.warmup_steps == 0
        super().__init__(name, cfg, plan=plan if from_start else None, **dims)
        self._target = [list(row) for row in plan]

    def wants_update(self, step: int) -> bool:
        return step == self.cfg.warmup_steps and self._plan != self._target

    def wants_activations(self, step: int) -> bool:
        return False

    def update(self, step: int, qkv: QKV | None) -> Plan | None:
        self._plan = [list(row) for row in self._target]
        return self.current_plan()

    def _state(self) -> dict[str, Any]:
        return {"target": self._target}

    def _load(self, state: dict[str, Any]) -> None:
        self._target = state["target"]


class RandomPolicy(StaticPolicy):
    """Each head's window drawn uniformly from the candidates with a seeded generator.

    Drawn once at construction and in force after the warm-up (see StaticPolicy); with
    `random_resample`, drawn again at every scheduled update.
    """

    def __init__(self, cfg: ControllerConfig, **dims: int) -> None:
        gen = torch.Generator().manual_seed(cfg.seed + RANDOM_STREAM)
        windows = cfg.resolved_windows(dims["seq_len"])
        first = draw_plan(gen, windows, dims["n_layer"], dims["n_head"])
        super().__init__("random", cfg, first, **dims)
        self.opts = cfg.options_as(RandomOptions)
        self._gen = gen  # the same generator keeps drawing: resampled plans continue its stream

    def _draw(self) -> Plan:
        return draw_plan(self._gen, self.windows, self.n_layer, self.n_head)

    def wants_update(self, step: int) -> bool:
        if self.opts.random_resample:
            return self._on_schedule(step)
        return super().wants_update(step)

    def update(self, step: int, qkv: QKV | None) -> Plan | None:
        if self.opts.random_resample and step > self.cfg.warmup_steps:
            self._target = self._draw()
        return super().update(step, qkv)

    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "rng": self._gen.get_state()}

    def _load(self, state: dict[str, Any]) -> None:
        super()._load(state)
        self._gen.set_state(state["rng"])


def draw_plan(gen: torch.Generator, windows: list[int], n_layer: int, n_head: int) -> Plan:
    """Each head's window drawn uniformly from `windows` (one `randint` call on `gen`)."""
    idx = torch.randint(len(windows), (n_layer, n_head), generator=gen)
    return [[windows[i] for i in row] for row in idx.tolist()]


def _static(cfg: ControllerConfig, **dims: int) -> Policy:
    path = cfg.options_as(StaticOptions).static_plan
    try:
        loaded = WindowPlan.load(str(path))
        if loaded.has_sinks:
            raise ValueError("the plan has attention sinks, which training does not run")
        plan = check_plan(loaded.windows, dims["n_layer"], dims["n_head"])
    except (OSError, ValueError) as err:
        raise ValueError(f"controller.static_plan {path!r}: {err}") from err
    return StaticPolicy("static", cfg, plan, **dims)


def _everywhere(name: str, window: int, cfg: ControllerConfig, **dims: int) -> Policy:
    plan = [[window] * dims["n_head"] for _ in range(dims["n_layer"])]
    return StaticPolicy(name, cfg, plan, **dims)


def _twin(
    build: Callable[..., BasePolicy], scope: Scope, redraw: Redraw, stream: int = TWIN_STREAM
) -> Callable[..., Policy]:
    """The builder of `build`'s `Shuffled` twin."""

    def make(cfg: ControllerConfig, **dims: int) -> Policy:
        return Shuffled(build(cfg, **dims), scope=scope, redraw=redraw, seed=cfg.seed + stream)

    return make


def _shuffle(cfg: ControllerConfig, **dims: int) -> Policy:
    resample = cfg.options_as(ShuffleOptions).random_resample
    redraw: Redraw = "every-decision" if resample else "once"
    return _twin(AdaptivePolicy, "layer", redraw, SHUFFLE_STREAM)(cfg, **dims)


#: policy name -> its builder (cfg, n_layer=, n_head=, n_kv_head=, seq_len=); a new policy is
#: one class, its options (`options.OPTIONS_OF`) and one line here.
BUILDERS: dict[str, Callable[..., Policy]] = {
    "full": lambda cfg, **d: _everywhere("full", d["seq_len"], cfg, **d),
    "fixed": lambda cfg, **d: _everywhere(
        "fixed", cfg.resolved_fixed_window(d["seq_len"]), cfg, **d
    ),
    "static": _static,
    "random": RandomPolicy,
    "budget": BudgetPolicy,
    "budget-shuffled": _twin(BudgetPolicy, "layer", "every-decision"),
    "loss-ablation": AblationPolicy,
    "loss-ablation-shuffled": _twin(AblationPolicy, "layer", "every-decision"),
    "replay": ReplayPolicy,
    "replay-shuffled": _twin(ReplayPolicy, "layer", "once"),
    "replay-scattered": _twin(ReplayPolicy, "model", "once"),
    **dict.fromkeys(ADAPTIVE_POLICIES, AdaptivePolicy),
    "shuffle": _shuffle,  # overrides the entry above: full-adaptive run by `Shuffled`
}


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
    return BUILDERS[cfg.policy](cfg, n_layer=n_layer, n_head=n_head, n_kv_head=n_kv_head,
                                seq_len=seq_len)  # fmt: skip
