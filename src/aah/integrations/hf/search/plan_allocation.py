"""Plans allocated on a signal's costs: one candidate window per KV head within a budget.

The allocating half of the plan search (`hf.search.plan_search`): a signal's costs (n_layer,
n_kv_head, n_windows) become a `WindowPlan` under a coverage or KV-byte budget
(`controller.allocate`), its `info` recording how (the search's module docstring lists the fields);
`allocations` makes one plan per setting of sinks, whole layers and floor that the search's choice
judges.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from aah.attention import coverage
from aah.attention.kv_bytes import KVShape, plan_kv_bytes
from aah.controller.allocate import Budget, allocate, check_candidates, kv_head_costs
from aah.integrations.hf.run.model_layout import layout
from aah.integrations.hf.search.cut_loss import chosen_cost
from aah.integrations.hf.search.signals import Signal
from aah.plan import WindowPlan


def plan_from_costs(
    costs: torch.Tensor,
    candidates: Sequence[int],
    budget: Budget,
    model_name: str,
    *,
    signal: str = "mass",
    unit: str = "mass",
    floor: int = 0,
    whole_layers: Sequence[int] = (),
) -> WindowPlan:
    """One candidate per KV head on costs (L, Hkv, n_w) measured with the budget's sinks
    (`controller.allocate.allocate`), as a plan whose `info` records the search (module
    docstring). `unit` is the costs' (`hf.search.signals.Signal.unit`): "mass" keeps `lost_mass`,
    "loss" keeps `loss_increase`. `floor`: a candidate window no KV head goes below.
    `whole_layers`: layers whose KV heads all keep full attention (the largest candidate must
    reach T), paid for first.

    Raises ValueError if the budget is below the all-smallest (or all-floor) plan's cost.
    """
    cands = check_candidates(candidates)
    n_layer, n_kv = costs.shape[:2]
    shape = budget.kv_shape
    if (n_layer, n_kv) != (shape.n_layer, shape.n_kv_head):
        raise ValueError(
            f"costs are {n_layer} layers x {n_kv} KV heads, the model has {shape.n_layer} x "
            f"{shape.n_kv_head}"
        )
    if not isinstance(signal, str) or not signal:
        raise ValueError(f"signal must be a signal's name, got {signal!r}")
    alloc = allocate(costs, cands, budget, floor=floor, whole_layers=whole_layers)
    sink_rows = budget.sink_rows()
    t = budget.seq_len
    if alloc is None:
        smallest = [[cands[-1]] * len(row) if i in whole_layers else row
                    for i, row in enumerate(budget.everywhere(floor or cands[0]))]  # fmt: skip
        if budget.coverage is not None:
            least = f"coverage {coverage(smallest, t, sink_rows or 0).causal:.4f}"
        else:
            least = f"{plan_kv_bytes(smallest, sink_rows, shape, t)} KV bytes"
        fixes = ["a lower floor"] if floor else ["a smaller candidate window"] * (cands[0] > 1)
        fixes += ["fewer whole layers"] * bool(whole_layers) + ["a larger budget"]
        fixes += ["fewer sinks"] * any(budget.sinks_per_layer())
        fix = ", ".join(fixes[:-1]) + (" or " if len(fixes) > 1 else "") + fixes[-1]
        what = "smallest plan" if whole_layers else "floor" if floor else "smallest candidate"
        raise ValueError(
            f"budget {budget.coverage if budget.coverage is not None else budget.kv_bytes} is "
            f"below the {what}'s {least} at T={t}; give {fix}"
        )
    info: dict[str, Any] = {
        "budget": budget.value,
        "coverage": coverage(alloc.windows, t, sink_rows or 0).causal,
        "candidates": cands,
        "model": model_name,
        "lost_mass": alloc.lost if unit == "mass" else None,
        "budget_unit": budget.unit,
        "kv_bytes": plan_kv_bytes(alloc.windows, sink_rows, shape, t)
        if shape.position_bytes
        else None,
        "signal": signal,
        "loss_increase": chosen_cost(costs, alloc.windows, cands) if unit == "loss" else None,
    }
    if floor:
        info["floor"] = floor
    if whole_layers:
        info["whole_layers"] = list(whole_layers)
    return WindowPlan.of(alloc.windows, sink_rows, t, **info)


def plan_from_mass(
    mass: torch.Tensor,
    candidates: Sequence[int],
    seq_len: int,
    budget: float | None,
    model_name: str,
    *,
    shape: KVShape | None = None,
    sinks: int = 0,
    kv_budget: int | None = None,
) -> WindowPlan:
    """`plan_from_costs` on a per-query-head mass (L, Hq, n_w), summed per KV head, within
    `budget` (coverage) or `kv_budget` (bytes). `shape` is the model's (`hf.run.model_layout.
    kv_shape`); without it every query head is its own KV head and KV bytes are not counted."""
    n_layer, n_head, _ = mass.shape
    cap = Budget(seq_len, n_layer, n_head, budget, kv_budget, sinks, shape)
    return plan_from_costs(kv_head_costs(mass, cap.kv_shape.n_kv_head), candidates, cap, model_name)


def allocations(
    model: torch.nn.Module, measured: Signal, settings: list[Any], caps: list[Budget],
    floors: list[int], costs_of: dict[int, torch.Tensor], cands: list[int],
    refused: list[ValueError],
) -> list[tuple[str, WindowPlan]]:  # fmt: skip
    """One plan per setting on the costs `measured` measured (over the candidates and every
    setting's floor), named for the signal and the setting; a setting the budget cannot pay
    for goes to `refused` (its ValueError)."""
    needed = sorted({*cands, *floors} - {0})  # the windows costs_of was measured on
    n_layer = layout(model).n_layer
    plans = []
    for v, cap, least in zip(settings, caps, floors, strict=True):
        own = sorted({*cands, least} - {0})
        rows = [costs_of[s][layer] for layer, s in enumerate(v.sinks_per_layer(n_layer))]
        costs = torch.stack(rows)[..., [needed.index(c) for c in own]]
        try:
            plan = plan_from_costs(
                costs, own, cap, type(model).__name__, signal=measured.name,
                unit=measured.unit, floor=least, whole_layers=v.whole_layers,
            )  # fmt: skip
        except ValueError as err:
            refused.append(err)  # a setting this budget cannot pay for is no candidate
            continue
        plans.append((v.name(measured.name), plan))
    return plans
