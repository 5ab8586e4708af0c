"""The banded layout's blocks as batched products that keep their softmax probabilities.

Same prefix + block layout as the fused-kernel engine (`band_layout`), but each head's n blocks
run as one batched product: scores = mask + scale * Q K^T, softmax in place, out = P V, and P
(H, n, b, L) is saved. The backward then recomputes nothing: four products and one fused softmax
backward. PyTorch's fused CPU kernel recomputes P inside its backward in small per-head tiles,
which measured ~1.5x slower for narrow windows; for wide windows P grows with T (W' + b) and the
memory-bound passes over it lose to the kernel, so `banded` picks this engine only for narrow
windows while gradients are needed.

Query blocks and the overlapping key spans are strided views (nothing copied), and the heads of
a GQA group read their K/V head directly. The prefix runs in the fused kernel, as in `banded`.
The softmax and its backward are ATen's own ops called with `out` = their input, so neither
allocates or writes a second P-sized tensor (tests/attention/test_attention_band_engines.py
checks the results against float64 math).
"""

from __future__ import annotations

import torch

from aah.attention import workspace
from aah.attention.band_layout import (
    BandGeometry,
    add_prefix_key_grads,
    band_mask,
    fold_spans,
    geometry,
    key_spans,
    pad_keys,
    pad_queries,
    prefix_backward,
    prefix_forward,
    query_blocks,
)


def _head_mask(mask: torch.Tensor, head: int, geo: BandGeometry) -> torch.Tensor:
    """This head's (b, L) additive band mask broadcast over the n blocks."""
    per_head = mask if mask.dim() == 2 else mask[0, head]
    return per_head.expand(geo.n_blocks, geo.block, geo.span)


class _BandedStored(torch.autograd.Function):
    """Forward that keeps P, and a backward of batched products over it."""

    @staticmethod
    def forward(ctx, q, k, v, windows: tuple[int, ...], scale: float):  # type: ignore[override]
        batch, heads, seq_len, dim = q.shape
        geo = geometry(windows, seq_len)
        mask = band_mask(geo, q.device, q.dtype)
        qp, kp, vp = pad_queries(q, geo), pad_keys(k, geo), pad_keys(v, geo)
        out = workspace.empty((batch, heads, qp.shape[2], dim), like=q)
        out_pre, lse_pre = prefix_forward(qp, kp, vp, geo, scale)
        out[:, :, : geo.prefix] = out_pre
        probs = workspace.empty((batch, heads, geo.n_blocks, geo.block, geo.span), like=q)
        for bi in range(batch if geo.n_blocks else 0):
            _blocks_forward(qp[bi], kp[bi], vp[bi], geo, mask, scale, probs[bi], out[bi])
        ctx.save_for_backward(qp, kp, vp, probs, out_pre, lse_pre)
        ctx.geo, ctx.scale = geo, scale
        return out[:, :, :seq_len]

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        qp, kp, vp, probs, out_pre, lse_pre = ctx.saved_tensors
        geo, scale = ctx.geo, ctx.scale
        grad_out = pad_queries(grad_out, geo)
        p = geo.prefix
        dq_p, dk_p, dv_p = prefix_backward(grad_out, qp, kp, vp, out_pre, lse_pre, geo, scale)
        if geo.n_blocks == 0:  # no padding either: the prefix is the whole sequence
            return dq_p, dk_p, dv_p, None, None
        dq = workspace.empty_like(qp)
        dq[:, :, :p] = dq_p
        dk, dv = workspace.empty_like(kp), workspace.empty_like(vp)
        for bi in range(qp.shape[0]):
            _blocks_backward(
                grad_out[bi], qp[bi], kp[bi], vp[bi], probs[bi], geo, scale, dq[bi], dk[bi], dv[bi]
            )
        dk, dv = add_prefix_key_grads(dk, dv, dk_p, dv_p, geo)
        return dq[:, :, : geo.seq_len], dk, dv, None, None


def _blocks_forward(q, k, v, geo: BandGeometry, mask, scale, probs, out) -> None:  # type: ignore[no-untyped-def]
    """One batch element: fills probs (H, n, b, L) and the block rows of out (H, Tq, D)."""
    group = q.shape[0] // k.shape[0]
    q_blocks, k_spans, v_spans = query_blocks(q, geo), key_spans(k, geo), key_spans(v, geo)
    out_blocks = query_blocks(out, geo)
    for h in range(q.shape[0]):
        keys = k_spans[:, h // group].transpose(1, 2)
        torch.baddbmm(_head_mask(mask, h, geo), q_blocks[:, h], keys, alpha=scale, out=probs[h])
    torch._softmax(probs, -1, False, out=probs)
    for h in range(q.shape[0]):
        torch.bmm(probs[h], v_spans[:, h // group], out=out_blocks[:, h])


def _blocks_backward(dout, q, k, v, probs, geo: BandGeometry, scale, dq, dk, dv) -> None:  # type: ignore[no-untyped-def]
    """One batch element (q (Hq, Tq, D), padded k/v (Hkv, Tk, D)): writes the block rows of dq
    and all of dk, dv (the prefix's share is added by the caller)."""
    heads, kv_heads = q.shape[0], k.shape[0]
    group = heads // kv_heads
    q_blocks, dout_blocks, dq_blocks = (query_blocks(x, geo) for x in (q, dout, dq))
    k_spans, v_spans = key_spans(k, geo), key_spans(v, geo)
    # Span gradients per query head, (n, H, L, D) as `fold_spans` takes them.
    spans = (geo.n_blocks, heads, geo.span, q.shape[-1])
    dk_spans = workspace.empty(spans, like=q, order=(1, 0, 2, 3))
    dv_spans = workspace.empty(spans, like=q, order=(1, 0, 2, 3))
    grad_scores = workspace.empty_like(probs)
    for h in range(heads):
        torch.bmm(probs[h].transpose(1, 2), dout_blocks[:, h], out=dv_spans[:, h])
        torch.bmm(dout_blocks[:, h], v_spans[:, h // group].transpose(1, 2), out=grad_scores[h])
    torch._softmax_backward_data(grad_scores, probs, -1, probs.dtype, grad_input=grad_scores)
    # beta=0 ignores the (broadcast) input, so alpha applies the scale inside the products.
    unused = q.new_zeros(1, 1, 1)
    for h in range(heads):
        g = grad_scores[h]
        torch.baddbmm(unused, g, k_spans[:, h // group], beta=0, alpha=scale, out=dq_blocks[:, h])
        torch.baddbmm(
            unused, g.transpose(1, 2), q_blocks[:, h], beta=0, alpha=scale, out=dk_spans[:, h]
        )
    if group > 1:  # a K/V head's span gradient sums over its group of query heads
        dk_spans = dk_spans.unflatten(1, (kv_heads, group)).sum(2)
        dv_spans = dv_spans.unflatten(1, (kv_heads, group)).sum(2)
    fold_spans(dk_spans, geo, dk)
    fold_spans(dv_spans, geo, dv)


def banded_stored_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: tuple[int, ...], scale: float
) -> torch.Tensor:
    return _BandedStored.apply(q, k, v, windows, scale)
