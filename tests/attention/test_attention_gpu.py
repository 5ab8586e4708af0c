"""The backend cases of test_attention_backends on a CUDA device (what benchmarks/gpu_check.py
checks, as tests): output and q/k/v gradients against the float64 `reference` on the CPU.

Rules, as on the CPU:
- float32: error <= 1e-5 * scale (error and scale as in test_attention_backends).
- bfloat16, flash-attention's rule: error <= 2 * error of plain PyTorch math run in bf16 on the
  same device and the same rounded inputs, + 1e-3.
flex runs compiled, forward and backward; flash has no fp32 kernel and needs `flash_attn`.
Skipped without CUDA.
"""

from __future__ import annotations

import math
from functools import cache

import pytest
import torch
from attention_helpers import assert_close_scaled, forward_backward, max_abs_error, naive_attention
from test_attention_backends import (
    CASES,
    FLEX_CASE_IDS,
    NAMES,
    bf16_truth,
    inputs,
    reference_result,
)

from aah.attention import windowed_attention
from aah.attention.flash import flash_available

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

DEVICE = "cuda"
KERNELS = ("dense", "banded", "grouped")
# flex (and auto, which is flash or flex on CUDA) compiles per shape: a few cases, T 1 to 1000.
COMPILED = ("flex", "auto")
FP32_PARAMS = [(b, c) for b in KERNELS for c in CASES] + [
    (b, c) for b in COMPILED for c in FLEX_CASE_IDS
]
BF16_PARAMS = FP32_PARAMS + [("flash", c) for c in FLEX_CASE_IDS]


def on_device(backend: str, case: str, tensors) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    """Output and (dq, dk, dv) of `backend` on DEVICE, brought back to the CPU."""
    if backend == "flash" and not flash_available():
        pytest.skip("backend 'flash' needs the flash_attn package")
    q, k, v, dout = (t.to(DEVICE) for t in tensors)
    windows = CASES[case][5]
    got = forward_backward(
        lambda q, k, v: windowed_attention(q, k, v, windows, backend=backend), q, k, v, dout
    )
    return [t.cpu() for t in got]


@pytest.mark.parametrize(("backend", "case"), FP32_PARAMS)
def test_float32_on_cuda_matches_reference(backend: str, case: str) -> None:
    got = on_device(backend, case, inputs(case, torch.float32))
    want = reference_result(case, torch.float32)
    for name, a, b in zip(NAMES, got, want, strict=True):
        assert a.dtype == torch.float32
        assert_close_scaled(a, b, 1e-5, f"{backend} {case} {name}")


@cache
def plain_bf16_error(case: str) -> list[float]:
    """Error of plain PyTorch math in bf16 on DEVICE (output, dq, dk, dv) against the truth."""
    (q, k, v, dout), truth, _ = bf16_truth(case)
    windows = CASES[case][5]
    scale = 1.0 / math.sqrt(q.shape[-1])
    plain = forward_backward(
        lambda q, k, v: naive_attention(q, k, v, windows, scale),
        *(t.to(DEVICE) for t in (q, k, v, dout)),
    )
    return [max_abs_error(a.cpu(), b) for a, b in zip(plain, truth, strict=True)]


@pytest.mark.parametrize(("backend", "case"), BF16_PARAMS)
def test_bfloat16_on_cuda_within_twice_plain_math_error(backend: str, case: str) -> None:
    rounded, truth, _ = bf16_truth(case)
    got = on_device(backend, case, rounded)
    for name, a, b, base in zip(NAMES, got, truth, plain_bf16_error(case), strict=True):
        assert a.dtype == torch.bfloat16, f"{backend} {name}: dtype {a.dtype}"
        err = max_abs_error(a, b)
        assert err <= 2 * base + 1e-3, f"{backend} {case} {name}: {err:.3e} vs plain {base:.3e}"
