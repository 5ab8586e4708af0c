"""Per-head features from detached Q/K/V, without any T x T matrix.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D), Hq % Hkv == 0; query head h reads KV head
h // (Hq // Hkv). S = query positions sampled (the same for every batch element), so each
head sees B * S = about `sample_queries` exact attention rows.

Base features, one row of 9 per query head (`BASE_FEATURES` order):
  0-5  mean |x| and std of q, k, v over (batch, time, head_dim); std is the population std;
       time is read at every ceil(T / 256)-th position (exact for T <= 256).
  6    normalised entropy: per sampled row, entropy / log(n) with n its allowed key count
       (rows with n = 1 count as 0), averaged over rows.
  7    output norm: L2 norm of the attention output row, averaged over rows.
  8    usage: the share of the reachable context the head actually uses, defined as the row's
       expected look-back distance over the largest possible one,
       sum_j p_ij (i - j) / max(n - 1, 1), averaged over rows; 0 = attends only itself,
       ~0.5 = uniform, 1 = everything on the oldest key it may see (0 when n = 1).
  Features 6-8 use the window currently in force for the head.

Mass beyond window (budget policy), shape (Hq, n_windows): for each candidate w, the share of
the FULL causal row's attention that falls on keys older than the last w (keys j <= i - w),
averaged over sampled rows.

Cost per layer: O(Hq * sample_queries * T * D), no T x T tensor. Rows are processed in
chunks of ascending position, each against only the keys it can see (keys 0..the chunk's last
position), which saves about a third of the work of one (B, Hq, S, T) block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

BASE_FEATURES: tuple[str, ...] = (
    "q_abs",
    "q_std",
    "k_abs",
    "k_std",
    "v_abs",
    "v_std",
    "entropy",
    "out_norm",
    "usage",
)
N_BASE = len(BASE_FEATURES)
# Time positions read per batch element for the six Q/K/V statistics.
STAT_POSITIONS = 256


@dataclass(frozen=True)
class HeadFeatures:
    """Features of one layer: `base` (Hq, 9) and `mass_beyond` (Hq, n_windows), float32 on CPU.

    Either is None when it was not asked for.
    """

    base: torch.Tensor | None
    mass_beyond: torch.Tensor | None


def sample_positions(seq_len: int, batch: int, n_samples: int, seed: int) -> torch.Tensor:
    """(S,) sorted distinct query positions, S = min(T, ceil(n_samples / B)); pure in its args."""
    per = min(seq_len, max(1, math.ceil(n_samples / batch)))
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randperm(seq_len, generator=gen)[:per].sort().values


def qkv_stats(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, max_positions: int = STAT_POSITIONS
) -> torch.Tensor:
    """(Hq, 6): mean |x| and population std of q, k, v over (B, T, D) (k/v: the head's KV head).

    Time is read at every ceil(T / max_positions)-th position (exact for T <= max_positions):
    a full pass over q, k and v costs more than all the sampled attention rows on CPU.
    """
    group = q.shape[1] // k.shape[1]
    stride = max(1, -(-q.shape[2] // max_positions))
    cols = []
    for x, expand in ((q, 1), (k, group), (v, group)):
        xs = x[:, :, ::stride].float()
        n = xs.numel() // xs.shape[1]
        dims = (0, 2, 3)
        mean = xs.sum(dim=dims).double() / n
        mean_sq = (xs * xs).sum(dim=dims).double() / n
        std = (mean_sq - mean * mean).clamp_min(0.0).sqrt().float()
        mean_abs = xs.abs().sum(dim=dims) / n
        cols += [mean_abs.repeat_interleave(expand), std.repeat_interleave(expand)]
    return torch.stack(cols, dim=-1)


def head_features(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int],
    candidates: Sequence[int] | None = None,
    *,
    sample_queries: int = 64,
    seed: int = 0,
    positions: torch.Tensor | None = None,
    scale: float | None = None,
    base: bool = True,
    chunks: int = 4,
) -> HeadFeatures:
    """Features of one layer (see module docstring).

    Args:
        q, k, v: detached projections after RoPE, shapes as in the module docstring.
        windows: the window in force for each query head (w >= T: full causal).
        candidates: candidate windows for the `mass_beyond` columns; None skips that feature.
        sample_queries: rows per head in all, spread over the batch.
        seed: fixes the sampled positions.
        positions: optional (S,) distinct query positions instead of the seeded sample.
        scale: score scale, default 1 / sqrt(D).
        base: compute the 9 base features (False leaves `base` None).
        chunks: row chunks (by position) processed against their visible keys only.
    """
    batch, n_q, seq_len, dim = q.shape
    w_list = [min(int(x), seq_len) for x in windows]
    if len(w_list) != n_q:
        raise ValueError(f"expected one window per query head ({n_q}), got {len(w_list)}")
    if scale is None:
        scale = 1.0 / math.sqrt(dim)
    with torch.no_grad():
        if positions is None:
            positions = sample_positions(seq_len, batch, sample_queries, seed)
        pos = positions.to(q.device).sort().values
        qs = q[:, :, pos].float().mul_(scale)  # (B, Hq, S, D)
        parts = torch.tensor_split(torch.arange(pos.numel()), min(chunks, pos.numel()))
        rows = [_rows(qs[:, :, i], pos[i], k, v, w_list, candidates, base) for i in parts]
        mass = feats = None
        if candidates is not None:
            mass = torch.cat([r[1] for r in rows], dim=2).mean(dim=(0, 2)).cpu()
        if base:
            attn = torch.cat([r[0] for r in rows], dim=2).mean(dim=(0, 2))  # (Hq, 3)
            feats = torch.cat([qkv_stats(q, k, v), attn], dim=-1).cpu()
    return HeadFeatures(base=feats, mass_beyond=mass)


def _rows(
    qs: torch.Tensor,
    pos: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    w_list: list[int],
    candidates: Sequence[int] | None,
    base: bool,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Row statistics for scaled queries qs (B, Hq, S, D) at sorted positions pos (S,).

    Uses keys lo..hi-1 only: those after the last row are future for all rows, and (when
    full rows are not needed) those before the first row's widest window are seen by no head.

    Returns ((B, Hq, S, 3) entropy / out-norm / usage or None, (B, Hq, S, n_windows) or None).
    """
    batch, n_q, n_s, dim = qs.shape
    n_kv, group = k.shape[1], n_q // k.shape[1]
    # Keys after the last row are future for every row: leave them out (64-aligned for blocks).
    hi = min(k.shape[2], -(-(int(pos[-1]) + 1) // 64) * 64)
    # Without full rows (no mass feature) keys older than every head's window are left out too.
    lo = 0 if candidates is not None else max(0, int(pos[0]) - max(w_list) + 1)
    n_keys_used = hi - lo
    kc, vc = k[:, :, lo:hi].float(), v[:, :, lo:hi].float()
    # Query heads grouped under their KV head: K/V are read, never copied (GQA).
    scores = torch.einsum("bhsd,bhtd->bhst", qs.reshape(batch, n_kv, group * n_s, dim), kc)
    scores = scores.view(batch, n_q, n_s, n_keys_used)
    keys = torch.arange(lo, hi, device=qs.device)
    dist = (pos.view(n_s, 1) - keys).float()  # (S, T'): how far back key j is from row i
    dist = torch.where(dist >= 0, dist, float(k.shape[2] + 1))  # future: outside every window

    mass = None
    if candidates is not None:
        full = torch.softmax(scores + _bias(dist, k.shape[2]), dim=-1)
        mass = _mass_beyond(full, pos, candidates)
    if not base:
        return None, mass
    # Finite -1e30 biases make p exactly 0 outside the window and keep p * logit finite.
    biases = {w: _bias(dist, w) for w in set(w_list)}
    for h, w in enumerate(w_list):
        scores[:, h] += biases[w]
    p = torch.softmax(scores, dim=-1)
    w = torch.tensor(w_list, device=qs.device).view(n_q, 1)
    n_keys = torch.minimum(pos.view(1, n_s) + 1, w).float()  # (Hq, S)
    # Entropy without p log p: H = lse - sum_j p_j s_j, lse = max s - log max p.
    lse = scores.amax(dim=-1) - p.amax(dim=-1).log()
    ent = lse - torch.linalg.vecdot(p, scores)
    ent = torch.where(n_keys > 1, ent / n_keys.clamp_min(2).log(), torch.zeros_like(ent))
    # Expected look-back sum_j p_ij (i - j) = i - sum_j p_ij j: a mat-vec.
    mean_key = torch.matmul(p, keys.to(p.dtype))
    usage = (pos.view(1, n_s) - mean_key).clamp_min(0) / (n_keys - 1).clamp_min(1)
    out = torch.matmul(p.view(batch, n_kv, group * n_s, n_keys_used), vc)
    out_norm = out.view(batch, n_q, n_s, dim).norm(dim=-1)
    return torch.stack([ent, out_norm, usage], dim=-1), mass


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
