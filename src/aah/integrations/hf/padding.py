"""Simple padding for the "aah" attention: rows whose real tokens are one run (left, right or
both sides padded) run on the fast backends without a dense mask (pure torch).

Shapes: B batch, T queries = keys (a prefill), slots index the keys handed over (padding
included). A row's real tokens are the slots its own query sees (the mask's diagonal); they
are "simple" when they form one run [first, end) and the mask of each real query is exactly
causal (and the layer's sliding window) over them. Then real position p = slot - first, and
windowed attention over the slots from `first` on is exact for every real row: under a causal
mask the pad slots after the run (right padding) are never read by a real row, whatever they
hold. Deciding this reads the mask's values, so it runs outside compiled code only; compiled
code and every other mask take the general rule (`hf.masks`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aah.attention.masks import window_allows


@dataclass(frozen=True)
class Padding:
    """One run of real tokens per row: `first` (B,) long, its first slot (0 for a row with
    none), and whether some row ends before the last slot (right padding)."""

    first: torch.Tensor
    right: bool

    @property
    def left(self) -> bool:
        return bool((self.first > 0).any())


def causal_pattern(
    q_len: int, k_len: int, sliding_window: int | None, device: torch.device
) -> torch.Tensor:
    """(Tq, Tk) bool: query i (at slot k_len - q_len + i) may see key j."""
    window = k_len if sliding_window is None else sliding_window  # k_len: plain causal
    slots = torch.arange(k_len - q_len, k_len, device=device)
    return window_allows(slots[:, None], torch.arange(k_len, device=device), window)


def simple_padding(allowed: torch.Tensor, sliding_window: int | None) -> Padding | None:
    """The rows' runs when `allowed` (B, 1 or H, T, T) is causal over one run of real tokens
    per row (the same for every head); None for anything else (holes, packed sequences,
    custom masks). Reads the mask's values: not for compiled code."""
    if allowed.shape[1] != 1 and not bool((allowed == allowed[:, :1]).all()):
        return None
    mask = allowed[:, 0]
    seq_len = mask.shape[-1]
    real = mask.diagonal(dim1=-2, dim2=-1)  # (B, T): a real token sees itself
    count = real.sum(-1)
    first = real.long().argmax(-1)  # 0 for a row with no real token
    slots = torch.arange(seq_len, device=mask.device)
    run = (slots >= first[:, None]) & (slots < (first + count)[:, None])
    if not torch.equal(real, run):
        return None
    expected = causal_pattern(seq_len, seq_len, sliding_window, mask.device) & real[:, None, :]
    rows = real[:, :, None]  # pad query rows are free: nothing reads them
    if not torch.equal(mask & rows, expected & rows):
        return None
    return Padding(first, bool((first + count < seq_len).any()))


def check_sinks_kept(position_ids: torch.Tensor | None, k_len: int, batch: int) -> None:
    """ValueError when the keys handed over no longer start at each row's first real token
    (a cache that drops old keys), so sink keys are missing. Reads the position ids: not for
    compiled code."""
    if position_ids is None:
        return
    last = position_ids.expand(batch, -1)[:, -1].long()
    first = (k_len - 1) - last  # the slot of real position 0, per row
    if bool((first < 0).any()):
        raise ValueError(
            "aah attention: the cache no longer holds the first tokens (a sliding-window layer "
            "cache drops them), so attention sinks cannot be served; use PerHeadCache "
            "(aah.integrations.hf.per_head_cache) or a full DynamicCache"
        )
