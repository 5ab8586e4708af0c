"""FlexAttention backend: one compiled kernel, a per-head BlockMask that skips empty tiles.

Sinks are part of the mask rule, so the BlockMask keeps the first key tiles for every query
tile that needs them: correct by construction, on any device.

The BlockMask depends on (T, windows, device) and is cached on that key; the compiled kernel is
built on first use (nothing happens at import). PyTorch has no flex backward on CPU, so on CPU
this backend is forward-only (inference); on CUDA it runs forward and backward.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache

import torch

from aah.attention.masks import window_allows

Sinks = tuple[int, ...] | None  # per query head; None: no sinks

TILE = 128  # FlexAttention's default block size, used for the BlockMask and the cost count


@cache
def _compiled_flex() -> Callable[..., torch.Tensor]:
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


@lru_cache(maxsize=64)
def block_mask(windows: tuple[int, ...], seq_len: int, device: str, sinks: Sinks = None):  # type: ignore[no-untyped-def]
    """Per-head sliding-window BlockMask: query i of head h sees keys j <= i with
    i - w_h < j, or j < s_h (its sinks)."""
    from torch.nn.attention.flex_attention import create_block_mask

    window_of_head = torch.tensor(windows, device=device)
    sinks_of_head = None if sinks is None else torch.tensor(sinks, device=device)

    def sliding_window(b, h, q_idx, kv_idx):  # type: ignore[no-untyped-def]
        sink = None if sinks_of_head is None else sinks_of_head[h]
        return window_allows(q_idx, kv_idx, window_of_head[h], sink)

    return create_block_mask(
        sliding_window, B=None, H=len(windows), Q_LEN=seq_len, KV_LEN=seq_len, device=device
    )


def check_flex(q: torch.Tensor, needs_grad: bool) -> None:
    if needs_grad and q.device.type == "cpu":
        raise ValueError(
            "backend 'flex' cannot run a backward on CPU (PyTorch has no CPU flex backward): "
            "use it under torch.no_grad() for inference, or pick 'grouped' / 'auto' for training"
        )


def flex_attention_windows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: tuple[int, ...],
    scale: float,
    sinks: Sinks = None,
    *,
    compiled: bool = True,
) -> torch.Tensor:
    """`compiled=False` runs flex's eager reference path (slow; for checking mask semantics)."""
    from torch.nn.attention.flex_attention import flex_attention

    seq_len = q.shape[2]
    mask = block_mask(windows, seq_len, str(q.device), sinks)
    kernel = _compiled_flex() if compiled else flex_attention
    return kernel(q, k, v, block_mask=mask, scale=scale, enable_gqa=k.shape[1] != q.shape[1])


def flex_executed(windows: tuple[int, ...], seq_len: int, sinks: Sinks = None) -> int:
    """Score elements in the TILE x TILE tiles the BlockMask keeps (partial tiles count whole)."""
    n_tiles = -(-seq_len // TILE)
    total = 0
    for h, w in enumerate(windows):
        sink_tiles = -(-sinks[h] // TILE) if sinks else 0
        for qb in range(n_tiles):
            # The tile's first query reaches furthest back: to qb * TILE - w + 1.
            first = max(0, qb * TILE - w + 1) // TILE
            total += qb - first + 1 + min(sink_tiles, first)
    return total * TILE * TILE
