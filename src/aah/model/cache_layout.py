"""How a window (and sink) plan lays out a per-head KV cache: buckets, rows, and which stored
entries a decoding query reads (the capacities and sink slots themselves: `attention.kv_bytes`).

Shapes: B batch, Hq query heads, Hkv key/value heads, G = Hq / Hkv, D head dim; per KV head,
S sink slots then a ring of C slots. Slot positions count every position fed to the cache
(left padding included); a row's real positions start after its `pad` slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

Index = slice | torch.Tensor  # a slice where heads are contiguous (a view), else a gather


@dataclass
class Rows:
    """Query heads of one bucket sharing one window and sink count: `kv` (bucket-local KV
    heads) x `g` (rows of the GQA group), a rectangle so one SDPA call serves them."""

    window: int  # min(w, C): these queries read the ring's last `window` entries
    sinks: int  # and the first `sinks` real positions when their window has left them
    kv: Index
    g: Index
    heads: Index  # their query heads, kv-major then g: where the output goes


@dataclass
class Bucket:
    """KV heads of one layer sharing (capacity, sinks), with their storage: slots [0, S) hold
    a row's first S real positions, slots S + (p % C) the ring."""

    capacity: int
    sinks: int
    kv_heads: tuple[int, ...]
    select: Index  # picks these KV heads out of (B, Hkv, ...)
    rows: list[Rows]
    k: torch.Tensor  # (B, Hb, S + C, D)
    v: torch.Tensor  # (B, Hb, S + C, D)


def selector(heads: tuple[int, ...], device: torch.device) -> Index:
    # A contiguous run of heads is a view; anything else needs an index (a gather).
    if heads == tuple(range(heads[0], heads[-1] + 1)):
        return slice(heads[0], heads[-1] + 1)
    return torch.tensor(heads, dtype=torch.long, device=device)


def make_rows(
    wins: list[list[int]],
    sinks: list[list[int]],
    kv_heads: tuple[int, ...],
    cap: int,
    device: torch.device,
) -> list[Rows]:
    """Split a bucket's query heads (wins[local kv][g], sinks alike) into rectangles of equal
    (window, sinks)."""
    group = len(wins[0])
    classes = {
        (min(w, cap), s)
        for ws, ss in zip(wins, sinks, strict=True)
        for w, s in zip(ws, ss, strict=True)
    }
    rows = []
    for window, sink in sorted(classes, reverse=True):
        by_gs: dict[tuple[int, ...], list[int]] = {}
        for j, (ws, ss) in enumerate(zip(wins, sinks, strict=True)):
            gs = tuple(g for g in range(group) if (min(ws[g], cap), ss[g]) == (window, sink))
            if gs:
                by_gs.setdefault(gs, []).append(j)
        for gs, js in by_gs.items():
            heads = tuple(kv_heads[j] * group + g for j in js for g in gs)
            rows.append(
                Rows(
                    window,
                    sink,
                    selector(tuple(js), device),
                    selector(gs, device),
                    selector(heads, device),
                )
            )
    return rows


def ring_last(x: torch.Tensor, t: int, n: int, window: int) -> torch.Tensor:
    """The ring entries (B, H, window, D) of positions t - window < p <= t, oldest first
    (x is the ring, (B, H, C, D); n its valid entries). A view unless the ring wraps."""
    cap = x.shape[2]
    if window >= n:
        return x[:, :, :n]
    start, end = (t - window + 1) % cap, t % cap + 1
    if start < end:
        return x[:, :, start:end]
    return torch.cat([x[:, :, start:], x[:, :, :end]], dim=2)  # wrapped: copies `window` entries


def ring_positions(t: int, n: int, cap: int, window: int, device: torch.device) -> torch.Tensor:
    """Slot positions of the entries `ring_last` returns, in its order."""
    if window < n:
        return torch.arange(t - window + 1, t + 1, device=device)
    slots = torch.arange(n, device=device)
    return slots if t < cap else t - torch.remainder(t - slots, cap)


def padded_mask(
    pads: torch.Tensor, t: int, window: int, n_sinks: int, positions: torch.Tensor
) -> torch.Tensor:
    """(B, 1, 1, n_sinks + len(positions)) bool for a query at slot t of rows with `pads`:
    sink j is read iff its window has left it (j <= t - pad - window); a ring entry iff it is
    not padding (its slot position >= pad)."""
    real = t - pads[:, None]  # (B, 1): the query's real position per row
    sink_ok = torch.arange(n_sinks, device=pads.device)[None, :] <= real - window
    ring_ok = positions[None, :] >= pads[:, None]
    return torch.cat([sink_ok, ring_ok], dim=1)[:, None, None, :]


def fixed_read_mask(
    n_sink_slots: int,
    cap: int,
    window: int,
    sinks: int,
    t: int,
    pads: torch.Tensor | None,
    device: torch.device,
) -> torch.Tensor:
    """(B or 1, 1, 1, S + C) bool over a bucket's whole storage for a query at slot t with
    `window` (<= C) and `sinks`, tensor operations only (t may be symbolic in compiled code):
    ring slot i holds position p = t - ((t - i) mod C), read iff 0 <= p, t - window < p and
    p >= pad; sink slot j holds real position j, read iff j < sinks and j <= t - pad - window
    (its window has left it). The entries `ring_last` and `padded_mask` give, as a mask."""
    pad = torch.zeros(1, 1, dtype=torch.long, device=device) if pads is None else pads[:, None]
    ring = torch.arange(cap, device=device)
    position = t - torch.remainder(t - ring, cap)  # (C,)
    ring_ok = (position >= 0) & (position > t - window) & (position >= pad)  # (B, C)
    j = torch.arange(n_sink_slots, device=device)
    sink_ok = (j < sinks) & (j <= t - pad - window)  # (B, S)
    return torch.cat([sink_ok, ring_ok], dim=1)[:, None, None, :]
