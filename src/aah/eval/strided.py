"""Score a whole text of any length >= 2 tokens: every next-token target exactly once.

A text no longer than the context (n - 1 <= T targets) is one window. A longer one is read
in windows of T tokens whose starts advance by `stride` (the last window ends at the text's
end); each window scores only the targets the previous one did not, so every target after
the first window sees at least T - stride tokens of context. Smaller strides give more
context per target and cost more forward passes (about (n - T) / stride + 1 windows).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

IGNORE = -100  # cross_entropy's ignore_index: targets an earlier window already scored


def default_stride(seq_len: int) -> int:
    """Half the context: every target after the first window sees >= T / 2 earlier tokens."""
    return max(1, seq_len // 2)


def strided_windows(n_tokens: int, seq_len: int, stride: int) -> list[tuple[int, int, int]]:
    """(start, length, skip) per window: input tokens[start : start + length], targets
    tokens[start + 1 : start + length + 1], of which the first `skip` are not scored."""
    if n_tokens < 2:
        raise ValueError(f"a text needs >= 2 tokens to score, got {n_tokens}")
    if not 1 <= stride <= seq_len:
        raise ValueError(f"--stride must be in [1, {seq_len}] (the context), got {stride}")
    if n_tokens - 1 <= seq_len:
        return [(0, n_tokens - 1, 0)]
    last = n_tokens - 1 - seq_len
    windows, start, scored_to = [], 0, 0  # scored_to: targets 1..scored_to are done
    while True:
        windows.append((start, seq_len, scored_to - start))
        scored_to = start + seq_len
        if start == last:
            return windows
        start = min(start + stride, last)


@torch.no_grad()
def score_text(
    model: nn.Module,
    tokens: np.ndarray,
    *,
    seq_len: int,
    stride: int,
    batch_size: int,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Mean next-token loss (nats) and bits per byte over every target of `tokens`."""
    windows = strided_windows(int(tokens.size), seq_len, stride)
    was_training = model.training
    model.eval()
    device = torch.device(device)
    total, count = 0.0, 0
    start_time = time.perf_counter()
    try:
        for first in range(0, len(windows), batch_size):
            group = windows[first : first + batch_size]
            length = group[0][1]  # every window has the same length
            rows = np.stack([np.asarray(tokens[s : s + length + 1], np.int64) for s, _, _ in group])
            x = torch.from_numpy(rows[:, :-1].copy()).to(device)
            y = torch.from_numpy(rows[:, 1:].copy())
            for row, (_, _, skip) in enumerate(group):
                y[row, :skip] = IGNORE
            logits = model(x)
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]),
                y.to(device).reshape(-1),
                ignore_index=IGNORE,
                reduction="sum",
            )
            total += float(loss)
            count += int((y != IGNORE).sum())
    finally:
        model.train(was_training)
    seconds = time.perf_counter() - start_time
    loss = total / count
    return {
        "loss": loss,
        "bpb": loss / math.log(2),
        "tokens": count,
        "tokens_per_s": count / seconds if seconds > 0 else float("nan"),
        "n_windows": len(windows),
        "stride": stride if len(windows) > 1 else None,
    }
