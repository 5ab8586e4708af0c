"""`ControllerConfig`: TOML section `[controller]` (CLI `--controller.<field>`) and its checks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from aah.validate import check_bool, check_choice, check_int, is_int, is_real

#: every window policy (policies.py builds each one).
PolicyName = Literal[
    "full",
    "fixed",
    "static",
    "random",
    "fixed-random-grouping",
    "shuffle",
    "aah-v3-full-adaptive",
    "aah-v3-shallow-freeze",
    "aah-v3-deep-reuse",
    "aah-v3-grouping-off",
    "budget",
    "budget-shuffled",
    "loss-ablation",
    "loss-ablation-shuffled",
    "replay",
    "replay-shuffled",
    "replay-scattered",
]
POLICIES: tuple[str, ...] = get_args(PolicyName)
#: the policies that follow a finished run's plans (`replay_from`).
REPLAY_POLICIES = ("replay", "replay-shuffled", "replay-scattered")
#: how a head's context use is measured (aah.controller.head_stats).
Usage = Literal["last-key", "look-back"]
USAGES: tuple[str, ...] = get_args(Usage)


@dataclass
class ControllerConfig:
    """How per-head windows are chosen (docs/method.md; defaults are the paper's main rows).

    `windows=None` resolves to [T//8, T//4, T//2, T] for sequence length T; `fixed_window=None`
    to T//4. `static_plan` names a plan JSON ({"windows": [[...]]} or a bare [[...]]).
    `replay_from` names a finished run whose plans.jsonl the replay policies follow.
    `warmup_steps` of full attention apply to every windowed policy (fixed, random and static
    too, so controls match); `windowed_from_start` puts those three in force from step 0.
    `grouping_seed` (None: `seed`) draws fixed-random-grouping's halves. `feature_rows` = 0
    computes the attention features over every row (exact); N > 0 estimates them from N
    sampled rows. `usage`: "last-key" (the method's) or "look-back" (share of reachable
    context used). `sample_queries` is the row sample of the budget policies' mass feature.
    `ablation_windows`: calibration sequences of T (evenly spaced over the training split)
    on which the loss-ablation policies measure what cutting each head costs.
    """

    policy: PolicyName = "full"
    windows: list[int] | None = None
    interval: int = 5
    warmup_steps: int = 100
    feature_ema: float = 0.9
    window_ema: float = 0.15
    seed: int = 0
    budget: float = 0.3
    fixed_window: int | None = None
    static_plan: str | None = None
    replay_from: str | None = None
    random_resample: bool = False
    group_threshold: float = 0.72
    upper_threshold: float = 0.76
    stickiness: float = 0.02
    min_group_size: int = 3
    max_depth: int = 4
    norm_penalty: float = 16.0
    sample_queries: int = 64
    parent_constraint: bool = True
    joint_scoring: bool = True
    use_feature_ema: bool = True
    grouping_seed: int | None = None
    feature_rows: int = 0
    usage: Usage = "last-key"
    windowed_from_start: bool = False
    ablation_windows: int = 16

    def validate(self, seq_len: int | None = None) -> None:
        """Raise ValueError naming the first bad field and its value."""
        check_choice("controller.policy", self.policy, PolicyName)
        if self.windows is not None:
            if isinstance(self.windows, (str, bytes)) or not hasattr(self.windows, "__iter__"):
                raise ValueError(f"controller.windows must be a list of ints, got {self.windows!r}")
            if len(self.windows) == 0:
                raise ValueError("controller.windows must not be empty, got []")
            for w in self.windows:
                if not is_int(w) or w < 1:
                    raise ValueError(
                        f"controller.windows: every window must be an int >= 1, got {w!r}"
                    )
        for name, minimum in (
            ("interval", 1),
            ("warmup_steps", 0),
            ("seed", None),
            ("min_group_size", 1),
            ("max_depth", 1),
            ("sample_queries", 1),
            ("feature_rows", 0),
            ("ablation_windows", 1),
        ):
            check_int(f"controller.{name}", getattr(self, name), minimum)
        if self.grouping_seed is not None:
            check_int("controller.grouping_seed", self.grouping_seed)
        check_choice("controller.usage", self.usage, Usage)
        if self.fixed_window is not None:
            check_int("controller.fixed_window", self.fixed_window, 1)
        for name in ("feature_ema", "window_ema"):
            value = getattr(self, name)
            if not is_real(value) or not 0.0 <= value < 1.0:
                raise ValueError(f"controller.{name} must be in [0, 1), got {value!r}")
        if not is_real(self.budget) or not 0.0 < self.budget <= 1.0:
            raise ValueError(f"controller.budget must be in (0, 1], got {self.budget!r}")
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
        for name in (
            "random_resample",
            "parent_constraint",
            "joint_scoring",
            "use_feature_ema",
            "windowed_from_start",
        ):
            check_bool(f"controller.{name}", getattr(self, name))
        if self.policy == "static" and not self.static_plan:
            raise ValueError(
                f"controller.static_plan must name a plan JSON for policy 'static', "
                f"got {self.static_plan!r}"
            )
        if self.static_plan is not None and not isinstance(self.static_plan, str):
            raise ValueError(f"controller.static_plan must be a path, got {self.static_plan!r}")
        if self.policy in REPLAY_POLICIES and not self.replay_from:
            raise ValueError(
                f"controller.replay_from must name a finished run directory for policy "
                f"{self.policy!r}, got {self.replay_from!r}"
            )
        if self.replay_from is not None and not isinstance(self.replay_from, str):
            raise ValueError(f"controller.replay_from must be a path, got {self.replay_from!r}")
        if seq_len is not None:
            check_int("seq_len", seq_len, 1)

    def resolved_windows(self, seq_len: int) -> list[int]:
        """Candidate windows, ascending and without repeats (index order = width order)."""
        if self.windows is not None:
            return sorted({int(w) for w in self.windows})
        return sorted({max(1, seq_len // d) for d in (8, 4, 2, 1)})

    def resolved_fixed_window(self, seq_len: int) -> int:
        return int(self.fixed_window) if self.fixed_window is not None else max(1, seq_len // 4)
