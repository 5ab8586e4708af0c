"""Attention sinks for the banded layout's query blocks: one small call, merged by log-sum-exp.

Shapes: qp (B, Hq, Tq, D) and padded kp, vp (B, Hkv, Tk, D) as in `band_layout`; R = n * b
block rows (positions [P, P + R)); S the largest sink count; Hs the query heads with sinks.

A block row at position i >= P >= w_h of head h sees, besides its band, the sink keys j < s_h
with j <= i - w_h: those its window no longer holds, so the two key sets are disjoint. They run
as one call of the Hs heads over keys [0, S) (copied per query head: S keys, a few KB), under
an additive mask; key 0 is always allowed (i - w_h >= 0), so no row is empty. The block pairs
(out, lse) are merged with the sink pairs in place; with the merged (final) out and lse, the
fused backward of each call returns exactly its share of the gradient (`sdpa_lse`).
"""

from __future__ import annotations

from functools import lru_cache

import torch

from aah.attention.band_layout import BandGeometry, additive_mask
from aah.attention.masks import window_allows
from aah.attention.sdpa_lse import attention_with_lse, attention_with_lse_backward


def sink_heads(geo: BandGeometry) -> tuple[int, ...]:
    """Query heads whose block rows read sink keys."""
    return tuple(h for h, s in enumerate(geo.sinks) if s > 0) if geo.n_blocks else ()


def sinks_executed(geo: BandGeometry) -> int:
    """Score elements of the sink call (all its heads, one batch element)."""
    heads = sink_heads(geo)
    if not heads:
        return 0
    return len(heads) * geo.n_blocks * geo.block * max(geo.sinks)


@lru_cache(maxsize=16)
def sink_mask(geo: BandGeometry, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(1, Hs, R, S) additive: row r (position P + r) of head h sees key j iff the window rule
    allows it through its sinks but not through its window (j < s_h and j <= P + r - w_h)."""
    heads = sink_heads(geo)
    width = max(geo.sinks)
    pos = geo.prefix + torch.arange(geo.n_blocks * geo.block, device=device)[:, None]
    key = torch.arange(width, device=device)[None, :]
    windows = torch.tensor([geo.windows[h] for h in heads], device=device).view(-1, 1, 1)
    sinks = torch.tensor([geo.sinks[h] for h in heads], device=device).view(-1, 1, 1)
    allowed = window_allows(pos, key, windows, sinks) & ~window_allows(pos, key, windows)
    return additive_mask(allowed, dtype).unsqueeze(0)


def _inputs(qp, kp, vp, geo: BandGeometry):  # type: ignore[no-untyped-def]
    """q rows (B, Hs, R, D) and sink keys / values (B, Hs, S, D) of the heads with sinks."""
    heads = sink_heads(geo)
    group = qp.shape[1] // kp.shape[1]
    idx = torch.tensor(heads, device=qp.device)
    kv = torch.tensor([h // group for h in heads], device=qp.device)
    rows = slice(geo.prefix, geo.prefix + geo.n_blocks * geo.block)
    keys = slice(geo.front_pad, geo.front_pad + max(geo.sinks))
    q = qp[:, :, rows].index_select(1, idx)
    return idx, kv, q, kp[:, :, keys].index_select(1, kv), vp[:, :, keys].index_select(1, kv)


def sinks_forward(qp, kp, vp, geo: BandGeometry, scale: float):  # type: ignore[no-untyped-def]
    """The sink call's (out (B, Hs, R, D), lse (B, Hs, R)); a function `adjust(bi, out_blk,
    lse_blk)` merging it into one batch element's block pair (n, Hq, b, ...) in place."""
    idx, _, q, k, v = _inputs(qp, kp, vp, geo)
    out_s, lse_s = attention_with_lse(q, k, v, scale, mask=sink_mask(geo, qp.device, qp.dtype))
    n, b = geo.n_blocks, geo.block

    def adjust(bi: int, out_blk: torch.Tensor, lse_blk: torch.Tensor) -> None:
        o_s = out_s[bi].unflatten(1, (n, b)).transpose(0, 1)  # (n, Hs, b, D)
        l_s = lse_s[bi].unflatten(1, (n, b)).transpose(0, 1).to(lse_blk.dtype)
        o_w, l_w = out_blk.index_select(1, idx), lse_blk.index_select(1, idx)
        lse = torch.logaddexp(l_w, l_s)
        merged = o_w * torch.exp(l_w - lse).unsqueeze(-1) + o_s * torch.exp(l_s - lse).unsqueeze(
            -1
        ).to(o_s.dtype)
        out_blk.index_copy_(1, idx, merged.to(out_blk.dtype))
        lse_blk.index_copy_(1, idx, lse)

    return adjust


def sinks_backward(grad_out, qp, kp, vp, blocks, geo: BandGeometry, scale: float, dq, dk) -> None:  # type: ignore[no-untyped-def]
    """Add the sink call's share of the gradients: into dq (B, Hq, T, D) rows [P, T), and into
    the padded dk, dv (B, Hkv, Tk, D) at the sink keys. `blocks` are the merged (out, lse)
    pairs per batch element; grad_out is padded to the block rows. dk is (dk, dv)."""
    idx, kv, q, k, v = _inputs(qp, kp, vp, geo)
    n, b = geo.n_blocks, geo.block
    out = torch.stack([blocks[2 * i].index_select(1, idx) for i in range(qp.shape[0])])
    lse = torch.stack([blocks[2 * i + 1].index_select(1, idx) for i in range(qp.shape[0])])
    out = out.permute(0, 2, 1, 3, 4).reshape(qp.shape[0], len(idx), n * b, -1)
    lse = lse.permute(0, 2, 1, 3).reshape(qp.shape[0], len(idx), n * b)
    rows = slice(geo.prefix, geo.prefix + n * b)
    grad = grad_out[:, :, rows].index_select(1, idx)
    dq_s, dk_s, dv_s = attention_with_lse_backward(
        grad, q, k, v, out, lse, scale, mask=sink_mask(geo, qp.device, qp.dtype)
    )
    real = geo.seq_len - geo.prefix
    dq.narrow(2, geo.prefix, real).index_add_(1, idx, dq_s[:, :, :real].to(dq.dtype))
    width = max(geo.sinks)
    dk_all, dv_all = dk
    dk_all.narrow(2, geo.front_pad, width).index_add_(1, kv, dk_s.to(dk_all.dtype))
    dv_all.narrow(2, geo.front_pad, width).index_add_(1, kv, dv_s.to(dv_all.dtype))
