"""Attention mass beyond each candidate window, per head, from sampled exact rows.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D), Hq % Hkv == 0; query head h reads KV head
h // (Hq // Hkv). For each candidate w, mass_beyond[h, w] is the share of the FULL causal
row's attention that falls on keys older than the last w (keys j <= i - w), averaged over
sampled rows: what a head would lose if cut to w. The budget policies and the Hugging Face
plan search allocate windows from it.

S = query positions sampled (the same for every batch element), so each head sees B * S =
about `sample_queries` exact attention rows. Cost per layer O(Hq * sample_queries * T * D),
no T x T tensor: rows go in chunks of ascending position, each against the keys it can see.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def sample_positions(seq_len: int, batch: int, n_samples: int, seed: int) -> torch.Tensor:
    """(S,) sorted distinct query positions, S = min(T, ceil(n_samples / B)); pure in its args."""
    per = min(seq_len, max(1, math.ceil(n_samples / batch)))
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randperm(seq_len, generator=gen)[:per].sort().values


def mass_beyond(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    candidates: Sequence[int],
    *,
    sample_queries: int = 64,
    seed: int = 0,
    positions: torch.Tensor | None = None,
    scale: float | None = None,
    chunks: int = 4,
    sinks: int = 0,
) -> torch.Tensor:
    """(Hq, n_windows) float32 on CPU: see the module docstring. With `sinks` = s, the keys
    j < s count as kept (a head with sinks sees them whatever its window).

    `positions` (S,) distinct query positions replace the seeded sample; `scale` defaults to
    1 / sqrt(D). `v` is accepted for a uniform signature and not read.
    """
    batch, _, seq_len, dim = q.shape
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    with torch.no_grad():
        if positions is None:
            positions = sample_positions(seq_len, batch, sample_queries, seed)
        pos = positions.to(q.device).sort().values
        qs = q[:, :, pos].float().mul_(scale)  # (B, Hq, S, D)
        parts = torch.tensor_split(torch.arange(pos.numel()), min(chunks, pos.numel()))
        rows = [_full_rows_mass(qs[:, :, i], pos[i], k, candidates, sinks) for i in parts]
        return torch.cat(rows, dim=2).mean(dim=(0, 2)).cpu()


def _full_rows_mass(
    qs: torch.Tensor, pos: torch.Tensor, k: torch.Tensor, candidates: Sequence[int], sinks: int = 0
) -> torch.Tensor:
    """(B, Hq, S, n_windows) for scaled queries qs (B, Hq, S, D) at sorted positions pos."""
    batch, n_q, n_s, dim = qs.shape
    n_kv, group = k.shape[1], n_q // k.shape[1]
    # Keys after the last row are future for every row: leave them out (64-aligned for blocks).
    hi = min(k.shape[2], -(-(int(pos[-1]) + 1) // 64) * 64)
    kc = k[:, :, :hi].float()
    # Query heads grouped under their KV head: K is read, never copied (GQA).
    scores = torch.einsum("bhsd,bhtd->bhst", qs.reshape(batch, n_kv, group * n_s, dim), kc)
    scores = scores.view(batch, n_q, n_s, hi)
    dist = (pos.view(n_s, 1) - torch.arange(hi, device=qs.device)).float()
    dist = torch.where(dist >= 0, dist, float(k.shape[2] + 1))  # future: outside every window
    full = torch.softmax(scores + _bias(dist, k.shape[2]), dim=-1)
    lost = _mass_beyond(full, pos, candidates)
    if sinks > 0:  # the sink keys j < min(s, i - w + 1) are kept: take their mass back
        s = min(sinks, hi)
        before = torch.nn.functional.pad(full[..., :s].double().cumsum(-1), (1, 0))
        ends = torch.stack([(pos - int(w) + 1).clamp(0, s) for w in candidates], dim=-1)
        kept = torch.gather(before, 3, ends.view(1, 1, n_s, -1).expand(batch, n_q, n_s, -1))
        lost = (lost.double() - kept).clamp(0.0, 1.0).to(lost.dtype)
    return lost


def _bias(dist: torch.Tensor, window: int) -> torch.Tensor:
    """Same shape as `dist`: 0 where 0 <= dist < window, <= -1e30 elsewhere (future dist > T)."""
    return (dist - (window - 1)).clamp_min_(0.0).mul_(-1e30)


def _mass_beyond(full: torch.Tensor, pos: torch.Tensor, candidates: Sequence[int]) -> torch.Tensor:
    """(B, Hq, S, n_windows): sum_{j <= i - w} p_ij per row, from full causal rows (B, Hq, S, T').

    A prefix sum over blocks of 64 keys plus one partial block per (row, window): cheaper on
    CPU than a cumsum over every key.
    """
    batch, n_q, n_s, n_keys = full.shape
    block = 64
    n_blocks = -(-n_keys // block)
    if n_blocks * block != n_keys:
        full = torch.nn.functional.pad(full, (0, n_blocks * block - n_keys))
    blocks = full.view(batch, n_q, n_s, n_blocks, block)
    # before[..., b] = mass on the keys of blocks 0..b-1
    before = torch.nn.functional.pad(blocks.sum(-1).cumsum(-1), (1, 0))
    lane = torch.arange(block, device=full.device)
    cols = []
    for w in candidates:
        last_out = pos - int(w)  # newest key outside the window, (S,)
        j = last_out.clamp_min(0)
        b_idx = (j // block).view(1, 1, n_s, 1).expand(batch, n_q, n_s, 1)
        head = torch.gather(before, 3, b_idx).squeeze(-1)
        part = torch.gather(blocks, 3, b_idx.unsqueeze(-1).expand(batch, n_q, n_s, 1, block))
        keep = lane <= (j % block).view(1, 1, n_s, 1, 1)
        outside = head + (part * keep).sum(dim=(-1, -2))
        cols.append(torch.where(last_out >= 0, outside, torch.zeros_like(outside)).clamp(0, 1))
    return torch.stack(cols, dim=-1)
