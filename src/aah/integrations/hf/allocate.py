"""Window allocation per KV head, the unit of KV memory, under a coverage or a KV-byte budget.

Shapes: L layers, Hq query heads and Hkv KV heads per layer, G = Hq / Hkv; mass
(L, Hq, n_windows) as `hf.search.measure_mass` gives it (already *given* the sinks s).

A KV head's keys are kept for the widest window of its query heads, so a narrower window on
one of them saves no memory: here the G query heads of one KV head always share one window.
One candidate c per KV head over all layers, minimising the summed mass of its query heads,
with one of two caps (T the calibration length):

- coverage: the plan's causal coverage with sinks at T (`aah.attention.coverage`), i.e.
  G * window_pairs(c, T, s) per KV head over L * Hq * T (T + 1) / 2;
- KV bytes: what `PerHeadCache` holds per sequence after T positions with max_cache_len = T,
  (S + min(c', T)) * D * 2 * itemsize per KV head, with c' = min(c, the layer's own sliding
  window) and S = min(s, T - c') sink slots when c' < T (none for a full head).

Greedy (`controller.greedy`, as for the training-time policies): every KV head starts at the
smallest window; repeatedly take the upgrade with the most mass saved per unit of cost that
still fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from aah.attention.cost import sink_slots, window_pairs
from aah.controller.greedy import greedy, pair_cap
from aah.model.cache_layout import kv_capacities, kv_sinks
from aah.plan import Plan
from aah.validate import check_int


def check_candidates(candidates: Sequence[int]) -> list[int]:
    """The candidate windows as ints, or ValueError unless they are distinct, >= 1, ascending."""
    out = [int(c) for c in candidates]
    if not out or any(c < 1 for c in out) or sorted(set(out)) != out:
        raise ValueError(f"candidates must be distinct ints >= 1 in ascending order, got {out}")
    return out


@dataclass(frozen=True)
class KVShape:
    """What KV memory a model's plan costs: KV heads per layer, bytes per stored position of
    one KV head (D * 2 * itemsize, keys and values), and each layer's own sliding window."""

    n_kv_head: int
    position_bytes: int
    sliding: tuple[int | None, ...]


def kv_shape(model: torch.nn.Module) -> KVShape:
    """The model's `KVShape`, read as `PerHeadCache` reads it (dtype of its parameters)."""
    from aah.integrations.hf.model_layout import layout, sliding_windows

    lay = layout(model)
    config = model.config
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // lay.n_head)
    itemsize = next(model.parameters()).element_size()
    return KVShape(lay.n_kv_head, head_dim * 2 * itemsize, tuple(sliding_windows(model)))


def plan_kv_bytes(
    windows: Sequence[Sequence[int]],
    sinks: Sequence[Sequence[int]] | None,
    shape: KVShape,
    seq_len: int,
) -> int:
    """Bytes `PerHeadCache` holds per sequence after `seq_len` positions with max_cache_len =
    seq_len, for a plan [layer][query head] and sinks alike (None: none)."""
    capped = [
        [min(w, cap) if cap else w for w in row]
        for row, cap in zip(windows, shape.sliding, strict=True)
    ]
    sink_rows = [[0] * len(r) for r in capped] if sinks is None else [list(r) for r in sinks]
    caps = kv_capacities(capped, shape.n_kv_head, seq_len)
    slots = kv_sinks(capped, sink_rows, shape.n_kv_head, seq_len)
    held = sum(sum(cr) + sum(sr) for cr, sr in zip(caps, slots, strict=True))
    return held * shape.position_bytes


def full_kv_bytes(shape: KVShape, n_layer: int, seq_len: int) -> int:
    """Bytes of a cache that keeps every position of every KV head (DynamicCache)."""
    return n_layer * shape.n_kv_head * seq_len * shape.position_bytes


@dataclass(frozen=True)
class KVAllocation:
    """The chosen plan: windows [layer][query head] (equal within each KV head)."""

    windows: Plan
    lost_mass: float  # mean over query heads of the chosen mass (given the sinks)


def kv_head_costs(per_query_head: torch.Tensor, n_kv_head: int) -> torch.Tensor:
    """(L, Hq, n_w) -> (L, Hkv, n_w) float64: each KV head's cost, the sum over its G query
    heads (a KV head's keys are kept for all of them, so they share one window)."""
    n_layer, n_head, n_w = per_query_head.shape
    if n_head % n_kv_head:
        raise ValueError(f"{n_head} query heads do not split into {n_kv_head} KV heads")
    group = n_head // n_kv_head
    return per_query_head.double().reshape(n_layer, n_kv_head, group, n_w).sum(dim=2)


def allocate_kv_heads(
    mass: torch.Tensor,
    candidates: Sequence[int],
    seq_len: int,
    shape: KVShape,
    *,
    sinks: int = 0,
    budget: float | None = None,
    kv_budget: int | None = None,
) -> KVAllocation | None:
    """`allocate_kv_costs` on a per-query-head signal (L, Hq, n_windows), summed per KV head."""
    return allocate_kv_costs(
        kv_head_costs(mass, shape.n_kv_head), candidates, seq_len, shape, n_head=mass.shape[1],
        sinks=sinks, budget=budget, kv_budget=kv_budget,
    )  # fmt: skip


def allocate_kv_costs(
    costs: torch.Tensor,
    candidates: Sequence[int],
    seq_len: int,
    shape: KVShape,
    *,
    n_head: int,
    sinks: int = 0,
    budget: float | None = None,
    kv_budget: int | None = None,
) -> KVAllocation | None:
    """Greedy choice of one candidate per KV head (module docstring) for costs (L, Hkv,
    n_windows) of a model with `n_head` query heads per layer, under exactly one of `budget`
    (causal coverage in (0, 1]) and `kv_budget` (bytes); None when even the smallest window
    everywhere is over the cap."""
    n_layer, n_kv, n_w = costs.shape
    if n_kv != shape.n_kv_head or n_head % n_kv:
        raise ValueError(
            f"costs have {n_kv} KV heads per layer, the model {shape.n_kv_head} (of {n_head} "
            "query heads)"
        )
    if len(shape.sliding) != n_layer:
        raise ValueError(f"shape has {len(shape.sliding)} layers, the costs have {n_layer}")
    check_int("sinks", sinks, minimum=0)
    group = n_head // n_kv
    units = costs.double().reshape(n_layer * n_kv, n_w).numpy()
    if (budget is None) == (kv_budget is None):
        raise ValueError("give exactly one of budget (coverage) and kv_budget (bytes)")
    if budget is not None:
        cap = pair_cap(budget, n_layer * n_head, seq_len)
        per = [group * window_pairs(int(c), seq_len, sinks) for c in candidates]
        cost = np.tile(np.array(per, dtype=np.int64), (n_layer * n_kv, 1))
    else:
        cap = int(kv_budget)  # type: ignore[arg-type]
        cost = np.array(
            [
                [_unit_bytes(int(c), sliding, sinks, seq_len, shape.position_bytes)
                 for c in candidates]
                for sliding in shape.sliding
                for _ in range(n_kv)
            ],
            dtype=np.int64,
        )  # fmt: skip
    chosen = greedy(units, cost, cap)
    if chosen is None:
        return None
    windows = [
        [int(candidates[chosen[layer * n_kv + h // group]]) for h in range(n_head)]
        for layer in range(n_layer)
    ]
    rows = np.arange(len(chosen))
    return KVAllocation(
        windows=windows,
        lost_mass=float(units[rows, chosen].sum() / (n_layer * n_head)),
    )


def _unit_bytes(window: int, sliding: int | None, sinks: int, seq_len: int, unit: int) -> int:
    w = min(window, sliding) if sliding else window
    slots = sink_slots(w, sinks, seq_len)
    return (slots + min(w, seq_len)) * unit
