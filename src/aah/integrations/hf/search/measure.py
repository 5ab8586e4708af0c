"""One-pass and retrieval measurements behind the built-in signals (`hf.search.signals`).

`measure_signal` runs calibration batches through the model with "aah" attention at full
causal windows and a probe in every layer (`hf.probing`): the probe gets each layer's post-RoPE
q, k, v and score scale and measures, per query head and candidate window with `sinks` sinks,
either the attention mass the window would lose ("mass": `controller.mass.mass_beyond`, or
`hf.search.sink_mass.mass_beyond_given_sinks` with sinks) or the squared change of the head's
residual-stream contribution ("output": `hf.search.output_error`), on exact rows of sampled queries
(no T x T matrix), averaged over batches. On a layer with a sliding window of its own, the
output change is taken from that layer's own windowed attention (`hf.search.output_error`); the
mass is still of the full causal row. `measure_retrieval` takes the output change at the
answer rows of retrieval prompts built on the calibration blocks; `blended` weighs several
measurements alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from aah.controller.allocate import check_candidates
from aah.controller.mass import mass_beyond
from aah.integrations.hf.run.apply_plan import probing
from aah.integrations.hf.run.model_layout import layout, sliding_windows
from aah.integrations.hf.search.output_error import output_error, output_projection
from aah.integrations.hf.search.sink_mass import mass_beyond_given_sinks
from aah.validate import check_int


def _mass_rows(
    module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    candidates: list[int], sinks: int, opts: dict[str, Any],
) -> torch.Tensor:  # fmt: skip
    opts = {k: v for k, v in opts.items() if k != "own_window"}  # mass: of the full causal row
    if sinks:
        return mass_beyond_given_sinks(q, k, candidates, sinks, **opts)
    return mass_beyond(q, k, v, candidates, **opts)


def _output_rows(
    module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    candidates: list[int], sinks: int, opts: dict[str, Any],
) -> torch.Tensor:  # fmt: skip
    return output_error(q, k, v, output_projection(module), candidates, sinks, **opts)


#: What each one-pass signal measures per layer: (Hq, n_windows) from the layer's q, k, v.
PROBED = {"mass": _mass_rows, "output": _output_rows}


def measure_signal(
    model: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    candidates: Sequence[int],
    signal: str = "mass",
    *,
    sample_queries: int = 64,
    seed: int = 0,
    sinks: int = 0,
    query_rows: Sequence[Sequence[int]] | None = None,
    progress: bool = False,
) -> torch.Tensor:
    """(n_layer, Hq, n_windows) float64, the mean over `batches` of a one-pass signal:
    "mass", the attention mass beyond each candidate window and outside the first `sinks`
    keys; "output", the squared change of each head's residual-stream contribution when cut
    to each candidate with `sinks` sinks (`hf.search.output_error`). `query_rows` (output only), one
    list of positions per batch, replaces the sampled rows: e.g. the rows that predict the
    answer of a retrieval prompt. `progress`: a bar over the batches."""
    if signal not in PROBED:
        raise ValueError(f"one-pass signal must be one of {', '.join(PROBED)}, got {signal!r}")
    cands = check_candidates(candidates)
    check_int("sinks", sinks, minimum=0)
    if not batches:
        raise ValueError("no calibration batches")
    if query_rows is not None and (signal != "output" or len(query_rows) != len(batches)):
        raise ValueError(
            f"query_rows needs the output signal and one list per batch ({len(batches)}), got "
            f"{len(query_rows)} for {signal!r}"
        )
    rows = PROBED[signal]
    lay = layout(model)
    slides = sliding_windows(model)
    index = {id(m): i for i, m in enumerate(lay.modules)}
    total = torch.zeros(lay.n_layer, lay.n_head, len(cands), dtype=torch.float64)
    calls = torch.zeros(lay.n_layer)
    batch_no = [0]

    def probe(
        module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> None:
        # A fresh sample of query positions per batch.
        opts: dict[str, Any] = {
            "sample_queries": sample_queries,
            "seed": seed + batch_no[0],
            "scale": scale,
        }
        if query_rows is not None:
            opts["rows"] = query_rows[batch_no[0]]
        layer = index[id(module)]
        if slides[layer] is not None:
            opts["own_window"] = slides[layer]
        total[layer] += rows(module, q.detach(), k.detach(), v.detach(), cands, sinks, opts)
        calls[layer] += 1

    was_training = model.training
    model.eval()
    try:
        with probing(model, probe), torch.no_grad():
            device = next(model.parameters()).device
            from tqdm import tqdm

            bar = tqdm(batches, desc=f"{signal} signal", unit="batch", disable=not progress)
            for i, ids in enumerate(bar):
                batch_no[0] = i
                model(input_ids=ids.to(device), use_cache=False)
    finally:
        model.train(was_training)
    if (calls != len(batches)).any():
        raise RuntimeError(f"probe ran {calls.tolist()} times per layer for {len(batches)} batches")
    return total / len(batches)


def blended(
    signals: Sequence[torch.Tensor], weights: Sequence[float] | None = None
) -> torch.Tensor:
    """The signals (L, H, n_windows) summed, each divided by its total over the heads at the
    smallest candidate window first, so each weighs the same whatever its units and scale,
    then by its weight (None: all alike; one signal passes through unchanged)."""
    if weights is not None and len(weights) != len(signals):
        raise ValueError(f"{len(weights)} weights for {len(signals)} signals")
    if len(signals) == 1 and weights is None:
        return signals[0]
    parts = []
    for i, signal in enumerate(signals):
        total = float(signal[..., 0].sum())
        if not total > 0:
            raise ValueError(f"signal {i} is zero at the smallest window: nothing to weigh")
        parts.append(signal / total if weights is None else signal / total * float(weights[i]))
    return torch.stack(parts).sum(0)


def measure_retrieval(
    model: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    candidates: Sequence[int],
    *,
    prompts: int = 16,
    tokenizer: Any | None = None,
    **kw: Any,
) -> torch.Tensor:
    """The output signal at the answer rows of `prompts` retrieval prompts built on the
    calibration blocks (`hf.search.retrieval_calib`): how far cutting each head moves its output on
    the rows that predict an answer stated earlier in the prompt. `kw` as `measure_signal`
    (seed, sinks, progress)."""
    from aah.integrations.hf.search.retrieval_calib import retrieval_prompts

    blocks = [row.view(1, -1) for batch in batches for row in batch]
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    items = retrieval_prompts(blocks, tokenizer, prompts, seed=kw.get("seed", 0), vocab_size=vocab)
    return measure_signal(model, [p.ids for p in items], candidates, "output",
                          query_rows=[p.rows for p in items], **kw)  # fmt: skip


def measure_mass(
    model: torch.nn.Module, batches: Sequence[torch.Tensor], candidates: Sequence[int], **kw: Any
) -> torch.Tensor:
    """`measure_signal(..., "mass", **kw)`."""
    return measure_signal(model, batches, candidates, "mass", **kw)


def measure_output_error(
    model: torch.nn.Module, batches: Sequence[torch.Tensor], candidates: Sequence[int], **kw: Any
) -> torch.Tensor:
    """`measure_signal(..., "output", **kw)`."""
    return measure_signal(model, batches, candidates, "output", **kw)
