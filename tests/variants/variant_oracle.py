"""Independent float64 references for the variant tests: loops and explicit formulas only."""

from __future__ import annotations

import math

import torch


def allowed_by_loops(windows: list[int], seq_len: int) -> torch.Tensor:
    """(H, T, T) boolean: j <= i and i - j < w_h, built element by element."""
    out = torch.zeros(len(windows), seq_len, seq_len, dtype=torch.bool)
    for h, w in enumerate(windows):
        for i in range(seq_len):
            for j in range(seq_len):
                out[h, i, j] = j <= i and i - j < w
    return out


def t5_bucket_scalar(n: int, num_buckets: int, max_distance: int) -> int:
    exact = num_buckets // 2
    if n < exact:
        return n
    b = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return min(b, num_buckets - 1)


def explicit_attention(q, k, v, allowed, bias=None, scale=None):  # type: ignore[no-untyped-def]
    """softmax(q k^T scale + bias, masked) v in float64; k/v heads repeated for GQA."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    scores = q @ k.transpose(-1, -2) * scale
    if bias is not None:
        scores = scores + bias.double()
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, -1) @ v


def qkv(batch, hq, hkv, seq_len, dim, seed=0, dtype=torch.float32):  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, hq, seq_len, dim, generator=gen, dtype=dtype)
    k = torch.randn(batch, hkv, seq_len, dim, generator=gen, dtype=dtype)
    v = torch.randn(batch, hkv, seq_len, dim, generator=gen, dtype=dtype)
    return q, k, v
