"""The one window allocator: costs per head and candidate window -> one window per head, in budget.

The plan search on a Hugging Face model (`integrations.hf.search`), the post-hoc plans
(`posthoc.plans`), the training-time budget policies (`controller.budget`, `controller.ablation`)
and the pretrained studies (`experiments.pretrained.methods`, outside the package) all allocate
here. Costs are (L, U, n_w): what each of U units of a layer loses at each candidate window, lower
is better (attention mass beyond the window, a loss rise, an output change). A unit is a KV head,
the unit of KV memory: its keys are kept for the widest window of its G = Hq / U query heads, so
they share one window (G = 1: every query head on its own, as the package's GPT policies allocate).
`kv_head_costs` sums a per-query-head measure over each KV head.

A `Budget` caps the plan at length T with s sinks in every head by one of
- causal coverage (`attention.coverage`, sinks included): a unit at candidate c costs
  G * window_pairs(c, T, s) pairs, within `greedy.pair_cap`;
- KV bytes per sequence: a unit costs what the per-head cache holds of it after T positions
  (`attention.kv_bytes.kv_head_bytes`, its layer's own sliding window applied).

`allocate` is the greedy of `greedy.greedy`: every unit starts at the smallest candidate (or
at `floor`, below which no unit goes), then takes the upgrade that saves the most cost per
unit of budget and still fits, until none does. `uniform_window` is the widest single window
for every head that fits the same budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from aah.attention.cost import window_pairs
from aah.attention.kv_bytes import KVShape, full_kv_bytes, kv_head_bytes, plan_kv_bytes
from aah.controller.greedy import greedy, pair_cap
from aah.plan import Plan
from aah.validate import check_int, is_int


def check_candidates(candidates: Sequence[int]) -> list[int]:
    """The candidate windows as ints, or ValueError unless they are distinct, >= 1, ascending."""
    out = [int(c) for c in candidates]
    if not out or any(c < 1 for c in out) or sorted(set(out)) != out:
        raise ValueError(f"candidates must be distinct ints >= 1 in ascending order, got {out}")
    return out


def kv_head_costs(per_query_head: torch.Tensor, n_kv_head: int) -> torch.Tensor:
    """(L, Hq, n_w) -> (L, Hkv, n_w) float64: each KV head's cost, the sum over its G query
    heads (a KV head's keys are kept for all of them, so they share one window)."""
    n_layer, n_head, n_w = per_query_head.shape
    if n_head % n_kv_head:
        raise ValueError(f"{n_head} query heads do not split into {n_kv_head} KV heads")
    group = n_head // n_kv_head
    return per_query_head.double().reshape(n_layer, n_kv_head, group, n_w).sum(dim=2)


@dataclass(frozen=True)
class Budget:
    """What a plan of a model with `n_layer` x `n_head` query heads may cost at `seq_len`
    with `sinks` sinks in every head (one count, or a tuple of one count per layer: a hybrid
    model's sliding layers may keep none): exactly one of causal `coverage` in (0, 1] and
    `kv_bytes` >= 1 per sequence. `shape` is the model's KV memory (KV heads, bytes per
    position, sliding windows): needed for a KV-byte budget; without it every query head is
    its own KV head and bytes are not counted."""

    seq_len: int
    n_layer: int
    n_head: int
    coverage: float | None = None
    kv_bytes: int | None = None
    sinks: int | tuple[int, ...] = 0
    shape: KVShape | None = None

    def __post_init__(self) -> None:
        for name in ("seq_len", "n_layer", "n_head"):
            check_int(name, getattr(self, name), minimum=1)
        if isinstance(self.sinks, tuple):
            if len(self.sinks) != self.n_layer:
                raise ValueError(
                    f"sinks per layer must give {self.n_layer} counts, got {len(self.sinks)}"
                )
            for count in self.sinks:
                check_int("sinks", count, minimum=0)
        else:
            check_int("sinks", self.sinks, minimum=0)
        if (self.coverage is None) == (self.kv_bytes is None):
            raise ValueError("give exactly one of budget (coverage) and kv_budget (KV bytes)")
        cov = self.coverage
        if cov is not None and (
            isinstance(cov, bool) or not isinstance(cov, (int, float)) or not 0 < cov <= 1
            or not math.isfinite(cov)
        ):  # fmt: skip
            raise ValueError(f"budget must be in (0, 1], got {cov}")
        if self.kv_bytes is not None:
            if not is_int(self.kv_bytes) or self.kv_bytes < 1:
                raise ValueError(f"kv_budget must be an int of bytes >= 1, got {self.kv_bytes}")
            if self.shape is None:
                raise ValueError("a KV-byte budget needs the model's KVShape (shape=)")
        shape = self.kv_shape
        if shape.n_layer != self.n_layer or self.n_head % shape.n_kv_head:
            raise ValueError(
                f"the KV shape has {shape.n_layer} layers of {shape.n_kv_head} KV heads, the "
                f"model {self.n_layer} layers of {self.n_head} query heads"
            )

    @classmethod
    def at_kv_fraction(
        cls, fraction: float, seq_len: int, n_layer: int, n_head: int, shape: KVShape,
        sinks: int | tuple[int, ...] = 0,
    ) -> Budget:  # fmt: skip
        """The KV-byte budget of `fraction` (in (0, 1]) of the full cache's bytes at seq_len."""
        if isinstance(fraction, bool) or not math.isfinite(fraction) or not 0 < fraction <= 1:
            raise ValueError(f"kv_fraction must be in (0, 1], got {fraction}")
        kv = max(1, int(fraction * full_kv_bytes(shape, seq_len)))
        return cls(seq_len, n_layer, n_head, kv_bytes=kv, sinks=sinks, shape=shape)

    @property
    def kv_shape(self) -> KVShape:
        """`shape`, or every query head its own KV head with no bytes counted."""
        return self.shape or KVShape(self.n_head, 0, (None,) * self.n_layer)

    @property
    def unit(self) -> str:
        """What the budget caps: "coverage" or "kv_bytes"."""
        return "coverage" if self.coverage is not None else "kv_bytes"

    @property
    def value(self) -> float:
        """The cap in its unit (a coverage, or bytes)."""
        return float(self.coverage if self.coverage is not None else self.kv_bytes)  # type: ignore[arg-type]

    def cap(self) -> int:
        """The cap as an int total of `unit_costs`: pairs, or bytes."""
        if self.coverage is not None:
            return pair_cap(self.coverage, self.n_layer * self.n_head, self.seq_len)
        return int(self.kv_bytes)  # type: ignore[arg-type]

    def unit_costs(self, candidates: Sequence[int], n_unit: int) -> np.ndarray:
        """(L * n_unit, n_w) int64: what each of `n_unit` units per layer costs at each
        candidate (module docstring)."""
        t, per_layer = self.seq_len, self.sinks_per_layer()
        if self.coverage is not None:
            group = self.n_head // n_unit
            rows = [[group * window_pairs(int(c), t, s) for c in candidates]
                    for s in per_layer for _ in range(n_unit)]  # fmt: skip
            return np.array(rows, dtype=np.int64)
        shape = self.kv_shape
        if n_unit != shape.n_kv_head:
            raise ValueError(f"a KV-byte budget allocates {shape.n_kv_head} KV heads, not {n_unit}")
        rows = [
            [kv_head_bytes(int(c), sliding, s, t, shape.position_bytes) for c in candidates]
            for sliding, s in zip(shape.sliding, per_layer, strict=True)
            for _ in range(n_unit)
        ]
        return np.array(rows, dtype=np.int64)

    def sinks_per_layer(self) -> list[int]:
        """Each layer's sink count."""
        if isinstance(self.sinks, tuple):
            return list(self.sinks)
        return [self.sinks] * self.n_layer

    def sink_rows(self) -> Plan | None:
        """The sinks [layer][query head], None when there are none."""
        per_layer = self.sinks_per_layer()
        return [[s] * self.n_head for s in per_layer] if any(per_layer) else None

    def everywhere(self, window: int) -> Plan:
        """One window for every head."""
        return [[window] * self.n_head for _ in range(self.n_layer)]

    @property
    def full_bytes(self) -> int:
        """Bytes of the model's own full cache: every position, within each layer's own
        sliding window (0 when bytes are not counted)."""
        return full_kv_bytes(self.kv_shape, self.seq_len)

    def bytes_of(self, plan: Plan | None) -> int:
        """KV bytes of `plan` with the budget's sinks at seq_len (None: the full cache)."""
        if plan is None:
            return self.full_bytes
        rows = [[s] * self.n_head for s in self.sinks_per_layer()]
        return plan_kv_bytes(plan, rows, self.kv_shape, self.seq_len)

    def fraction_of(self, plan: Plan | None) -> float:
        """`bytes_of(plan)` as a share of the full cache."""
        return self.bytes_of(plan) / self.full_bytes


@dataclass(frozen=True)
class Allocation:
    """The chosen candidate index per unit (layer-major, of the candidates at or above the
    floor), the plan [layer][query head] and the mean over query heads of the chosen costs."""

    indices: list[int]
    windows: Plan
    lost: float


def allocate(
    costs: torch.Tensor | np.ndarray,
    candidates: Sequence[int],
    budget: Budget,
    *,
    floor: int = 0,
    whole_layers: Sequence[int] = (),
) -> Allocation | None:
    """One candidate per unit (module docstring) for costs (L, U, n_w), U units per layer
    (KV heads, or query heads when U = n_head); None when even the all-smallest plan (every
    unit at the floor, the whole layers whole) is over the budget.

    `floor` (0: none): a window every unit keeps at least; it must be one of the candidates
    (its cost measured), and the candidates below it are dropped. `whole_layers`: layers whose
    units all keep the largest candidate, which must reach T (full attention); their cost comes
    off the budget first and the greedy shares the rest among the other layers."""
    cands = check_candidates(candidates)
    values = torch.as_tensor(costs).double()
    if values.ndim != 3:
        raise ValueError(f"costs must be (layers, heads, candidates), got {tuple(values.shape)}")
    n_layer, n_unit, n_w = values.shape
    if n_w != len(cands):
        raise ValueError(f"the costs have {n_w} windows per head, {len(cands)} candidates given")
    if n_layer != budget.n_layer or n_unit < 1 or budget.n_head % n_unit:
        raise ValueError(
            f"costs are {n_layer} layers x {n_unit} heads, the budget's model {budget.n_layer} "
            f"layers of {budget.n_head} query heads"
        )
    check_int("floor", floor, minimum=0)
    first = 0
    if floor:
        if floor not in cands:
            raise ValueError(
                f"floor {floor} must be one of the candidates {cands} (its cost measured)"
            )
        first = cands.index(floor)
    kept = cands[first:]
    units = values[..., first:].reshape(n_layer * n_unit, len(kept)).numpy()
    unit_costs = budget.unit_costs(kept, n_unit)
    whole = _whole_units(whole_layers, n_layer, n_unit, kept[-1], budget.seq_len)
    chosen = np.full(n_layer * n_unit, len(kept) - 1, dtype=np.int64)
    rest = ~whole
    cap = budget.cap() - int(unit_costs[whole, -1].sum())
    if cap < 0:
        return None
    if rest.any():
        picked = greedy(units[rest], unit_costs[rest], cap)
        if picked is None:
            return None
        chosen[rest] = picked
    group = budget.n_head // n_unit
    windows = [
        [kept[chosen[layer * n_unit + h // group]] for h in range(budget.n_head)]
        for layer in range(n_layer)
    ]
    rows = np.arange(len(chosen))
    lost = float(units[rows, chosen].sum() / (n_layer * budget.n_head))
    return Allocation([int(i) for i in chosen], windows, lost)


def check_whole_layers(
    layers: Sequence[int], n_layer: int, largest: int, seq_len: int
) -> list[int]:
    """The layers as a list, or ValueError unless they are distinct ints in 0..n_layer - 1 and
    (when there are any) the largest candidate window is full attention at T."""
    picked = list(layers)
    if not all(is_int(layer) and 0 <= layer < n_layer for layer in picked) or len(
        set(picked)
    ) != len(picked):  # fmt: skip
        raise ValueError(
            f"whole_layers must be distinct layers in 0..{n_layer - 1}, got {layers!r}"
        )
    if picked and largest < seq_len:
        raise ValueError(
            f"whole layers keep the largest candidate, {largest}, which is not full attention at "
            f"T = {seq_len}; add a candidate >= {seq_len}"
        )
    return picked


def _whole_units(
    layers: Sequence[int], n_layer: int, n_unit: int, largest: int, seq_len: int
) -> np.ndarray:
    """(L * n_unit,) bool: the units of `layers` (`check_whole_layers`)."""
    picked = check_whole_layers(layers, n_layer, largest, seq_len)
    mask = np.zeros(n_layer * n_unit, dtype=bool)
    for layer in picked:
        mask[layer * n_unit : (layer + 1) * n_unit] = True
    return mask


def uniform_window(budget: Budget, whole_layers: Sequence[int] = ()) -> int | None:
    """The widest window w in [1, seq_len] such that w for every head (with the budget's
    sinks) fits the budget; None when even w = 1 does not. The cost grows with w.
    `whole_layers`: layers kept at full attention (window seq_len), paid for first; w is then
    the other layers' one window."""
    per_layer = budget.kv_shape.n_kv_head
    t, layers = budget.seq_len, np.arange(budget.n_layer)
    whole = set(check_whole_layers(whole_layers, budget.n_layer, t, t))
    kept = [int(layer in whole) for layer in layers]  # 1: the layer's cost at T

    def fits(window: int) -> bool:
        costs = budget.unit_costs([window, t], per_layer).reshape(len(layers), per_layer, 2)
        return int(costs[layers, :, kept].sum()) <= budget.cap()

    if not fits(1):
        return None
    lo, hi = 1, t
    while lo < hi:  # the widest w that fits lies in [lo, hi]
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
