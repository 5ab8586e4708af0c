"""A fast loss signal: what cutting one KV head costs the last tokens of each block.

Shapes as `hf.search.cut_loss`: L layers, Hq query heads and Hkv KV heads per layer, calibration
batches (B, T), n_w ascending candidate windows.

The exact loss signal (`hf.search.cut_loss.loss_increase`) reruns every block from the cut layer on,
all T rows, once per (KV head, candidate): about half a forward per cut, 900 cuts on a 30-layer
model with 3 KV heads and 10 candidates. This one reruns only the last `suffix` rows. Per block:

1. one pass over the first P = T - suffix tokens at full attention keeps every layer's keys
   and values (the prefix cache);
2. the last `suffix` tokens run on top of that cache at full attention: the reference loss
   over their predictions, and every layer's output for those rows (`hf.search.layer_replay`);
3. each cut reruns those `suffix` tokens on the same prefix cache, from the cut layer on, with
   that KV head's G query heads cut to the candidate (and the sinks).

The cost of a cut is the rise of the mean loss over the suffix's predictions. What it leaves
out: in a real cut the prefix rows past the window change too, from the cut layer on, and
later layers read their changed keys and values; here the prefix stays as full attention left
it (the suffix rows' own keys and values do change). So this measures the cut's effect along
each suffix row's own path: exact in the cut layer, and in every later layer for what the row
itself computes. `experiments/scripts/signal_fidelity.py` ranks it against the exact rises.

Cost per cut: about suffix / T of the layers from the cut on, plus the suffix's attention over
all T keys: on SmolLM2-135M at T = 2048, 1.7 s a cut at suffix T/16 and 5.0 s at T/4 against
14.2 s for the exact signal (one thread, `experiments/scripts/signal_fidelity.py`).
Candidates >= T cost 0 without a pass; so does a candidate no suffix row is cut by (w > T - 1). Made
non-increasing in the window and floored at 0 by `hf.search.cut_loss.monotone_costs`, as the exact
signal.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from tqdm import tqdm

from aah.controller.ablation import single_cuts
from aah.controller.allocate import check_candidates
from aah.integrations.hf.run.apply_plan import applied
from aah.integrations.hf.run.model_layout import decoder_layers, layout
from aah.integrations.hf.search.cut_loss import (
    Imposed,
    cut_plan,
    evaluating,
    monotone_costs,
)
from aah.integrations.hf.search.layer_replay import recording, replaying
from aah.validate import check_int

KV = list[tuple[torch.Tensor, torch.Tensor]]


def _cache_of(prefix: KV):  # -> DynamicCache
    """A fresh cache holding the prefix keys and values (the tensors are not modified: a
    forward appends by concatenation)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer, (k, v) in enumerate(prefix):
        cache.update(k, v, layer)
    return cache


def _prefix_kv(model: torch.nn.Module, ids: torch.Tensor) -> KV:
    """Every layer's (keys, values) of `ids` at full attention (model as it stands)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    model(input_ids=ids, past_key_values=cache, use_cache=True)
    return [(layer.keys, layer.values) for layer in cache.layers]


def _suffix_nll(model: torch.nn.Module, ids: torch.Tensor, prefix: KV) -> float:
    """Summed next-token loss of the predictions inside `ids` (B, S), run on `prefix`."""
    logits = model(input_ids=ids, past_key_values=_cache_of(prefix), use_cache=True).logits
    logits = logits[:, :-1].float()
    return float(
        torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="sum"
        )
    )


@torch.no_grad()
def suffix_loss_increase(
    model: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    candidates: Sequence[int],
    *,
    suffix: int,
    sinks: int = 0,
    progress: bool = False,
    only: Sequence[tuple[int, int, int]] | None = None,
) -> torch.Tensor:
    """(L, Hkv, n_w) float64: rise of the mean loss over the last `suffix` tokens' predictions
    of each block when that KV head alone is cut to each candidate, the prefix frozen at full
    attention (module docstring); may be < 0 by noise. `only`: just these (layer, KV head,
    candidate index) cuts (the rest stay 0). The model's plan is as it was on return."""
    check_int("sinks", sinks, minimum=0)
    cands = check_candidates(candidates)
    if not batches:
        raise ValueError("no calibration batches")
    seq_len = int(batches[0].shape[1])
    if any(int(b.shape[1]) != seq_len for b in batches):
        raise ValueError(f"calibration batches must all hold {seq_len} tokens")
    check_int("suffix", suffix, minimum=2)
    if suffix >= seq_len:
        raise ValueError(f"suffix must be shorter than the blocks ({seq_len}), got {suffix}")
    lay = layout(model)
    group = lay.n_head // lay.n_kv_head
    start = seq_len - suffix  # the first suffix row
    sink_rows = [[sinks] * lay.n_head for _ in range(lay.n_layer)] if sinks else None
    # a window >= T - 1 keeps every key of every row: nothing to cut
    todo = single_cuts(lay.n_layer, lay.n_kv_head, cands, seq_len - 1, only)
    full = Imposed([[seq_len] * lay.n_head for _ in range(lay.n_layer)], sink_rows)
    cuts = [
        Imposed(cut_plan(lay.n_layer, lay.n_head, group, seq_len, layer, kv, cands[j]), sink_rows)
        for layer, kv, j in todo
    ]
    layers = decoder_layers(model)
    device = next(model.parameters()).device
    base_nll, cut_nll, count = 0.0, [0.0] * len(todo), 0
    bar = tqdm(
        total=len(todo) * len(batches), desc=f"suffix-loss signal (last {suffix} tokens)",
        unit="pass", disable=not progress,
    )  # fmt: skip
    with evaluating(model):
        for ids in batches:
            ids = ids.to(device)
            tail = ids[:, start:]
            with applied(model, full):
                prefix = _prefix_kv(model, ids[:, :start])
                with recording(layers) as outputs:
                    base_nll += _suffix_nll(model, tail, prefix)
            count += tail[:, 1:].numel()
            for i, ((layer, _, _), cut) in enumerate(zip(todo, cuts, strict=True)):
                with applied(model, cut), replaying(layers, outputs, layer):
                    cut_nll[i] += _suffix_nll(model, tail, prefix)
                bar.update(1)
    bar.close()
    base = base_nll / count
    out = torch.zeros(lay.n_layer, lay.n_kv_head, len(cands), dtype=torch.float64)
    for (layer, kv, j), nll in zip(todo, cut_nll, strict=True):
        out[layer, kv, j] = nll / count - base
    if not math.isfinite(base) or not torch.isfinite(out).all():
        raise RuntimeError("the calibration loss is not finite")
    return out


def measure_suffix_loss_costs(
    model: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    candidates: Sequence[int],
    *,
    suffix: int,
    sinks: int = 0,
    progress: bool = False,
) -> torch.Tensor:
    """(L, Hkv, n_w) float64 costs, >= 0 and non-increasing along the candidates."""
    raw = suffix_loss_increase(
        model, batches, candidates, suffix=suffix, sinks=sinks, progress=progress
    )
    return monotone_costs(raw)
