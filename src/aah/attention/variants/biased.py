"""Exact windowed attention with an additive distance bias b_h(i - j) (ALiBi, relative).

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D); windows (Hq,) capped at T; bias (H, *S) for
distances S. Query i with window w sees keys i - w < j <= i, scored q.k * scale + b_h(i - j).

Same decomposition as the engine's banded layout (`aah.attention.banded`), with W the widest
window, b the block and W' = W rounded up to a multiple of b:
- prefix: queries [0, W) against keys [0, W) under an explicit (H, W, W) bias-and-window mask;
- blocks: queries [W, T) in blocks of b. Block m reads the key span [s - W', s + b) with
  s = W + m b. In that span query row r and key column c are at distance W' + r - c for every
  block, so ONE (H, b, L) tile (bias where allowed, -inf elsewhere) serves all blocks.
Both parts go through SDPA with a float mask, batched over blocks; autograd gives the q/k/v
gradients and, for a learned bias, the bias-table gradient (SDPA then takes its explicit path).
Work: W^2 + (T - W) (W' + b) score elements per head instead of T^2.
`grouped_biased_attention` buckets heads by window first, so each bucket pays for its own W.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from aah.attention.band_layout import BandGeometry, block_size_for
from aah.attention.masks import window_allows
from aah.attention.variants.base import masked_attention

BiasFn = Callable[[torch.Tensor], torch.Tensor]  # distances (*S) -> (H, *S)


def _per_head(windows: tuple[int, ...], dims: int, device: torch.device) -> torch.Tensor:
    """(H, 1, ..., 1) windows that broadcast against `dims` position dimensions."""
    return torch.tensor(windows, device=device).view(-1, *([1] * dims))


def dense_biased_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: tuple[int, ...],
    bias: BiasFn,
    scale: float,
) -> torch.Tensor:
    """The explicit path: one (H, T, T) bias-and-window mask; O(H T^2) memory and work."""
    pos = torch.arange(q.shape[2], device=q.device)
    allowed = window_allows(pos[:, None], pos[None, :], _per_head(windows, 2, q.device))
    return masked_attention(q, k, v, allowed, bias(pos[:, None] - pos[None, :]), scale)


def biased_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: tuple[int, ...],
    bias: BiasFn,
    scale: float,
) -> torch.Tensor:
    """Windowed causal attention plus bias(i - j), in O(T W) work (see the module notes)."""
    batch, n_head, seq_len, dim = q.shape
    w = min(max(windows), seq_len)
    pre = slice(0, w)
    out_pre = dense_biased_attention(q[:, :, pre], k[:, :, pre], v[:, :, pre], windows, bias, scale)
    if w == seq_len:
        return out_pre
    # The engine's band layout and block size (aah.attention.banded).
    geo = BandGeometry((w,), seq_len, block_size_for(w))
    b, w_pad, span, n, back = geo.block, geo.span_before, geo.span, geo.n_blocks, geo.back_pad
    # Keys padded so span m starts at padded index m * b; front padding sits beyond every
    # window (distance > w) and back padding in the future, so the tile's mask hides both.
    kp = F.pad(k, (0, 0, geo.front_pad, back))
    vp = F.pad(v, (0, 0, geo.front_pad, back))
    qb = F.pad(q, (0, 0, 0, back))[:, :, w:].unflatten(2, (n, b)).transpose(1, 2)
    spans_k = kp.unfold(2, span, b).permute(0, 2, 1, 4, 3)  # (B, n, Hkv, L, D) view
    spans_v = vp.unfold(2, span, b).permute(0, 2, 1, 4, 3)
    r = torch.arange(b, device=q.device)[:, None]
    c = torch.arange(span, device=q.device)[None, :]
    # Row r sits at distance w_pad + r - c from column c, the same for every block.
    tile = window_allows(w_pad + r, c, _per_head(windows, 2, q.device))
    distance = w_pad + r - c
    out_blk = masked_attention(
        qb.reshape(batch * n, n_head, b, dim),
        spans_k.reshape(batch * n, k.shape[1], span, dim),
        spans_v.reshape(batch * n, k.shape[1], span, dim),
        tile,
        bias(distance),
        scale,
    )
    out_blk = out_blk.view(batch, n, n_head, b, dim).transpose(1, 2).reshape(batch, n_head, -1, dim)
    return torch.cat([out_pre, out_blk[:, :, : seq_len - w]], dim=2)


def grouped_biased_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: tuple[int, ...],
    bias: BiasFn,
    scale: float,
) -> torch.Tensor:
    """Heads bucketed by window, each bucket in its own banded layout (sized for its own
    window, as the engine's grouped backend does), outputs put back in head order.

    Without bucketing one full-window head would size the layout for every head (measured:
    a mixed plan then costs as much as the dense mask)."""
    seq_len = q.shape[2]
    capped = tuple(min(w, seq_len) for w in windows)
    if len(set(capped)) == 1:
        return biased_window_attention(q, k, v, capped, bias, scale)
    group = q.shape[1] // k.shape[1]
    out = torch.empty_like(q)
    for w in sorted(set(capped)):
        heads = [h for h, x in enumerate(capped) if x == w]
        idx = torch.tensor(heads, device=q.device)
        kv_idx = torch.tensor([h // group for h in heads], device=q.device)
        # Each query head gets its own copy of its K/V head: simple, and only this bucket's.
        out[:, idx] = biased_window_attention(
            q[:, idx],
            k.index_select(1, kv_idx),
            v.index_select(1, kv_idx),
            (w,) * len(heads),
            lambda d, idx=idx: bias(d).index_select(0, idx),
            scale,
        )
    return out
