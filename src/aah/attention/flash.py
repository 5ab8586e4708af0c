"""FlashAttention backend (the `flash_attn` package, CUDA, fp16/bf16): one call per window bucket.

Window w maps to flash's `window_size=(w - 1, 0)` with `causal=True`; full heads use (-1, 0).
flash_attn has no way to keep sink keys outside the window: `windowed_attention` refuses sinks
here with a ValueError, and `auto` picks flex when a plan has sinks.
"""

from __future__ import annotations

import importlib.util

import torch

from aah.attention.grouped import bucket_plan
from aah.attention.heads import merge_heads, split_heads

TILE = 128  # cost counted at this tile granularity (flash's exact tiling varies by GPU)


def flash_available() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


def check_flash(q: torch.Tensor, needs_grad: bool) -> None:
    if q.device.type != "cuda":
        raise ValueError(f"backend 'flash' needs a CUDA device, got {q.device}")
    if not flash_available():
        raise ValueError("backend 'flash' needs the flash_attn package: pip install flash-attn")
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"backend 'flash' needs float16 or bfloat16, got {q.dtype}")


def flash_attention_windows(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: tuple[int, ...], scale: float
) -> torch.Tensor:
    from flash_attn import flash_attn_func

    seq_len = q.shape[2]
    plan = bucket_plan(windows, seq_len, k.shape[1])
    q_parts, k_parts = split_heads(q, plan.q_index), split_heads(k, plan.kv_index)
    parts = zip(q_parts, k_parts, split_heads(v, plan.kv_index), strict=True)
    outs = []
    for bucket, (q_b, k_b, v_b) in zip(plan.buckets, parts, strict=True):
        left = -1 if bucket.window >= seq_len else bucket.window - 1
        out = flash_attn_func(  # flash wants (B, T, H, D)
            q_b.transpose(1, 2), k_b.transpose(1, 2), v_b.transpose(1, 2),
            softmax_scale=scale, causal=True, window_size=(left, 0),
        )  # fmt: skip
        outs.append(out.transpose(1, 2))
    return merge_heads(tuple(outs), plan.q_index)
