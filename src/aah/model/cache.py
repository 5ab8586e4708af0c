"""`KVCache`: a per-head KV cache whose memory and decode work follow the window plan.

Shapes: B batch, Hq query heads, Hkv key/value heads, G = Hq / Hkv, D head dim, C capacity,
S sink slots.

Each KV head keeps a ring buffer of the last `C = min(w, max_len)` positions, where `w` is the
largest window among the query heads that read it (GQA/MQA) and `max_len` the most positions
the cache will ever hold, and, when those heads have attention sinks, the first `S` positions
(S = their largest sink count that can matter within max_len). Position p lives in ring slot
`p % C`; a head with `C == max_len` never wraps, so it is a plain growing cache. KV heads of
equal (capacity, sinks) share one tensor per layer so decoding batches over them. Within a
bucket, query heads of equal (window, sinks) form rectangles (KV heads x group rows), one SDPA
call each, over exactly their last w ring entries (a slice, or a copy of w entries where the
ring wraps) and the sinks their window has left; a mask is built only for padded rows.
Storage is reserved once, in the constructor; `nbytes()` counts the positions held so far and
reaches `reserved_nbytes()` when `max_len` positions have been seen.

Left padding (batches of unequal prompts): `pads[b]` slots precede row b's first real token;
its sinks are its own first S real tokens, and pad slots are never read.

Inside `torch.compile` a step reads each bucket's whole storage under a mask of the entries
the slices above would give (`cache_layout.fixed_read_mask`): no shape or branch depends on
the position, so one graph serves every step (at S + C keys per head instead of w + s).

Rolling (`shift`, a `RopeShift` of the model's rotary frequencies; `max_len` then may be
`UNBOUNDED_LEN`): the cache never fills, and once a head's window has left its sinks the sinks
take the positions StreamingLLM assigns within the cache. A query at position p of a head with
window w and s sinks reads the s first keys and the w last ones; for p >= s + w - 1 the window's
keys keep their distances to the query (rotary scores depend on distances only) and sink j sits
at distance s + w - 1 - j instead of p - j: each step rotates the s sink keys it reads forward by
p - (s + w - 1). Before that every position is the plain one. Unpadded rows only, not inside
`torch.compile`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from aah.attention.kv_bytes import head_sinks, held_positions, kv_capacities, kv_sinks
from aah.attention.sink_logit import sdpa_with_sink_logit
from aah.model.cache_layout import (
    Bucket,
    fixed_read_mask,
    make_rows,
    padded_mask,
    ring_last,
    ring_positions,
    selector,
)
from aah.model.rope_shift import RopeShift

# `max_len` of a rolling cache: no limit on the positions it sees (its storage is the plan's).
UNBOUNDED_LEN = 1 << 62


class KVCache:
    """Per-layer, per-KV-head ring buffers for one batch of sequences, sized by the plan.

    Use: `prefill(layer, k, v)` for every layer with the prompt's keys/values, `advance(T)`;
    then per new token `attend(layer, q, k, v)` for every layer, `advance(1)`. `GPT.forward`
    does this when given the cache: each attention receives its own `layer(i)` view.
    """

    def __init__(
        self,
        plan: Sequence[Sequence[int]],
        *,
        n_kv_head: int,
        head_dim: int,
        batch: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        sinks: Sequence[Sequence[int]] | None = None,
        pads: Sequence[int] | torch.Tensor | None = None,
        shift: RopeShift | None = None,
    ) -> None:
        """plan `[layer][query head]` windows >= 1; sinks alike (ints >= 0, None: none);
        `max_len` >= 1 positions at most; pads: left-padding slots per row (None: none), ints
        or a (B,) tensor (inside compiled code a tensor is kept as it is, unread); `shift`:
        roll (module docstring), moving sinks with these rotary frequencies."""
        rows = [[int(w) for w in row] for row in plan]
        if not rows:
            raise ValueError("plan is empty: give one row of windows per layer")
        n_head = len(rows[0])
        if n_kv_head < 1 or n_head % n_kv_head or any(len(r) != n_head for r in rows):
            raise ValueError(
                f"plan rows must each hold one window per query head, a multiple of "
                f"n_kv_head={n_kv_head}; got row lengths {[len(r) for r in rows]}"
            )
        if any(w < 1 for r in rows for w in r):
            raise ValueError(f"every window must be >= 1, got plan {rows}")
        if max_len < 1 or batch < 1 or head_dim < 1:
            raise ValueError(
                f"max_len, batch and head_dim must be >= 1, got {max_len}, {batch}, {head_dim}"
            )
        sink_rows = [[0] * n_head for _ in rows] if sinks is None else [list(r) for r in sinks]
        if [len(r) for r in sink_rows] != [len(r) for r in rows] or any(
            isinstance(s, bool) or not isinstance(s, int) or s < 0 for r in sink_rows for s in r
        ):
            raise ValueError(f"sinks must be ints >= 0 shaped like the plan, got {sinks}")
        self.pads = self._check_pads(pads, batch, max_len)
        if shift is not None and self.pads is not None:
            raise ValueError(
                "a rolling KVCache takes unpadded rows only (each row's sinks and positions "
                f"count from its own first token), got pads {pads}"
            )
        if shift is not None and len(shift.inv_freq) != len(rows):
            raise ValueError(
                f"shift gives rotary frequencies for {len(shift.inv_freq)} layers, the plan "
                f"has {len(rows)}"
            )
        self.shift = shift
        self.plan, self.sinks = rows, sink_rows
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, head_dim
        self.batch, self.max_len, self.length = batch, max_len, 0
        self.dtype, self.device = dtype, torch.device(device)
        self.capacities = kv_capacities(rows, n_kv_head, max_len)
        self.sink_slots = kv_sinks(rows, sink_rows, n_kv_head, max_len)
        self.layers = [self._layer(i) for i in range(len(rows))]
        # One rectangle covering every query head in order: its output is the layer's output.
        self.whole = [
            len(bs) == 1 and len(bs[0].rows) == 1 and bs[0].rows[0].heads == slice(0, n_head)
            for bs in self.layers
        ]

    @staticmethod
    def _check_pads(
        pads: Sequence[int] | torch.Tensor | None, batch: int, max_len: int
    ) -> torch.Tensor | None:
        if isinstance(pads, torch.Tensor) and torch.compiler.is_compiling():
            return pads.long()  # checking would read its values: a graph break
        if pads is None or not any(int(p) for p in pads):
            return None
        values = [int(p) for p in pads]
        if len(values) != batch or any(p < 0 or p >= max_len for p in values):
            raise ValueError(f"pads must be {batch} ints in [0, max_len={max_len}), got {pads}")
        return torch.tensor(values, dtype=torch.long)

    def _layer(self, layer: int) -> list[Bucket]:
        group = self.n_head // self.n_kv_head
        row, caps, slots = self.plan[layer], self.capacities[layer], self.sink_slots[layer]
        sinks = head_sinks(row, self.sinks[layer], self.max_len)
        buckets = []
        for cap, n_sink in sorted(set(zip(caps, slots, strict=True)), reverse=True):
            heads = tuple(j for j in range(self.n_kv_head) if (caps[j], slots[j]) == (cap, n_sink))
            wins = [[row[j * group + g] for g in range(group)] for j in heads]
            sks = [[sinks[j * group + g] for g in range(group)] for j in heads]
            shape = (self.batch, len(heads), n_sink + cap, self.head_dim)
            buckets.append(
                Bucket(
                    capacity=cap,
                    sinks=n_sink,
                    kv_heads=heads,
                    select=selector(heads, self.device),
                    rows=make_rows(wins, sks, heads, cap, self.device),
                    k=torch.zeros(shape, dtype=self.dtype, device=self.device),
                    v=torch.zeros(shape, dtype=self.dtype, device=self.device),
                )
            )
        return buckets

    def layer(self, index: int) -> LayerCache:
        """The view of layer `index` that this layer's attention reads and writes."""
        if not 0 <= index < len(self.layers):
            raise ValueError(f"layer {index} is not in [0, {len(self.layers)})")
        return LayerCache(self, index)

    def nbytes(self) -> int:
        """Bytes of the keys and values held: B * sum over layers and KV heads of
        (min(S, t) + min(C, t)) * D * 2 * element size, t the positions seen."""
        size = torch.empty((), dtype=self.dtype).element_size()
        held = held_positions(self.capacities, self.sink_slots, self.length)
        return self.batch * held * self.head_dim * 2 * size

    def reserved_nbytes(self) -> int:
        """Bytes of the storage tensors (equal to `nbytes()` once `max_len` positions are in)."""
        return sum(
            b.k.numel() * b.k.element_size() + b.v.numel() * b.v.element_size()
            for buckets in self.layers
            for b in buckets
        )

    def advance(self, n: int) -> None:
        """Record n more positions seen, after every layer has stored them."""
        if self.length + n > self.max_len:
            raise ValueError(f"cache holds at most max_len={self.max_len} positions")
        self.length += n

    def prefill(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v (B, Hkv, T, D) at positions t .. t + T - 1 (t = positions seen); each
        head keeps the last C of them in ring order and each row's first S real ones."""
        t, n_new = self.length, k.shape[2]
        if t + n_new > self.max_len:
            raise ValueError(f"{t + n_new} positions exceed the cache's max_len={self.max_len}")
        for b in self.layers[layer]:
            keep = min(b.capacity, n_new)
            pos = torch.arange(t + n_new - keep, t + n_new, device=self.device)
            slots = b.sinks + pos % b.capacity
            src = slice(n_new - keep, n_new)
            b.k.index_copy_(2, slots, k[:, b.select, src].to(self.dtype))
            b.v.index_copy_(2, slots, v[:, b.select, src].to(self.dtype))
            if b.sinks:
                self._store_sinks(b, k, v, t)

    def _store_sinks(self, b: Bucket, k: torch.Tensor, v: torch.Tensor, t: int) -> None:
        """Copy the real positions < S among slots t .. t + T - 1 of k, v into sink slots."""
        n_new = k.shape[2]
        if self.pads is None:
            first, last = t, min(b.sinks, t + n_new)  # real positions = slot positions
            if first < last:
                b.k[:, :, first:last] = k[:, b.select, : last - first].to(self.dtype)
                b.v[:, :, first:last] = v[:, b.select, : last - first].to(self.dtype)
            return
        # Sink slot j of row r holds real position j, at slot pad_r + j: in this chunk when
        # 0 <= pad_r + j - t < T. Gathered for every row at once (no per-row Python ints).
        src = self.pads.to(k.device)[:, None] + torch.arange(b.sinks, device=k.device) - t
        inside = ((src >= 0) & (src < n_new))[:, None, :, None]  # (B, 1, S, 1)
        index = src.clamp(0, n_new - 1)[:, None, :, None].expand(-1, k.shape[1], -1, k.shape[3])
        for store, new in ((b.k, k), (b.v, v)):
            taken = new.gather(2, index)[:, b.select].to(self.dtype)
            store[:, :, : b.sinks] = torch.where(inside, taken, store[:, :, : b.sinks])

    def attend(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
        logit: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Store one new position's k, v (B, Hkv, 1, D) and attend q (B, Hq, 1, D) at that
        position over each head's own window and sinks, with a sink logit per query head
        where `logit` (Hq,) is given (`aah.attention.sink_logit`). Returns (B, Hq, 1, D)."""
        t = self.length  # the new token's slot position
        if t >= self.max_len:
            raise ValueError(f"cache holds at most max_len={self.max_len} positions")
        if torch.compiler.is_compiling():
            if self.shift is not None:
                raise ValueError("a rolling KVCache does not run inside torch.compile")
            return self._attend_fixed(layer, q, k, v, scale, t, logit)
        bsz, d = q.shape[0], self.head_dim
        # Query head h reads KV head h // G, so (B, Hq, 1, D) -> (B, Hkv, G, D) lines them up.
        qg = q.reshape(bsz, self.n_kv_head, self.n_head // self.n_kv_head, d)
        lg = None if logit is None else logit.to(q.dtype).view(self.n_kv_head, -1)
        out = None if self.whole[layer] else q.new_empty(bsz, self.n_head, d)
        for b in self.layers[layer]:
            slot = b.sinks + t % b.capacity
            b.k[:, :, slot] = k[:, b.select, 0]
            b.v[:, :, slot] = v[:, b.select, 0]
            if b.sinks:
                self._store_sinks(b, k, v, t)
            n = min(t + 1, b.capacity)  # valid ring entries
            qb = qg[:, b.select]
            for r in b.rows:
                keys, values, mask = self._read(layer, b, r.window, r.sinks, t, n)
                # Each query reads exactly its own window and sinks: no T, no mask unpadded.
                y = sdpa_with_sink_logit(
                    qb[:, r.kv][:, :, r.g], keys[:, r.kv], values[:, r.kv], mask, scale,
                    None if lg is None else lg[b.select][r.kv][:, r.g],
                )  # fmt: skip
                if out is None:
                    return y.reshape(bsz, self.n_head, 1, d)
                out[:, r.heads] = y.reshape(bsz, -1, d)
        return out.unsqueeze(2)

    def _attend_fixed(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
        t: int,
        logit: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`attend` for compiled code: no shape and no branch depends on t, so one graph serves
        every step. Each group of query heads reads its bucket's whole storage (S + C slots)
        under a mask of the entries its window and sinks keep (`fixed_read_mask`), which
        selects the same keys as `attend` does."""
        bsz, d = q.shape[0], self.head_dim
        qg = q.reshape(bsz, self.n_kv_head, self.n_head // self.n_kv_head, d)
        lg = None if logit is None else logit.to(q.dtype).view(self.n_kv_head, -1)
        out = q.new_empty(bsz, self.n_head, d)
        pads = None if self.pads is None else self.pads.to(q.device)
        for b in self.layers[layer]:
            slot = (torch.zeros(1, dtype=torch.long, device=q.device) + t) % b.capacity + b.sinks
            b.k.index_copy_(2, slot, k[:, b.select].to(self.dtype))
            b.v.index_copy_(2, slot, v[:, b.select].to(self.dtype))
            if b.sinks:
                self._store_sinks(b, k, v, t)
            qb = qg[:, b.select]
            for r in b.rows:
                mask = fixed_read_mask(b.sinks, b.capacity, r.window, r.sinks, t, pads, q.device)
                y = sdpa_with_sink_logit(
                    qb[:, r.kv][:, :, r.g], b.k[:, r.kv], b.v[:, r.kv], mask, scale,
                    None if lg is None else lg[b.select][r.kv][:, r.g],
                )  # fmt: skip
                out[:, r.heads] = y.reshape(bsz, -1, d)
        return out.unsqueeze(2)

    def _read(
        self, layer: int, b: Bucket, window: int, sinks: int, t: int, n: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Keys and values (B, Hb, L, D) a query at slot t of (window, sinks) reads, and the
        (B, 1, 1, L) mask padded rows need (None without padding). Rolling, the sinks come
        rotated to their positions within the cache."""
        s = b.sinks
        if self.pads is None:
            # Sinks the window has left: j <= t - window, at most `sinks`.
            n_sink = max(0, min(sinks, t - window + 1))
            moving = self.shift is not None and n_sink and t - (sinks + window - 1) > 0
            if n_sink == s and window >= n and not moving:  # sinks then the whole ring: a view
                return b.k[:, :, : s + n], b.v[:, :, : s + n], None
            mask = None
        else:
            n_sink = sinks
        ring_k = ring_last(b.k[:, :, s:], t, n, window)
        ring_v = ring_last(b.v[:, :, s:], t, n, window)
        if self.pads is not None:
            pads = self.pads.to(b.k.device)
            where = ring_positions(t, n, b.capacity, window, b.k.device)
            mask = padded_mask(pads, t, window, n_sink, where)
        if n_sink == 0:
            return ring_k, ring_v, mask
        sink_k, moved = b.k[:, :, :n_sink], t - (sinks + window - 1)
        if self.shift is not None and moved > 0:  # the window has left the sinks behind
            sink_k = self.shift.rotate(layer, sink_k, moved)
        keys = torch.cat([sink_k, ring_k], dim=2)
        return keys, torch.cat([b.v[:, :, :n_sink], ring_v], dim=2), mask


@dataclass(frozen=True)
class LayerCache:
    """One layer's share of a `KVCache`: positions seen so far, the prompt's store, one step."""

    store: KVCache
    index: int

    @property
    def length(self) -> int:
        """Positions seen (and so the position of the next token)."""
        return self.store.length

    def prefill(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the prompt's k, v (B, Hkv, T, D); see `KVCache.prefill`."""
        self.store.prefill(self.index, k, v)

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """Store one step's k, v (B, Hkv, 1, D), attend q (B, Hq, 1, D): (B, Hq, 1, D)."""
        return self.store.attend(self.index, q, k, v, scale)


def refuse_unbounded(
    windows: Sequence[Sequence[int]], sinks: Sequence[Sequence[int]], positions: int, what: str
) -> None:
    """ValueError naming every head that cannot roll: one whose window reaches `positions`
    (`what` the limit is: the model's positions, max_seq_len) keeps everything it saw, and one
    whose window plus sinks passes them shows distances the model was never trained on."""
    heads = [
        f"layer {i} head {h} (window {w}" + (f" + {s} sinks)" if s else ")")
        for i, (row, srow) in enumerate(zip(windows, sinks, strict=True))
        for h, (w, s) in enumerate(zip(row, srow, strict=True))
        if w >= positions or w + s > positions
    ]
    if heads:
        shown = "; ".join(heads[:8]) + (f"; and {len(heads) - 8} more" if len(heads) > 8 else "")
        raise ValueError(
            f"a rolling cache needs every head bounded, its window plus sinks within {what} "
            f"({positions}), and {len(heads)} heads are not: {shown}. Give those heads a "
            "window (a plan searched at a length below the model's positions)"
        )
