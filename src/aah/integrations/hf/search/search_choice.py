"""The last stage of the plan search: candidate plans judged end to end, the best refined.

The allocations of `hf.search.plan_search` are joined by one uniform window per sink setting (the
trivial baseline is always a candidate; on a hybrid model also its full layers whole beside one
window for the sliding layers), every candidate runs whole on the held-out blocks and, by default,
on retrieval prompts built on them (`hf.search.plan_choice`), and the one the model does best with
is returned, its record in `info["choice"]`; with `refine`, its budget is then exchanged between
groups of layers (`hf.search.plan_refine`).

A plan other than one window is chosen only when it beats the best one-window candidate by
`CHOICE_MARGIN` (relative): the score is an estimate on 4 blocks and 8 prompts, and a smaller
lead is noise-sized. On Gemma 3 270M at T = 4096 (KV 0.3) the lowest score was an output-signal
plan 0.3% under one window's; scored on 30 documents it was 0.07 nats per token worse than that
window on running text.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import torch

from aah.controller.allocate import Budget
from aah.integrations.hf.run.model_layout import hybrid_full_layers, sliding_windows
from aah.integrations.hf.search.plan_candidates import sink_name, uniform_plan
from aah.integrations.hf.search.plan_choice import FullReference, Scored
from aah.integrations.hf.search.plan_choice import choose as choose_plan
from aah.integrations.hf.search.plan_refine import plan_sinks
from aah.integrations.hf.search.plan_refine import refine as refine_plan
from aah.integrations.hf.search.retrieval_calib import probes_on
from aah.plan import WindowPlan

#: what the end-to-end choice may judge plans by, and how its record names it
OBJECTIVES = {
    "text": "mean KL(full || plan) of the next token, nats",
    "text+retrieval": "mean of: the next token's KL(full || plan) on the held-out text, and "
    "the same at the answer rows of retrieval prompts built on it, nats",
}

SinkSetting = int | tuple[int, ...]

#: the objective a search judges by when given none (text alone where T holds no probe)
DEFAULT_OBJECTIVE = "text+retrieval"

#: the relative lead over the best one-window candidate a plan needs to be chosen over it
#: (module docstring; the same noise floor as the refine step's `DEFAULT_MIN_GAIN`)
CHOICE_MARGIN = 0.01


def check_objective(objective: str | None, choose: bool) -> str | None:
    """`objective` if known and usable (it judges candidates, so it needs `choose`); None
    (the default) stays None: `DEFAULT_OBJECTIVE` where the held-out blocks hold a probe."""
    if objective is None:
        return None
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if not choose:
        raise ValueError(f"objective {objective!r} judges candidate plans: it needs choose")
    return objective


def uniform_candidates(
    model: torch.nn.Module, sinks: Sequence[SinkSetting], budget_of: Callable[[Any], Budget]
) -> list[tuple[str, WindowPlan]]:
    """One uniform window per distinct sink setting, the widest its budget pays for; on a
    model that mixes sliding and full layers, also its full layers whole and one window for
    the sliding layers, where the budget pays for that (the only layers that see past the
    sliding window are then never cut)."""
    full = hybrid_full_layers(sliding_windows(model))
    plans = []
    for s in dict.fromkeys(sinks):
        for whole in ((), full) if full else ((),):
            window = uniform_plan(budget_of(s), type(model).__name__, whole)
            if window is not None:
                name = f"uniform, {sink_name(s)}" + ", full layers whole" * bool(whole)
                plans.append((name, window))
    return plans


def preferred(scored: Sequence[Scored], windows: Collection[str], margin: float) -> Scored:
    """The lowest of `scored` (sorted, lowest first), unless it is not one of the one-window
    candidates named in `windows` and scores no lower than (1 - `margin`) times the best of
    them: then that window (a tie goes to the window)."""
    best = scored[0]
    window = next((s for s in scored if s.name in windows), None)
    if window is None or best.name in windows:
        return best
    return best if best.divergence < window.divergence * (1 - margin) else window


def judged(
    model: torch.nn.Module,
    plans: Sequence[tuple[str, WindowPlan]],
    windows: Sequence[tuple[str, WindowPlan]],
    held_out: Sequence[torch.Tensor],
    *,
    in_sample: bool,
    objective: str | None,
    refine: bool,
    budget_of: Callable[[Any], Budget],
    seed: int,
    tokenizer: Any | None,
    progress: bool,
) -> WindowPlan:
    """The best of `plans` and the one-window `windows` on `held_out` by `objective`, a window
    where no plan beats it by `CHOICE_MARGIN` (module docstring), refined if asked;
    `in_sample`: the held-out blocks are the measured ones (too little text to split). None:
    `DEFAULT_OBJECTIVE`, or text alone where a block is too short to hide a fact, ask about it
    and answer (tens of tokens); the record says which."""
    probes: list[tuple[torch.Tensor, list[int]]] = []
    if (objective or DEFAULT_OBJECTIVE) == "text+retrieval":
        vocab = getattr(model.config, "vocab_size", None)
        try:
            probes = probes_on(held_out, tokenizer, seed=seed, vocab_size=vocab)
        except ValueError:
            if objective is not None:  # asked for by name: say why it cannot be had
                raise
    objective = "text+retrieval" if probes else "text"
    reference = FullReference.of(model, held_out, probes)
    candidates = [*plans, *windows]
    scored = choose_plan(model, candidates, held_out, progress=progress, reference=reference)
    best = preferred(scored, {name for name, _ in windows}, CHOICE_MARGIN)
    best.plan.info["choice"] = {
        "objective": OBJECTIVES[objective],
        "held_out_blocks": sum(int(b.shape[0]) for b in held_out),
        "held_out": "in-sample" if in_sample else "held-out",
        "retrieval_probes": len(probes),
        "margin": CHOICE_MARGIN,
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
