"""Exact sliding-window attention in O(T (W + b)) work and O(T W) memory, W the widest window.

The prefix + block layout is in `band_layout`. Two engines run the blocks:
- while gradients are needed, W <= STORED_MAX_WINDOW and D >= STORED_MIN_HEAD_DIM,
  `band_stored`: batched products that keep the softmax probabilities, so the backward
  recomputes nothing;
- otherwise PyTorch's fused CPU flash kernel, batched over blocks (GQA native), with a
  recomputing backward: the kernel's own backward, span gradients folded back into place.
Measured at T=4096, 8 heads, 2 threads, fwd+bwd, ratio to SDPA causal in the same run (stored vs
kernel): D=64: w=128 0.115 vs 0.171, w=256 0.215 vs 0.245, w=512 0.431 vs 0.436, w=1024 0.713
vs 0.670; D=128: w=128 0.126 vs 0.213, w=256 0.198 vs 0.330; D=32 (batch 2): a wash, w=32..256
within noise of each other (0.10-0.27 both). The stored engine's products grow with D while its
passes over P do not, hence the head-dim floor. Above w=256 the probabilities (H T (W' + b)
floats per batch element) cost memory for little or no speed. `grouped` calls this per bucket.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aah.attention import workspace
from aah.attention.band_layout import (
    add_prefix_key_grads,
    band_mask,
    blocks_forward,
    fold_spans,
    geometry,
    key_spans,
    pad_keys,
    pad_queries,
    prefix_backward,
    prefix_forward,
    query_blocks,
)
from aah.attention.band_sinks import sink_heads, sinks_backward, sinks_executed, sinks_forward
from aah.attention.band_stored import banded_stored_attention
from aah.attention.dense import dense_attention
from aah.attention.sdpa_lse import attention_with_lse_backward

STORED_MAX_WINDOW = 256
STORED_MIN_HEAD_DIM = 64
# A cap on one call's kept probabilities, so a large batch cannot balloon memory (T=16384,
# 8 heads, w=256 keeps 168 MB per batch element).
STORED_MAX_BYTES = 2**30


def _empty_bthd(x: torch.Tensor, length: int) -> torch.Tensor:
    """(B, H, length, D) laid out as (B, T, H, D) in memory: the fused kernel's own output and
    gradient layout, so filling it is a contiguous copy (measured: w=128 fwd+bwd at T=4096,
    ratio 0.16 this way against 0.19 in (B, H, T, D) memory, even with (B, H, T, D) inputs).
    It is also what a model's output projection reads next without a copy."""
    b, h, _, d = x.shape
    return workspace.empty((b, h, length, d), like=x, order=(0, 2, 1, 3))


class _BandedKernel(torch.autograd.Function):
    """Forward and recomputing backward of the prefix + masked-block decomposition."""

    @staticmethod
    def forward(ctx, q, k, v, windows: tuple[int, ...], scale: float, sinks=None):  # type: ignore[override]
        seq_len = q.shape[2]
        geo = geometry(windows, seq_len, sinks)
        mask = band_mask(geo, q.device, q.dtype)
        qp, kp, vp = pad_queries(q, geo), pad_keys(k, geo), pad_keys(v, geo)
        out = _empty_bthd(q, seq_len)
        out_pre, lse_pre = prefix_forward(qp, kp, vp, geo, scale)
        out[:, :, : geo.prefix] = out_pre
        adjust = sinks_forward(qp, kp, vp, geo, scale) if sink_heads(geo) else None
        pairs = blocks_forward(qp, kp, vp, geo, mask, scale, out, adjust)
        blocks = [t for pair in pairs for t in pair]
        ctx.save_for_backward(qp, kp, vp, out_pre, lse_pre, *blocks)
        ctx.geo, ctx.scale = geo, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        qp, kp, vp, out_pre, lse_pre, *blocks = ctx.saved_tensors
        geo, scale = ctx.geo, ctx.scale
        mask = band_mask(geo, qp.device, qp.dtype)
        grad_out = pad_queries(grad_out, geo)
        p, seq_len = geo.prefix, geo.seq_len
        dq_p, dk_p, dv_p = prefix_backward(grad_out, qp, kp, vp, out_pre, lse_pre, geo, scale)
        if geo.n_blocks == 0:  # no padding either: the prefix is the whole sequence
            return dq_p, dk_p, dv_p, None, None, None
        dq = _empty_bthd(qp, seq_len)
        dq[:, :, :p] = dq_p
        # K/V gradients are built padded and returned as views: no extra copies.
        dk, dv = _empty_bthd(kp, kp.shape[2]), _empty_bthd(vp, vp.shape[2])
        for bi in range(qp.shape[0]):
            out_blk, lse_blk = blocks[2 * bi : 2 * bi + 2]
            dq_b, dk_s, dv_s = attention_with_lse_backward(
                query_blocks(grad_out[bi], geo), query_blocks(qp[bi], geo),
                key_spans(kp[bi], geo), key_spans(vp[bi], geo), out_blk, lse_blk, scale,
                mask=mask,
            )  # fmt: skip
            dq[bi, :, p:] = dq_b.transpose(0, 1).flatten(1, 2)[:, : seq_len - p]
            fold_spans(dk_s, geo, dk[bi])
            fold_spans(dv_s, geo, dv[bi])
        if sink_heads(geo):
            sinks_backward(grad_out, qp, kp, vp, blocks, geo, scale, dq, (dk, dv))
        dk, dv = add_prefix_key_grads(dk, dv, dk_p, dv_p, geo)
        return dq, dk, dv, None, None, None


def _stores_probabilities(q, k, v, windows: tuple[int, ...]) -> bool:  # type: ignore[no-untyped-def]
    """The measured rule for the stored engine (module docstring), within a memory cap."""
    if not torch.is_grad_enabled() or not (q.requires_grad or k.requires_grad or v.requires_grad):
        return False
    batch, heads, seq_len, dim = q.shape
    geo = geometry(windows, seq_len)
    kept = batch * heads * geo.n_blocks * geo.block * geo.span * q.element_size()
    return (
        dim >= STORED_MIN_HEAD_DIM and geo.window <= STORED_MAX_WINDOW and kept <= STORED_MAX_BYTES
    )


def banded_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: tuple[int, ...],
    scale: float,
    sinks: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """Windowed attention, one block layout for all heads (sized for the widest window).

    sinks: effective per-head sinks (`api.effective_sinks`) or None. With sinks the blocks run
    in the fused-kernel engine (the stored engine's kept probabilities assume one call per row).
    """
    seq_len = q.shape[2]
    if min(windows) >= seq_len:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
        )
    if _square_is_cheaper(windows, seq_len, sinks):
        return dense_attention(q, k, v, windows, scale, sinks)
    if not sinks and _stores_probabilities(q, k, v, windows):
        return banded_stored_attention(q, k, v, windows, scale)
    return _BandedKernel.apply(q, k, v, windows, scale, sinks)


def _square_is_cheaper(
    windows: tuple[int, ...], seq_len: int, sinks: tuple[int, ...] | None = None
) -> bool:
    """Short sequences: the block layout's fixed tiles would cost more than the T x T square."""
    geo = geometry(windows, seq_len, sinks)
    return geo.executed() + sinks_executed(geo) // len(windows) >= seq_len * seq_len


def banded_executed(
    windows: tuple[int, ...], seq_len: int, sinks: tuple[int, ...] | None = None
) -> int:
    """Score elements the banded backend computes for these heads (one batch element); both
    engines run the same layout, plus the sink call when some head has sinks."""
    if min(windows) >= seq_len:
        return len(windows) * seq_len * (seq_len + 1) // 2
    if _square_is_cheaper(windows, seq_len, sinks):
        return len(windows) * seq_len * seq_len
    geo = geometry(windows, seq_len, sinks)
    return len(windows) * geo.executed() + sinks_executed(geo)
