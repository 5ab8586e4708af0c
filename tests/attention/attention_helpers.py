"""Independent computations the attention tests compare against.

The window rule, the masks and the math are written out again here (nothing of `aah` is
reused for them) so a bug in the package cannot hide by being shared with its checks. Only
`run_backend` calls the package: one way to run any backend, flex through its eager path.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D); windows one int per query head.
Rule: query i with window w sees keys j with i - w < j <= i; with s sinks also keys j < s
(j <= i).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import torch

from aah.attention import windowed_attention
from aah.attention.flex import flex_attention_windows

# Backends that run forward and backward on this CPU (flex is forward-only here, flash absent).
TRAINABLE_BACKENDS = ("dense", "banded", "grouped", "auto")
# Every backend that runs here; "flex-eager" is flex's uncompiled path (forward only).
CPU_BACKENDS = ("reference", *TRAINABLE_BACKENDS, "flex-eager")


def allowed_keys(i: int, window: int, sinks: int = 0) -> list[int]:
    """Key positions query i may read, enumerated from the rule."""
    return [j for j in range(i + 1) if i - window < j or j < sinks]


def rule_mask(
    windows: Sequence[int], seq_len: int, sinks: Sequence[int] | None = None
) -> torch.Tensor:
    """(H, T, T) bool mask filled entry by entry from `allowed_keys`."""
    sinks = sinks or [0] * len(windows)
    mask = torch.zeros(len(windows), seq_len, seq_len, dtype=torch.bool)
    for h, w in enumerate(windows):
        for i in range(seq_len):
            mask[h, i, allowed_keys(i, w, sinks[h])] = True
    return mask


def band_mask(
    windows: Sequence[int], seq_len: int, sinks: Sequence[int] | None = None
) -> torch.Tensor:
    """The same (H, T, T) mask, vectorised (for sizes where the loop is slow)."""
    i = torch.arange(seq_len).view(1, -1, 1)
    j = torch.arange(seq_len).view(1, 1, -1)
    w = torch.tensor(list(windows)).view(-1, 1, 1)
    s = torch.tensor(list(sinks or [0] * len(windows))).view(-1, 1, 1)
    return (j <= i) & ((j > i - w) | (j < s))


def brute_force_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int],
    scale: float,
    sinks: Sequence[int] | None = None,
) -> torch.Tensor:
    """Loop over every (batch, head, query), softmax by hand in Python floats (float64)."""
    batch, n_q_heads, seq_len, head_dim = q.shape
    group = n_q_heads // k.shape[1]
    sinks = sinks or [0] * n_q_heads
    qs, ks, vs = q.tolist(), k.tolist(), v.tolist()
    out = torch.zeros(batch, n_q_heads, seq_len, head_dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(n_q_heads):
            kv = h // group  # GQA: query head h reads key/value head h // group
            for i in range(seq_len):
                keys = allowed_keys(i, windows[h], sinks[h])
                scores = [
                    scale * sum(a * c for a, c in zip(qs[b][h][i], ks[b][kv][j], strict=True))
                    for j in keys
                ]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                for d in range(head_dim):
                    out[b, h, i, d] = (
                        sum(wt * vs[b][kv][j][d] for wt, j in zip(weights, keys, strict=True))
                        / total
                    )
    return out


def naive_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int],
    scale: float,
    sinks: Sequence[int] | None = None,
) -> torch.Tensor:
    """Plain PyTorch math in the inputs' own dtype: scores, mask, softmax, weighted sum.

    Used as the "what ordinary math achieves in this dtype" baseline for bf16 checks.
    """
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scale
    allowed = band_mask(windows, q.shape[2], sinks).to(scores.device)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def make_qkv(
    batch: int,
    n_q_heads: int,
    n_kv_heads: int,
    seq_len: int,
    head_dim: int,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random q, k, v and an upstream gradient `dout`, reproducible from `seed`."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_q_heads, seq_len, head_dim, generator=gen)
    k = torch.randn(batch, n_kv_heads, seq_len, head_dim, generator=gen)
    v = torch.randn(batch, n_kv_heads, seq_len, head_dim, generator=gen)
    dout = torch.randn(batch, n_q_heads, seq_len, head_dim, generator=gen)
    return q.to(dtype), k.to(dtype), v.to(dtype), dout.to(dtype)


def forward_backward(fn, q, k, v, dout):  # type: ignore[no-untyped-def]
    """Output and (dq, dk, dv) of `fn(q, k, v)` on fresh leaf copies (inputs left untouched)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    out = fn(*leaves)
    out.backward(dout)
    return [out.detach(), *(t.grad for t in leaves)]


def max_abs_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return (actual.double() - expected.double()).abs().max().item()


def assert_close_scaled(
    actual: torch.Tensor, expected: torch.Tensor, rel: float, what: str
) -> None:
    """max |actual - expected| <= rel * max(1, max |expected|): error relative to the scale."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    scale = max(1.0, expected.double().abs().max().item()) if expected.numel() else 1.0
    err = max_abs_error(actual, expected) if expected.numel() else 0.0
    assert err <= rel * scale, f"{what}: max abs error {err:.3e} > {rel:.0e} * {scale:.3g}"


def run_backend(
    backend: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    windows: Sequence[int],
    scale: float | None = None,
    sinks: Sequence[int] | None = None,
) -> torch.Tensor:
    """`windowed_attention`, except "flex-eager": flex's uncompiled path, under no_grad.

    Compiling flex costs seconds per shape on CPU; the eager path has the same BlockMask.
    """
    if backend != "flex-eager":
        return windowed_attention(q, k, v, windows, backend=backend, scale=scale, sinks=sinks or 0)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        kept = tuple(sinks) if sinks and any(sinks) else None
        return flex_attention_windows(q, k, v, tuple(windows), scale, kept, compiled=False)
