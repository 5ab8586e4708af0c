"""Exchanges of budget between groups of layers, each judged end to end: the search's refine step.

A signal prices each KV head's cut alone, and the choice (`hf.search.plan_choice`) only picks among
whole plans the signal and the uniform windows made. Neither asks whether the plan would do
better with more context in some layers and less in others: on Gemma 3 270M the choice keeps
one window for every layer, although only its three full layers ever see past 512 tokens.

`refine` starts from a plan and tries, round by round, moves of one kind: scale the windows of
one *group* of layers by a factor (up or down), and rescale every other layer's windows by the
one factor that spends the rest of the budget (the largest that fits). Groups are contiguous
quarters of the layers and, on a model that mixes sliding and full layers, each kind. Every
move runs whole on the held-out blocks (`FullReference.divergence`); a round keeps its best move
when it lowers the divergence by at least `min_gain` (relative), else the search stops. Sinks
stay as they are; a KV head keeps one window for its query heads (a layer's heads are scaled
alike). The start is always a candidate, so a refined plan never does worse than it there.

Cost: (2 x groups) forwards of every held-out block per round (8 for a model without sliding
layers, 12 with); the rounds stop early when nothing helps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aah.attention import coverage
from aah.controller.allocate import Budget
from aah.integrations.hf.run.model_layout import hybrid_full_layers
from aah.integrations.hf.search.plan_choice import FullReference
from aah.plan import Plan, WindowPlan
from aah.validate import check_int

#: the factors a group's windows are scaled by in a move (up, down)
DEFAULT_FACTORS = (1.5, 1 / 1.5)
#: the least relative fall in divergence that keeps a move (smaller ones are noise-sized)
DEFAULT_MIN_GAIN = 0.01


@dataclass(frozen=True)
class Move:
    """One group of layers scaled by `factor`, the other layers paying for it (or gaining)."""

    group: str
    layers: tuple[int, ...]
    factor: float

    @property
    def name(self) -> str:
        return f"{self.group} x{self.factor:.3g}"


def layer_groups(n_layer: int, sliding: Sequence[int | None] = ()) -> dict[str, tuple[int, ...]]:
    """The groups moves scale: contiguous quarters of the layers (fewer when there are fewer
    than 4 layers) and, when `sliding` mixes sliding (an int) and full (None) layers, each kind."""
    check_int("n_layer", n_layer, minimum=1)
    parts = min(4, n_layer)
    groups = {}
    for i in range(parts):
        lo, hi = i * n_layer // parts, (i + 1) * n_layer // parts
        groups[f"layers {lo}-{hi - 1}"] = tuple(range(lo, hi))
    full = hybrid_full_layers(sliding)
    if full:  # a kind that is already a quarter is not tried twice
        slid = tuple(i for i, cap in enumerate(sliding) if cap)
        for name, layers in (("sliding layers", slid), ("full layers", full)):
            if layers not in groups.values():
                groups[name] = layers
    return groups


def plan_sinks(plan: WindowPlan) -> int | tuple[int, ...]:
    """The plan's sinks as a `Budget` takes them: one count, or one per layer (the first
    head's: every candidate of the search gives a layer's heads one count)."""
    per_layer = tuple(int(row[0]) if row else 0 for row in plan.sinks)
    return per_layer[0] if len(set(per_layer)) == 1 else per_layer


def plan_cost(budget: Budget, windows: Plan) -> float:
    """What `windows` (with the budget's sinks) costs in the budget's unit."""
    if budget.unit == "kv_bytes":
        return float(budget.bytes_of(windows))
    return coverage(windows, budget.seq_len, budget.sink_rows() or 0).causal


def _scaled(windows: Plan, layers: Sequence[int], factor: float, caps: Sequence[int]) -> Plan:
    """The windows of `layers` times `factor`, each within 1..its layer's cap."""
    chosen = set(layers)
    return [
        [max(1, min(caps[i], round(w * factor))) for w in row] if i in chosen else list(row)
        for i, row in enumerate(windows)
    ]


def _caps(budget: Budget) -> list[int]:
    """Each layer's widest useful window: its own sliding window, else T (a wider window
    changes nothing the model computes)."""
    t = budget.seq_len
    return [min(s, t) if s else t for s in budget.kv_shape.sliding]


def exchanged(windows: Plan, move: Move, budget: Budget, steps: int = 40) -> Plan | None:
    """`windows` with the move's group scaled and the other layers rescaled by the largest
    factor that keeps the plan within `budget`; None when it changes nothing or cannot fit."""
    caps, limit = _caps(budget), float(budget.value)
    moved = _scaled(windows, move.layers, move.factor, caps)
    others = [i for i in range(len(windows)) if i not in set(move.layers)]
    if moved == [list(r) for r in windows]:
        return None
    lo, hi = 0.0, float(budget.seq_len)  # bisection on the others' factor: cost rises with it
    if plan_cost(budget, _scaled(moved, others, lo, caps)) > limit:
        return None  # the group alone, the others at a window of 1, does not fit
    for _ in range(steps):
        mid = (lo + hi) / 2
        if plan_cost(budget, _scaled(moved, others, mid, caps)) <= limit:
            lo = mid
        else:
            hi = mid
    plan = _scaled(moved, others, lo, caps)
    return None if plan == [list(r) for r in windows] else plan


@dataclass(frozen=True)
class Step:
    """A round's best move and the divergence it reached (or the start, with no move)."""

    move: str
    divergence: float


def refine(
    model: Any,
    plan: WindowPlan,
    budget: Budget,
    reference: FullReference,
    *,
    rounds: int = 2,
    factors: Sequence[float] = DEFAULT_FACTORS,
    min_gain: float = DEFAULT_MIN_GAIN,
    start: float | None = None,
    progress: bool = False,
) -> tuple[WindowPlan, list[Step]]:
    """(the refined plan, the steps taken) from `plan` under `budget` (whose sinks must be
    the plan's; its KV shape gives the sliding layers), judged on `reference`'s held-out
    blocks (module docstring). `start`: the plan's divergence when already measured."""
    check_int("rounds", rounds, minimum=0)
    if not factors or any(not f > 0 or f == 1 for f in factors):
        raise ValueError(f"factors must be positive and not 1, got {list(factors)}")
    if not 0 <= min_gain < 1:
        raise ValueError(f"min_gain must be in [0, 1), got {min_gain}")
    windows = [list(r) for r in plan.windows]
    current = reference.divergence(model, plan) if start is None else start
    steps = [Step("start", current)]
    groups = layer_groups(len(windows), budget.kv_shape.sliding)
    moves = [Move(g, layers, f) for g, layers in groups.items() for f in factors]
    bar: Any = contextlib.nullcontext()
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=rounds * len(moves), desc="refining plan", unit="move")
    with bar as tick:
        for _ in range(rounds):
            best: tuple[float, Move, Plan] | None = None
            for move in moves:
                tried = exchanged(windows, move, budget)
                if tried is not None:
                    score = reference.divergence(model, _with(plan, tried))
                    if best is None or score < best[0]:
                        best = (score, move, tried)
                if tick is not None:
                    tick.update(1)
            if best is None or best[0] > current * (1 - min_gain):
                break
            current, windows = best[0], best[2]
            steps.append(Step(best[1].name, current))
    if len(steps) == 1:
        return plan, steps
    return _with(plan, windows, budget), steps


def _with(plan: WindowPlan, windows: Plan, budget: Budget | None = None) -> WindowPlan:
    """`plan` with other windows (its sinks and record kept; with `budget`, the record's
    coverage and bytes are those of the new windows)."""
    info = dict(plan.info)
    if budget is not None:
        t = budget.seq_len
        info["coverage"] = coverage(windows, t, budget.sink_rows() or 0).causal
        if info.get("kv_bytes") is not None:
            info["kv_bytes"] = budget.bytes_of(windows)
    return WindowPlan(windows, plan.sinks, plan.seq_len, info)
