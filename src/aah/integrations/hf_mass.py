"""Attention mass beyond each candidate window *given* attention sinks, from sampled exact rows.

Shapes: q (B, Hq, T, D); k (B, Hkv, T, D), Hq % Hkv == 0, query head h reads KV head
h // (Hq // Hkv). A head with window w and s sinks keeps, for the query at position i, the keys
i - w < j <= i and the keys j < s. What it loses is the full causal row's attention on the keys
it keeps neither way: s <= j <= i - w. `mass_beyond_given_sinks` averages that share over
sampled rows, per query head and candidate; with s = 0 it is `controller.mass.mass_beyond`.

Cost per call O(Hq * sample_queries * T * D) and no T x T tensor: the sampled rows go in chunks,
each against the keys up to its last position.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from aah.controller.mass import sample_positions


def mass_beyond_given_sinks(
    q: torch.Tensor,
    k: torch.Tensor,
    candidates: Sequence[int],
    sinks: int,
    *,
    sample_queries: int = 64,
    seed: int = 0,
    positions: torch.Tensor | None = None,
    scale: float | None = None,
    chunks: int = 4,
) -> torch.Tensor:
    """(Hq, n_windows) float32 on CPU: the mean share of each sampled full causal row on keys
    s <= j <= i - w (module docstring). `positions` (S,) replace the seeded sample; `scale`
    defaults to 1 / sqrt(D)."""
    if isinstance(sinks, bool) or not isinstance(sinks, int) or sinks < 0:
        raise ValueError(f"sinks must be an int >= 0, got {sinks!r}")
    batch, _, seq_len, dim = q.shape
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    with torch.no_grad():
        if positions is None:
            positions = sample_positions(seq_len, batch, sample_queries, seed)
        pos = positions.to(q.device).sort().values
        qs = q[:, :, pos].float().mul_(scale)  # (B, Hq, S, D)
        parts = torch.tensor_split(torch.arange(pos.numel()), min(chunks, pos.numel()))
        rows = [_lost(qs[:, :, i], pos[i], k, candidates, sinks) for i in parts]
        return torch.cat(rows, dim=2).mean(dim=(0, 2)).float().cpu()


def _lost(
    qs: torch.Tensor, pos: torch.Tensor, k: torch.Tensor, candidates: Sequence[int], sinks: int
) -> torch.Tensor:
    """(B, Hq, S, n_windows) float64 for scaled queries qs (B, Hq, S, D) at sorted positions."""
    batch, n_q, n_s, dim = qs.shape
    n_kv, group = k.shape[1], n_q // k.shape[1]
    hi = int(pos[-1]) + 1  # later keys are future for every row
    # Query heads grouped under their KV head: K is read, never repeated (GQA).
    scores = torch.einsum(
        "bhsd,bhtd->bhst", qs.reshape(batch, n_kv, group * n_s, dim), k[:, :, :hi].float()
    ).view(batch, n_q, n_s, hi)
    future = torch.arange(hi, device=qs.device)[None, :] > pos[:, None]  # (S, hi)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    # before[..., m]: mass on keys 0 .. m - 1 (float64 so differences of prefixes stay exact).
    before = F.pad(probs.double().cumsum(-1), (1, 0))
    cols = []
    for w in candidates:
        out_end = (pos - int(w) + 1).clamp_min(0)  # keys j < out_end are outside the window
        sink_end = out_end.clamp_max(sinks)  # ... and j < sink_end of them are sinks
        ends = torch.stack([out_end, sink_end], dim=-1).view(1, 1, n_s, 2)
        got = torch.gather(before, 3, ends.expand(batch, n_q, n_s, 2))
        cols.append((got[..., 0] - got[..., 1]).clamp(0.0, 1.0))
    return torch.stack(cols, dim=-1)
