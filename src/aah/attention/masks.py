"""The window rule in one place: query i with window w sees keys j with i - w < j <= i."""

from __future__ import annotations

import torch


def window_mask(windows: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Boolean (H, T, T) mask, True where head h's query i may attend key j."""
    pos = torch.arange(seq_len, device=windows.device)
    distance = pos[:, None] - pos[None, :]  # i - j
    return (distance >= 0) & (distance < windows.reshape(-1, 1, 1))
