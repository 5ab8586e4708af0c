"""The paper's execution branch: bucket heads by window, run each bucket, put heads back in order.

Full-window buckets go through SDPA `is_causal`; local buckets through `banded`, each
with a layout sized for its own window. Heads of one window but different sinks go to different
buckets. The bucketing depends only on (windows, sinks, T, Hq, Hkv), so it is computed once per
window plan and cached.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

from aah.attention.banded import banded_attention, banded_executed
from aah.attention.cost import causal_pairs
from aah.attention.heads import merge_heads, split_heads


@dataclass(frozen=True)
class Bucket:
    """Query heads sharing one effective window, and the K/V heads they read."""

    window: int  # min(w, T); == T means full causal
    sinks: int  # effective sinks of these heads (0 for full causal)
    q_heads: tuple[int, ...]
    # One per KV head when the bucket holds whole GQA groups (the kernel shares them natively),
    # else one per query head.
    kv_heads: tuple[int, ...]


@dataclass(frozen=True)
class BucketPlan:
    buckets: tuple[Bucket, ...]
    # Per bucket, its query / K-V heads as `split_heads` indices (slices where contiguous).
    q_index: tuple[slice | tuple[int, ...], ...]
    kv_index: tuple[slice | tuple[int, ...], ...]


def _head_index(heads: tuple[int, ...]) -> slice | tuple[int, ...]:
    """A slice (a view, no copy) when the heads are a contiguous run."""
    if heads == tuple(range(heads[0], heads[0] + len(heads))):
        return slice(heads[0], heads[0] + len(heads))
    return heads


@lru_cache(maxsize=256)
def bucket_plan(
    windows: tuple[int, ...],
    seq_len: int,
    n_kv_heads: int,
    sinks: tuple[int, ...] | None = None,
) -> BucketPlan:
    group = len(windows) // n_kv_heads
    by_window: dict[tuple[int, int], list[int]] = {}
    for head, w in enumerate(windows):
        key = (min(w, seq_len), sinks[head] if sinks else 0)
        by_window.setdefault(key, []).append(head)
    buckets = []
    for window, sink in sorted(by_window):
        heads = tuple(by_window[window, sink])
        kv_groups = {h // group for h in heads}
        whole_groups = len(heads) == len(kv_groups) * group and heads == tuple(
            h for g in sorted(kv_groups) for h in range(g * group, (g + 1) * group)
        )
        kv = (
            tuple(sorted(kv_groups))
            if whole_groups and group > 1
            else tuple(h // group for h in heads)
        )
        buckets.append(Bucket(window, sink, heads, kv))
    return BucketPlan(
        tuple(buckets),
        tuple(_head_index(b.q_heads) for b in buckets),
        tuple(_head_index(b.kv_heads) for b in buckets),
    )


def grouped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: tuple[int, ...],
    scale: float,
    sinks: tuple[int, ...] | None = None,
) -> torch.Tensor:
    seq_len = q.shape[2]
    plan = bucket_plan(windows, seq_len, k.shape[1], sinks)
    if len(plan.buckets) == 1:
        return _run_bucket(q, k, v, plan.buckets[0], seq_len, scale)
    q_parts = split_heads(q, plan.q_index)
    k_parts, v_parts = split_heads(k, plan.kv_index), split_heads(v, plan.kv_index)
    outs = [
        _run_bucket(q_b, k_b, v_b, bucket, seq_len, scale)
        for q_b, k_b, v_b, bucket in zip(q_parts, k_parts, v_parts, plan.buckets, strict=True)
    ]
    return merge_heads(tuple(outs), plan.q_index)


def _run_bucket(q, k, v, bucket: Bucket, seq_len: int, scale: float) -> torch.Tensor:  # type: ignore[no-untyped-def]
    if bucket.window >= seq_len:
        return F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
        )
    heads = q.shape[1]
    sinks = (bucket.sinks,) * heads if bucket.sinks else None
    return banded_attention(q, k, v, (bucket.window,) * heads, scale, sinks)


def grouped_executed(
    windows: tuple[int, ...], seq_len: int, sinks: tuple[int, ...] | None = None
) -> int:
    total = 0
    for bucket in bucket_plan(windows, seq_len, len(windows), sinks).buckets:
        heads = len(bucket.q_heads)
        if bucket.window >= seq_len:
            total += heads * causal_pairs(seq_len)
        else:
            bucket_sinks = (bucket.sinks,) * heads if bucket.sinks else None
            total += banded_executed((bucket.window,) * heads, seq_len, bucket_sinks)
    return total
