"""What a searched plan costs in quality: held-out perplexity across budgets.

`budget_sweep` measures attention mass once on the calibration text, allocates a plan per budget
(`plan_from_mass`), and evaluates held-out perplexity with each plan applied against the model
as given (its own attention implementation). Coverage is the causal coverage at the calibration
length; the held-out text is cut into blocks of that same length.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from aah.attention import coverage
from aah.controller.allocate import check_candidates
from aah.integrations.hf.run.apply_plan import applied
from aah.integrations.hf.run.data import TextLike
from aah.integrations.hf.run.load import resolve_tokenizer
from aah.integrations.hf.run.model_layout import kv_shape
from aah.integrations.hf.search.calibration_text import calibration_batches
from aah.integrations.hf.search.cut_loss import mean_loss
from aah.integrations.hf.search.measure import measure_mass
from aah.integrations.hf.search.plan_allocation import plan_from_mass
from aah.integrations.hf.search.plan_search import default_candidates

DEFAULT_BUDGETS = (0.2, 0.4, 0.6, 0.8)


def perplexity(model: torch.nn.Module, batches: Sequence[torch.Tensor]) -> float:
    """exp(mean next-token NLL) over every predicted token of `batches` (B, T)."""
    return math.exp(mean_loss(model, batches))


@dataclass(frozen=True)
class SweepRow:
    """One budget's plan and its held-out perplexity against the unplanned model."""

    budget: float
    coverage: float  # causal coverage at the calibration length
    acr: float
    lost_mass: float  # expected attention mass beyond the windows and sinks (calibration)
    ppl: float
    ppl_full: float
    delta_pct: float  # 100 * (ppl / ppl_full - 1)
    windows: list[list[int]]
    kv_bytes: int | None = None  # PerHeadCache bytes per sequence at the calibration length


def budget_sweep(
    model: torch.nn.Module,
    calib: TextLike,
    heldout: TextLike,
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    *,
    seq_len: int | None = None,
    candidates: Sequence[int] | None = None,
    batch_size: int = 1,
    max_batches: int | None = None,
    sample_queries: int = 64,
    seed: int = 0,
    tokenizer: Any | None = None,
    sinks: int = 0,
) -> list[SweepRow]:
    """One row per coverage budget (module docstring), every plan with `sinks` sinks per head
    and one window per KV head; the model is left as it was. Text is read with `tokenizer`,
    else the one `load_model` tied to the model (`hf.run.load.resolve_tokenizer`)."""
    tokenizer = resolve_tokenizer(model, tokenizer)
    kw = {"batch_size": batch_size, "max_batches": max_batches, "tokenizer": tokenizer}
    calib_batches = calibration_batches(model, calib, seq_len=seq_len, **kw)
    t = calib_batches[0].shape[1]
    held = calibration_batches(model, heldout, seq_len=t, **kw)
    cands = check_candidates(candidates) if candidates is not None else default_candidates(t)
    mass = measure_mass(
        model, calib_batches, cands, sample_queries=sample_queries, seed=seed, sinks=sinks
    )
    shape = kv_shape(model)
    ppl_full = perplexity(model, held)
    rows = []
    for budget in budgets:
        plan = plan_from_mass(
            mass, cands, t, budget, type(model).__name__, shape=shape, sinks=sinks
        )
        with applied(model, plan):
            ppl = perplexity(model, held)
        rows.append(
            SweepRow(
                budget=float(budget),
                coverage=plan.info["coverage"],
                acr=coverage(plan.windows, t, plan.sinks).acr,
                lost_mass=float(plan.info["lost_mass"] or 0.0),
                ppl=ppl,
                ppl_full=ppl_full,
                delta_pct=100.0 * (ppl / ppl_full - 1.0),
                windows=plan.windows,
                kv_bytes=plan.info["kv_bytes"],
            )
        )
    return rows


def sweep_table(rows: Sequence[SweepRow]) -> str:
    """A plain-text table of the sweep, one line per budget."""
    names = ("budget", "coverage", "acr", "lost", "ppl", "full", "delta%")
    widths = (6, 8, 6, 7, 10, 10, 8)
    lines = [" ".join(f"{n:>{w}}" for n, w in zip(names, widths, strict=True))]
    for r in rows:
        lines.append(
            f"{r.budget:6.2f} {r.coverage:8.4f} {r.acr:6.3f} {r.lost_mass:7.4f} "
            f"{r.ppl:10.4f} {r.ppl_full:10.4f} {r.delta_pct:+8.3f}"
        )
    return "\n".join(lines)


def sweep_json(rows: Sequence[SweepRow]) -> str:
    """The sweep as one JSON object: {"rows": [...]}."""
    return json.dumps({"rows": [asdict(r) for r in rows]})
