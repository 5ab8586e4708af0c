"""The window rule in one place: query i with window w and s sinks sees keys j <= i with
i - w < j (its window) or j < s (the sequence's first keys, "attention sinks").

`window_allows` is the rule itself, on broadcastable tensors and with tensor operations only,
so a FlexAttention mask_mod can call it; every mask in the package is built from it.
"""

from __future__ import annotations

import torch

IntLike = torch.Tensor | int


def window_allows(
    query: IntLike, key: IntLike, window: IntLike, sinks: IntLike | None = None
) -> torch.Tensor:
    """Bool, the broadcast shape of the arguments (at least one a tensor): True where the query
    at position `query` may attend the key at position `key`, i.e. 0 <= query - key < window,
    or (sinks given) key < sinks with key <= query."""
    distance = query - key
    near = distance < window
    if sinks is not None:
        near = near | (key < sinks)
    return (distance >= 0) & near  # type: ignore[return-value]


def window_mask(
    windows: torch.Tensor, seq_len: int, sinks: torch.Tensor | None = None
) -> torch.Tensor:
    """Boolean (H, T, T) mask, True where head h's query i may attend key j."""
    pos = torch.arange(seq_len, device=windows.device)
    per_head = (-1, 1, 1)
    sink_t = None if sinks is None else sinks.to(windows.device).reshape(per_head)
    return window_allows(pos[:, None], pos[None, :], windows.reshape(per_head), sink_t)
