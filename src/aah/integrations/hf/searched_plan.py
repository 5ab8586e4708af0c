"""A searched window plan and its JSON file format.

    {"windows": [[...], ...], "budget": 0.3, "coverage": 0.298, "candidates": [64, ...],
     "model": "LlamaForCausalLM", "seq_len": 512, "lost_mass": 0.012,
     "sinks": [[4, ...], ...], "budget_unit": "coverage", "kv_bytes": 1048576,
     "signal": "mass", "loss_increase": null}

`windows[layer][query_head]`; `coverage` is the plan's causal coverage at `seq_len` (the
calibration length; at other lengths the same windows cover a different share), sinks
included; `lost_mass` is the expected attention mass beyond the windows and sinks, averaged over
query heads. Optional fields (absent in older files): `sinks[layer][query_head]`, the attention
sinks `hf.apply` gives the plan (absent: none); `budget_unit`, what `budget` caps: "coverage"
(the default) or "kv_bytes"; `kv_bytes`, the bytes `PerHeadCache` holds per sequence after
`seq_len` positions (`hf.allocate.plan_kv_bytes`); `signal`, what the search allocated on:
"mass" (the default; attention mass beyond the windows, `lost_mass` set), "output" (the squared
change of each head's residual-stream contribution, `hf.output_error`; `lost_mass` null) or
"loss" (the loss rise of cutting each KV head alone, `hf.ablation`; `lost_mass` is then null and
`loss_increase` holds the summed single-KV-head loss rises of the chosen windows, nats, an
additive estimate of the plan's own). JSON floats are written with Python's
shortest round-trip repr, so `from_json(p.to_json()) == p` exactly. The file is also a plan
file of the project's one format (`aah.plan.WindowPlan.load` reads it, sinks and all).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from aah.plan import Plan, WindowPlan, check_plan
from aah.validate import is_int

FIELDS = (
    "windows", "budget", "coverage", "candidates", "model", "seq_len", "lost_mass", "sinks",
    "budget_unit", "kv_bytes", "signal", "loss_increase",
)  # fmt: skip
OPTIONAL = ("lost_mass", "sinks", "budget_unit", "kv_bytes", "signal", "loss_increase")
BUDGET_UNITS = ("coverage", "kv_bytes")


@dataclass(frozen=True)
class SearchedPlan:
    """A plan found by `hf.search.search_plan` (see the module docstring for the fields)."""

    windows: Plan
    budget: float
    coverage: float
    candidates: list[int]
    model: str
    seq_len: int
    lost_mass: float | None = None
    sinks: Plan | None = None
    budget_unit: str = "coverage"
    kv_bytes: int | None = None
    signal: str = "mass"
    loss_increase: float | None = None

    def __post_init__(self) -> None:
        self.window_plan()  # windows and sinks checked as every plan is
        if not self.candidates or any(not is_int(c) or c < 1 for c in self.candidates):
            raise ValueError(f"candidates must be ints >= 1, got {self.candidates!r}")
        for name in ("budget", "coverage"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if not isinstance(self.seq_len, int) or self.seq_len < 1:
            raise ValueError(f"seq_len must be an int >= 1, got {self.seq_len!r}")
        if self.budget_unit not in BUDGET_UNITS:
            raise ValueError(
                f"budget_unit must be one of {', '.join(BUDGET_UNITS)}, got {self.budget_unit!r}"
            )
        if self.kv_bytes is not None and (
            isinstance(self.kv_bytes, bool)
            or not isinstance(self.kv_bytes, int)
            or self.kv_bytes < 0
        ):
            raise ValueError(f"kv_bytes must be an int >= 0, got {self.kv_bytes!r}")
        if not isinstance(self.signal, str) or not self.signal:
            raise ValueError(f"signal must be a signal's name, got {self.signal!r}")
        if self.loss_increase is not None and (
            isinstance(self.loss_increase, bool)
            or not isinstance(self.loss_increase, (int, float))
            or not math.isfinite(self.loss_increase)
        ):
            raise ValueError(f"loss_increase must be a finite number, got {self.loss_increase!r}")

    def window_plan(self) -> WindowPlan:
        """The plan itself (windows, sinks, seq_len), for `hf.apply`, caches and plan files."""
        return WindowPlan.of(self.windows, self.sinks, self.seq_len)

    def to_json(self) -> str:
        """The file format, one JSON object."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SearchedPlan:
        """Parse `to_json`'s output; ValueError naming what is missing or unknown."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a plan file must hold one JSON object")
        missing = [f for f in FIELDS if f not in data and f not in OPTIONAL]
        if missing:
            raise ValueError(f"plan file lacks {', '.join(missing)}")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise ValueError(f"plan file has unknown keys: {', '.join(unknown)}")
        return cls(
            windows=check_plan(data["windows"]),
            budget=data["budget"],
            coverage=data["coverage"],
            candidates=list(data["candidates"]),
            model=str(data["model"]),
            seq_len=data["seq_len"],
            lost_mass=data.get("lost_mass"),
            sinks=data.get("sinks"),
            budget_unit=data.get("budget_unit", "coverage"),
            kv_bytes=data.get("kv_bytes"),
            signal=data.get("signal", "mass"),
            loss_increase=data.get("loss_increase"),
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.to_json() + "\n")

    @classmethod
    def load(cls, path: str | Path) -> SearchedPlan:
        return cls.from_json(Path(path).read_text())
