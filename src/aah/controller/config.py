"""`ControllerConfig`: TOML section `[controller]` (CLI `--controller.<field>`) and its checks."""

from __future__ import annotations

import math
from dataclasses import dataclass

from aah.controller.head_stats import USAGES

POLICIES: tuple[str, ...] = (
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
)


@dataclass
class ControllerConfig:
    """How per-head windows are chosen (docs/method.md; defaults are the paper's main rows).

    `windows=None` resolves to [T//8, T//4, T//2, T] for sequence length T; `fixed_window=None`
    to T//4. `static_plan` names a plan JSON ({"windows": [[...]]} or a bare [[...]]).
    `warmup_steps` of full attention apply to every windowed policy (fixed, random and static
    too, so controls match); `windowed_from_start` puts those three in force from step 0.
    `grouping_seed` (None: `seed`) draws fixed-random-grouping's halves. `feature_rows` = 0
    computes the attention features over every row (exact); N > 0 estimates them from N
    sampled rows. `usage`: "last-key" (the method's) or "look-back" (share of reachable
    context used). `sample_queries` is the row sample of the budget policies' mass feature.
    """

    policy: str = "full"
    windows: list[int] | None = None
    interval: int = 5
    warmup_steps: int = 100
    feature_ema: float = 0.9
    window_ema: float = 0.15
    seed: int = 0
    budget: float = 0.3
    fixed_window: int | None = None
    static_plan: str | None = None
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
    usage: str = "last-key"
    windowed_from_start: bool = False

    def validate(self, seq_len: int | None = None) -> None:
        """Raise ValueError naming the first bad field and its value."""
        if self.policy not in POLICIES:
            raise ValueError(
                f"controller.policy: unknown policy {self.policy!r}; choose one of "
                + ", ".join(POLICIES)
            )
        if self.windows is not None:
            if isinstance(self.windows, (str, bytes)) or not hasattr(self.windows, "__iter__"):
                raise ValueError(f"controller.windows must be a list of ints, got {self.windows!r}")
            if len(self.windows) == 0:
                raise ValueError("controller.windows must not be empty, got []")
            for w in self.windows:
                if not _is_int(w) or w < 1:
                    raise ValueError(
                        f"controller.windows: every window must be an int >= 1, got {w!r}"
                    )
        _check_int("interval", self.interval, 1)
        _check_int("warmup_steps", self.warmup_steps, 0)
        _check_int("seed", self.seed, None)
        _check_int("min_group_size", self.min_group_size, 1)
        _check_int("max_depth", self.max_depth, 1)
        _check_int("sample_queries", self.sample_queries, 1)
        _check_int("feature_rows", self.feature_rows, 0)
        if self.grouping_seed is not None:
            _check_int("grouping_seed", self.grouping_seed, None)
        if self.usage not in USAGES:
            raise ValueError(
                f"controller.usage: unknown definition {self.usage!r}; choose one of "
                + ", ".join(USAGES)
            )
        if self.fixed_window is not None:
            _check_int("fixed_window", self.fixed_window, 1)
        for name in ("feature_ema", "window_ema"):
            value = getattr(self, name)
            if not _is_real(value) or not 0.0 <= value < 1.0:
                raise ValueError(f"controller.{name} must be in [0, 1), got {value!r}")
        if not _is_real(self.budget) or not 0.0 < self.budget <= 1.0:
            raise ValueError(f"controller.budget must be in (0, 1], got {self.budget!r}")
        for name in ("group_threshold", "upper_threshold"):  # cosine similarities
            value = getattr(self, name)
            if not _is_real(value) or not -1.0 <= value <= 1.0:
                raise ValueError(
                    f"controller.{name} is a cosine similarity and must be in [-1, 1], "
                    f"got {value!r}"
                )
        for name in ("stickiness", "norm_penalty"):
            value = getattr(self, name)
            if not _is_real(value) or value < 0:
                raise ValueError(f"controller.{name} must be a finite number >= 0, got {value!r}")
        for name in (
            "random_resample",
            "parent_constraint",
            "joint_scoring",
            "use_feature_ema",
            "windowed_from_start",
        ):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"controller.{name} must be true or false, got {value!r}")
        if self.policy == "static" and not self.static_plan:
            raise ValueError(
                f"controller.static_plan must name a plan JSON for policy 'static', "
                f"got {self.static_plan!r}"
            )
        if self.static_plan is not None and not isinstance(self.static_plan, str):
            raise ValueError(f"controller.static_plan must be a path, got {self.static_plan!r}")
        if seq_len is not None and (not _is_int(seq_len) or seq_len < 1):
            raise ValueError(f"seq_len must be an int >= 1, got {seq_len!r}")

    def resolved_windows(self, seq_len: int) -> list[int]:
        """Candidate windows, ascending and without repeats (index order = width order)."""
        if self.windows is not None:
            return sorted({int(w) for w in self.windows})
        return sorted({max(1, seq_len // d) for d in (8, 4, 2, 1)})

    def resolved_fixed_window(self, seq_len: int) -> int:
        return int(self.fixed_window) if self.fixed_window is not None else max(1, seq_len // 4)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _check_int(name: str, value: object, minimum: int | None) -> None:
    if not _is_int(value) or (minimum is not None and value < minimum):  # type: ignore[operator]
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"controller.{name} must be an int{bound}, got {value!r}")
