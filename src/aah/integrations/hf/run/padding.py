"""Simple padding for the "aah" attention: rows whose real tokens are one run (left, right or
both sides padded) run on the fast backends without a dense mask (pure torch).

Shapes: B batch, T queries = keys (a prefill), slots index the keys handed over (padding
included). A row's real tokens are the slots its own query sees (the mask's diagonal); they
are "simple" when they form one run [first, end) and the mask of each real query is exactly
causal (and the layer's sliding window) over them. Then real position p = slot - first, and
windowed attention over the slots from `first` on is exact for every real row: under a causal
mask the pad slots after the run (right padding) are never read by a real row, whatever they
hold. Deciding this reads the mask's values, so it runs outside compiled code only; compiled
code and every other mask take the general rule (`hf.run.masks`).
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


def one_head(allowed: torch.Tensor) -> torch.Tensor | None:
    """(B, Tq, Tk): the mask `allowed` (B, 1 or H, Tq, Tk) when every head's is the same;
    None when they differ (a per-head custom mask, which only the general rule serves)."""
    if allowed.shape[1] != 1 and not bool((allowed == allowed[:, :1]).all()):
        return None
    return allowed[:, 0]


def simple_padding(allowed: torch.Tensor, sliding_window: int | None) -> Padding | None:
    """The rows' runs when `allowed` (B, 1 or H, T, T) is causal over one run of real tokens
    per row (the same for every head); None for anything else (holes, packed sequences,
    custom masks). Reads the mask's values: not for compiled code."""
    mask = one_head(allowed)
    if mask is None:
        return None
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


def left_padded_keys(
    allowed: torch.Tensor, position_ids: torch.Tensor | None, sliding_window: int | None
) -> torch.Tensor | None:
    """(B, 1, Tq, Tk) bool: every key from each row's first real slot on, up to the query
    (causal, no sliding window), when `allowed` (B, 1 or H, Tq, Tk; Tq <= Tk) is causal and the
    layer's sliding window over the keys from that slot on (left padding or none, a cache in
    front); None for anything else. A layer's own sliding mask hides a row's first tokens from
    a late query, so the first slot is read off the last query's position id (what `generate`
    and a full cache give), or off the mask where the row is short. Reads the values: not for
    compiled code."""
    mask = one_head(allowed)
    if mask is None:
        return None
    batch, q_len, k_len = mask.shape
    keys = torch.arange(k_len, device=mask.device)
    candidates = [mask[:, -1].long().argmax(-1)]  # the last query sees its row's first key
    if position_ids is not None:
        last = position_ids.to(mask.device).expand(batch, -1)[:, -1].long()
        candidates.insert(0, ((k_len - 1) - last).clamp(0, k_len - 1))
    pattern = causal_pattern(q_len, k_len, sliding_window, mask.device)
    full = causal_pattern(q_len, k_len, None, mask.device)
    slots = torch.arange(k_len - q_len, k_len, device=mask.device)
    for first in candidates:
        real_keys = keys[None, None, :] >= first[:, None, None]
        real_rows = (slots[None, :] >= first[:, None])[..., None]  # pad query rows are free
        if torch.equal(mask & real_rows, pattern & real_keys & real_rows):
            return (full & real_keys)[:, None]
    return None


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
