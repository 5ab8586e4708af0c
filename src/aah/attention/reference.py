"""The float64 oracle: plain masked softmax, written for clarity, not speed.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D); windows (Hq,); sinks (Hq,) or None.
"""

from __future__ import annotations

import torch

from aah.attention.masks import window_mask


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: torch.Tensor,
    scale: float,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Exact windowed causal attention (with sinks) in float64, returned in q's dtype."""
    batch, n_q_heads, seq_len, head_dim = q.shape
    n_kv_heads = k.shape[1]
    group = n_q_heads // n_kv_heads
    # View query heads as (Hkv, G) so K/V broadcast over the group instead of being copied.
    q64 = q.double().reshape(batch, n_kv_heads, group, seq_len, head_dim)
    k64 = k.double().unsqueeze(2)
    v64 = v.double().unsqueeze(2)
    scores = torch.matmul(q64, k64.transpose(-1, -2)) * scale  # (B, Hkv, G, T, T)
    allowed = window_mask(windows.to(q.device), seq_len, sinks)  # (Hq, T, T)
    allowed = allowed.reshape(n_kv_heads, group, seq_len, seq_len)
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs, v64)
    return out.reshape(batch, n_q_heads, seq_len, head_dim).to(q.dtype)
