"""The attention function registered as "aah" in transformers' AttentionInterface (pure torch).

transformers calls it from each attention module as
    fn(module, query, key, value, attention_mask, dropout=..., scaling=..., **kwargs)
with query (B, Hq, Tq, D) and key/value (B, Hkv, Tk, D) after RoPE and after any KV-cache
update; Hq % Hkv == 0 and query head h reads KV head h // (Hq // Hkv). It returns
(output (B, Tq, Hq, D), None): no attention weights are materialised.

Per-head windows come from the module: `module.aah_windows` holds one int per query head
(None = full causal), set by `aah.integrations.hf.apply`. Query at position p with window w sees
keys p - w < j <= p. A layer's own `sliding_window` kwarg (Mistral, Qwen sliding layers) uses the
same convention, so the effective window is min(w, sliding_window).

Supported: prefill / training with Tq == Tk (any `windowed_attention` backend, gradients
included), and KV-cache decoding or chunked prefill with Tq < Tk where the cache holds the most
recent Tk keys (DynamicCache; a dense masked path, O(Tq * Tk) per head).
Refused with ValueError: attention masks other than the plain causal / sliding pattern (padding
of unequal lengths, packed sequences, static caches), dropout > 0, non-causal attention
(encoders, cross-attention), logit soft-capping and attention sinks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from aah.attention import windowed_attention

WINDOWS_ATTR = "aah_windows"
BACKEND_ATTR = "aah_backend"
PROBE_ATTR = "aah_probe"
# Additive mask values at or below this count as "masked" (exp(-1e4) is 0 in every float dtype).
MASKED_BELOW = -1.0e4

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
    _, n_q, q_len, dim = query.shape
    k_len = key.shape[2]
    if q_len > k_len:
        raise ValueError(f"aah attention: {q_len} queries but only {k_len} keys")
    if attention_mask is not None:
        check_structural_mask(attention_mask, q_len, k_len, sliding_window)
    windows = effective_windows(module, n_q, k_len, sliding_window)
    scale = float(scaling) if scaling is not None else dim**-0.5
    probe = getattr(module, PROBE_ATTR, None)
    if probe is not None:
        probe(module, query, key, value, scale)
    if q_len == k_len:
        backend = getattr(module, BACKEND_ATTR, "auto")
        out = windowed_attention(query, key, value, windows, backend=backend, scale=scale)
    else:
        out = suffix_attention(query, key, value, windows, scale)
    return out.transpose(1, 2).contiguous(), None


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


def check_structural_mask(
    mask: torch.Tensor, q_len: int, k_len: int, sliding_window: int | None
) -> None:
    """Accept a mask only if it is exactly the causal (or sliding) pattern the windows imply.

    The windows already encode causality, so a mask can only add information the backends cannot
    take (padding, packing, unused static-cache slots): refuse rather than silently ignore it.
    """
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
    expected = causal_pattern(q_len, k_len, sliding_window, mask.device)
    if not torch.equal(allowed, expected.expand_as(allowed)):
        raise ValueError(
            "aah attention: the attention mask is not the plain causal pattern. Padding (a batch "
            "of unequal lengths), packed sequences and static caches are not supported; run "
            "batches of equal length without padding (attention_mask all ones or None)"
        )


def causal_pattern(
    q_len: int, k_len: int, sliding_window: int | None, device: torch.device
) -> torch.Tensor:
    """(Tq, Tk) bool: query i (at position k_len - q_len + i) may see key j."""
    dist = query_positions(q_len, k_len, device)[:, None] - torch.arange(k_len, device=device)
    allowed = dist >= 0
    if sliding_window is not None:
        allowed &= dist < sliding_window
    return allowed


def query_positions(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    # The cache holds the most recent keys, so the queries are the last q_len positions.
    return torch.arange(k_len - q_len, k_len, device=device)


def suffix_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, windows: Sequence[int], scale: float
) -> torch.Tensor:
    """(B, Hq, Tq, D): windowed attention of the last Tq positions over Tk >= Tq keys.

    Dense masked scores in float32, grouped under their KV head (K/V never repeated). Every row
    sees at least its own key, so no row is fully masked.
    """
    batch, n_q, q_len, dim = q.shape
    n_kv, k_len = k.shape[1], k.shape[2]
    group = n_q // n_kv
    dist = query_positions(q_len, k_len, q.device)[:, None] - torch.arange(k_len, device=q.device)
    w = torch.tensor(list(windows), device=q.device).view(n_q, 1, 1)
    allowed = (dist >= 0) & (dist < w)  # (Hq, Tq, Tk)
    qg = q.float().reshape(batch, n_kv, group * q_len, dim)
    scores = torch.matmul(qg, k.float().transpose(-1, -2)).mul_(scale)
    scores = scores.view(batch, n_q, q_len, k_len).masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1).view(batch, n_kv, group * q_len, k_len)
    out = torch.matmul(probs, v.float())
    return out.view(batch, n_q, q_len, v.shape[-1]).to(q.dtype)


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
    for name, what in (("softcap", "logit soft-capping"), ("s_aux", "attention sinks")):
        if kwargs.get(name) is not None:
            raise ValueError(f"aah attention: {what} ({name!r}) is not supported")
