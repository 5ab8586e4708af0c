"""The block layout shared by the banded backends: geometry, band masks, views, and the fold.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D). Query i of head h sees keys i - w_h < j <= i.

Decomposition, with block size b and W' = W (the widest window) rounded up to a multiple of b:
- prefix: queries [0, W) see every earlier key within their window: one causal call (a
  per-head mask only when some head's window is narrower than W).
- blocks: queries [W, T) in blocks of b. The block starting at s needs keys s-W+1 .. s+b-1; it
  reads the aligned span [s-W', s+b) (L = W' + b keys) under one band mask, (b, L) or per head.
  Spans are strided views of K/V (no copies), so K/V are never repeated.
- sinks (heads with s_h > 0): the prefix mask holds them; block rows get them from a small
  extra call merged by log-sum-exp (`band_sinks`).
Keys before position 0 (front padding, only when b does not divide W) are always outside the
band, so the mask alone keeps them out. A key's gradient is the sum over the spans that hold it,
which `fold_spans` gathers back into place.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from aah.attention.masks import window_allows, window_mask
from aah.attention.sdpa_lse import attention_with_lse, attention_with_lse_backward


def block_size_for(window: int) -> int:
    """Query block size: small blocks waste less of the band, large ones make larger products.

    Measured at T=4096, 8 heads, D=64, 2 threads (fwd+bwd, median ratio to SDPA causal).
    Fused kernel: w=128: b=64 0.15, b=32 0.20, b=128 0.18; w=512: b=256 0.42, b=128 0.47-0.49,
    b=64 0.57. Stored-probability engine (used up to w=256), where the same rule is best:
    w=32: b=32 0.066, b=64 0.111; w=128: b=64 0.115, b=128 0.143; w=256: b=64 0.215, b=128 0.204.
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
    sinks: tuple[int, ...] = ()  # per head, effective; () when no head has any

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
        square) plus a (b, L) tile per block; sink rows are counted by `band_sinks`."""
        p = self.prefix
        prefix = p * (p + 1) // 2 if self.prefix_is_causal else p * p
        return prefix + self.n_blocks * self.block * self.span

    @property
    def prefix_is_causal(self) -> bool:
        return min(self.windows) >= self.prefix


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    zeros = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return zeros.masked_fill(~allowed, float("-inf"))


# Bounded: a mixed-window prefix mask is (1, H, W, W) and can reach hundreds of MB.
@lru_cache(maxsize=16)
def band_mask(geo: BandGeometry, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask, (b, L) or per head (1, H, b, L): query r sees span key c iff
    w' - w_h < c - r <= w' (query r sits w' + r - c positions after key c in every block)."""
    r = torch.arange(geo.block, device=device)[:, None]
    c = torch.arange(geo.span, device=device)[None, :]
    if geo.uniform:
        windows: torch.Tensor | int = geo.window
    else:
        windows = torch.tensor(geo.windows, device=device).view(1, -1, 1, 1)
    return additive_mask(window_allows(geo.span_before + r, c, windows), dtype)


@lru_cache(maxsize=4)
def prefix_mask(geo: BandGeometry, device: torch.device, dtype: torch.dtype) -> torch.Tensor | None:
    """None when plain causal attention covers the prefix, else a per-head (1, H, P, P) mask."""
    if geo.prefix_is_causal:
        return None
    windows = torch.tensor(geo.windows, device=device)
    sinks = torch.tensor(geo.sinks, device=device) if geo.sinks else None
    return additive_mask(window_mask(windows, geo.prefix, sinks), dtype).unsqueeze(0)


def query_blocks(x: torch.Tensor, geo: BandGeometry) -> torch.Tensor:
    """(H, Tq, D) with Tq = prefix + n_blocks * b -> (n_blocks, H, b, D) view."""
    rows = x[:, geo.prefix : geo.prefix + geo.n_blocks * geo.block]
    return rows.unflatten(1, (geo.n_blocks, geo.block)).transpose(0, 1)


def key_spans(x: torch.Tensor, geo: BandGeometry) -> torch.Tensor:
    """(H, Tk, D) padded keys -> (n_blocks, H, L, D) overlapping view; span m starts at m * b."""
    h, _, d = x.shape
    s_h, s_t, s_d = x.stride()
    return x.as_strided(
        (geo.n_blocks, h, geo.span, d),
        (geo.block * s_t, s_h, s_t, s_d),
        x.storage_offset(),
    )


def pad_keys(x: torch.Tensor, geo: BandGeometry) -> torch.Tensor:
    if geo.front_pad == 0 and geo.back_pad == 0:
        return x
    return F.pad(x, (0, 0, geo.front_pad, geo.back_pad))


def pad_queries(x: torch.Tensor, geo: BandGeometry) -> torch.Tensor:
    return F.pad(x, (0, 0, 0, geo.back_pad)) if geo.back_pad else x


def fold_spans(spans: torch.Tensor, geo: BandGeometry, out: torch.Tensor) -> None:
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


@lru_cache(maxsize=256)  # asked for several times per call (dispatch, engine, executed count)
def geometry(
    windows: tuple[int, ...], seq_len: int, sinks: tuple[int, ...] | None = None
) -> BandGeometry:
    kept = tuple(sinks) if sinks is not None and any(sinks) else ()
    return BandGeometry(windows, seq_len, block_size_for(min(max(windows), seq_len)), kept)


def prefix_forward(q, k, v, geo: BandGeometry, scale: float):  # type: ignore[no-untyped-def]
    """Queries [0, W) of the whole batch (q (B, Hq, Tq, D), padded k/v): (out, lse). One call
    for every batch element: the fused backward parallelises over batch x heads only."""
    p, front = geo.prefix, geo.front_pad
    mask = prefix_mask(geo, q.device, q.dtype)
    return attention_with_lse(
        q[:, :, :p],
        k[:, :, front : front + p],
        v[:, :, front : front + p],
        scale,
        causal=mask is None,
        mask=mask,
    )


def prefix_backward(dout, q, k, v, out, lse, geo: BandGeometry, scale: float):  # type: ignore[no-untyped-def]
    """The prefix's (dq, dk, dv), each (B, H, W, D)."""
    p, front = geo.prefix, geo.front_pad
    mask = prefix_mask(geo, q.device, q.dtype)
    return attention_with_lse_backward(
        dout[:, :, :p], q[:, :, :p], k[:, :, front : front + p],
        v[:, :, front : front + p], out, lse, scale, causal=mask is None, mask=mask,
    )  # fmt: skip


def blocks_forward(qp, kp, vp, geo: BandGeometry, mask, scale: float, out, adjust=None) -> list:  # type: ignore[no-untyped-def]
    """Every batch element's query blocks: writes rows [prefix, T) of out (B, H, T, Dv) and
    returns the (out_blk, lse_blk) pairs, one per batch element, for a backward.

    `adjust(bi, out_blk, lse_blk)`, if given, updates a pair in place before it is written
    (the sinks' merge)."""
    pairs = []
    for bi in range(qp.shape[0] if geo.n_blocks else 0):
        out_blk, lse_blk = attention_with_lse(
            query_blocks(qp[bi], geo), key_spans(kp[bi], geo), key_spans(vp[bi], geo),
            scale, mask=mask,
        )  # fmt: skip
        if adjust is not None:
            adjust(bi, out_blk, lse_blk)
        tail = out_blk.transpose(0, 1).flatten(1, 2)
        out[bi, :, geo.prefix :] = tail[:, : geo.seq_len - geo.prefix]
        pairs.append((out_blk, lse_blk))
    return pairs


def forward_with_lse(q, k, v, windows: tuple[int, ...], scale: float):  # type: ignore[no-untyped-def]
    """Windowed attention without autograd, with each row's log-sum-exp: (out, lse).

    q, k (B, H, T, D), v (B, H, T, Dv) with Dv == D (the fused CPU kernel's rule; pad with
    zero columns to use more value columns); one window per head. out (B, H, T, Dv), lse
    (B, H, T) float32 on CPU. Cost ~ T (W + b) per head, as the banded backend's forward.
    """
    seq_len = q.shape[2]
    geo = geometry(windows, seq_len)
    mask = band_mask(geo, q.device, q.dtype)
    qp, kp, vp = pad_queries(q, geo), pad_keys(k, geo), pad_keys(v, geo)
    out = q.new_empty(q.shape[0], q.shape[1], seq_len, v.shape[-1])
    out_pre, lse_pre = prefix_forward(qp, kp, vp, geo, scale)
    out[:, :, : geo.prefix] = out_pre
    lse = lse_pre.new_empty(q.shape[0], q.shape[1], seq_len)
    lse[:, :, : geo.prefix] = lse_pre
    for bi, (_, lse_blk) in enumerate(blocks_forward(qp, kp, vp, geo, mask, scale, out)):
        lse[bi, :, geo.prefix :] = lse_blk.transpose(0, 1).flatten(1, 2)[:, : seq_len - geo.prefix]
    return out, lse


def add_prefix_key_grads(dk, dv, dk_p, dv_p, geo: BandGeometry):  # type: ignore[no-untyped-def]
    """Add the prefix's key gradients into the padded dk, dv (B, Hkv, Tk, D) the blocks filled;
    returns their views over the real keys."""
    front, p = geo.front_pad, geo.prefix
    dk[:, :, front : front + p] += dk_p
    dv[:, :, front : front + p] += dv_p
    keys = slice(front, front + geo.seq_len)
    return dk[:, :, keys], dv[:, :, keys]
