"""Several new positions into a filled `KVCache` at once: the next turn of a conversation, or a
question after a cached document, without feeding the history again.

Shapes as in `aah.model.cache`: B batch, Hq query heads, Hkv KV heads, G = Hq / Hkv, D head
dim, n new positions, t positions already held.

The new queries (positions t .. t + n - 1) read, per KV head, the keys the cache still holds
(its sinks and the last C positions of its ring) and the n new keys, under the window rule of
a whole-sequence prefill: the query at p with window w and s sinks sees p - w < j <= p and
j < s. Every key that rule can pick is there: w <= C, so the window of a query at p >= t starts
at or after t - C, the oldest position the ring holds, and sinks live in their own slots. A
sink position that is also in the ring counts once (as a window key when it lies inside the
window, as a sink only outside it). Only then are the new keys written (`KVCache.prefill`):
written first they would overwrite ring slots the earlier new queries still read.

Left-padded batches are refused (their sinks and windows count from each row's own first real
token; a conversation is one row), as is anything under `torch.compile` (the key count depends
on t).
"""

from __future__ import annotations

import torch

from aah.attention.kv_bytes import head_sinks
from aah.attention.sink_logit import sdpa_with_sink_logit
from aah.model.cache import KVCache
from aah.model.cache_layout import Bucket


def extend(
    store: KVCache,
    layer: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    logit: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attend the n new queries q (B, Hq, n, D) of `layer` over the held keys and the new k, v
    (B, Hkv, n, D), then store k, v, with a sink logit per query head where `logit` (Hq,) is
    given. Returns (B, Hq, n, D). The caller advances the store by n once every layer has
    run."""
    t, n = store.length, q.shape[2]
    if store.pads is not None:
        raise ValueError(
            "KVCache: several new tokens into a left-padded batch's filled cache are not "
            "supported; feed them one at a time"
        )
    if t + n > store.max_len:
        raise ValueError(f"{t + n} positions exceed the cache's max_len={store.max_len}")
    windows = store.plan[layer]
    sinks = head_sinks(windows, store.sinks[layer], store.max_len)
    group = store.n_head // store.n_kv_head
    out = q.new_empty(q.shape)
    for b in store.layers[layer]:
        keys, values, key_pos, is_sink = _held_and_new(b, k, v, t)
        query_pos = torch.arange(t, t + n, device=q.device)[:, None]  # (n, 1)
        for i, head in enumerate(b.kv_heads):
            heads = slice(head * group, (head + 1) * group)
            w = torch.tensor(windows[heads], device=q.device)[:, None, None]  # (G, 1, 1)
            s = torch.tensor(sinks[heads], device=q.device)[:, None, None]
            inside = (key_pos <= query_pos) & (key_pos > query_pos - w) & ~is_sink
            as_sink = is_sink & (key_pos < s) & (key_pos <= query_pos - w)
            out[:, heads] = sdpa_with_sink_logit(
                q[:, heads], keys[:, i : i + 1].expand(-1, group, -1, -1),
                values[:, i : i + 1].expand(-1, group, -1, -1), (inside | as_sink)[None], scale,
                None if logit is None else logit[heads].to(q.dtype).view(1, -1, 1),
            )  # fmt: skip
    store.prefill(layer, k, v)
    return out


def _held_and_new(
    b: Bucket, k: torch.Tensor, v: torch.Tensor, t: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The bucket's keys and values (B, Hb, L, D): its held sinks, its ring in position order,
    then the new ones; each key's position (L,) and whether it is a sink slot (L,)."""
    device = b.k.device
    n_sink, held = min(b.sinks, t), min(t, b.capacity)
    ring_pos = torch.arange(t - held, t, device=device)
    ring_slots = b.sinks + ring_pos % b.capacity
    new_k, new_v = k[:, b.select].to(b.k.dtype), v[:, b.select].to(b.v.dtype)
    keys = torch.cat([b.k[:, :, :n_sink], b.k[:, :, ring_slots], new_k], dim=2)
    values = torch.cat([b.v[:, :, :n_sink], b.v[:, :, ring_slots], new_v], dim=2)
    new_pos = torch.arange(t, t + k.shape[2], device=device)
    key_pos = torch.cat([torch.arange(n_sink, device=device), ring_pos, new_pos])
    is_sink = torch.arange(key_pos.numel(), device=device) < n_sink
    return keys, values, key_pos, is_sink
