"""The paper's execution path: one SDPA call over the whole T x T square with a per-head mask.

Kept as a baseline: it executes every score element whatever the windows (and sinks) are.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aah.attention.masks import window_mask


def dense_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: tuple[int, ...],
    scale: float,
    sinks: tuple[int, ...] | None = None,
) -> torch.Tensor:
    seq_len = q.shape[-2]
    sink_t = None if sinks is None else torch.tensor(sinks, device=q.device)
    mask = window_mask(torch.tensor(windows, device=q.device), seq_len, sink_t)  # (Hq, T, T)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
    )


def dense_executed(
    windows: tuple[int, ...], seq_len: int, sinks: tuple[int, ...] | None = None
) -> int:
    """The whole square for every head."""
    return len(windows) * seq_len * seq_len
