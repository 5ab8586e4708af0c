"""Cost diagnostics, kept apart on purpose (docs/method.md, "Windows and cost").

- ACR: mean over heads (and layers) of min(w, T) / T, the paper's routing diagnostic; with
  sinks, min(w + s, T) / T (the keys the last query sees).
- causal coverage: allowed (query, key) pairs over the full causal count; the ideal cost ratio.
- executed ratio: score elements a backend really computes over the full causal count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch


def causal_pairs(seq_len: int) -> int:
    """Score elements of a full causal kernel for one head: T (T + 1) / 2."""
    return seq_len * (seq_len + 1) // 2


def sink_slots(window: int, sinks: int, seq_len: int) -> int:
    """The sink keys a head adds at length T: a sink j is outside query i's window only when
    j <= i - w, so j < T - w: min(s, T - w) for w < T, and none for a head that sees its whole
    context."""
    return min(sinks, seq_len - window) if window < seq_len else 0


def window_pairs(window: int, seq_len: int, sinks: int = 0) -> int:
    """Allowed (query, key) pairs of one head: sum over i of min(i + 1, w) plus, for sinks,
    the sink keys outside the window, sum over i >= w of min(s, i - w + 1)."""
    w = min(window, seq_len)
    # Queries 0..w-1 see i + 1 keys; the remaining T - w queries see w keys each.
    pairs = w * (w + 1) // 2 + (seq_len - w) * w
    n, s = seq_len - w, sink_slots(w, sinks, seq_len)
    # Query w - 1 + m (m = 1..n) has min(s, m) sink keys outside its window.
    return pairs + s * (s + 1) // 2 + (n - s) * s if s > 0 else pairs


def flatten_windows(windows: object) -> list[int]:
    """Accept one int per head, a 1-D tensor, or a per-layer plan [layer][head]."""
    if isinstance(windows, torch.Tensor):
        return [int(w) for w in windows.reshape(-1).tolist()]
    if isinstance(windows, int):
        return [windows]
    flat: list[int] = []
    for item in windows:  # type: ignore[union-attr]
        if isinstance(item, Iterable) and not isinstance(item, (str, bytes)):
            flat.extend(flatten_windows(item))
        else:
            flat.append(int(item))  # type: ignore[call-overload]
    return flat


@dataclass(frozen=True)
class Coverage:
    """Selected cost of a window plan: `acr` (paper) and `causal` (causal coverage)."""

    acr: float
    causal: float
    heads: int
    seq_len: int


def coverage(windows: object, seq_len: int, sinks: object = 0) -> Coverage:
    """ACR and causal coverage of per-head windows (flat, tensor, or [layer][head]) and sinks
    (one int for every head, or the same shape as windows)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    flat = flatten_windows(windows)
    if not flat:
        raise ValueError("windows is empty: give at least one head's window")
    bad = [w for w in flat if w < 1]
    if bad:
        raise ValueError(f"every window must be >= 1, got {bad[0]}")
    sink = [sinks] * len(flat) if isinstance(sinks, int) else flatten_windows(sinks)
    if len(sink) != len(flat) or any(s < 0 for s in sink):
        raise ValueError(f"sinks must be ints >= 0, one per window ({len(flat)}), got {sinks!r}")
    acr = sum(min(w + s, seq_len) / seq_len for w, s in zip(flat, sink, strict=True)) / len(flat)
    pairs = sum(window_pairs(w, seq_len, s) for w, s in zip(flat, sink, strict=True))
    causal = pairs / (len(flat) * causal_pairs(seq_len))
    return Coverage(acr=acr, causal=causal, heads=len(flat), seq_len=seq_len)


def executed_ratio(executed_elements: int, n_heads: int, seq_len: int) -> float:
    """Executed score elements over what a full causal kernel computes for the same heads."""
    return executed_elements / (n_heads * causal_pairs(seq_len))
