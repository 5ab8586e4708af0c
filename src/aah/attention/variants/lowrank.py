"""Causal low-rank attention (Linformer made causal by segments).

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D). The sequence is cut into segments of S
positions. Each segment's keys and values are compressed to R summary rows by a learned
(S, R) projection per KV head (Linformer's E and F, applied per segment). A query in segment m
attends exactly (softmax, causally) to the keys of its own segment, plus the summaries of
segments 0 .. m-1 only: a summary never contains a key at or after the query's segment, so no
future key can leak. Work per query: S + m R scores instead of i + 1.

Windows: not honoured (a summary mixes many distances); a plan narrower than T raises.
Score biases: not supported (a summary has no single distance).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from aah.attention.variants.base import Variant, Windows


class LowRankAttention(Variant):
    name = "low-rank"
    supports_windows = False

    def __init__(
        self, n_head: int, n_kv_head: int, head_dim: int, *, segment: int = 64, rank: int = 8
    ) -> None:
        super().__init__(n_head, n_kv_head, head_dim)
        if segment < 1 or rank < 1:
            raise ValueError(f"low-rank needs segment >= 1 and rank >= 1, got {segment}, {rank}")
        self.segment, self.rank = segment, rank
        gen = torch.Generator().manual_seed(0)
        # Starts near a mean-pool of the segment, so summaries begin as averages of keys.
        init = torch.full((segment, rank), 1.0 / segment) + 0.02 * torch.randn(
            segment, rank, generator=gen
        )
        self.proj_k = nn.Parameter(init.repeat(n_kv_head, 1, 1))  # (Hkv, S, R)
        self.proj_v = nn.Parameter(init.clone().repeat(n_kv_head, 1, 1))

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: Windows = None
    ) -> torch.Tensor:
        self.plan(q, k, v, windows)
        batch, hq, seq_len, dim = q.shape
        hkv, s, r = k.shape[1], self.segment, self.rank
        n = -(-seq_len // s)
        pad = n * s - seq_len  # padded keys are in the future of every real query
        qs = F.pad(q, (0, 0, 0, pad)).unflatten(2, (n, s))  # (B, Hq, n, S, D)
        ks = F.pad(k, (0, 0, 0, pad)).unflatten(2, (n, s))  # (B, Hkv, n, S, D)
        vs = F.pad(v, (0, 0, 0, pad)).unflatten(2, (n, s))
        # Summaries (B, Hkv, n, R, D): E^T K_m for every segment m.
        sk = torch.einsum("bhnsd,hsr->bhnrd", ks, self.proj_k.to(k.dtype)).flatten(2, 3)
        sv = torch.einsum("bhnsd,hsr->bhnrd", vs, self.proj_v.to(v.dtype)).flatten(2, 3)
        # Per query segment: its own S keys, then all n R summaries; the mask keeps summaries
        # of strictly earlier segments and own keys j <= i.
        keys = torch.cat([ks, sk.unsqueeze(2).expand(-1, -1, n, -1, -1)], dim=3)
        vals = torch.cat([vs, sv.unsqueeze(2).expand(-1, -1, n, -1, -1)], dim=3)
        seg = torch.arange(n, device=q.device)
        own = torch.ones(s, s, dtype=torch.bool, device=q.device).tril()
        summary = seg.repeat_interleave(r)[None, :] < seg[:, None]  # (n, n R)
        allowed = torch.cat(
            [own.expand(n, s, s), summary[:, None, :].expand(n, s, n * r)], dim=2
        )  # (n, S, S + n R)
        mask = torch.zeros(allowed.shape, dtype=q.dtype, device=q.device)
        mask = mask.masked_fill(~allowed, float("-inf"))
        out = F.scaled_dot_product_attention(
            qs.transpose(1, 2).reshape(batch * n, hq, s, dim),
            keys.transpose(1, 2).reshape(batch * n, hkv, -1, dim),
            vals.transpose(1, 2).reshape(batch * n, hkv, -1, dim),
            attn_mask=mask.unsqueeze(1).repeat(batch, 1, 1, 1),
            scale=self.scale,
            enable_gqa=hkv != hq,
        )  # (B n, Hq, S, D)
        out = out.view(batch, n, hq, s, dim).transpose(1, 2).reshape(batch, hq, n * s, dim)
        return out[:, :, :seq_len]
