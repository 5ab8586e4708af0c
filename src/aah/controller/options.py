"""Each policy's own options: one dataclass per policy family, registered by policy name.

`ControllerConfig` holds what every policy reads (name, warm-up, seed) and one of these. In
TOML and on the command line the options stay flat keys of `[controller]` (`budget = 0.3`,
`--controller.interval 25`); `ControllerConfig.set` routes each to the policy's options.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args

from aah.controller.hierarchy import GroupingRule
from aah.validate import check_bool, check_choice, check_int, is_int, is_real

#: how a head's context use is measured (aah.controller.head_stats).
Usage = Literal["last-key", "look-back"]
USAGES: tuple[str, ...] = get_args(Usage)


def _check_windows(windows: list[int] | None) -> None:
    if windows is None:
        return
    if isinstance(windows, (str, bytes)) or not hasattr(windows, "__iter__"):
        raise ValueError(f"controller.windows must be a list of ints, got {windows!r}")
    if len(windows) == 0:
        raise ValueError("controller.windows must not be empty, got []")
    for w in windows:
        if not is_int(w) or w < 1:
            raise ValueError(f"controller.windows: every window must be an int >= 1, got {w!r}")


def _check_fraction(name: str, value: Any, low_open: bool = False) -> None:
    """`value` in [0, 1) (feature/window EMAs) or, with `low_open`, in (0, 1] (a budget)."""
    ok = is_real(value) and (0.0 < value <= 1.0 if low_open else 0.0 <= value < 1.0)
    if not ok:
        span = "(0, 1]" if low_open else "[0, 1)"
        raise ValueError(f"controller.{name} must be in {span}, got {value!r}")


def _check_path(name: str, value: Any, policy: str, what: str) -> None:
    if not value:
        raise ValueError(f"controller.{name} must name {what} for policy {policy!r}, got {value!r}")
    if not isinstance(value, str):
        raise ValueError(f"controller.{name} must be a path, got {value!r}")


@dataclass
class Options:
    """No options (full attention)."""

    def check(self, policy: str) -> None:
        """Raise ValueError naming the first bad option and its value."""


@dataclass
class FixedOptions(Options):
    """`fixed_window` (None: T // 4) for every head; `windowed_from_start` puts it in force
    from step 0 instead of after the warm-up."""

    fixed_window: int | None = None
    windowed_from_start: bool = False

    def check(self, policy: str) -> None:
        if self.fixed_window is not None:
            check_int("controller.fixed_window", self.fixed_window, 1)
        check_bool("controller.windowed_from_start", self.windowed_from_start)


@dataclass
class StaticOptions(Options):
    """`static_plan`: a plan file ({"windows": [[...]]} or a bare [[...]]) in force after the
    warm-up, or from step 0 with `windowed_from_start`."""

    static_plan: str | None = None
    windowed_from_start: bool = False

    def check(self, policy: str) -> None:
        _check_path("static_plan", self.static_plan, policy, "a plan JSON")
        check_bool("controller.windowed_from_start", self.windowed_from_start)


@dataclass
class Scheduled(Options):
    """Candidate `windows` (None: T/8, T/4, T/2, T) and the `interval` between updates."""

    windows: list[int] | None = None
    interval: int = 5

    def check(self, policy: str) -> None:
        _check_windows(self.windows)
        check_int("controller.interval", self.interval, 1)


@dataclass
class RandomOptions(Scheduled):
    """Seeded uniform draws; `random_resample` draws again at every update."""

    random_resample: bool = False
    windowed_from_start: bool = False

    def check(self, policy: str) -> None:
        super().check(policy)
        check_bool("controller.random_resample", self.random_resample)
        check_bool("controller.windowed_from_start", self.windowed_from_start)


@dataclass
class SmoothedOptions(Scheduled):
    """An EMA of the measured features (`feature_ema`, off with `use_feature_ema = false`)."""

    feature_ema: float = 0.9
    use_feature_ema: bool = True

    def check(self, policy: str) -> None:
        super().check(policy)
        _check_fraction("feature_ema", self.feature_ema)
        check_bool("controller.use_feature_ema", self.use_feature_ema)


@dataclass
class BudgetOptions(SmoothedOptions):
    """Greedy allocation of the mass beyond each window under a coverage `budget`, the mass
    measured on `sample_queries` sampled rows per head."""

    budget: float = 0.3
    sample_queries: int = 64

    def check(self, policy: str) -> None:
        super().check(policy)
        _check_fraction("budget", self.budget, low_open=True)
        check_int("controller.sample_queries", self.sample_queries, 1)


@dataclass
class AblationOptions(SmoothedOptions):
    """Greedy allocation of measured loss rises under a coverage `budget`, measured on
    `ablation_windows` calibration sequences of T (spread over the training split)."""

    budget: float = 0.3
    ablation_windows: int = 16

    def check(self, policy: str) -> None:
        super().check(policy)
        _check_fraction("budget", self.budget, low_open=True)
        check_int("controller.ablation_windows", self.ablation_windows, 1)


@dataclass
class AdaptiveOptions(SmoothedOptions):
    """The AAH-v3 controller (docs/method.md; defaults are the paper's main rows).

    `grouping_seed` (None: the seed) draws fixed-random-grouping's halves; `feature_rows` = 0
    computes the attention features over every row (exact), N > 0 from N sampled rows;
    `usage`: "last-key" (the method's) or "look-back" (share of reachable context used).
    """

    window_ema: float = 0.15
    # the clustering's thresholds: the paper's defaults, defined once in `GroupingRule`
    group_threshold: float = GroupingRule.group_threshold
    upper_threshold: float = GroupingRule.upper_threshold
    stickiness: float = GroupingRule.stickiness
    min_group_size: int = GroupingRule.min_group_size
    max_depth: int = GroupingRule.max_depth
    norm_penalty: float = GroupingRule.norm_penalty
    parent_constraint: bool = True
    joint_scoring: bool = True
    grouping_seed: int | None = None
    feature_rows: int = 0
    usage: Usage = "last-key"

    def check(self, policy: str) -> None:
        super().check(policy)
        _check_fraction("window_ema", self.window_ema)
        for name in ("group_threshold", "upper_threshold"):  # cosine similarities
            value = getattr(self, name)
            if not is_real(value) or not -1.0 <= value <= 1.0:
                raise ValueError(
                    f"controller.{name} is a cosine similarity and must be in [-1, 1], "
                    f"got {value!r}"
                )
        for name in ("stickiness", "norm_penalty"):
            value = getattr(self, name)
            if not is_real(value) or value < 0:
                raise ValueError(f"controller.{name} must be a finite number >= 0, got {value!r}")
        for name, minimum in (("min_group_size", 1), ("max_depth", 1), ("feature_rows", 0)):
            check_int(f"controller.{name}", getattr(self, name), minimum)
        if self.grouping_seed is not None:
            check_int("controller.grouping_seed", self.grouping_seed)
        check_choice("controller.usage", self.usage, Usage)
        for name in ("parent_constraint", "joint_scoring"):
            check_bool(f"controller.{name}", getattr(self, name))


@dataclass
class ShuffleOptions(AdaptiveOptions):
    """The adaptive controller's options; `random_resample`: the `shuffle` twin draws a new
    permutation at every decision (otherwise one, drawn once)."""

    random_resample: bool = False

    def check(self, policy: str) -> None:
        super().check(policy)
        check_bool("controller.random_resample", self.random_resample)


@dataclass
class ReplayOptions(Options):
    """`replay_from`: a finished run whose plans.jsonl the replay follows."""

    replay_from: str | None = None

    def check(self, policy: str) -> None:
        _check_path("replay_from", self.replay_from, policy, "a finished run directory")


#: every window policy and the options it reads (policies.py builds each one).
OPTIONS_OF: dict[str, type[Options]] = {
    "full": Options,
    "fixed": FixedOptions,
    "static": StaticOptions,
    "random": RandomOptions,
    "aah-v3-full-adaptive": AdaptiveOptions,
    "aah-v3-shallow-freeze": AdaptiveOptions,
    "aah-v3-deep-reuse": AdaptiveOptions,
    "aah-v3-grouping-off": AdaptiveOptions,
    "fixed-random-grouping": AdaptiveOptions,
    "shuffle": ShuffleOptions,
    "budget": BudgetOptions,
    "budget-shuffled": BudgetOptions,
    "loss-ablation": AblationOptions,
    "loss-ablation-shuffled": AblationOptions,
    "replay": ReplayOptions,
    "replay-shuffled": ReplayOptions,
    "replay-scattered": ReplayOptions,
}


def option_types() -> dict[str, Any]:
    """Every option name of any policy -> its annotated type (one type per name)."""
    types: dict[str, Any] = {}
    for cls in dict.fromkeys(OPTIONS_OF.values()):
        hints = typing.get_type_hints(cls)
        types |= {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    return types


def option_defaults() -> dict[str, Any]:
    """Every option name of any policy -> its default (one default per name)."""
    return {f.name: f.default for cls in dict.fromkeys(OPTIONS_OF.values())
            for f in dataclasses.fields(cls)}  # fmt: skip


def names_of(cls: type[Options]) -> list[str]:
    """The option names `cls` owns, in declaration order."""
    return [f.name for f in dataclasses.fields(cls)]
