"""Both engines of the banded backend against float64 math, and the rule that picks one.

`banded` runs its prefix + block layout either in PyTorch's fused kernel (recomputing backward)
or as batched products that keep the softmax probabilities (`band_stored`). Which one runs
depends on grad mode and window width, so the backend-level tests see each engine only for
some windows; here both run every case directly.
"""

from __future__ import annotations

import pytest
import torch
from attention_helpers import (
    assert_close_scaled,
    forward_backward,
    make_qkv,
    naive_attention,
)

import aah.attention.banded as banded_module
from aah.attention.band_layout import geometry
from aah.attention.band_stored import banded_stored_attention
from aah.attention.banded import (
    STORED_MAX_WINDOW,
    STORED_MIN_HEAD_DIM,
    _BandedKernel,
    banded_attention,
)


def kernel_engine(q, k, v, windows, scale):  # type: ignore[no-untyped-def]
    return _BandedKernel.apply(q, k, v, tuple(windows), scale)


ENGINES = {"kernel": kernel_engine, "stored": banded_stored_attention}

# (B, Hq, Hkv, T, D, windows): ids say which part of the layout each case reaches.
CASES = {
    # b = 32 divides W: no front padding; T - W not a multiple of b: back padding.
    "uniform-w32-backpad": (2, 2, 2, 203, 8, (32, 32)),
    # W = 100 with b = 64: front padding of 28 zero keys, kept out by the mask alone.
    "uniform-w100-frontpad": (1, 3, 3, 400, 16, (100, 100, 100)),
    # Per-head windows: per-head band masks and a masked (non-causal) prefix.
    "mixed-gqa": (2, 4, 2, 333, 8, (5, 70, 1, 70)),
    "mixed-mqa": (1, 4, 1, 300, 16, (9, 40, 64, 2)),
    # Exactly one block after the prefix; windows of 1 (a query sees only itself).
    "one-block": (1, 2, 1, 96, 8, (64, 1)),
}


def _reference(case: str, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    batch, hq, hkv, seq_len, dim, windows = CASES[case]
    q, k, v, dout = make_qkv(batch, hq, hkv, seq_len, dim, seed=1, dtype=dtype)
    scale = dim**-0.5

    def run(q, k, v):  # type: ignore[no-untyped-def]
        return naive_attention(q.double(), k.double(), v.double(), windows, scale)

    return (q, k, v, dout), windows, scale, forward_backward(run, q, k, v, dout.double())


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_engine_matches_float64_math(engine: str, case: str, dtype: torch.dtype, tol: float):
    (q, k, v, dout), windows, scale, want = _reference(case, dtype)
    assert geometry(windows, q.shape[2]).n_blocks > 0  # the case reaches the block layout
    got = forward_backward(lambda q, k, v: ENGINES[engine](q, k, v, windows, scale), q, k, v, dout)
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want, strict=True):
        assert a.dtype == dtype
        assert_close_scaled(a, b, tol, f"{engine} {case} {name}")


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_accepts_sequence_major_memory(engine: str) -> None:
    """A model's q/k/v are (B, T, H, D) in memory viewed as (B, H, T, D): same results."""
    (q, k, v, dout), windows, scale, want = _reference("mixed-gqa", torch.float32)

    def seq_major(x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous().transpose(1, 2)

    got = forward_backward(
        lambda q, k, v: ENGINES[engine](seq_major(q), seq_major(k), seq_major(v), windows, scale),
        q, k, v, dout,
    )  # fmt: skip
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want, strict=True):
        assert_close_scaled(a, b, 1e-5, f"{engine} seq-major {name}")


def _engine_of(out: torch.Tensor) -> str:
    name = type(out.grad_fn).__name__
    return {"_BandedStoredBackward": "stored", "_BandedKernelBackward": "kernel"}.get(name, name)


@pytest.mark.parametrize(
    ("window", "head_dim", "grad", "expected"),
    [
        (STORED_MAX_WINDOW, STORED_MIN_HEAD_DIM, True, "stored"),
        (STORED_MAX_WINDOW + 1, STORED_MIN_HEAD_DIM, True, "kernel"),
        (STORED_MAX_WINDOW, STORED_MIN_HEAD_DIM // 2, True, "kernel"),
    ],
)
def test_rule_picks_the_engine(window: int, head_dim: int, grad: bool, expected: str):
    q, k, v, _ = make_qkv(1, 2, 2, 4 * STORED_MAX_WINDOW, head_dim)
    for t in (q, k, v):
        t.requires_grad_(grad)
    out = banded_attention(q, k, v, (window, window), head_dim**-0.5)
    assert _engine_of(out) == expected


@pytest.mark.parametrize("inputs_need_grad", [False, True], ids=["plain", "under-no_grad"])
def test_rule_keeps_nothing_without_a_graph(monkeypatch, inputs_need_grad: bool) -> None:
    """No graph will be built: the kernel's forward runs and no probabilities are kept."""

    def refuse(*args):  # type: ignore[no-untyped-def]
        raise AssertionError("stored engine picked without gradients")

    monkeypatch.setattr(banded_module, "banded_stored_attention", refuse)
    q, k, v, _ = make_qkv(1, 2, 2, 4 * STORED_MAX_WINDOW, STORED_MIN_HEAD_DIM)
    for t in (q, k, v):
        t.requires_grad_(inputs_need_grad)
    with torch.no_grad():
        out = banded_attention(q, k, v, (64, 64), STORED_MIN_HEAD_DIM**-0.5)
    assert out.grad_fn is None and out.shape == q.shape


def test_rule_keeps_probabilities_within_the_memory_cap(monkeypatch) -> None:
    q, k, v, _ = make_qkv(2, 2, 2, 512, STORED_MIN_HEAD_DIM)
    for t in (q, k, v):
        t.requires_grad_(True)
    # 2 batch x 2 heads x 6 blocks x 64 x 192 floats of 4 bytes: 1,179,648 bytes kept.
    monkeypatch.setattr(banded_module, "STORED_MAX_BYTES", 1_179_648)
    assert _engine_of(banded_attention(q, k, v, (128, 128), 0.125)) == "stored"
    monkeypatch.setattr(banded_module, "STORED_MAX_BYTES", 1_179_647)
    assert _engine_of(banded_attention(q, k, v, (128, 128), 0.125)) == "kernel"


@pytest.mark.parametrize("case", ["uniform-w100-frontpad", "mixed-gqa"])
def test_stored_engine_bfloat16_within_twice_plain_math_error(case: str) -> None:
    """Run as CUDA would run it (CPU backends upcast bf16 first): flash-attention's rule, the
    error against fp32 math at most 2x that of plain bf16 math (plus 1e-3)."""
    batch, hq, hkv, seq_len, dim, windows = CASES[case]
    q, k, v, dout = make_qkv(batch, hq, hkv, seq_len, dim, seed=2, dtype=torch.bfloat16)
    scale = dim**-0.5

    def run(engine, dtype):  # type: ignore[no-untyped-def]
        args = [t.to(dtype) for t in (q, k, v, dout)]
        return forward_backward(lambda q, k, v: engine(q, k, v, windows, scale), *args)

    def plain(q, k, v, windows, scale):  # type: ignore[no-untyped-def]
        return naive_attention(q, k, v, windows, scale)

    truth = run(plain, torch.float32)
    baseline, got = run(plain, torch.bfloat16), run(banded_stored_attention, torch.bfloat16)
    for name, a, base, want in zip(("output", "dq", "dk", "dv"), got, baseline, truth, strict=True):
        assert a.dtype == torch.bfloat16
        err = (a.float() - want).abs().max().item()
        base_err = (base.float() - want).abs().max().item()
        assert err <= 2 * base_err + 1e-3, f"stored {case} {name}: {err:.3e} vs {base_err:.3e}"
