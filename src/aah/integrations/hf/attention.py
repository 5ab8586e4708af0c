"""The attention function registered as "aah" in transformers' AttentionInterface (pure torch).

transformers calls it from each attention module as
    fn(module, query, key, value, attention_mask, dropout=..., scaling=..., **kwargs)
with query (B, Hq, Tq, D) and key/value (B, Hkv, Tk, D) after RoPE and after any KV-cache
update; Hq % Hkv == 0 and query head h reads KV head h // (Hq // Hkv). It returns
(output (B, Tq, Hq, D), None): no attention weights are materialised.

Per-head windows come from the module: `module.aah_windows` holds one int per query head
(None = full causal) and `module.aah_sinks` one sink count per query head (absent: none), set by
`aah.integrations.hf.apply`. Query at real position p with window w and s sinks sees keys
p - w < j <= p and j < s. A layer's own `sliding_window` kwarg (Mistral, Qwen sliding layers)
uses the same convention, so the effective window is min(w, sliding_window).

Supported: prefill / training with Tq == Tk (any `windowed_attention` backend, gradients
included); KV-cache decoding or chunked prefill with Tq < Tk where the cache holds the most
recent Tk keys (DynamicCache; a dense masked path, O(Tq * Tk) per head); decoding with
`hf.cache.PerHeadCache`, which hands its key tensor over marked (`CACHE_MARK`) so the step
reads only the cache's per-head windows and sinks; left padding in all of these (`hf.padding`).
Refused with ValueError: other attention masks (right padding, packed sequences, static caches),
dropout > 0, non-causal attention (encoders, cross-attention), logit soft-capping and learned
sink logits (`s_aux`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from aah.attention import windowed_attention
from aah.attention.masks import window_allows
from aah.integrations.hf.padding import check_sinks_kept, query_slots, row_pads

WINDOWS_ATTR = "aah_windows"
SINKS_ATTR = "aah_sinks"
# Attribute `PerHeadCache.update` sets on the key tensor it returns: the cache that holds it.
CACHE_MARK = "_aah_per_head_cache"
BACKEND_ATTR = "aah_backend"
PROBE_ATTR = "aah_probe"

# probe(module, query, key, value, scale): sees every call's post-RoPE tensors (plan search).
Probe = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor, torch.Tensor, float], None]

_NOT_SET = object()


def aah_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    sliding_window: int | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Per-head windowed causal attention in transformers' calling convention (module docstring)."""
    _refuse_unsupported(module, dropout, is_causal, kwargs)
    batch, n_q, q_len, dim = query.shape
    step = getattr(key, CACHE_MARK, None)  # a PerHeadCache step (hf.cache)
    # With the per-head cache the key tensor holds only the new keys: the mask spans them all.
    k_len = step.mask_length(q_len) if step is not None else key.shape[2]
    if q_len > k_len:
        raise ValueError(f"aah attention: {q_len} queries but only {k_len} keys")
    pads = None
    position_ids = kwargs.get("position_ids")
    if attention_mask is not None:
        pads = row_pads(attention_mask, position_ids, q_len, k_len, sliding_window, batch)
    windows = effective_windows(module, n_q, k_len, sliding_window)
    sinks = head_sinks(module, n_q)
    if any(sinks) and step is None:
        check_sinks_kept(position_ids, k_len, batch)
    scale = float(scaling) if scaling is not None else dim**-0.5
    probe = getattr(module, PROBE_ATTR, None)
    if probe is not None:
        probe(module, query, key, value, scale)
    if step is not None and step.decoding:
        out = step.attend(query, key, value, scale, windows, sinks, pads)
    elif q_len == key.shape[2]:
        backend = getattr(module, BACKEND_ATTR, "auto")
        out = prefill_attention(query, key, value, windows, sinks, pads, backend, scale)
    else:
        out = suffix_attention(query, key, value, windows, scale, sinks, pads)
    return out.transpose(1, 2).contiguous(), None


def head_sinks(module: torch.nn.Module, n_q: int) -> list[int]:
    """One sink count per query head: the module's (set by `hf.apply`), 0 when it has none."""
    sinks = getattr(module, SINKS_ATTR, None)
    if sinks is None:
        return [0] * n_q
    if len(sinks) != n_q:
        raise ValueError(f"aah sinks give {len(sinks)} counts, the layer has {n_q} query heads")
    return [int(s) for s in sinks]


def prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int],
    sinks: Sequence[int],
    pads: torch.Tensor | None,
    backend: str,
    scale: float,
) -> torch.Tensor:
    """(B, Hq, T, D) windowed attention over T == Tk keys. Rows of equal padding run together
    on their real slots (the windows and sinks count from the first real token); pad query
    rows get zeros."""
    if pads is None:
        return windowed_attention(q, k, v, windows, backend=backend, scale=scale, sinks=sinks)
    out = torch.zeros_like(q)
    for pad in sorted(set(pads.tolist())):
        rows = (pads == pad).nonzero().flatten()
        real = slice(pad, None)
        out[rows, :, real] = windowed_attention(
            q[rows][:, :, real], k[rows][:, :, real], v[rows][:, :, real], windows,
            backend=backend, scale=scale, sinks=sinks,
        )  # fmt: skip
    return out


def effective_windows(
    module: torch.nn.Module, n_q: int, k_len: int, sliding_window: int | None
) -> list[int]:
    """One window per query head: the module's plan, capped by the layer's own sliding window."""
    planned = getattr(module, WINDOWS_ATTR, _NOT_SET)
    if planned is _NOT_SET:
        raise ValueError(
            f"{type(module).__name__} has no aah windows: call "
            "aah.integrations.hf.apply(model, plan) instead of setting attn_implementation='aah'"
        )
    windows = [k_len] * n_q if planned is None else [int(w) for w in planned]  # type: ignore[union-attr]
    if len(windows) != n_q:
        raise ValueError(f"aah plan gives {len(windows)} windows, the layer has {n_q} query heads")
    if sliding_window is not None:
        windows = [min(w, int(sliding_window)) for w in windows]
    return windows


def suffix_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int],
    scale: float,
    sinks: Sequence[int] | None = None,
    pads: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, Hq, Tq, D): windowed attention of the last Tq slots over Tk >= Tq keys.

    A boolean mask per query head (one for all when their windows and sinks agree) over dense
    scores, in float32, by PyTorch's SDPA (K/V shared by each KV head's query heads, never
    repeated). Every real row sees at least its own key; pad rows (all keys masked) give
    zeros.
    """
    batch, n_q, q_len, _ = q.shape
    k_len = k.shape[2]
    device = q.device
    slots = query_slots(q_len, k_len, device)
    keys = torch.arange(k_len, device=device)
    heads = (list(windows), list(sinks or [0] * n_q))
    per_head = 1 if all(len(set(h)) == 1 for h in heads) else n_q  # one mask serves all heads
    w, s = (torch.tensor(h[:per_head], device=device).view(1, per_head, 1, 1) for h in heads)
    pad = pads if pads is not None else torch.zeros(batch, dtype=torch.long, device=device)
    pad = pad.to(device).view(batch, 1, 1, 1)
    # Real positions per row: the window and sinks count from the row's first real token.
    real_query = slots.view(1, 1, q_len, 1) - pad
    real_key = keys.view(1, 1, 1, k_len) - pad
    allowed = window_allows(real_query, real_key, w, s) & (real_key >= 0)  # (B, Hq|1, Tq, Tk)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=allowed, scale=scale,
        enable_gqa=n_q != k.shape[1],
    )  # fmt: skip
    if pads is not None:  # pad rows see nothing: zeros, whatever the kernel left there
        out = torch.where(allowed.any(-1, keepdim=True), out, 0.0)
    return out.to(q.dtype)


def _refuse_unsupported(
    module: torch.nn.Module, dropout: float, is_causal: bool | None, kwargs: dict[str, Any]
) -> None:
    if dropout and dropout > 0:
        raise ValueError(
            f"aah attention: attention dropout {dropout} is not supported; call model.eval() "
            "or set the config's attention dropout to 0 for training"
        )
    if is_causal is False or getattr(module, "is_causal", True) is False:
        raise ValueError(
            f"aah attention: {type(module).__name__} is not causal (encoder or cross-attention); "
            "per-head windows are causal only"
        )
    for name, what in (("softcap", "logit soft-capping"), ("s_aux", "learned sink logits")):
        if kwargs.get(name) is not None:
            raise ValueError(f"aah attention: {what} ({name!r}) is not supported")
