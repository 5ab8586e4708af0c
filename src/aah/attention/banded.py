"""Exact sliding-window attention in O(T (W + b)) work and O(T W) memory, W the widest window.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D). Query i of head h sees keys i - w_h < j <= i.

Decomposition, with block size b and W' = W rounded up to a multiple of b:
- prefix: queries [0, W) see every earlier key within their window: one causal call (a
  per-head mask only when some head's window is narrower than W).
- blocks: queries [W, T) in blocks of b. The block starting at s needs keys s-W+1 .. s+b-1; it
  reads the aligned span [s-W', s+b) (L = W' + b keys) under one band mask, (b, L) or per head.
  Spans are strided views of K/V (no copies) and GQA is native to the kernel, so K/V are never
  repeated.
Both run in PyTorch's fused CPU flash kernel, batched over blocks. The backward calls the
kernel's own backward and folds the span gradients back into place with one strided reduction.
Keys before position 0 (front padding, only when b does not divide W) are always outside the
band, so the mask alone keeps them out. `grouped` calls this once per window bucket.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from aah.attention.dense import dense_attention
from aah.attention.masks import window_mask
from aah.attention.sdpa_lse import attention_with_lse, attention_with_lse_backward


def block_size_for(window: int) -> int:
    """Query block size: small blocks waste less of the band, large ones run the kernel faster.

    Measured at T=4096, 8 heads, D=64, 2 threads (fwd+bwd, median ratio to SDPA causal):
    w=128: b=64 0.15, b=32 0.20, b=128 0.18; w=512: b=256 0.42, b=128 0.47-0.49, b=64 0.57.
    """
    if window <= 64:
        return 32
    return 64 if window <= 256 else 256


@dataclass(frozen=True)
class BandGeometry:
    """Where the prefix and the blocks live for per-head windows, T and a block size.

    The layout is sized for the widest window W; heads with narrower windows get their own rows
    in the (per-head) masks, so one kernel call serves them all.
    """

    windows: tuple[int, ...]
    seq_len: int
    block: int

    @property
    def window(self) -> int:
        return min(max(self.windows), self.seq_len)

    @property
    def uniform(self) -> bool:
        return all(min(w, self.seq_len) == self.window for w in self.windows)

    @property
    def prefix(self) -> int:
        return min(self.window, self.seq_len)

    @property
    def span_before(self) -> int:
        """w' = w rounded up to a multiple of the block."""
        return -(-self.window // self.block) * self.block

    @property
    def span(self) -> int:
        return self.span_before + self.block

    @property
    def n_blocks(self) -> int:
        tail = self.seq_len - self.prefix
        return -(-tail // self.block) if tail > 0 else 0

    @property
    def front_pad(self) -> int:
        """Zero keys before position 0 so spans align; none when there are no blocks."""
        return self.span_before - self.window if self.n_blocks else 0

    @property
    def back_pad(self) -> int:
        return self.prefix + self.n_blocks * self.block - self.seq_len

    def executed(self) -> int:
        """Score elements computed per head: the prefix (triangle when causal suffices, else
        square) plus a (b, L) tile per block."""
        p = self.prefix
        prefix = p * (p + 1) // 2 if self.prefix_is_causal else p * p
        return prefix + self.n_blocks * self.block * self.span

    @property
    def prefix_is_causal(self) -> bool:
        return min(self.windows) >= self.prefix


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    zeros = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return zeros.masked_fill(~allowed, float("-inf"))


# Bounded: a mixed-window prefix mask is (1, H, W, W) and can reach hundreds of MB.
@lru_cache(maxsize=16)
def _band_mask(geo: BandGeometry, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask, (b, L) or per head (1, H, b, L): query r sees span key c iff
    w' - w_h < c - r <= w'."""
    r = torch.arange(geo.block, device=device)[:, None]
    c = torch.arange(geo.span, device=device)[None, :]
    offset = c - r
    if geo.uniform:
        windows: torch.Tensor | int = geo.window
    else:
        windows = torch.tensor(geo.windows, device=device).view(1, -1, 1, 1)
    return _additive((offset <= geo.span_before) & (offset > geo.span_before - windows), dtype)


@lru_cache(maxsize=4)
def _prefix_mask(
    geo: BandGeometry, device: torch.device, dtype: torch.dtype
) -> torch.Tensor | None:
    """None when plain causal attention covers the prefix, else a per-head (1, H, P, P) mask."""
    if geo.prefix_is_causal:
        return None
    windows = torch.tensor(geo.windows, device=device)
    return _additive(window_mask(windows, geo.prefix), dtype).unsqueeze(0)


def _query_blocks(x: torch.Tensor, geo: BandGeometry) -> torch.Tensor:
    """(H, Tq, D) with Tq = prefix + n_blocks * b -> (n_blocks, H, b, D) view."""
    rows = x[:, geo.prefix : geo.prefix + geo.n_blocks * geo.block]
    return rows.unflatten(1, (geo.n_blocks, geo.block)).transpose(0, 1)


def _key_spans(x: torch.Tensor, geo: BandGeometry) -> torch.Tensor:
    """(H, Tk, D) padded keys -> (n_blocks, H, L, D) overlapping view; span m starts at m * b."""
    h, _, d = x.shape
    s_h, s_t, s_d = x.stride()
    return x.as_strided(
        (geo.n_blocks, h, geo.span, d),
        (geo.block * s_t, s_h, s_t, s_d),
        x.storage_offset(),
    )


def _pad_keys(x: torch.Tensor, geo: BandGeometry) -> torch.Tensor:
    if geo.front_pad == 0 and geo.back_pad == 0:
        return x
    return F.pad(x, (0, 0, geo.front_pad, geo.back_pad))


def _pad_queries(x: torch.Tensor, geo: BandGeometry) -> torch.Tensor:
    return F.pad(x, (0, 0, 0, geo.back_pad)) if geo.back_pad else x


def _empty_bthd(x: torch.Tensor, length: int) -> torch.Tensor:
    """(B, H, length, D) laid out as (B, T, H, D) in memory: the fused kernel's own output and
    gradient layout, so filling it is a contiguous copy (measured: w=128 fwd+bwd at T=4096,
    ratio 0.16 this way against 0.19 in (B, H, T, D) memory, even with (B, H, T, D) inputs).
    It is also what a model's output projection reads next without a copy."""
    b, h, _, d = x.shape
    return x.new_empty(b, length, h, d).transpose(1, 2)


class _BandedWindow(torch.autograd.Function):
    """Forward and recomputing backward of the prefix + masked-block decomposition."""

    @staticmethod
    def forward(ctx, q, k, v, windows: tuple[int, ...], scale: float):  # type: ignore[override]
        batch, seq_len = q.shape[0], q.shape[2]
        geo = geometry(windows, seq_len)
        mask = _band_mask(geo, q.device, q.dtype)
        qp, kp, vp = _pad_queries(q, geo), _pad_keys(k, geo), _pad_keys(v, geo)
        out = _empty_bthd(q, seq_len)
        saved = []
        for bi in range(batch):
            out_pre, lse_pre, out_blk, lse_blk = _forward_one(
                qp[bi], kp[bi], vp[bi], geo, mask, scale
            )
            out[bi, :, : geo.prefix] = out_pre[0]
            if geo.n_blocks:
                tail = out_blk.transpose(0, 1).flatten(1, 2)
                out[bi, :, geo.prefix :] = tail[:, : seq_len - geo.prefix]
            saved += [out_pre, lse_pre, out_blk, lse_blk]
        ctx.save_for_backward(qp, kp, vp, *saved)
        ctx.geo, ctx.scale = geo, scale
        return out

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        qp, kp, vp, *saved = ctx.saved_tensors
        geo, scale = ctx.geo, ctx.scale
        mask = _band_mask(geo, qp.device, qp.dtype)
        grad_out = _pad_queries(grad_out, geo)
        batch = qp.shape[0]
        seq_len, front = geo.seq_len, geo.front_pad
        dq = _empty_bthd(qp, seq_len)
        # K/V gradients are built padded and returned as views: no extra copies.
        dk, dv = _empty_bthd(kp, kp.shape[2]), _empty_bthd(vp, vp.shape[2])
        for bi in range(batch):
            out_pre, lse_pre, out_blk, lse_blk = saved[4 * bi : 4 * bi + 4]
            _backward_one(
                grad_out[bi], qp[bi], kp[bi], vp[bi], out_pre, lse_pre, out_blk, lse_blk,
                geo, mask, scale, dq[bi], dk[bi], dv[bi],
            )  # fmt: skip
        keys = slice(front, front + seq_len)
        return dq, dk[:, :, keys], dv[:, :, keys], None, None


def _forward_one(q, k, v, geo: BandGeometry, mask, scale):  # type: ignore[no-untyped-def]
    """One batch element: q (Hq, Tq, D), padded k/v (Hkv, Tk, D)."""
    p, front = geo.prefix, geo.front_pad
    k_pre, v_pre = k[None, :, front : front + p], v[None, :, front : front + p]
    pre_mask = _prefix_mask(geo, q.device, q.dtype)
    out_pre, lse_pre = attention_with_lse(
        q[None, :, :p], k_pre, v_pre, scale, causal=pre_mask is None, mask=pre_mask
    )
    if geo.n_blocks == 0:
        return out_pre, lse_pre, None, None
    out_blk, lse_blk = attention_with_lse(
        _query_blocks(q, geo), _key_spans(k, geo), _key_spans(v, geo), scale, mask=mask
    )
    return out_pre, lse_pre, out_blk, lse_blk


def _backward_one(  # type: ignore[no-untyped-def]
    dout, q, k, v, out_pre, lse_pre, out_blk, lse_blk, geo: BandGeometry, mask, scale, dq, dk, dv
):
    """Writes one batch element's gradients into dq (Hq, T, D) and padded dk, dv (Hkv, Tk, D)."""
    p, front, seq_len = geo.prefix, geo.front_pad, geo.seq_len
    k_pre, v_pre = k[None, :, front : front + p], v[None, :, front : front + p]
    pre_mask = _prefix_mask(geo, q.device, q.dtype)
    dq_p, dk_p, dv_p = attention_with_lse_backward(
        dout[None, :, :p], q[None, :, :p], k_pre, v_pre, out_pre, lse_pre, scale,
        causal=pre_mask is None, mask=pre_mask,
    )  # fmt: skip
    dq[:, :p] = dq_p[0]
    if geo.n_blocks == 0:  # no padding either: the prefix is the whole sequence
        dk.copy_(dk_p[0])
        dv.copy_(dv_p[0])
        return
    dq_b, dk_s, dv_s = attention_with_lse_backward(
        _query_blocks(dout, geo), _query_blocks(q, geo), _key_spans(k, geo), _key_spans(v, geo),
        out_blk, lse_blk, scale, mask=mask,
    )  # fmt: skip
    dq[:, p:] = dq_b.transpose(0, 1).flatten(1, 2)[:, : seq_len - p]
    for grad, spans, prefix_grad in ((dk, dk_s, dk_p), (dv, dv_s, dv_p)):
        _fold_spans(spans, geo, grad)
        grad[:, front : front + p] += prefix_grad[0]


def _fold_spans(spans: torch.Tensor, geo: BandGeometry, out: torch.Tensor) -> None:
    """Write into out (H, Tk, D) the sum of every span's key gradient (n, H, L, D) at its place.

    Key block j collects block t of span j - t. For interior j all L / b terms exist and are read
    through one strided view whose reduction writes the result directly (one pass over the
    spans, no zero fill); the few blocks at either end are summed explicitly.
    """
    n, heads, span, dim = spans.shape
    b = geo.block
    per_span = span // b
    n_key_blocks = n + per_span - 1
    out_blocks = out.unflatten(1, (n_key_blocks, b)).permute(1, 0, 2, 3)  # (nk, H, b, D)
    s_m, s_h, s_l, s_d = spans.stride()
    interior = range(per_span - 1, n)
    if len(interior):
        # Reversed term order keeps every stride non-negative: term u is span j - nL + 1 + u.
        terms = spans.as_strided(
            (len(interior), per_span, heads, b, dim),
            (s_m, s_m - b * s_l, s_h, s_l, s_d),
            spans.storage_offset() + (per_span - 1) * b * s_l,
        )
        torch.sum(terms, dim=1, out=out_blocks[interior.start : interior.stop])
    for j in range(n_key_blocks):
        if j in interior:
            continue
        parts = [spans[j - t, :, t * b : (t + 1) * b] for t in range(per_span) if 0 <= j - t < n]
        torch.sum(torch.stack(parts), dim=0, out=out_blocks[j])


def geometry(windows: tuple[int, ...], seq_len: int) -> BandGeometry:
    return BandGeometry(windows, seq_len, block_size_for(min(max(windows), seq_len)))


def banded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: tuple[int, ...], scale: float
) -> torch.Tensor:
    """Windowed attention, one kernel layout for all heads (sized for the widest window)."""
    seq_len = q.shape[2]
    if min(windows) >= seq_len:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
        )
    if _square_is_cheaper(windows, seq_len):
        return dense_attention(q, k, v, windows, scale)
    return _BandedWindow.apply(q, k, v, windows, scale)


def _square_is_cheaper(windows: tuple[int, ...], seq_len: int) -> bool:
    """Short sequences: the block layout's fixed tiles would cost more than the T x T square."""
    return geometry(windows, seq_len).executed() >= seq_len * seq_len


def banded_executed(windows: tuple[int, ...], seq_len: int) -> int:
    """Score elements the banded backend computes for these heads (one batch element)."""
    if min(windows) >= seq_len:
        return len(windows) * seq_len * (seq_len + 1) // 2
    if _square_is_cheaper(windows, seq_len):
        return len(windows) * seq_len * seq_len
    return len(windows) * geometry(windows, seq_len).executed()
