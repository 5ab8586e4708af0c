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

A rolling cache (`KVCache.shift`) also starts here, from t = 0: its prompt follows the rolling
rule (`aah.model.cache`), under which a query past s + w - 1 reads its sinks moved forward by
p - (s + w - 1), a distance that differs from query to query. Scores are kept exact in one SDPA
call by doubling the head dimension: each query becomes [q, R(-d) q] (its own move d back),
each window key [k, 0] and each sink key [0, k], so q'.k' = q.k for a window key and
R(-d) q . k = q . R(d) k for a sink. Queries go in blocks of `QUERY_BLOCK`, each over the keys
its windows can reach, so a long prompt never builds a prompt-by-prompt mask.

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
from aah.model.rope_shift import RopeShift

# Queries attended together: memory grows as QUERY_BLOCK x (sinks + capacity + QUERY_BLOCK).
QUERY_BLOCK = 512


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
        keys, values, key_pos, n_sink = _held_and_new(b, k, v, t)
        held = min(t, b.capacity)
        for a in range(0, n, QUERY_BLOCK):
            z = min(n, a + QUERY_BLOCK)
            # The window keys queries t + a .. t + z - 1 can reach: positions > t + a - C,
            # after the sink copies; one view when that is every key up to the block's last.
            first, end = n_sink + max(0, a - b.capacity + 1 + held), n_sink + held + z
            reach: slice | torch.Tensor = slice(0, end)
            if first > n_sink:
                reach = torch.cat([torch.arange(n_sink), torch.arange(first, end)])
                reach = reach.to(keys.device)
            pos = key_pos[reach]
            is_sink = torch.arange(pos.numel(), device=pos.device) < n_sink
            block = _Block(pos, is_sink, torch.arange(t + a, t + z, device=q.device))
            for i, head in enumerate(b.kv_heads):
                heads = slice(head * group, (head + 1) * group)
                out[:, heads, a:z] = block.attend(
                    q[:, heads, a:z], keys[:, i : i + 1, reach], values[:, i : i + 1, reach],
                    windows[heads], sinks[heads], scale,
                    None if logit is None else logit[heads].to(q.dtype).view(1, -1, 1),
                    store.shift, layer,
                )  # fmt: skip
    store.prefill(layer, k, v)
    return out


class _Block:
    """One block of new queries (positions `query_pos`) and the keys they may read: each key's
    position and whether it is a sink slot's copy."""

    def __init__(
        self, key_pos: torch.Tensor, is_sink: torch.Tensor, query_pos: torch.Tensor
    ) -> None:
        self.key_pos, self.is_sink, self.query_pos = key_pos, is_sink, query_pos[:, None]
        self.any_sink = bool(is_sink.any())  # read once per block, not per KV head

    def attend(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor,
        windows: list[int], sinks: list[int], scale: float, logit: torch.Tensor | None,
        shift: RopeShift | None, layer: int,
    ) -> torch.Tensor:  # fmt: skip
        """q (B, G, m, D) of one KV head's query heads over its keys, values (B, 1, L, D)
        under the window rule (rolling where `shift` is given): (B, G, m, D)."""
        device, group = q.device, q.shape[1]
        w = torch.tensor(windows, device=device)[:, None, None]  # (G, 1, 1)
        s = torch.tensor(sinks, device=device)[:, None, None]
        pos, is_sink, query = self.key_pos, self.is_sink, self.query_pos
        inside = (pos <= query) & (pos > query - w) & ~is_sink
        as_sink = is_sink & (pos < s) & (pos <= query - w)
        keys, values = keys.expand(-1, group, -1, -1), values.expand(-1, group, -1, -1)
        if shift is not None and self.any_sink:
            moved = (query - (s + w - 1)).clamp(min=0)[..., 0]  # (G, m): each query's move
            q = torch.cat([q, shift.rotate(layer, q, -moved)], dim=-1)
            sink_col = is_sink[:, None].to(keys.dtype)
            keys = torch.cat([keys * (1 - sink_col), keys * sink_col], dim=-1)
        return sdpa_with_sink_logit(q, keys, values, (inside | as_sink)[None], scale, logit)


def _held_and_new(
    b: Bucket, k: torch.Tensor, v: torch.Tensor, t: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """The bucket's keys and values (B, Hb, L, D): copies of its sink positions (held in their
    slots, or among the new keys), its ring in position order, then the new keys; each key's
    position (L,), and how many sink copies lead."""
    device = b.k.device
    n = k.shape[2]
    held_sinks, n_sink, held = min(b.sinks, t), min(b.sinks, t + n), min(t, b.capacity)
    ring_pos = torch.arange(t - held, t, device=device)
    ring_slots = b.sinks + ring_pos % b.capacity
    new_k, new_v = k[:, b.select].to(b.k.dtype), v[:, b.select].to(b.v.dtype)
    fresh = slice(0, n_sink - held_sinks)  # sink positions first seen in this chunk
    keys = torch.cat([b.k[:, :, :held_sinks], new_k[:, :, fresh], b.k[:, :, ring_slots], new_k], 2)
    values = torch.cat(
        [b.v[:, :, :held_sinks], new_v[:, :, fresh], b.v[:, :, ring_slots], new_v], 2
    )
    new_pos = torch.arange(t, t + n, device=device)
    key_pos = torch.cat([torch.arange(n_sink, device=device), ring_pos, new_pos])
    return keys, values, key_pos, n_sink
