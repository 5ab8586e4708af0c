"""What a window plan costs in KV memory: the one byte count of both per-head caches.

The package's `model.cache.KVCache` (and `integrations.hf.cache.PerHeadCache`, which stores in
one) keeps, per layer and KV head, S sink slots then a ring of C slots:

- C = min(the widest window of the head's query heads, max_len) (`kv_capacities`);
- S = the most sink slots any of those query heads needs: min(s, max_len - w) for w <
  max_len, none for a head that sees its whole context (`kv_sinks`, `cost.sink_slots`).

After t positions it holds min(S, t) + min(C, t) positions of each KV head (`held_positions`),
each D * 2 * itemsize bytes (keys and values). `plan_kv_bytes` is that count for one sequence
with max_len = t = the plan's length, as the searches and the CLI predict it. A layer with a
sliding window of its own (Mistral, Qwen, Gemma 3) stores min(plan window, sliding window), and
a head whose plan window does not cut below that window attends as the model does: no sinks
(`layer_sinks`). The full cache a KV fraction is taken of is the model's own (`full_kv_bytes`:
each layer keeps min(T, its sliding window) positions, as transformers' DynamicCache does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aah.attention.cost import sink_slots


def kv_capacities(plan: Sequence[Sequence[int]], n_kv_head: int, max_len: int) -> list[list[int]]:
    """`[layer][kv_head]` ring capacities: min(largest window of the head's queries, max_len)."""
    caps = []
    for row in plan:
        group = len(row) // n_kv_head
        caps.append([min(max(row[j * group : (j + 1) * group]), max_len) for j in range(n_kv_head)])
    return caps


def layer_sinks(window: int, sinks: int, sliding: int | None) -> int:
    """The sinks a head keeps on a layer with a sliding window of its own: none where its plan
    window does not cut below that window (the head then attends exactly as the model does;
    sinks there would show it keys it was never trained to see), else `sinks`."""
    return 0 if sliding and window >= sliding else sinks


def head_sinks(windows: Sequence[int], sinks: Sequence[int], max_len: int) -> list[int]:
    """Sinks that can matter within max_len positions: min(s, max_len - w) if w < max_len
    (a sink j is outside the window of the query at p only if j <= p - w), else 0."""
    return [sink_slots(w, s, max_len) for w, s in zip(windows, sinks, strict=True)]


def kv_sinks(
    plan: Sequence[Sequence[int]], sinks: Sequence[Sequence[int]], n_kv_head: int, max_len: int
) -> list[list[int]]:
    """`[layer][kv_head]` sink slots: the most any of the head's queries needs."""
    out = []
    for row, srow in zip(plan, sinks, strict=True):
        group = len(row) // n_kv_head
        eff = head_sinks(row, srow, max_len)
        out.append([max(eff[j * group : (j + 1) * group]) for j in range(n_kv_head)])
    return out


def held_positions(
    capacities: Sequence[Sequence[int]], sinks: Sequence[Sequence[int]], t: int
) -> int:
    """Positions held over all layers and KV heads after t positions: sum of min(S, t) +
    min(C, t) (capacities and sink slots [layer][kv_head])."""
    return sum(
        min(s, t) + min(c, t)
        for caps, slots in zip(capacities, sinks, strict=True)
        for c, s in zip(caps, slots, strict=True)
    )


@dataclass(frozen=True)
class KVShape:
    """What KV memory a model's plan costs: KV heads per layer, bytes per stored position of
    one KV head (D * 2 * itemsize, keys and values; 0 when bytes are not counted), and each
    layer's own sliding window (None: none)."""

    n_kv_head: int
    position_bytes: int
    sliding: tuple[int | None, ...]

    @property
    def n_layer(self) -> int:
        return len(self.sliding)


def kv_head_bytes(window: int, sliding: int | None, sinks: int, seq_len: int, unit: int) -> int:
    """Bytes one KV head whose query heads all have `window` and `sinks` holds after seq_len
    positions (max_len = seq_len), its layer's `sliding` window applied; `unit` bytes each."""
    w = min(window, sliding) if sliding else window
    return (sink_slots(w, layer_sinks(window, sinks, sliding), seq_len) + min(w, seq_len)) * unit


def plan_kv_bytes(
    windows: Sequence[Sequence[int]],
    sinks: Sequence[Sequence[int]] | None,
    shape: KVShape,
    seq_len: int,
) -> int:
    """Bytes the cache holds per sequence after `seq_len` positions with max_len = seq_len,
    for a plan [layer][query head] and sinks alike (None: none)."""
    capped = [
        [min(w, cap) if cap else w for w in row]
        for row, cap in zip(windows, shape.sliding, strict=True)
    ]
    sink_rows = (
        [[0] * len(r) for r in capped]
        if sinks is None
        else [
            [layer_sinks(w, s, cap) for w, s in zip(row, srow, strict=True)]
            for row, srow, cap in zip(windows, sinks, shape.sliding, strict=True)
        ]
    )
    caps = kv_capacities(capped, shape.n_kv_head, seq_len)
    slots = kv_sinks(capped, sink_rows, shape.n_kv_head, seq_len)
    return held_positions(caps, slots, seq_len) * shape.position_bytes


def full_kv_bytes(shape: KVShape, seq_len: int) -> int:
    """Bytes of the model's own cache after seq_len positions (transformers' DynamicCache):
    every position of every KV head, within each layer's own sliding window."""
    held = sum(min(seq_len, cap) if cap else seq_len for cap in shape.sliding)
    return held * shape.n_kv_head * shape.position_bytes
