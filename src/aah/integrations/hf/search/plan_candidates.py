"""The candidate plans a search chooses among, end to end (`hf.search.plan_choice`).

How many sinks a model wants, and whether a layer must stay whole, differ by model: SmolLM2-135M
loses 0.41 nats at one window without 4 sinks, Gemma 3 270M loses 1.06 with them (its sliding
layers never saw their context's first tokens); SmolLM2 needs its first layer whole to fetch
facts from the start of a long prompt. So the search does not fix them. Each setting a caller
leaves open (None) takes every value of its grid, a forced one takes just that value:

    sinks          0 and `DEFAULT_SINKS` (4); on a model that mixes sliding and full layers,
                   also 4 on the full layers alone (a sliding layer never attended to its
                   context's first tokens in training)
    whole_layers   none and the first layer
    floor          0 and 0.5 of the uniform window (no KV head starved by the signal)

Each combination is one allocation on the signal's costs (measured once per sink count; a
layer's costs are those of its own sink count), and one uniform window per sink setting joins
them: the trivial baseline is always a candidate, so
the choice can never pick a plan that does worse than it on the held-out blocks.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from aah.attention import coverage
from aah.attention.kv_bytes import plan_kv_bytes
from aah.controller.allocate import Budget, uniform_window
from aah.integrations.hf.run.model_layout import hybrid_full_layers
from aah.plan import WindowPlan

#: the sink count tried besides none when a search leaves sinks open
DEFAULT_SINKS = 4
#: the floors (shares of the uniform window) tried when a search leaves the floor open
DEFAULT_FLOORS = (0.0, 0.5)


def sink_name(sinks: int | tuple[int, ...]) -> str:
    """A sink setting as the record of the choice shows it."""
    if isinstance(sinks, tuple):
        return f"sinks {max(sinks)} on full layers"
    return f"sinks {sinks}"


@dataclass(frozen=True)
class Variant:
    """One setting of the options a plan is allocated with; `sinks` is one count for every
    layer, or one count per layer."""

    sinks: int | tuple[int, ...]
    whole_layers: tuple[int, ...]
    floor: float

    def sinks_per_layer(self, n_layer: int) -> list[int]:
        """Each layer's sink count."""
        return list(self.sinks) if isinstance(self.sinks, tuple) else [self.sinks] * n_layer

    def name(self, signal: str) -> str:
        """How the candidate is shown in the plan's record of the choice."""
        parts = [signal, sink_name(self.sinks)]
        if self.whole_layers:
            parts.append(f"whole {','.join(map(str, self.whole_layers))}")
        if self.floor:
            parts.append(f"floor {self.floor:g}")
        return ", ".join(parts)


def variants(
    sinks: int | None,
    whole_layers: Sequence[int] | None,
    floor: float | None,
    choosing: bool,
    sliding: Sequence[int | None] = (),
) -> list[Variant]:
    """The settings to allocate with: the grid over what is left open when `choosing`, else
    the one setting (an open option at its plain default: no sinks, no whole layer, no
    floor). `sliding`: each layer's own sliding window (None: full attention); on a model
    that mixes both, open sinks also try sinks on the full layers alone."""
    if not choosing:
        return [Variant(sinks or 0, tuple(whole_layers or ()), floor or 0.0)]
    sink_grid: tuple[int | tuple[int, ...], ...] = (
        (sinks,) if sinks is not None else (0, DEFAULT_SINKS)
    )
    full = hybrid_full_layers(sliding)
    if sinks is None and full:
        sink_grid = (*sink_grid, tuple(DEFAULT_SINKS * (i in full) for i in range(len(sliding))))
    whole_grid = ((), (0,)) if whole_layers is None else (tuple(whole_layers),)
    floor_grid = DEFAULT_FLOORS if floor is None else (floor,)
    return [Variant(s, w, f) for s, w, f in itertools.product(sink_grid, whole_grid, floor_grid)]


def uniform_plan(
    budget: Budget, model_name: str, whole_layers: Sequence[int] = ()
) -> WindowPlan | None:
    """One window for every head, the widest within `budget` (its sinks included), recorded
    as a search records its plans; None when not even a window of 1 fits. `whole_layers`:
    layers kept at full attention, paid for first (the window is the other layers')."""
    window = uniform_window(budget, whole_layers)
    if window is None:
        return None
    t = budget.seq_len
    windows = [[t] * budget.n_head if layer in whole_layers else row
               for layer, row in enumerate(budget.everywhere(window))]  # fmt: skip
    sink_rows, shape = budget.sink_rows(), budget.kv_shape
    extra = {"whole_layers": list(whole_layers)} if whole_layers else {}
    return WindowPlan.of(
        windows, sink_rows, t,
        budget=budget.value, budget_unit=budget.unit,
        coverage=coverage(windows, t, sink_rows or 0).causal, model=model_name,
        kv_bytes=plan_kv_bytes(windows, sink_rows, shape, t) if shape.position_bytes else None,
        signal="uniform", candidates=[window], lost_mass=None, loss_increase=None, **extra,
    )  # fmt: skip
