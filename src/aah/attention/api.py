"""The one public entry point: `windowed_attention`, its validation and backend dispatch.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D) with Hq % Hkv == 0; windows (Hq,) ints >= 1;
sinks (Hq,) ints >= 0 (or one int for every head).
Query i with window w and s sinks attends keys j <= i with i - w < j (the window) or j < s
(the first s keys, "attention sinks"); w >= T is full causal attention.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from aah.attention.cost import sink_slots
from aah.attention.registry import BACKENDS, get_backend, pick_auto


def normalize_windows(
    windows: Sequence[int] | torch.Tensor, n_heads: int, *, name: str = "windows", minimum: int = 1
) -> tuple[int, ...]:
    """Windows as a tuple of Python ints, one per query head, each >= `minimum` (1)."""
    if isinstance(windows, torch.Tensor):
        if windows.dim() != 1:
            raise ValueError(f"{name} must be 1-D (one per head), got shape {tuple(windows.shape)}")
        if windows.dtype.is_floating_point or windows.dtype == torch.bool:
            raise ValueError(f"{name} must hold integers, got dtype {windows.dtype}")
        values = tuple(int(w) for w in windows.tolist())
    else:
        try:
            values = tuple(windows)
        except TypeError:
            raise ValueError(f"{name} must be a sequence of ints, got {windows!r}") from None
        for w in values:
            if isinstance(w, bool) or not isinstance(w, numbers.Integral):
                raise ValueError(f"{name} must be ints, got {w!r}")
        values = tuple(int(w) for w in values)
    one = name.removesuffix("s")
    if len(values) != n_heads:
        raise ValueError(f"expected one {one} per query head ({n_heads}), got {len(values)}")
    for w in values:
        if w < minimum:
            raise ValueError(f"every {one} must be >= {minimum}, got {w}")
    return values


def normalize_sinks(sinks: int | Sequence[int] | torch.Tensor, n_heads: int) -> tuple[int, ...]:
    """Sinks as a tuple of Python ints, one per query head, each >= 0 (one int: every head)."""
    if isinstance(sinks, numbers.Integral) and not isinstance(sinks, bool):
        if sinks < 0:
            raise ValueError(f"sinks must be >= 0, got {sinks}")
        return (int(sinks),) * n_heads
    if isinstance(sinks, torch.Tensor) and sinks.dim() == 0:
        raise ValueError(f"sinks must be an int or one per head, got a 0-d tensor {sinks}")
    return normalize_windows(sinks, n_heads, name="sinks", minimum=0)  # type: ignore[arg-type]


def effective_sinks(
    windows: tuple[int, ...], sinks: tuple[int, ...], seq_len: int
) -> tuple[int, ...]:
    """The sinks that add keys at length T: min(s, T - w) for w < T, else 0.

    A sink key j is new to query i only when j <= i - w, so j < T - w; heads that see their
    whole context gain nothing. The result selects exactly the same keys as `sinks`.
    """
    return tuple(sink_slots(w, s, seq_len) for w, s in zip(windows, sinks, strict=True))


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, T, D), got shape {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise ValueError(f"{name} must be floating point, got dtype {t.dtype}")
    if k.shape != v.shape:
        raise ValueError(f"k and v shapes differ: {tuple(k.shape)} vs {tuple(v.shape)}")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError(f"q, k, v dtypes differ: {q.dtype}, {k.dtype}, {v.dtype}")
    if q.device != k.device or q.device != v.device:
        raise ValueError(f"q, k, v devices differ: {q.device}, {k.device}, {v.device}")
    b, hq, t, d = q.shape
    bk, hkv, tk, dk = k.shape
    if bk != b or tk != t or dk != d:
        raise ValueError(
            f"k/v shape {tuple(k.shape)} does not match q shape {tuple(q.shape)} "
            "in batch, sequence length or head dim"
        )
    if hkv < 1 or hq % hkv != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of key/value heads ({hkv})")
    if t < 1 or d < 1:
        raise ValueError(f"sequence length and head dim must be >= 1, got T={t}, D={d}")


def windowed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int] | torch.Tensor,
    *,
    backend: str = "auto",
    scale: float | None = None,
    sinks: int | Sequence[int] | torch.Tensor = 0,
) -> torch.Tensor:
    """Causal attention where query head h sees only its last `windows[h]` keys and its
    first `sinks[h]` keys.

    Args:
        q: (B, Hq, T, D) queries.
        k, v: (B, Hkv, T, D) keys and values, Hq % Hkv == 0 (GQA/MQA).
        windows: one int >= 1 per query head; w >= T means full causal attention.
        backend: one of "reference", "dense", "banded", "grouped", "flex", "flash", "auto".
        scale: score scale, default 1 / sqrt(D).
        sinks: one int >= 0 per query head, or one int for all; default 0 (no sinks).

    Returns:
        (B, Hq, T, D) in q's dtype.

    Raises:
        ValueError: bad shapes, dtypes, devices, windows, sinks, or a backend unknown or unable
            to run (flash has no sinks).
    """
    if not isinstance(backend, str) or (backend != "auto" and backend not in BACKENDS):
        names = ", ".join(["auto", *BACKENDS])
        raise ValueError(f"unknown backend {backend!r}; choose one of {names}")
    check_qkv(q, k, v)
    plan = normalize_windows(windows, q.shape[1])
    sink_plan = effective_sinks(plan, normalize_sinks(sinks, q.shape[1]), q.shape[2])
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    elif not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale must be a positive finite float, got {scale}")
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    name = pick_auto(q, plan, needs_grad, sink_plan) if backend == "auto" else backend
    chosen = get_backend(name)
    if any(sink_plan) and not chosen.sinks:
        raise ValueError(
            f"backend {name!r} cannot keep attention sinks (flash_attn's window_size has no "
            "sink keys); use 'flex' or 'auto' for sinks > 0"
        )
    chosen.check(q, needs_grad)
    return chosen.run(q, k, v, plan, float(scale), sink_plan if any(sink_plan) else None)


def executed_elements(
    backend: str, windows: Sequence[int], seq_len: int, sinks: int | Sequence[int] = 0
) -> int:
    """Score elements `backend` computes for one batch element of these windows and sinks."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    plan = tuple(int(w) for w in windows)
    sink_plan = effective_sinks(plan, normalize_sinks(sinks, len(plan)), seq_len)
    return BACKENDS[backend].executed(plan, seq_len, sink_plan if any(sink_plan) else None)
