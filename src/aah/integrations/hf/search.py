"""Post-hoc window plan search for a Hugging Face model under a coverage or KV-byte budget.

1. Run calibration batches through the model with "aah" attention at full causal windows and a
   probe in every layer (`hf.probing`): the probe gets each layer's post-RoPE q, k, v and the
   layer's score scale, and measures the share of each query head's attention that a candidate
   window with `sinks` attention sinks would lose (keys outside the window that are not sinks:
   `controller.mass.mass_beyond` without sinks, `hf.mass.mass_beyond_given_sinks` with them;
   exact rows of sampled queries, no T x T matrix). Shares are averaged over batches: mass
   (n_layer, Hq, n_windows).
2. `hf.allocate.allocate_kv_heads` picks one candidate per KV head (the unit of KV memory; its
   query heads share it) over ALL layers, minimising the mass lost with the plan's causal
   coverage (sinks included) or its KV bytes at the calibration length within the budget.

With `signal="output"` step 1 measures instead, from the same sampled rows and the layer's
output projection, how far each window moves the head's contribution to the residual stream
(`hf.output_error`), and step 2 allocates on that. With `signal="loss"` step 1 measures
instead the rise of the calibration loss when each KV head alone is cut to each candidate
(`hf.ablation`: one forward over the calibration batches per (KV head, candidate < T)), and
step 2 allocates on those costs in place of the mass. `signal="suffix-loss"` measures the same
rise over the last tokens of each block only, the context before them frozen at full
attention (`hf.suffix_loss`: each cut reruns those tokens from its layer on; 8x cheaper at T/16).

Layers with a sliding window of their own (Mistral, Qwen sliding layers) are measured and
costed in coverage as if full causal (at run time they see min(plan window, sliding window));
their KV bytes count the capped window, as `PerHeadCache` stores it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

import torch

from aah.attention import coverage
from aah.integrations.hf.ablation import chosen_cost
from aah.integrations.hf.allocate import (
    KVShape,
    allocate_kv_costs,
    check_candidates,
    full_kv_bytes,
    kv_head_costs,
    kv_shape,
    plan_kv_bytes,
)
from aah.integrations.hf.data import TextLike, token_batches
from aah.integrations.hf.load import resolve_tokenizer
from aah.integrations.hf.measure import (  # noqa: F401  (re-exported: the measurements' old home)
    PROBED,
    blended,
    measure_mass,
    measure_output_error,
    measure_retrieval,
    measure_retrieval_blend,
    measure_signal,
)
from aah.integrations.hf.model_layout import layout
from aah.integrations.hf.searched_plan import SearchedPlan
from aah.integrations.hf.signal_registry import make_signal, signal_names
from aah.integrations.hf.signals import SearchContext, Signal

DEFAULT_SEQ_LEN = 512


def default_candidates(seq_len: int) -> list[int]:
    """T/32, T/16, ..., T/2 (powers of two below T) and T itself (full causal)."""
    below = [1 << p for p in range(max(0, seq_len.bit_length() - 6), seq_len.bit_length())]
    return sorted({w for w in below if w < seq_len} | {seq_len})


def check_signal(signal: str) -> str:
    """`signal` if a signal of that name is known (`hf.signal_registry`), else ValueError."""
    if signal not in signal_names():
        raise ValueError(f"signal must be one of {', '.join(signal_names())}, got {signal!r}")
    return signal


def check_budget(budget: float | None, kv_budget: int | None) -> None:
    """ValueError unless exactly one is given: coverage in (0, 1], or bytes >= 1."""
    if (budget is None) == (kv_budget is None):
        raise ValueError("give exactly one of budget (coverage) and kv_budget (KV bytes)")
    if budget is not None and (not math.isfinite(budget) or not 0 < budget <= 1):
        raise ValueError(f"budget must be in (0, 1], got {budget}")
    if kv_budget is not None and (
        isinstance(kv_budget, bool) or int(kv_budget) != kv_budget or kv_budget < 1
    ):
        raise ValueError(f"kv_budget must be an int of bytes >= 1, got {kv_budget}")


def plan_from_costs(
    costs: torch.Tensor,
    candidates: Sequence[int],
    seq_len: int,
    budget: float | None,
    model_name: str,
    *,
    n_head: int,
    shape: KVShape,
    sinks: int = 0,
    kv_budget: int | None = None,
    signal: str = "mass",
    unit: str = "mass",
) -> SearchedPlan:
    """One candidate per KV head (module docstring) on costs (L, Hkv, n_w) of a model with
    `n_head` query heads per layer, measured with the same `sinks`, within `budget` (causal
    coverage at `seq_len`, in (0, 1]) or `kv_budget` (bytes per sequence after `seq_len`
    positions): give exactly one. The plan records `signal`, and by the costs' `unit` (see
    `hf.signals.Signal`) the lost mass ("mass") or the summed loss rise of the chosen windows
    ("loss", nats).

    Raises ValueError if the budget is out of range or below the all-smallest plan's cost.
    """
    cands = check_candidates(candidates)
    n_layer, _, n_w = costs.shape
    if n_w != len(cands):
        raise ValueError(f"the costs have {n_w} windows per head, {len(cands)} candidates given")
    check_budget(budget, kv_budget)
    alloc = allocate_kv_costs(
        costs, cands, seq_len, shape, n_head=n_head, sinks=sinks, budget=budget,
        kv_budget=kv_budget,
    )  # fmt: skip
    sink_rows = [[sinks] * n_head for _ in range(n_layer)] if sinks else None
    if alloc is None:
        smallest = [[cands[0]] * n_head for _ in range(n_layer)]
        if budget is not None:
            floor = f"coverage {coverage(smallest, seq_len, sink_rows or 0).causal:.4f}"
        else:
            floor = f"{plan_kv_bytes(smallest, sink_rows, shape, seq_len)} KV bytes"
        fix = "a larger budget" + (" or fewer sinks" if sinks else "")
        if cands[0] > 1:
            fix = "a smaller candidate window, " + fix
        raise ValueError(
            f"budget {budget if budget is not None else kv_budget} is below the smallest "
            f"candidate's {floor} at T={seq_len}; give {fix}"
        )
    kv_bytes = (
        plan_kv_bytes(alloc.windows, sink_rows, shape, seq_len) if shape.position_bytes else None
    )
    return SearchedPlan(
        windows=alloc.windows,
        budget=float(budget if budget is not None else kv_budget),  # type: ignore[arg-type]
        coverage=coverage(alloc.windows, seq_len, sink_rows or 0).causal,
        candidates=cands,
        model=model_name,
        seq_len=int(seq_len),
        lost_mass=alloc.lost_mass if unit == "mass" else None,
        sinks=sink_rows,
        budget_unit="coverage" if budget is not None else "kv_bytes",
        kv_bytes=kv_bytes,
        signal=signal,
        loss_increase=chosen_cost(costs, alloc.windows, cands) if unit == "loss" else None,
    )


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
) -> SearchedPlan:
    """`plan_from_costs` on a per-query-head mass (L, Hq, n_w), summed per KV head. `shape` is
    the model's (`hf.allocate.kv_shape`); without it every query head is its own KV head and
    KV bytes are not counted."""
    n_layer, n_head, _ = mass.shape
    if kv_budget is not None and shape is None:
        raise ValueError("a kv_budget needs the model's shape (hf.allocate.kv_shape)")
    if shape is None:
        shape = KVShape(n_head, 0, (None,) * n_layer)
    return plan_from_costs(
        kv_head_costs(mass, shape.n_kv_head), candidates, seq_len, budget, model_name,
        n_head=n_head, shape=shape, sinks=sinks, kv_budget=kv_budget,
    )  # fmt: skip


def plan_from_loss(
    costs: torch.Tensor,
    candidates: Sequence[int],
    seq_len: int,
    budget: float | None,
    model_name: str,
    *,
    n_head: int,
    shape: KVShape,
    sinks: int = 0,
    kv_budget: int | None = None,
    signal: str = "loss",
) -> SearchedPlan:
    """`plan_from_costs` on loss costs (L, Hkv, n_w) from `hf.ablation.measure_loss_costs` or
    `hf.suffix_loss.measure_suffix_loss_costs`: the plan has that `signal`, no `lost_mass`, and
    `loss_increase`, the summed costs of the chosen windows (nats)."""
    n_layer, n_kv, _ = costs.shape
    if n_kv != shape.n_kv_head or len(shape.sliding) != n_layer:
        raise ValueError(
            f"costs are {n_layer} layers x {n_kv} KV heads, the model has "
            f"{len(shape.sliding)} x {shape.n_kv_head}"
        )
    return plan_from_costs(
        costs, candidates, seq_len, budget, model_name, n_head=n_head, shape=shape,
        sinks=sinks, kv_budget=kv_budget, signal=check_signal(signal), unit="loss",
    )  # fmt: skip


#: blocks of the shipped mix a search reads when given no text
MIX_BLOCKS = 8


def model_positions(model: torch.nn.Module, seq_len: int | None) -> int:
    """`seq_len` (default `DEFAULT_SEQ_LEN`) capped by the model's maximum position count."""
    config = model.config
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    t = seq_len or DEFAULT_SEQ_LEN
    return min(t, int(limit)) if limit is not None else t


def shipped_mix(
    model: torch.nn.Module, tokenizer: Any | None, seq_len: int | None, n_blocks: int
) -> list[list[int]]:
    """`n_blocks` blocks of the shipped calibration mix (`hf.calibration_mix`) at the T a
    search of `seq_len` runs at, read with `tokenizer` (bytes for a byte-level model)."""
    from aah.integrations.hf.calibration_mix import calibration_mix

    vocab = getattr(model.config, "vocab_size", None)
    t = model_positions(model, seq_len)
    return calibration_mix(tokenizer, seq_len=t, n_blocks=n_blocks, vocab_size=vocab)


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
    t = model_positions(model, seq_len)
    vocab = getattr(model.config, "vocab_size", None)
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
    calib: TextLike | None = None,
    budget: float | None = None,
    *,
    kv_budget: int | None = None,
    kv_fraction: float | None = None,
    sinks: int = 0,
    seq_len: int | None = None,
    candidates: Sequence[int] | None = None,
    batch_size: int = 1,
    max_batches: int | None = None,
    sample_queries: int = 64,
    seed: int = 0,
    tokenizer: Any | None = None,
    signal: str | Signal = "output",
    suffix: int | None = None,
    progress: bool | None = None,
) -> SearchedPlan:
    """Measure mass (or loss costs) on `calib`, then allocate windows per KV head (module
    docstring).

    Args:
        model: a supported transformers causal LM; left as it was on return.
        calib: calibration text or token ids (see `hf.data`); None (the default): the
            shipped calibration mix (`hf.calibration_mix`: English reference prose and Python
            source from the running Python's standard library), `max_batches` blocks of T
            tokens (8 when not given).
        budget: the plan's causal coverage cap (sinks included), in (0, 1]; or
        kv_budget: the cap on KV bytes per sequence after T positions; or
        kv_fraction: that cap as a fraction in (0, 1] of the full cache's bytes at T (one of
            the three).
        sinks: attention sinks of every head, measured and costed (default 0: none).
        seq_len: calibration length T (default 512, capped by the model and the data).
        candidates: ascending windows (default `default_candidates(T)`).
        sample_queries: exact attention rows per head and batch (mass signal).
        signal: "output" (the default: the squared change of each head's residual-stream
            contribution, `hf.output_error`, one pass; the allocation that beat one uniform
            window on every kind of text measured, docs/pretrained.md), "mass" (attention mass
            beyond each window, one pass), "output+retrieval" (the output signal blended with
            the same change at the answer rows of 16 retrieval prompts built on the
            calibration text, equally weighted, `measure_retrieval_blend`), "loss" (the loss rise
            of cutting each KV head alone to each window: one pass per (KV head, candidate <
            T), `hf.ablation`) or "suffix-loss" (the same rise over the last `suffix` tokens
            of each block, the context before them frozen at full attention: each cut reruns
            only those tokens, `hf.suffix_loss`).
        suffix: the tokens the "suffix-loss" signal scores per block (default T // 16).
        progress: a progress bar over the calibration passes (None: when stderr is a
            terminal).
    """
    tokenizer = resolve_tokenizer(model, tokenizer)  # the one `load_model` tied, if not given
    if progress is None:
        progress = sys.stderr.isatty()
    if calib is None:
        calib = shipped_mix(model, tokenizer, seq_len, max_batches or MIX_BLOCKS)
    if isinstance(signal, str):
        check_signal(signal)
    if kv_fraction is None:
        check_budget(budget, kv_budget)
    elif budget is not None or kv_budget is not None:
        raise ValueError("give exactly one of budget, kv_budget and kv_fraction")
    elif not math.isfinite(kv_fraction) or not 0 < kv_fraction <= 1:
        raise ValueError(f"kv_fraction must be in (0, 1], got {kv_fraction}")
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
    name, shape = type(model).__name__, kv_shape(model)
    if kv_fraction is not None:
        kv_budget = max(1, int(kv_fraction * full_kv_bytes(shape, layout(model).n_layer, t)))
    measured = resolve_signal(signal, sample_queries=sample_queries, suffix=suffix)
    context = SearchContext(sinks=sinks, seed=seed, progress=progress, tokenizer=tokenizer)
    costs = measured.measure(model, batches, cands, context)
    return plan_from_costs(
        costs, cands, t, budget, name, n_head=layout(model).n_head, shape=shape, sinks=sinks,
        kv_budget=kv_budget, signal=measured.name, unit=measured.unit,
    )  # fmt: skip


def resolve_signal(
    signal: str | Signal, *, sample_queries: int = 64, suffix: int | None = None
) -> Signal:
    """`signal` itself, or the registered signal of that name built with the two options
    `search_plan` still takes as keywords (`sample_queries` for the one-pass signals, `suffix`
    for "suffix-loss"; a Signal object carries its own options)."""
    if not isinstance(signal, str):
        if not isinstance(signal, Signal):
            raise ValueError(
                f"signal must be a name or a Signal (name, unit, measure), got {signal!r}"
            )
        if suffix is not None:
            raise ValueError("suffix is an option of SuffixLoss: give SuffixLoss(suffix=...)")
        return signal
    if suffix is not None and signal != "suffix-loss":
        raise ValueError(f"suffix is for the suffix-loss signal, not {signal!r}")
    options: dict[str, Any] = {}
    if signal in ("mass", "output", "output+retrieval", "retrieval"):
        options["sample_queries"] = sample_queries
    elif signal == "suffix-loss" and suffix is not None:
        options["suffix"] = suffix
    return make_signal(signal, **options)
