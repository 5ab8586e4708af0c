"""The per-head window rule over any attention mask transformers hands the "aah" function
(pure torch, no data-dependent control flow: it runs inside `torch.compile(fullgraph=True)`).

Shapes: B batch, H heads of the mask (1: one for all), Tq queries, Tk keys (cache slots
included). A mask says which keys each query may see: padding (left, right, both sides, holes
inside a row), packed sequences (transformers masks each segment off from the others), a layer's
own sliding window, a static cache's empty slots, or any custom 4-D mask. The rule counts over
the keys the mask allows, in slot order:

    query i sees key j  <=>  the mask allows (i, j), and j is one of the w most recent keys the
                             mask allows i (i itself included) or one of the first s of them.

So a row's window is its w most recent real tokens and its sinks its first s real tokens, with
any padding anywhere; in a packed row each segment gets its own window and sinks; under a
custom mask the window counts the keys that mask leaves. Over a plain causal mask this is the
usual rule (query i sees i - w < j <= i or j < s). A query the mask allows no key (a left pad
row) reads the first slot instead, so no row is empty and no NaN reaches the gradients; nothing
reads such rows.

`aah_mask` is the mask builder "aah" registers with transformers' AttentionMaskInterface.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from aah.attention.sink_logit import sdpa_with_sink_logit

# Additive mask values at or below this count as "masked" (exp(-1e4) is 0 in every float dtype).
MASKED_BELOW = -1.0e4


def aah_mask(*args: Any, **kwargs: Any) -> torch.Tensor | None:
    """transformers' sdpa mask builder, except that it gives None ("plain causal, no mask")
    only when there are as many keys as queries. sdpa's own skip also covers a query offset of
    0 over more keys (a static cache's prefill), which sdpa reads as upper-left causal; the
    "aah" function reads a missing mask as the queries being the last Tq keys, so it needs
    the mask there."""
    from transformers.masking_utils import sdpa_mask

    names = ("batch_size", "q_length", "kv_length")
    sizes = dict(zip(names, args, strict=False)) | {n: kwargs[n] for n in names if n in kwargs}
    if sizes.get("q_length") != sizes.get("kv_length"):
        kwargs["allow_is_causal_skip"] = False
    return sdpa_mask(*args, **kwargs)


def allowed_from_mask(mask: torch.Tensor, q_len: int, k_len: int) -> torch.Tensor:
    """(B, 1 or H, Tq, Tk) bool from a boolean or additive (0 / -inf) 4-D mask."""
    if mask.dim() != 4 or mask.shape[-2] != q_len or mask.shape[-1] != k_len:
        raise ValueError(
            f"aah attention: attention mask of shape {tuple(mask.shape)} does not match "
            f"(batch, heads, {q_len}, {k_len}); pass a 2-D (batch, keys) mask or a 4-D one of "
            "that shape"
        )
    if mask.dtype == torch.bool:
        return mask
    return mask > MASKED_BELOW


def check_mask(mask: torch.Tensor, allowed: torch.Tensor) -> None:
    """ValueError for what the rule cannot honour: an additive bias (values other than 0 and
    -inf) or a key after its query (aah attention is causal). Reads the values: call it
    outside compiled code only."""
    if mask.dtype != torch.bool and not ((mask == 0) | (mask <= MASKED_BELOW)).all():
        raise ValueError(
            "aah attention: additive attention masks may hold only 0 (attend) and -inf or the "
            "dtype's minimum (masked); a bias with other values is not supported"
        )
    q_len, k_len = allowed.shape[-2:]
    if (allowed & ~causal(q_len, k_len, allowed.device)).any():
        raise ValueError(
            "aah attention: the attention mask lets a query see a later key; per-head windows "
            "are causal only (the queries are the last keys of the mask)"
        )


def causal(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    """(Tq, Tk) bool: the queries are the last Tq of the Tk keys, each sees itself and before."""
    slots = torch.arange(k_len - q_len, k_len, device=device)
    return slots[:, None] >= torch.arange(k_len, device=device)


def keys_in_use(allowed: torch.Tensor) -> int:
    """How many leading key slots the rule needs: `allowed` (B, 1 or H, Tq, Tk) with its
    trailing slots that no query may see (a static cache's empty slots) cut off, as long as
    the queries stay the last Tq of what is left and every allowed pair stays causal there.
    The rule is blind to slots nobody sees (it counts allowed keys), so the cut is exact, and
    a static cache then runs what a dynamic one does. Reads the values: not for compiled code."""
    q_len, k_len = allowed.shape[-2:]
    seen = allowed.flatten(0, -2).any(0).nonzero()
    used = max(int(seen[-1]) + 1 if len(seen) else 0, q_len)
    if used == k_len or bool((allowed[..., :used] & ~causal(q_len, used, allowed.device)).any()):
        return k_len
    return used


def keep_by_rank(
    allowed: torch.Tensor, windows: Sequence[int], sinks: Sequence[int]
) -> torch.Tensor:
    """(B, Hq or 1, Tq, Tk) bool: the pairs `allowed` (B, 1 or Hq, Tq, Tk) allows that the
    rule keeps for each query head's window and sinks (one mask for all heads when they
    agree and the mask has one head); a query the mask allows nothing gets the first slot."""
    n_q = len(windows)
    uniform = len(set(windows)) == 1 and len(set(sinks)) == 1 and allowed.shape[1] == 1
    n = 1 if uniform else n_q
    device = allowed.device
    w = torch.tensor(list(windows)[:n], device=device).view(1, n, 1, 1)
    s = torch.tensor(list(sinks)[:n], device=device).view(1, n, 1, 1)
    # int32 counts: from_start is 1 at a query's first allowed key, from_end 1 at its last.
    from_start = allowed.to(torch.int32).cumsum(-1)
    from_end = from_start[..., -1:] - from_start + 1
    keep = allowed & ((from_end <= w) | (from_start <= s))
    first_slot = F.pad(torch.ones_like(keep[..., :1]), (0, keep.shape[-1] - 1))
    return keep | (~keep.any(-1, keepdim=True) & first_slot)


def masked_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep: torch.Tensor,
    scale: float,
    logit: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, Hq, Tq, D): attention of q (B, Hq, Tq, D) over k, v (B, Hkv, Tk, D) where `keep`
    (B, Hq or 1, Tq, Tk) allows, by PyTorch's SDPA in float32 (K/V shared by each KV head's
    query heads, never repeated), with a sink logit per query head where `logit` (Hq,) is
    given (`aah.attention.sink_logit`)."""
    rows = None if logit is None else logit.float().view(1, -1, 1)
    out = sdpa_with_sink_logit(
        q.float(), k.float(), v.float(), keep, scale, rows, enable_gqa=q.shape[1] != k.shape[1]
    )
    return out.to(q.dtype)
