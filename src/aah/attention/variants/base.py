"""What every attention variant shares: the module contract, plan checks and a masked path.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D) with Hq % Hkv == 0; windows one int per query
head (query i with window w sees keys i - w < j <= i; w >= T is full causal) or None (full).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from aah.attention.api import check_qkv, normalize_windows
from aah.attention.masks import window_mask

Windows = Sequence[int] | torch.Tensor | None


class Variant(nn.Module):
    """An attention variant: `forward(q, k, v, windows) -> (B, Hq, T, D)`, always causal.

    `supports_windows` says whether a per-head window plan is honoured exactly; a variant that
    cannot honour one raises ValueError (naming itself) for any window narrower than T.
    `supports_gqa` says whether Hkv < Hq is accepted.
    """

    name: str = "variant"
    supports_windows: bool = True
    supports_gqa: bool = True

    def __init__(self, n_head: int, n_kv_head: int, head_dim: int) -> None:
        super().__init__()
        if n_head < 1 or n_kv_head < 1 or n_head % n_kv_head:
            raise ValueError(f"n_kv_head ({n_kv_head}) must be >= 1 and divide n_head ({n_head})")
        if not self.supports_gqa and n_kv_head != n_head:
            raise ValueError(f"attention variant {self.name!r} needs n_kv_head == n_head")
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, head_dim
        self.scale = 1.0 / math.sqrt(head_dim)

    def plan(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: Windows) -> tuple:
        """Validate shapes against this module and return the windows, capped at T."""
        check_qkv(q, k, v)
        if q.shape[1] != self.n_head or k.shape[1] != self.n_kv_head or q.shape[3] != self.head_dim:
            raise ValueError(
                f"attention variant {self.name!r} was built for Hq={self.n_head}, "
                f"Hkv={self.n_kv_head}, D={self.head_dim}; got q {tuple(q.shape)}, "
                f"k {tuple(k.shape)}"
            )
        seq_len = q.shape[2]
        if windows is None:
            return (seq_len,) * self.n_head
        plan = tuple(min(w, seq_len) for w in normalize_windows(windows, self.n_head))
        if not self.supports_windows and min(plan) < seq_len:
            raise ValueError(
                f"attention variant {self.name!r} cannot honour a window plan narrower than "
                f"the sequence (T={seq_len}, smallest window {min(plan)}); use full windows "
                "or a variant that supports windows"
            )
        return plan


def expand_kv(x: torch.Tensor, n_q_heads: int) -> torch.Tensor:
    """(B, Hkv, ...) -> (B, Hq, ...): query head h reads kv head h // (Hq / Hkv)."""
    group = n_q_heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def plan_mask(windows: tuple[int, ...], seq_len: int, device: torch.device) -> torch.Tensor:
    """Boolean (Hq, T, T): the window rule of each head (causal included)."""
    return window_mask(torch.tensor(windows, device=device), seq_len)


def additive_mask(
    allowed: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor:
    """Float mask: `bias` (or 0) where allowed, -inf elsewhere; shapes broadcast."""
    value = torch.zeros((), dtype=dtype, device=allowed.device) if bias is None else bias.to(dtype)
    blocked = torch.full((), float("-inf"), dtype=dtype, device=allowed.device)
    return torch.where(allowed, value, blocked)


def masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float,
) -> torch.Tensor:
    """Softmax attention over an explicit (Hq|1, T, T) boolean pattern plus an optional
    additive (Hq, T, T) bias. Every row must allow at least one key (the diagonal does).

    Memory O(H T^2) for the mask: the general path for patterns with no banded structure.
    """
    mask = additive_mask(allowed, bias, q.dtype)
    gqa = k.shape[1] != q.shape[1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
