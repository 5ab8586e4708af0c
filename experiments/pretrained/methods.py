"""The methods compared on a pretrained model, each held to the same KV bytes per sequence.

A method turns the calibration signals into a window plan [layer][query head] (equal within
each KV head, the unit of KV memory) whose KV bytes at T with the shared sinks fit the budget,
counted as `PerHeadCache` holds them (`controller.allocate.Budget`, `attention.kv_bytes`):

- `full`: no plan (every head sees everything; KV fraction 1);
- `uniform`: one window for every head, the widest that fits (StreamingLLM with the sinks;
  `controller.allocate.uniform_window`);
- `output`, `mass`: greedy allocation per KV head (`controller.allocate.allocate`) on the
  measured signal of the same name (`hf.search.measure.measure_signal`), summed per KV head;
- `output+retrieval`: the same greedy allocation on the output signal of running text plus
  the output signal at the answer rows of retrieval calibration prompts
  (`hf.search.retrieval_calib`), each divided by its total at the smallest candidate so the two
  weigh the same (`hf.search.measure.blended` on the per-query-head signals, as the committed
  results were made; the search's `Blend` does the same per KV head);
- `NAME-whole0` (NAME `output` or `output+retrieval`): NAME's allocation with the first
  layer's KV heads all at full attention, paid for out of the budget first
  (`allocate(..., whole_layers=(0,))`);
- `suffix-loss`: the same greedy allocation on the measured loss rise of cutting each KV head
  alone to each candidate, over the last tokens of calibration blocks whose context stays at
  full attention (`hf.search.suffix_loss`): the loss search, at about 1/8 of its cost;
- `duo`: a DuoAttention-style split: each KV head either full or `recent` + sinks, chosen by
  the output signal restricted to those two windows (DuoAttention learns gates; this ranks the
  heads by the measured output change of streaming them); `duo-loss` the same split ranked
  by the measured loss rise of streaming each KV head (the `suffix-loss` signal at `recent`);
- `random`: the same greedy allocation on a seeded random non-increasing signal, a plan that
  fills the budget with no information in it;
- `aah-v3`: the AAH-v3 controller's first decision (full-adaptive, the paper's windows T/8,
  T/4, T/2, T) on the model's own post-RoPE Q/K/V of one calibration block
  (`posthoc.plans.aah_plan`). It takes no budget: it is one plan at its own KV fraction, and
  is compared with `uniform` at that fraction. `aah-v3-shuffled` is its drawn-once twin
  (below);
- `NAME-shuffled`: NAME's plan with each layer's KV heads permuted once (seeded), each taking
  its query heads' windows along: the same windows per layer, KV bytes and coverage, on other
  heads. It asks whether the method chose *which head* well, apart from how much each layer
  gets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from aah.controller.allocate import Budget, allocate, kv_head_costs, uniform_window
from aah.controller.shuffle import shuffled
from aah.integrations.hf.search.measure import blended
from aah.plan import Plan

SHUFFLED = "-shuffled"
#: per-head method -> the calibration signals it allocates on (`blended` when several)
SIGNALS_OF = {
    "output": ("output",), "mass": ("mass",), "duo": ("output",), "duo-loss": ("suffix-loss",),
    "output+retrieval": ("output", "retrieval"), "suffix-loss": ("suffix-loss",),
    "output-whole0": ("output",), "output+retrieval-whole0": ("output", "retrieval"),
}  # fmt: skip
#: method -> the layers its allocation keeps whole
WHOLE_LAYERS = {"output-whole0": (0,), "output+retrieval-whole0": (0,)}
BASE_METHODS = ("full", "uniform", "random")
#: the budget-free methods: one plan each, at its own KV fraction
AAH_METHODS = ("aah-v3", "aah-v3" + SHUFFLED)
METHODS = (*BASE_METHODS, *SIGNALS_OF, *(m + SHUFFLED for m in SIGNALS_OF), *AAH_METHODS)


def check_methods(methods: Sequence[str]) -> list[str]:
    """`methods` as a list with `uniform` (the baseline every comparison needs) first; a
    ValueError names an unknown or repeated one."""
    bad = [m for m in methods if m not in METHODS]
    if bad or len(set(methods)) != len(methods):
        raise ValueError(
            f"methods must be distinct names from {', '.join(METHODS)}, got {', '.join(methods)}"
        )
    return ["uniform", *(m for m in methods if m != "uniform")]


def signals_needed(methods: Sequence[str]) -> list[str]:
    """The calibration signals the methods allocate on, in a fixed order."""
    bases = {m.removesuffix(SHUFFLED) for m in methods}
    return sorted({s for base in bases & SIGNALS_OF.keys() for s in SIGNALS_OF[base]})


def uniform_plan(budget: Budget) -> Plan:
    """The widest single window for every head whose KV bytes fit."""
    window = uniform_window(budget)
    if window is None:
        raise ValueError(f"KV budget {budget.kv_bytes} B is below one window of 1 + sinks")
    return budget.everywhere(window)


def allocated_plan(
    signal: torch.Tensor, candidates: Sequence[int], budget: Budget,
    whole_layers: Sequence[int] = (),
) -> Plan:  # fmt: skip
    """Greedy per-KV-head allocation of `signal` (L, Hq, n_windows), summed per KV head,
    within the budget, `whole_layers` at full attention."""
    costs = kv_head_costs(signal, budget.kv_shape.n_kv_head)
    alloc = allocate(costs, candidates, budget, whole_layers=whole_layers)
    if alloc is None:
        raise ValueError(
            f"KV budget {budget.kv_bytes} B is below the smallest candidate ({candidates[0]}) "
            "everywhere; add a smaller candidate window"
        )
    return alloc.windows


def random_signal(n_layer: int, n_head: int, n_windows: int, seed: int) -> torch.Tensor:
    """(L, Hq, n_windows) seeded random costs, non-increasing along the windows, 0 at the last:
    what the greedy rule allocates without information."""
    gen = torch.Generator().manual_seed(seed)
    steps = torch.rand(n_layer, n_head, n_windows, generator=gen, dtype=torch.float64)
    steps[..., -1] = 0.0  # the widest candidate loses nothing
    return steps.flip(-1).cumsum(-1).flip(-1)


def shuffled_twin(plan: Plan, n_kv_head: int, seed: int) -> Plan:
    """`plan` with each layer's KV heads permuted once, each carrying its query heads' windows
    along: the same windows per layer and the same KV bytes, on other heads."""
    group = len(plan[0]) // n_kv_head
    blocks = [[tuple(row[i * group : (i + 1) * group]) for i in range(n_kv_head)] for row in plan]
    moved = shuffled(blocks, torch.Generator().manual_seed(seed), "layer")
    return [[w for block in row for w in block] for row in moved]


def aah_v3_plans(qkv: Sequence[tuple[torch.Tensor, ...]], seed: int = 0) -> dict[str, Plan]:
    """`aah-v3` and its twin from per-layer (q, k, v) of one block (full causal attention)."""
    from aah.posthoc.plans import aah_plan

    seq_len, n_kv_head = qkv[0][0].shape[2], qkv[0][1].shape[1]
    plan = aah_plan("aah-v3", qkv, [seq_len // 8, seq_len // 4, seq_len // 2, seq_len], seed)
    return {"aah-v3": plan, "aah-v3" + SHUFFLED: shuffled_twin(plan, n_kv_head, seed + 1)}


def build_plans(
    methods: Sequence[str],
    budget: Budget,
    signals: Mapping[str, torch.Tensor],
    candidates: Sequence[int],
    *,
    recent: int,
    seed: int = 0,
) -> dict[str, Plan | None]:
    """Each method's plan at `budget` (None for `full`), from the measured `signals`
    (signal name -> (L, Hq, len(candidates)))."""
    cands = list(candidates)
    plans: dict[str, Plan | None] = {}
    for method in methods:
        if method in AAH_METHODS:
            continue  # budget-free: `aah_v3_plans`
        base = method.removesuffix(SHUFFLED)
        if base == "full":
            plan = None
        elif base == "uniform":
            plan = uniform_plan(budget)
        elif base == "random":
            shape = (budget.n_layer, budget.n_head, len(cands))
            plan = allocated_plan(random_signal(*shape, seed=seed), cands, budget)
        elif base in ("duo", "duo-loss"):
            if recent not in cands or cands[-1] < budget.seq_len:
                raise ValueError(f"{base} needs {recent} and T={budget.seq_len} among {cands}")
            keep = [cands.index(recent), len(cands) - 1]
            signal = signals[SIGNALS_OF[base][0]][..., keep]
            plan = allocated_plan(signal, [recent, cands[-1]], budget)
        else:
            parts = [signals[name] for name in SIGNALS_OF[base]]
            plan = allocated_plan(blended(parts), cands, budget, WHOLE_LAYERS.get(base, ()))
        if method != base:
            plan = shuffled_twin(plan, budget.kv_shape.n_kv_head, seed + 1)  # type: ignore[arg-type]
        plans[method] = plan
    return plans
