"""The window rule in one place: query i with window w and s sinks sees keys j <= i with
i - w < j (its window) or j < s (the sequence's first keys, "attention sinks")."""

from __future__ import annotations

import torch


def window_mask(
    windows: torch.Tensor, seq_len: int, sinks: torch.Tensor | None = None
) -> torch.Tensor:
    """Boolean (H, T, T) mask, True where head h's query i may attend key j."""
    pos = torch.arange(seq_len, device=windows.device)
    distance = pos[:, None] - pos[None, :]  # i - j
    allowed = (distance >= 0) & (distance < windows.reshape(-1, 1, 1))
    if sinks is not None:
        sink_key = pos[None, None, :] < sinks.to(windows.device).reshape(-1, 1, 1)
        allowed |= (distance >= 0) & sink_key
    return allowed
