"""Left padding for the "aah" attention: per-row pads read from the positions, checked against
the mask transformers built (pure torch).

Shapes: B batch, Tq queries, Tk keys; slots index the keys handed over (padding included), the
queries are the last Tq slots. A row with `pad` leading pad slots has its real position
p = slot - pad; `generate` numbers real tokens from 0 (position_ids = cumsum(mask) - 1), so the
last query's position id gives pad = (Tk - 1) - position_ids[b, -1]. A negative value means a
cache that keeps only recent keys (a sliding-window layer) has dropped the first ones: no
padding is left in view, and sinks cannot be served (`check_sinks_kept`).

The windows (and sinks) apply to real positions; the mask may add nothing else: the mask of a
real query row must be exactly causal (and the layer's sliding window) over the row's real keys.
Pad query rows are free (nothing reads their outputs). Anything else (right padding, packed
sequences, custom 4-D masks, static caches) is refused with ValueError.
"""

from __future__ import annotations

import torch

from aah.attention.masks import window_allows

# Additive mask values at or below this count as "masked" (exp(-1e4) is 0 in every float dtype).
MASKED_BELOW = -1.0e4

UNSUPPORTED_MASK = (
    "aah attention: the attention mask is not causal with left padding. Right padding, packed "
    "sequences, custom masks and static caches are not supported; pad on the left "
    "(tokenizer.padding_side = 'left', what generate expects) or run equal lengths"
)


def allowed_from_mask(mask: torch.Tensor, q_len: int, k_len: int) -> torch.Tensor:
    """(B, Tq, Tk) bool from a boolean or additive (B, 1 or H, Tq, Tk) mask."""
    if mask.dim() != 4 or mask.shape[-2] != q_len or mask.shape[-1] != k_len:
        raise ValueError(
            f"aah attention: attention mask of shape {tuple(mask.shape)} does not match "
            f"(batch, heads, {q_len}, {k_len}); static caches and custom masks are not supported"
        )
    if mask.dtype == torch.bool:
        allowed = mask
    else:
        allowed = mask == 0
        if not (allowed | (mask <= MASKED_BELOW)).all():
            raise ValueError("aah attention: additive bias masks (values other than 0 / -inf)")
    if allowed.shape[1] != 1 and not (allowed == allowed[:, :1]).all():
        raise ValueError("aah attention: per-head attention masks are not supported")
    return allowed[:, 0]


def causal_pattern(
    q_len: int, k_len: int, sliding_window: int | None, device: torch.device
) -> torch.Tensor:
    """(Tq, Tk) bool: query i (at slot k_len - q_len + i) may see key j."""
    window = k_len if sliding_window is None else sliding_window  # k_len: plain causal
    return window_allows(
        query_slots(q_len, k_len, device)[:, None], torch.arange(k_len, device=device), window
    )


def query_slots(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    # The keys end at the queries: the queries are the last q_len slots.
    return torch.arange(k_len - q_len, k_len, device=device)


def row_pads(
    mask: torch.Tensor,
    position_ids: torch.Tensor | None,
    q_len: int,
    k_len: int,
    sliding_window: int | None,
    batch: int,
) -> torch.Tensor | None:
    """Pad slots per row (B,) long, or None when no row is padded; ValueError when the mask
    is anything other than causal with left padding."""
    allowed = allowed_from_mask(mask, q_len, k_len).expand(batch, q_len, k_len)
    device = allowed.device
    candidates = []
    if position_ids is not None:
        last = position_ids.to(device).expand(batch, -1)[:, -1].long()
        candidates.append(((k_len - 1) - last).clamp(0, k_len - 1))
    # A forward called without position ids numbers the pad slots too: read the pads off the
    # mask instead (the last query, a real token, sees keys from its row's first real slot).
    candidates.append(allowed[:, -1].long().argmax(dim=-1))
    for pads in candidates:
        if _matches(allowed, pads, q_len, k_len, sliding_window):
            return pads if bool((pads > 0).any()) else None
    raise ValueError(UNSUPPORTED_MASK)


def _matches(
    allowed: torch.Tensor, pads: torch.Tensor, q_len: int, k_len: int, sliding_window: int | None
) -> bool:
    """Whether the real query rows of `allowed` (B, Tq, Tk) are causal over the real keys."""
    device = allowed.device
    keys = torch.arange(k_len, device=device)
    expected = causal_pattern(q_len, k_len, sliding_window, device) & (
        keys[None, None, :] >= pads[:, None, None]
    )
    real_rows = (query_slots(q_len, k_len, device)[None, :] >= pads[:, None])[..., None]
    return torch.equal(allowed & real_rows, expected & real_rows)


def check_sinks_kept(position_ids: torch.Tensor | None, k_len: int, batch: int) -> None:
    """ValueError when the keys handed over no longer start at each row's first real token
    (a cache that drops old keys), so sink keys are missing."""
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
