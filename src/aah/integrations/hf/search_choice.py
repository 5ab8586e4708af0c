"""The last stage of the plan search: candidate plans judged end to end, the best refined.

The allocations of `hf.search` are joined by one uniform window per sink setting (the trivial
baseline is always a candidate), every candidate runs whole on the held-out blocks
(`hf.plan_choice`), and the one the model does best with is returned, its record in
`info["choice"]`; with `refine`, its budget is then exchanged between groups of layers
(`hf.plan_refine`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from aah.controller.allocate import Budget
from aah.integrations.hf.plan_candidates import sink_name, uniform_plan
from aah.integrations.hf.plan_choice import FullReference
from aah.integrations.hf.plan_choice import choose as choose_plan
from aah.integrations.hf.plan_refine import plan_sinks
from aah.integrations.hf.plan_refine import refine as refine_plan
from aah.integrations.hf.retrieval_calib import probes_on
from aah.plan import WindowPlan

#: what the end-to-end choice may judge plans by, and how its record names it
OBJECTIVES = {
    "text": "mean KL(full || plan) of the next token, nats",
    "text+retrieval": "mean of: the next token's KL(full || plan) on the held-out text, and "
    "the same at the answer rows of retrieval prompts built on it, nats",
}

SinkSetting = int | tuple[int, ...]


def check_objective(objective: str, choose: bool) -> str:
    """`objective` if known and usable (it judges candidates, so it needs `choose`)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if objective != "text" and not choose:
        raise ValueError(f"objective {objective!r} judges candidate plans: it needs choose")
    return objective


def uniform_candidates(
    model: torch.nn.Module, sinks: Sequence[SinkSetting], budget_of: Callable[[Any], Budget]
) -> list[tuple[str, WindowPlan]]:
    """One uniform window per distinct sink setting, the widest its budget pays for."""
    plans = []
    for s in dict.fromkeys(sinks):
        window = uniform_plan(budget_of(s), type(model).__name__)
        if window is not None:
            plans.append((f"uniform, {sink_name(s)}", window))
    return plans


def judged(
    model: torch.nn.Module,
    plans: Sequence[tuple[str, WindowPlan]],
    held_out: Sequence[torch.Tensor],
    *,
    in_sample: bool,
    objective: str,
    refine: bool,
    budget_of: Callable[[Any], Budget],
    seed: int,
    tokenizer: Any | None,
    progress: bool,
) -> WindowPlan:
    """The best of `plans` on `held_out` by `objective` (module docstring), refined if asked;
    `in_sample`: the held-out blocks are the measured ones (too little text to split)."""
    probes: list[tuple[torch.Tensor, list[int]]] = []
    if objective == "text+retrieval":
        vocab = getattr(model.config, "vocab_size", None)
        probes = probes_on(held_out, tokenizer, seed=seed, vocab_size=vocab)
    reference = FullReference.of(model, held_out, probes)
    scored = choose_plan(model, plans, held_out, progress=progress, reference=reference)
    best = scored[0]
    best.plan.info["choice"] = {
        "objective": OBJECTIVES[objective],
        "held_out_blocks": sum(int(b.shape[0]) for b in held_out),
        "held_out": "in-sample" if in_sample else "held-out",
        "retrieval_probes": len(probes),
        "chosen": best.name,
        "scores": {s.name: s.divergence for s in scored},
    }
    if not refine:
        return best.plan
    plan, steps = refine_plan(
        model, best.plan, budget_of(plan_sinks(best.plan)), reference,
        start=best.divergence, progress=progress,
    )  # fmt: skip
    plan.info["refine"] = {"steps": [[s.move, s.divergence] for s in steps]}
    return plan
