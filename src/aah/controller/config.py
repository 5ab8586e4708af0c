"""`ControllerConfig`: TOML section `[controller]` (CLI `--controller.<key>`) and its checks.

What every policy reads is a field: `policy`, `warmup_steps` (full attention first, for every
windowed policy alike, so controls match) and `seed`. Everything else is the policy's own
`options` (`controller/options.py`): flat keys of the same table in TOML and on the command
line, routed to the policy when it is built.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypeVar, get_args

from aah.controller.options import (
    OPTIONS_OF,
    USAGES,
    Options,
    Usage,
    option_defaults,
    option_types,
)
from aah.validate import check_choice, check_int

OptionsT = TypeVar("OptionsT", bound=Options)

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
#: the fields every policy reads; every other key is an option of some policy.
COMMON = ("policy", "warmup_steps", "seed")

__all__ = ["POLICIES", "REPLAY_POLICIES", "USAGES", "ControllerConfig", "PolicyName", "Usage"]


class ControllerConfig:
    """How per-head windows are chosen: the policy, its warm-up and seed, and its options.

    `ControllerConfig("budget", warmup_steps=400, budget=0.3)`; `options` is the policy's own
    options dataclass (`controller/options.py`), built from the keys given. A key that only
    other policies read is kept aside and left out of `options` and `to_dict()`, so one suite
    table can hold the options of all its regimes, and files written when every option was a
    field of every policy still load. A key that no policy reads is a ValueError.
    """

    def __init__(
        self, policy: str = "full", *, warmup_steps: int = 100, seed: int = 0, **options: Any
    ) -> None:
        self.policy = policy
        self.warmup_steps = warmup_steps
        self.seed = seed
        self._given: dict[str, Any] = {}
        for key, value in options.items():
            self.set(key, value)

    def set(self, key: str, value: Any) -> None:
        """Set a common field or an option by name (values already typed)."""
        if key in COMMON:
            setattr(self, key, value)
        elif key in option_types():
            self._given[key] = value
        else:
            raise ValueError(
                f"unknown config key 'controller.{key}'; [controller] keys: "
                f"{', '.join([*COMMON, *option_types()])}"
            )

    @property
    def options(self) -> Options:
        """The policy's options: the keys given that it reads, defaults for the rest."""
        cls = OPTIONS_OF.get(self.policy)
        if cls is None:
            check_choice("controller.policy", self.policy, PolicyName)
        assert cls is not None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in self._given.items() if k in names})

    def options_as(self, cls: type[OptionsT]) -> OptionsT:
        """`options`, checked to be `cls` (a policy class asks for the options it reads)."""
        opts = self.options
        if not isinstance(opts, cls):
            name = type(opts).__name__
            raise TypeError(f"policy {self.policy!r} reads {name}, not {cls.__name__}")
        return opts

    def unused(self) -> list[str]:
        """The keys given a value other than their default that this policy does not read
        (a file written when every option was a field of every policy lists them all at
        their defaults: those are not worth a word)."""
        names = {f.name for f in dataclasses.fields(OPTIONS_OF.get(self.policy, Options))}
        defaults = option_defaults()
        return sorted(k for k, v in self._given.items() if k not in names and v != defaults[k])

    def to_dict(self) -> dict[str, Any]:
        """The common fields, then the policy's options (what `[controller]` in TOML holds)."""
        common = {"policy": self.policy, "warmup_steps": self.warmup_steps, "seed": self.seed}
        return common | dataclasses.asdict(self.options)

    def validate(self, seq_len: int | None = None) -> None:
        """Raise ValueError naming the first bad field and its value."""
        check_choice("controller.policy", self.policy, PolicyName)
        check_int("controller.warmup_steps", self.warmup_steps, 0)
        check_int("controller.seed", self.seed)
        self.options.check(self.policy)
        if seq_len is not None:
            check_int("seq_len", seq_len, 1)

    def resolved_windows(self, seq_len: int) -> list[int]:
        """Candidate windows, ascending and without repeats (index order = width order):
        the policy's `windows` option, or T/8, T/4, T/2, T."""
        windows = getattr(self.options, "windows", None)
        if windows is not None:
            return sorted({int(w) for w in windows})
        return sorted({max(1, seq_len // d) for d in (8, 4, 2, 1)})

    def resolved_fixed_window(self, seq_len: int) -> int:
        fixed = getattr(self.options, "fixed_window", None)
        return int(fixed) if fixed is not None else max(1, seq_len // 4)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ControllerConfig):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"ControllerConfig({items})"
