"""Connectivity patterns beyond sliding windows: block-sparse and global tokens.

Both build an explicit boolean pattern and run softmax attention over it (SDPA with a mask),
so they execute the whole T x T square: they change WHICH pairs interact, not the cost on this
CPU path. Both stay causal, accept GQA/MQA and an optional score bias, and compose with a
window plan as documented on each class.
"""

from __future__ import annotations

import torch

from aah.attention.variants.base import Variant, Windows, masked_attention, plan_mask
from aah.attention.variants.score_bias import ScoreBias


def block_sparse_mask(
    seq_len: int, block: int, local_blocks: int, stride: int, device: torch.device | None = None
) -> torch.Tensor:
    """Boolean (T, T): query i (block qb = i // block) sees key j <= i (block kb) when
    kb == qb (own block, causally), qb - local_blocks <= kb < qb (local blocks), or
    kb < qb with (qb - kb) % stride == 0 (every stride-th block before it)."""
    pos = torch.arange(seq_len, device=device)
    qb, kb = (pos // block)[:, None], (pos // block)[None, :]
    gap = qb - kb
    allowed = (gap <= local_blocks) | (gap % stride == 0)
    return allowed & (pos[None, :] <= pos[:, None])


def global_tokens_mask(windows: tuple[int, ...], seq_len: int, n_global: int,
                       device: torch.device | None = None) -> torch.Tensor:  # fmt: skip
    """Boolean (H, T, T): head h's window keys plus the first n_global positions, causal."""
    pos = torch.arange(seq_len, device=device)
    global_keys = (pos[None, :] < n_global) & (pos[None, :] <= pos[:, None])
    return plan_mask(windows, seq_len, pos.device) | global_keys


class _MaskedVariant(Variant):
    def __init__(self, n_head: int, n_kv_head: int, head_dim: int, bias: ScoreBias | None) -> None:
        super().__init__(n_head, n_kv_head, head_dim)
        self.bias = bias

    def pattern(self, plan: tuple[int, ...], seq_len: int, device: torch.device) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: Windows = None
    ) -> torch.Tensor:
        plan = self.plan(q, k, v, windows)
        seq_len = q.shape[2]
        allowed = self.pattern(plan, seq_len, q.device)
        bias = None
        if self.bias is not None:
            pos = torch.arange(seq_len, device=q.device)
            bias = self.bias(pos[:, None] - pos[None, :])
        return masked_attention(q, k, v, allowed, bias, self.scale)


class BlockSparseAttention(_MaskedVariant):
    """Local blocks plus strided blocks (`block_sparse_mask`). With a window plan the pattern
    is intersected with each head's window: a head sees a pair only if both allow it."""

    name = "block-sparse"

    def __init__(self, n_head: int, n_kv_head: int, head_dim: int, *, block: int = 64,
                 local_blocks: int = 1, stride: int = 4,
                 bias: ScoreBias | None = None) -> None:  # fmt: skip
        super().__init__(n_head, n_kv_head, head_dim, bias)
        if block < 1 or local_blocks < 0 or stride < 1:
            raise ValueError(
                f"block-sparse needs block >= 1, local_blocks >= 0, stride >= 1; "
                f"got {block}, {local_blocks}, {stride}"
            )
        self.block, self.local_blocks, self.stride = block, local_blocks, stride

    def pattern(self, plan: tuple[int, ...], seq_len: int, device: torch.device) -> torch.Tensor:
        sparse = block_sparse_mask(seq_len, self.block, self.local_blocks, self.stride, device)
        if min(plan) >= seq_len:
            return sparse
        return sparse & plan_mask(plan, seq_len, device)


class GlobalTokensAttention(_MaskedVariant):
    """The first `n_global` positions are read by every later query (causally). With a window
    plan a head sees its window keys united with the global keys."""

    name = "global-tokens"

    def __init__(self, n_head: int, n_kv_head: int, head_dim: int, *, n_global: int = 4,
                 bias: ScoreBias | None = None) -> None:  # fmt: skip
        super().__init__(n_head, n_kv_head, head_dim, bias)
        if n_global < 0:
            raise ValueError(f"global-tokens needs n_global >= 0, got {n_global}")
        self.n_global = n_global

    def pattern(self, plan: tuple[int, ...], seq_len: int, device: torch.device) -> torch.Tensor:
        return global_tokens_mask(plan, seq_len, self.n_global, device)
