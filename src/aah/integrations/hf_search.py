"""Post-hoc window plan search for a Hugging Face model under a causal-coverage budget.

1. Run calibration batches through the model with "aah" attention at full causal windows and a
   probe in every layer (`hf.probing`): the probe gets each layer's post-RoPE q, k, v and the
   layer's score scale, and measures with `mass_beyond` the share of each
   query head's attention that falls beyond each candidate window (exact rows of sampled
   queries, no T x T matrix). Shares are averaged over batches: mass (n_layer, Hq, n_windows).
2. `allocate_budget` picks one candidate per head over ALL layers' heads, minimising the mass
   lost beyond the windows with the plan's causal coverage at the calibration length <= budget.

Layers with a sliding window of their own (Mistral, Qwen sliding layers) are measured and
costed as if full causal; at run time they see min(plan window, sliding window).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from aah.attention import coverage
from aah.controller.budget import allocate_budget
from aah.controller.mass import mass_beyond
from aah.integrations.hf import layout, probing
from aah.integrations.hf_data import TextLike, token_batches
from aah.integrations.hf_plan import SearchedPlan

DEFAULT_SEQ_LEN = 512


def default_candidates(seq_len: int) -> list[int]:
    """T/32, T/16, ..., T/2 (powers of two below T) and T itself (full causal)."""
    below = [1 << p for p in range(max(0, seq_len.bit_length() - 6), seq_len.bit_length())]
    return sorted({w for w in below if w < seq_len} | {seq_len})


def check_candidates(candidates: Sequence[int]) -> list[int]:
    out = [int(c) for c in candidates]
    if not out or any(c < 1 for c in out) or sorted(set(out)) != out:
        raise ValueError(f"candidates must be distinct ints >= 1 in ascending order, got {out}")
    return out


def measure_mass(
    model: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    candidates: Sequence[int],
    *,
    sample_queries: int = 64,
    seed: int = 0,
) -> torch.Tensor:
    """(n_layer, Hq, n_windows) float64: mean attention mass beyond each candidate window."""
    cands = check_candidates(candidates)
    if not batches:
        raise ValueError("no calibration batches")
    lay = layout(model)
    index = {id(m): i for i, m in enumerate(lay.modules)}
    total = torch.zeros(lay.n_layer, lay.n_head, len(cands), dtype=torch.float64)
    calls = torch.zeros(lay.n_layer)
    batch_no = [0]

    def probe(
        module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> None:
        mass = mass_beyond(
            q.detach(),
            k.detach(),
            v.detach(),
            cands,
            sample_queries=sample_queries,
            seed=seed + batch_no[0],  # a fresh sample of query positions per batch
            scale=scale,
        )
        layer = index[id(module)]
        total[layer] += mass.double()
        calls[layer] += 1

    was_training = model.training
    model.eval()
    try:
        with probing(model, probe), torch.no_grad():
            device = next(model.parameters()).device
            for i, ids in enumerate(batches):
                batch_no[0] = i
                model(input_ids=ids.to(device), use_cache=False)
    finally:
        model.train(was_training)
    if (calls != len(batches)).any():
        raise RuntimeError(f"probe ran {calls.tolist()} times per layer for {len(batches)} batches")
    return total / len(batches)


def plan_from_mass(
    mass: torch.Tensor,
    candidates: Sequence[int],
    seq_len: int,
    budget: float,
    model_name: str,
) -> SearchedPlan:
    """One candidate per head with causal coverage at `seq_len` <= budget (module docstring).

    Raises ValueError if the budget is not in (0, 1] or is below the all-smallest plan's cost.
    """
    if not math.isfinite(budget) or not 0 < budget <= 1:
        raise ValueError(f"budget must be in (0, 1], got {budget}")
    cands = check_candidates(candidates)
    n_layer, n_head, n_w = mass.shape
    if n_w != len(cands):
        raise ValueError(f"mass has {n_w} windows per head, {len(cands)} candidates given")
    alloc = allocate_budget(mass.reshape(-1, n_w).double().numpy(), cands, seq_len, budget)
    if alloc.exceeded:
        floor = coverage([cands[0]], seq_len).causal
        raise ValueError(
            f"budget {budget} is below the smallest candidate's coverage {floor:.4f} at "
            f"T={seq_len}; add a smaller candidate window"
        )
    flat = [cands[i] for i in alloc.indices]
    windows = [flat[layer * n_head : (layer + 1) * n_head] for layer in range(n_layer)]
    return SearchedPlan(
        windows=windows,
        budget=float(budget),
        coverage=coverage(windows, seq_len).causal,
        candidates=cands,
        model=model_name,
        seq_len=int(seq_len),
        lost_mass=alloc.lost_mass,
    )


def calibration_batches(
    model: torch.nn.Module,
    data: TextLike,
    *,
    seq_len: int | None = None,
    batch_size: int = 1,
    max_batches: int | None = None,
    tokenizer: Any | None = None,
) -> list[torch.Tensor]:
    """`data` as token batches for `model`, T capped by its maximum position count."""
    config = model.config
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    t = seq_len or DEFAULT_SEQ_LEN
    if limit is not None:
        t = min(t, int(limit))
    vocab = getattr(config, "vocab_size", None)
    return token_batches(
        data,
        t,
        batch_size=batch_size,
        tokenizer=tokenizer,
        vocab_size=vocab,
        max_batches=max_batches,
    )


def search_plan(
    model: torch.nn.Module,
    calib: TextLike,
    budget: float,
    *,
    seq_len: int | None = None,
    candidates: Sequence[int] | None = None,
    batch_size: int = 1,
    max_batches: int | None = None,
    sample_queries: int = 64,
    seed: int = 0,
    tokenizer: Any | None = None,
) -> SearchedPlan:
    """Measure mass on `calib`, then allocate windows under `budget` (module docstring).

    Args:
        model: a supported transformers causal LM; left as it was on return.
        calib: calibration text or token ids (see `hf_data`).
        budget: the plan's causal coverage cap, in (0, 1].
        seq_len: calibration length T (default 512, capped by the model and the data).
        candidates: ascending windows (default `default_candidates(T)`).
        sample_queries: exact attention rows per head and batch.
    """
    batches = calibration_batches(
        model,
        calib,
        seq_len=seq_len,
        batch_size=batch_size,
        max_batches=max_batches,
        tokenizer=tokenizer,
    )
    t = batches[0].shape[1]
    cands = check_candidates(candidates) if candidates is not None else default_candidates(t)
    mass = measure_mass(model, batches, cands, sample_queries=sample_queries, seed=seed)
    return plan_from_mass(mass, cands, t, budget, type(model).__name__)
