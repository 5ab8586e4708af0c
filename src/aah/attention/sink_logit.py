"""A learned sink logit per query head: one more term, exp(s_h), in the softmax's denominator.

    out_h(i) = sum_j exp(z_ij) v_j / (sum_j exp(z_ij) + exp(s_h))

as if every query of head h also saw a key with score s_h and a value of zero: the head may
put attention on nothing instead of on the keys its window leaves (gpt-oss's sinks, transformers'
`s_aux`; a healed plan's `sink` parameters). No key or value is stored for it: zero KV bytes.

Any attention that takes q, k, v runs it exactly, without a second pass for the log-sum-exp:
`with_sink_key` prepends that key. Each query gains one dimension holding s_h / scale and each
key a zero there, so q'.k' = q.k for every real key; the new key is zero but for a 1 in that
dimension (q'.k'_0 = s_h / scale, a score of s_h after the scale) and its value is zero. The
dimensions are padded with zeros (zeros change no score): to a multiple of 8 on the CPU, to a
power of two on a GPU (what FlexAttention's kernels take). A masked caller allows the new
key for every query (`sink_key_mask`); a windowed caller gives it as one more sink at position
0, with a dummy query there whose output it drops (`windowed_with_sink_logit`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from aah.attention.api import windowed_attention

ALIGN = 8


def with_sink_key(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, logit: torch.Tensor, scale: float, *,
    pad_values: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """(q', k', v'): q (..., Tq, D) with each row's logit (broadcastable to q.shape[:-1]) in a
    new dimension, k (..., Tk, D) with the sink key prepended (Tk + 1 keys), v with a zero value
    prepended. `pad_values` pads v's dimension like q's and k's (for callers that need one
    head dimension; the output's extra columns are then zero)."""
    d = q.shape[-1]
    width = padded_width(d + 1, q.device)
    rows = (logit.to(q.dtype) / scale).expand(q.shape[:-1]).unsqueeze(-1)
    q2 = torch.cat([q, rows, q.new_zeros(*q.shape[:-1], width - d - 1)], dim=-1)
    k2 = torch.cat([k, k.new_zeros(*k.shape[:-1], width - d)], dim=-1)
    key = k.new_zeros(*k.shape[:-2], 1, width)
    key[..., d] = 1.0
    k2 = torch.cat([key, k2], dim=-2)
    v2 = F.pad(v, (0, width - v.shape[-1])) if pad_values else v
    v2 = torch.cat([v2.new_zeros(*v2.shape[:-2], 1, v2.shape[-1]), v2], dim=-2)
    return q2, k2, v2


def padded_width(needed: int, device: torch.device) -> int:
    """The head dimension that holds `needed` columns: a multiple of `ALIGN` on the CPU, a
    power of two on a GPU."""
    if device.type == "cpu":
        return needed + (-needed) % ALIGN
    return 1 << (needed - 1).bit_length()


def sink_key_mask(mask: torch.Tensor | None) -> torch.Tensor | None:
    """A boolean mask (..., Tq, Tk) with the sink key's column (allowed) prepended."""
    if mask is None:
        return None
    return torch.cat([mask.new_ones(*mask.shape[:-1], 1), mask], dim=-1)


def sdpa_with_sink_logit(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    logit: torch.Tensor | None,
    *,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """PyTorch's SDPA of q over k, v under a boolean `mask` (or None), with each query row's
    sink logit (broadcastable to q.shape[:-1]); plain SDPA where `logit` is None."""
    if logit is None:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa
        )
    q2, k2, v2 = with_sink_key(q, k, v, logit, scale)
    return F.scaled_dot_product_attention(
        q2, k2, v2, attn_mask=sink_key_mask(mask), scale=scale, enable_gqa=enable_gqa
    )


def windowed_with_sink_logit(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int],
    logit: torch.Tensor,
    *,
    backend: str = "auto",
    scale: float,
    sinks: Sequence[int],
) -> torch.Tensor:
    """`windowed_attention` (q (B, Hq, T, D), k, v (B, Hkv, T, D)) with a sink logit per
    query head (`logit` (Hq,)): the sink key sits at position 0 as one more sink of every
    head, before a dummy query whose output row is dropped; each real query keeps its window
    (counted back from itself) and its own sinks after it."""
    b, hq, _, d = q.shape
    q2, k2, v2 = with_sink_key(q, k, v, logit.view(1, hq, 1), scale, pad_values=True)
    q2 = torch.cat([q2.new_zeros(b, hq, 1, q2.shape[-1]), q2], dim=2)
    out = windowed_attention(
        q2, k2, v2, windows, backend=backend, scale=scale, sinks=[int(s) + 1 for s in sinks]
    )
    return out[:, :, 1:, :d]
