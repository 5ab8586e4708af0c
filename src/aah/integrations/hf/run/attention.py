"""The attention function registered as "aah" in transformers' AttentionInterface (pure torch).

transformers calls it from each attention module as
    fn(module, query, key, value, attention_mask, dropout=..., scaling=..., **kwargs)
with query (B, Hq, Tq, D) and key/value (B, Hkv, Tk, D) after RoPE and after any KV-cache
update; Hq % Hkv == 0 and query head h reads KV head h // (Hq // Hkv). It returns
(output (B, Tq, Hq, D), None): no attention weights are materialised.

Per-head windows come from the module: `module.aah_windows` holds one int per query head
(None = full causal) and `module.aah_sinks` one sink count per query head (absent: none), set by
`aah.integrations.hf.apply`. Query at real position p with window w and s sinks sees keys
p - w < j <= p and j < s. A layer's own `sliding_window` kwarg (Mistral, Qwen and Gemma 3
sliding layers) uses the same convention, so the effective window is min(w, sliding_window)
(under a general mask transformers' own sliding mask, counted in slots, applies as well); a
head whose plan window is not below it was given no sinks (`hf.apply`).

Every mask transformers builds or a caller passes is accepted (`hf.run.masks`): the windows and
sinks count over the keys the mask allows each query, in slot order, so a row's window is its w
most recent real tokens and its sinks its first s real tokens whatever the padding (left,
right, both sides, holes), each packed segment gets its own window and sinks, a custom 4-D mask
is combined with the rule (both must allow a pair), and a static cache's empty slots are never
read. Eagerly, trailing key slots no query may see (a static cache's empty slots) are cut off
first (`hf.run.masks.keys_in_use`), so a static cache computes what a dynamic one does. Paths:
- no mask, or one run of real tokens per row (left / right / both-sides padding, checked
  outside compiled code, `hf.run.padding`): the `windowed_attention` backends on each row's real
  slots, no dense mask (pad query rows: zeros, or for right padding whatever the plain path
  leaves there; nothing reads them);
- any other mask, Tq < Tk (KV-cache decoding, chunked prefill, static caches), and every mask
  inside `torch.compile`: the rule as a dense (B, Hq or 1, Tq, Tk) mask over PyTorch's SDPA,
  without data-dependent control flow (a query the mask allows nothing reads the first slot);
- decoding with `hf.run.cache.PerHeadCache`, which hands its key tensor over marked (`CACHE_MARK`)
  so the step reads only the cache's per-head windows and sinks (left padding only); several
  tokens after held ones (a chat's next turn) take the same way, as a chunked prefill over the
  held keys (unpadded rows only).
The mask checks (additive values other than 0 / -inf, a key after its query, a cache that
dropped the sinks) read tensor values and run only outside compiled code. Refused with
ValueError: dropout > 0, non-causal attention (encoders, cross-attention), logit soft-capping,
a model's own sink logits (`s_aux`) beside a healed plan's (either alone runs, on every path:
`aah.attention.sink_logit`), and sinks on a layer whose own sliding window hides them under
a general mask (keys >= the sliding window) other than left padding over a cache, eagerly (there
the function rebuilds the mask without the slot-counted window: `hf.run.padding.left_padded_keys`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from aah.attention import windowed_attention
from aah.attention.sink_logit import windowed_with_sink_logit
from aah.integrations.hf.run.masks import (
    allowed_from_mask,
    causal,
    check_mask,
    keep_by_rank,
    keys_in_use,
    masked_attention,
)
from aah.integrations.hf.run.padding import check_sinks_kept, left_padded_keys, simple_padding

WINDOWS_ATTR = "aah_windows"
SINKS_ATTR = "aah_sinks"
# Attribute `PerHeadCache.update` sets on the key tensor it returns: the cache that holds it.
CACHE_MARK = "_aah_per_head_cache"
BACKEND_ATTR = "aah_backend"
PROBE_ATTR = "aah_probe"
# A healed plan's per-head log-temperature, (n_head,) (`hf.run.heal_params`): q * exp(t).
QUERY_SCALE_ATTR = "aah_query_log_scale"
# A healed plan's per-head sink logit, (n_head,): exp(s) joins the softmax's denominator
# (`aah.attention.sink_logit`); transformers' `s_aux` (gpt-oss's sinks) is the same term.
SINK_LOGIT_ATTR = "aah_sink_logit"

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
    log_scale = getattr(module, QUERY_SCALE_ATTR, None)
    if log_scale is not None:  # before every path, so prefill, masks and the cache agree
        query = query * log_scale.exp().to(query.dtype).view(1, -1, 1, 1)
    logit = sink_logit(module, kwargs.get("s_aux"), query.shape[1])
    batch, n_q, q_len, dim = query.shape
    step = getattr(key, CACHE_MARK, None)  # a PerHeadCache step (hf.run.cache)
    # With the per-head cache the key tensor holds only the new keys: the mask spans them all.
    k_len = step.mask_length(q_len) if step is not None else key.shape[2]
    if q_len > k_len:
        raise ValueError(f"aah attention: {q_len} queries but only {k_len} keys")
    compiling = torch.compiler.is_compiling()
    allowed = None
    if attention_mask is not None:
        allowed = allowed_from_mask(attention_mask, q_len, k_len)
        if not compiling:
            check_mask(attention_mask, allowed)
        if step is None and not compiling:  # a static cache's empty slots, eagerly: cut off
            k_len = keys_in_use(allowed)
            key, value, allowed = key[:, :, :k_len], value[:, :, :k_len], allowed[..., :k_len]
    windows = effective_windows(module, n_q, k_len, sliding_window)
    sinks = head_sinks(module, n_q)
    if any(sinks) and step is None and not compiling:
        check_sinks_kept(kwargs.get("position_ids"), k_len, batch)
    scale = float(scaling) if scaling is not None else dim**-0.5
    probe = getattr(module, PROBE_ATTR, None)
    if probe is not None:
        probe(module, query, key, value, scale)
    if step is not None and step.decoding:
        out = step.attend(query, key, value, scale, windows, sinks, allowed, logit)
        return out.transpose(1, 2).contiguous(), None
    padding = None
    if allowed is not None and q_len == key.shape[2] and not compiling:
        padding = simple_padding(allowed, sliding_window)
    if step is not None and not compiling:  # a PerHeadCache prefill: left padding only
        step.check_prefill(allowed, padding)
    if q_len == key.shape[2] and (allowed is None or padding is not None):
        pads = padding.first if padding is not None and padding.left else None
        backend = getattr(module, BACKEND_ATTR, "auto")
        out = prefill_attention(query, key, value, windows, sinks, pads, backend, scale, logit)
    else:
        if allowed is not None and _sinks_hidden(sinks, sliding_window, k_len):
            allowed = _unhide_sinks(allowed, kwargs.get("position_ids"), sliding_window, compiling)
        if allowed is None:  # the queries are the last Tq keys
            allowed = causal(q_len, k_len, query.device)[None, None]
        else:  # per-head windows are causal whatever the mask allows (checked outside compile)
            allowed = allowed & causal(q_len, k_len, query.device)
        keep = keep_by_rank(allowed, windows, sinks)
        out = masked_attention(query, key, value, keep, scale, logit)
    return out.transpose(1, 2).contiguous(), None


def head_sinks(module: torch.nn.Module, n_q: int) -> list[int]:
    """One sink count per query head: the module's (set by `hf.apply`), 0 when it has none."""
    sinks = getattr(module, SINKS_ATTR, None)
    if sinks is None:
        return [0] * n_q
    if len(sinks) != n_q:
        raise ValueError(f"aah sinks give {len(sinks)} counts, the layer has {n_q} query heads")
    return [int(s) for s in sinks]


def sink_logit(
    module: torch.nn.Module, s_aux: torch.Tensor | None, n_q: int
) -> torch.Tensor | None:
    """The layer's sink logit per query head (n_q,): a healed plan's, or the model's own
    (`s_aux`), or None."""
    healed = getattr(module, SINK_LOGIT_ATTR, None)
    if healed is not None and s_aux is not None:
        raise ValueError(
            "aah attention: the model has sink logits of its own (s_aux); a healed plan's "
            "sink logits cannot be added to them"
        )
    logit = healed if healed is not None else s_aux
    if logit is not None and logit.numel() != n_q:
        raise ValueError(f"aah attention: {logit.numel()} sink logits for {n_q} query heads")
    return None if logit is None else logit.reshape(n_q)


def prefill_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int],
    sinks: Sequence[int],
    pads: torch.Tensor | None,
    backend: str,
    scale: float,
    logit: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, Hq, T, D) windowed attention over T == Tk keys, with a sink logit per query head
    where `logit` is given. Rows of equal padding run together on their real slots (the
    windows and sinks count from the first real token); pad query rows get zeros. `pads` is
    read as Python ints: not for compiled code."""

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if logit is None:
            return windowed_attention(q, k, v, windows, backend=backend, scale=scale, sinks=sinks)
        return windowed_with_sink_logit(
            q, k, v, windows, logit.to(q.dtype), backend=backend, scale=scale, sinks=sinks
        )

    if pads is None:
        return attend(q, k, v)
    out = torch.zeros_like(q)
    for pad in sorted(set(pads.tolist())):
        rows = (pads == pad).nonzero().flatten()
        real = slice(pad, None)
        out[rows, :, real] = attend(q[rows][:, :, real], k[rows][:, :, real], v[rows][:, :, real])
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


def _sinks_hidden(sinks: Sequence[int], sliding_window: int | None, k_len: int) -> bool:
    """Whether transformers' mask of this layer's own sliding window may hide its sinks (a
    decision on shapes only)."""
    return any(sinks) and sliding_window is not None and k_len >= sliding_window


def _unhide_sinks(
    allowed: torch.Tensor,
    position_ids: torch.Tensor | None,
    sliding_window: int | None,
    compiling: bool,
) -> torch.Tensor:
    """The mask without the layer's sliding window, which the per-head windows apply anyway
    (min(w, sliding window) real tokens), so that the sinks it hides are seen. Possible where
    the rows are left padded (or not) and eager; otherwise the sinks would silently be lost:
    ValueError."""
    unhidden = None if compiling else left_padded_keys(allowed, position_ids, sliding_window)
    if unhidden is None:
        raise ValueError(
            f"aah attention: this layer's own sliding window ({sliding_window}) hides its "
            f"attention sinks among {allowed.shape[-1]} keys under this mask (holes, packed "
            "sequences, right padding, a custom or static-cache mask, or torch.compile); give "
            "the sliding-window layers no sinks, or run left-padded batches eagerly"
        )
    return unhidden


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
    if kwargs.get("softcap") is not None:
        raise ValueError("aah attention: logit soft-capping ('softcap') is not supported")
