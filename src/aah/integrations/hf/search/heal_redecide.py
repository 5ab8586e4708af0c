"""Windows re-decided while a heal trains: the paper's controller on a pretrained model.

`heal` holds a plan's windows fixed by default. With `HealOptions(redecide=Redecide())` it
re-decides them every `every` training steps the way the project's `budget` policy does while
a model trains from scratch (`controller.budget`): measure a signal on the model as it stands
(its healed parameters in, at full attention), fold it into an exponential moving average of
the costs (`controller.ema.FeatureEMA`, the policy's `feature_ema`), allocate one candidate
window per KV head within a budget (`controller.allocate`, through
`hf.search.plan_allocation.plan_from_costs`), and put those windows in force with the
parameters kept. What the allocation may use is the plan's own: its candidates, sinks, floor
and whole layers (its `info`, as a search wrote it), and its own KV bytes as the budget, so a
re-decided plan never holds more than the plan it started from.

The signal is the plan's own (`info["signal"]`, "output" for a default search) unless named, so
that a heal with and without re-deciding differ in that alone. Each decision measures `blocks`
training blocks, taken in turn; the heal's held-out KL then judges the model under the windows
just decided, and keep-best keeps the windows with the parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from aah.attention.kv_bytes import plan_kv_bytes
from aah.controller.allocate import Budget
from aah.controller.ema import FeatureEMA
from aah.integrations.hf.run.apply_plan import apply, current_plan
from aah.integrations.hf.run.model_layout import kv_shape, layout, sliding_windows
from aah.integrations.hf.search.plan_allocation import plan_from_costs
from aah.integrations.hf.search.signals import Mass, Output, SearchContext
from aah.plan import WindowPlan
from aah.validate import check_int

#: the one-pass signals a decision can measure (a loss signal costs a pass per KV head)
SIGNALS = {"mass": Mass, "output": Output}


@dataclass(frozen=True)
class Redecide:
    """How often, on what and with which smoothing a heal re-decides its plan's windows."""

    every: int = 10
    blocks: int = 2
    feature_ema: float = 0.9  # the `budget` policy's default
    signal: str | None = None  # None: the plan's own
    sample_queries: int = 64

    def __post_init__(self) -> None:
        for name in ("every", "blocks", "sample_queries"):
            check_int(name, getattr(self, name), minimum=1)
        ema = self.feature_ema
        if isinstance(ema, bool) or not isinstance(ema, (int, float)) or not 0 <= ema < 1:
            raise ValueError(f"feature_ema must be in [0, 1), got {ema!r}")
        if self.signal is not None and self.signal not in SIGNALS:
            raise ValueError(
                f"redecide signal must be one of {', '.join(SIGNALS)} or None, got {self.signal!r}"
            )


def decision_signal(plan: WindowPlan, signal: str | None = None) -> str:
    """The signal decisions on `plan` measure (`signal`, else the plan's own); ValueError
    where the plan is no search's (no candidate windows, or sinks that differ within a layer)
    or its signal is not one-pass."""
    candidates = plan.info.get("candidates")
    chosen = signal or plan.info.get("signal")
    if not candidates or chosen not in SIGNALS:
        raise ValueError(
            "re-deciding windows needs a searched plan (its info lists 'candidates' and a "
            f"one-pass 'signal', {' or '.join(SIGNALS)}), got candidates={candidates!r}, "
            f"signal={plan.info.get('signal')!r}"
            + ("" if chosen in SIGNALS else "; from Python, name one: Redecide(signal=...)")
        )
    mixed = [i for i, row in enumerate(plan.sinks) if len(set(row)) > 1]
    if mixed:  # a search gives every head of a layer its sinks; decisions keep them as they are
        raise ValueError(
            f"re-deciding windows keeps each layer's sinks, one count for all its heads; "
            f"layers {mixed} give their heads different counts"
        )
    return chosen


class WindowRedecider:
    """Re-decides a plan's windows on a model during a heal (module docstring)."""

    def __init__(
        self, model: torch.nn.Module, plan: WindowPlan, seq_len: int, options: Redecide
    ) -> None:
        signal = decision_signal(plan, options.signal)
        candidates = plan.info["candidates"]
        lay = layout(model)
        shape = kv_shape(model)
        self.model = model
        self.options = options
        self.signal = SIGNALS[signal](sample_queries=options.sample_queries)
        self.candidates = sorted(int(c) for c in candidates)
        self.floor = int(plan.info.get("floor") or 0)
        self.whole_layers = tuple(int(i) for i in plan.info.get("whole_layers") or ())
        sinks = tuple(max(row) for row in plan.sinks)
        self.kv_bytes = plan_kv_bytes(plan.windows, plan.sinks, shape, seq_len)
        self.budget = Budget(
            seq_len, lay.n_layer, lay.n_head, kv_bytes=self.kv_bytes, sinks=sinks, shape=shape
        )
        self.ema = FeatureEMA(options.feature_ema)
        self.decisions: list[dict[str, Any]] = []

    def layers(self) -> list[int]:
        """The layers some decision could cut (every one but the whole layers, where the
        smallest candidate is below what the layer would see): the heal's parameters go there."""
        t = self.budget.seq_len
        smallest = max(self.floor, self.candidates[0])
        out = []
        for i, cap in enumerate(sliding_windows(self.model)):
            full = min(t, cap) if cap else t
            if i not in self.whole_layers and smallest < full:
                out.append(i)
        return out

    def next_blocks(self, batches: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """The training blocks the next decision measures: `blocks` of them, in turn."""
        start = len(self.decisions) * self.options.blocks
        return [batches[(start + j) % len(batches)] for j in range(self.options.blocks)]

    def decide(self, step: int, blocks: Sequence[torch.Tensor]) -> WindowPlan:
        """Measure the signal on `blocks`, fold it into the EMA, allocate within the budget and
        apply the windows (the installed parameters stay); the plan now in force."""
        costs = self._costs(blocks)
        smoothed = self.ema.update(costs).double()
        plan = plan_from_costs(
            smoothed, self.candidates, self.budget, type(self.model).__name__,
            signal=self.signal.name, unit=self.signal.unit, floor=self.floor,
            whole_layers=self.whole_layers,
        )  # fmt: skip
        before = current_plan(self.model) or plan.windows
        changed = sum(
            a != b
            for old, new in zip(before, plan.windows, strict=True)
            for a, b in zip(old, new, strict=True)
        )
        apply(self.model, plan, keep_params=True)
        self.decisions.append(
            {"step": step, "changed_heads": changed, "kv_bytes": plan.info["kv_bytes"]}
        )
        return plan

    def _costs(self, blocks: Sequence[torch.Tensor]) -> torch.Tensor:
        """(n_layer, n_kv_head, n_candidates): each layer's row measured with its own sinks."""
        by_sinks: dict[int, torch.Tensor] = {}
        rows = []
        for layer, sinks in enumerate(self.budget.sinks_per_layer()):
            if sinks not in by_sinks:
                context = SearchContext(sinks=sinks, seq_len=self.budget.seq_len)
                by_sinks[sinks] = self.signal.measure(self.model, blocks, self.candidates, context)
            rows.append(by_sinks[sinks][layer])
        costs = torch.stack(rows)
        if not torch.isfinite(costs).all():
            raise RuntimeError(f"the {self.signal.name} signal measured non-finite costs")
        return costs

    def record(self) -> dict[str, Any]:
        """What the plan's heal record keeps of the re-deciding."""
        return {
            "every": self.options.every,
            "blocks": self.options.blocks,
            "feature_ema": self.options.feature_ema,
            "signal": self.signal.name,
            "kv_bytes_budget": self.kv_bytes,
            "decisions": self.decisions,
        }
