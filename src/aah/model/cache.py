"""`KVCache`: a per-head KV cache whose memory and decode work follow the window plan.

Shapes: B batch, Hq query heads, Hkv key/value heads, G = Hq / Hkv, D head dim, C capacity.

Each KV head keeps a ring buffer of the last `C = min(w, max_len)` positions, where `w` is the
largest window among the query heads that read it (GQA/MQA) and `max_len` the most positions
the cache will ever hold. Position p lives in slot `p % C`; a head with `C == max_len` never
wraps, so it is a plain growing cache. KV heads of equal capacity share one tensor per
(layer, capacity) bucket so decoding batches over them. Within a bucket, query heads of equal
window form rectangles (KV heads x group rows), one SDPA call each, over exactly their last w
ring entries: a slice, or a copy of w entries where the ring wraps; no mask is ever built.
Storage is reserved once, in the constructor; `nbytes()` counts the positions held so far and
reaches `reserved_nbytes()` when `max_len` positions have been seen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

Index = slice | torch.Tensor  # a slice where heads are contiguous (a view), else a gather


@dataclass
class _Rows:
    """Query heads of one bucket sharing one window: `kv` (bucket-local KV heads) x `g` (rows
    of the GQA group), a rectangle so one SDPA call serves them."""

    window: int  # min(w, C): these queries read the ring's last `window` entries
    kv: Index
    g: Index
    heads: Index  # their query heads, kv-major then g: where the output goes


@dataclass
class _Bucket:
    """KV heads of one layer that share a capacity, with their ring buffers."""

    capacity: int
    kv_heads: tuple[int, ...]
    select: Index  # picks these KV heads out of (B, Hkv, ...)
    rows: list[_Rows]
    k: torch.Tensor  # (B, Hb, C, D)
    v: torch.Tensor  # (B, Hb, C, D)


def kv_capacities(plan: Sequence[Sequence[int]], n_kv_head: int, max_len: int) -> list[list[int]]:
    """`[layer][kv_head]` ring capacities: min(largest window of the head's queries, max_len)."""
    caps = []
    for row in plan:
        group = len(row) // n_kv_head
        caps.append([min(max(row[j * group : (j + 1) * group]), max_len) for j in range(n_kv_head)])
    return caps


def _selector(heads: tuple[int, ...], device: torch.device) -> Index:
    # A contiguous run of heads is a view; anything else needs an index (a gather).
    if heads == tuple(range(heads[0], heads[-1] + 1)):
        return slice(heads[0], heads[-1] + 1)
    return torch.tensor(heads, dtype=torch.long, device=device)


def _rows(
    wins: list[list[int]], kv_heads: tuple[int, ...], cap: int, device: torch.device
) -> list[_Rows]:
    """Split a bucket's query heads (wins[local kv][g]) into rectangles of equal window."""
    group = len(wins[0])
    rows = []
    for window in sorted({min(w, cap) for ws in wins for w in ws}, reverse=True):
        by_gs: dict[tuple[int, ...], list[int]] = {}
        for j, ws in enumerate(wins):
            gs = tuple(g for g in range(group) if min(ws[g], cap) == window)
            if gs:
                by_gs.setdefault(gs, []).append(j)
        for gs, js in by_gs.items():
            heads = tuple(kv_heads[j] * group + g for j in js for g in gs)
            rows.append(
                _Rows(
                    window,
                    _selector(tuple(js), device),
                    _selector(gs, device),
                    _selector(heads, device),
                )
            )
    return rows


def _last(x: torch.Tensor, t: int, n: int, window: int) -> torch.Tensor:
    """The ring entries (B, H, window, D) of positions t - window < p <= t, in any order."""
    cap = x.shape[2]
    if window >= n:
        return x[:, :, :n]
    start, end = (t - window + 1) % cap, t % cap + 1
    if start < end:
        return x[:, :, start:end]
    return torch.cat([x[:, :, start:], x[:, :, :end]], dim=2)  # wrapped: copies `window` entries


class KVCache:
    """Per-layer, per-KV-head ring buffers for one batch of sequences, sized by the plan.

    Use: `prefill(layer, k, v)` for every layer with the prompt's keys/values, `advance(T)`;
    then per new token `attend(layer, q, k, v)` for every layer, `advance(1)`.
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
    ) -> None:
        """plan `[layer][query head]` windows >= 1; `max_len` >= 1 positions at most."""
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
        self.plan = rows
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, head_dim
        self.batch, self.max_len, self.length = batch, max_len, 0
        self.dtype, self.device = dtype, torch.device(device)
        self.capacities = kv_capacities(rows, n_kv_head, max_len)
        self.layers = [
            self._layer(row, caps) for row, caps in zip(rows, self.capacities, strict=True)
        ]
        # One rectangle covering every query head in order: its output is the layer's output.
        self.whole = [
            len(bs) == 1 and len(bs[0].rows) == 1 and bs[0].rows[0].heads == slice(0, n_head)
            for bs in self.layers
        ]

    def _layer(self, row: list[int], caps: list[int]) -> list[_Bucket]:
        group = self.n_head // self.n_kv_head
        buckets = []
        for cap in sorted(set(caps), reverse=True):
            heads = tuple(j for j, c in enumerate(caps) if c == cap)
            wins = [[row[j * group + g] for g in range(group)] for j in heads]
            shape = (self.batch, len(heads), cap, self.head_dim)
            buckets.append(
                _Bucket(
                    capacity=cap,
                    kv_heads=heads,
                    select=_selector(heads, self.device),
                    rows=_rows(wins, heads, cap, self.device),
                    k=torch.zeros(shape, dtype=self.dtype, device=self.device),
                    v=torch.zeros(shape, dtype=self.dtype, device=self.device),
                )
            )
        return buckets

    def nbytes(self) -> int:
        """Bytes of the keys and values held: B * sum over layers and KV heads of
        min(C, t) * D * 2 * element size, t the positions seen (C = min(w, max_len))."""
        size = torch.empty((), dtype=self.dtype).element_size()
        held = sum(min(c, self.length) for caps in self.capacities for c in caps)
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
        head keeps the last C of them in ring order."""
        t, n_new = self.length, k.shape[2]
        if t + n_new > self.max_len:
            raise ValueError(f"{t + n_new} positions exceed the cache's max_len={self.max_len}")
        for b in self.layers[layer]:
            keep = min(b.capacity, n_new)
            pos = torch.arange(t + n_new - keep, t + n_new, device=self.device)
            slots = pos % b.capacity
            src = slice(n_new - keep, n_new)
            b.k.index_copy_(2, slots, k[:, b.select, src].to(self.dtype))
            b.v.index_copy_(2, slots, v[:, b.select, src].to(self.dtype))

    def attend(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
    ) -> torch.Tensor:
        """Store one new position's k, v (B, Hkv, 1, D) and attend q (B, Hq, 1, D) at that
        position over each head's own window. Returns (B, Hq, 1, D)."""
        t = self.length  # the new token's position
        if t >= self.max_len:
            raise ValueError(f"cache holds at most max_len={self.max_len} positions")
        bsz, d = q.shape[0], self.head_dim
        # Query head h reads KV head h // G, so (B, Hq, 1, D) -> (B, Hkv, G, D) lines them up.
        qg = q.reshape(bsz, self.n_kv_head, self.n_head // self.n_kv_head, d)
        out = None if self.whole[layer] else q.new_empty(bsz, self.n_head, d)
        for b in self.layers[layer]:
            slot = t % b.capacity
            b.k[:, :, slot] = k[:, b.select, 0]
            b.v[:, :, slot] = v[:, b.select, 0]
            n = min(t + 1, b.capacity)  # valid ring entries
            qb = qg[:, b.select]
            for r in b.rows:
                # Each query reads exactly its own last `window` entries: no mask, no T.
                keys = _last(b.k, t, n, r.window)[:, r.kv]
                values = _last(b.v, t, n, r.window)[:, r.kv]
                y = F.scaled_dot_product_attention(
                    qb[:, r.kv][:, :, r.g], keys, values, scale=scale
                )
                if out is None:
                    return y.reshape(bsz, self.n_head, 1, d)
                out[:, r.heads] = y.reshape(bsz, -1, d)
        return out.unsqueeze(2)
