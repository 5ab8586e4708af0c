"""FlashAttention backend (the `flash_attn` package, CUDA, fp16/bf16): one call per window bucket.

Window w maps to flash's `window_size=(w - 1, 0)` with `causal=True`; full heads use (-1, 0).
"""

from __future__ import annotations

import importlib.util

import torch

from aah.attention.grouped import _as_index, bucket_plan

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
    outs = []
    for bucket in plan.buckets:
        q_b = q[:, _as_index(bucket.q_heads)].transpose(1, 2)  # flash wants (B, T, H, D)
        kv = _as_index(bucket.kv_heads)
        k_b, v_b = k[:, kv].transpose(1, 2), v[:, kv].transpose(1, 2)
        left = -1 if bucket.window >= seq_len else bucket.window - 1
        out = flash_attn_func(
            q_b, k_b, v_b, softmax_scale=scale, causal=True, window_size=(left, 0)
        )
        outs.append(out.transpose(1, 2))
    out = torch.cat(outs, dim=1) if len(outs) > 1 else outs[0]
    return out if plan.order is None else out[:, list(plan.order)]
