"""Every backend against the float64 `reference` on awkward shapes: outputs and q/k/v gradients.

Tolerances (error = max |backend - reference| over the tensor, `scale` = max(1, max |reference|)):
- float32: error <= 1e-5 * scale (the kernels reach ~1e-6; reference is exact float64 math).
- float64: error <= 1e-10 * scale.
- bfloat16, flash-attention's rule: inputs are rounded to bf16 once; the truth is `reference` on
  those rounded inputs upcast to fp32 (float64 math inside). The baseline is plain PyTorch math
  (scores, mask, softmax, weighted sum) run entirely in bf16 on the same rounded inputs. The
  backend in bf16 must satisfy error(backend) <= 2 * error(baseline) + 1e-3.
flex runs forward only on CPU; its eager path (`compiled=False`) checks the mask semantics.
"""

from __future__ import annotations

import math
from functools import cache

import pytest
import torch
from attention_helpers import (
    assert_close_scaled,
    forward_backward,
    make_qkv,
    max_abs_error,
    naive_attention,
    run_backend,
)

from aah.attention import windowed_attention

# (B, Hq, Hkv, T, D, windows); ids say what each case is for.
CASES = {
    "T1-mha": (1, 2, 2, 1, 8, (1, 5)),
    "T2-gqa": (2, 4, 2, 2, 16, (1, 2, 3, 1)),
    "T7-mqa-1-3-T-2T": (2, 4, 1, 7, 8, (1, 3, 7, 14)),
    "T7-gqa3-repeats": (1, 6, 3, 7, 64, (2, 7, 2, 100, 2, 5)),
    "T70-w1": (2, 2, 2, 70, 8, (1, 1)),
    "T257-gqa-1-3-T-2T": (1, 4, 2, 257, 16, (1, 3, 257, 514)),
    # Repeated windows in non-contiguous heads that split GQA groups: per-head K/V indexing.
    "T257-gqa3-split-groups": (2, 6, 3, 257, 8, (17, 100, 17, 300, 100, 17)),
    # Whole GQA groups {0, 2} share a window but are not adjacent: shared K/V, permuted heads.
    "T257-gqa3-whole-groups": (1, 6, 3, 257, 16, (33, 33, 200, 200, 33, 33)),
    "T257-mqa-17-100": (1, 4, 1, 257, 64, (100, 1, 100, 1)),
    # Windows either side of the 32/64 block sizes, one short of T, and all > T.
    "T300-block-edges": (1, 6, 6, 300, 8, (31, 32, 33, 64, 65, 299)),
    "T300-all-beyond-T": (1, 2, 1, 300, 16, (301, 600)),
    "T512-mqa-mixed": (1, 4, 1, 512, 16, (1, 3, 512, 100)),
    "T1000-gqa-mixed": (1, 4, 2, 1000, 64, (1, 17, 100, 1000)),
}
CASE_IDS = list(CASES)
KERNELS = ("dense", "banded", "grouped")
# Cases with T > 300 are slow on CPU and run in fewer checks. T512-mqa-mixed is for bf16:
# there many query blocks add into each key's gradient.
SHORT = [name for name in CASE_IDS if CASES[name][3] <= 300]
FP32_PARAMS = (
    [(b, c) for b in KERNELS for c in SHORT]
    + [(b, "T1000-gqa-mixed") for b in KERNELS]
    # `auto` is `grouped` on CPU: checked on the short cases only.
    + [("auto", c) for c in SHORT]
)
# dense is one SDPA call: a few cases suffice in float64 and bf16; the windowed kernels get all.
DENSE_SPOT_CHECKS = ["T7-gqa3-repeats", "T257-gqa3-split-groups", "T300-block-edges"]
# float64 runs an explicit (unfused) path in banded; grouped reuses it bucket by bucket.
FLOAT64_PARAMS = (
    [("dense", c) for c in DENSE_SPOT_CHECKS]
    + [(b, c) for b in ("banded", "grouped") for c in SHORT]
    + [("banded", "T1000-gqa-mixed")]
)
BF16_PARAMS = (
    [("dense", c) for c in DENSE_SPOT_CHECKS]
    + [(b, c) for b in ("banded", "grouped") for c in SHORT if CASES[c][3] >= 7]
    + [(b, "T512-mqa-mixed") for b in ("banded", "grouped")]
)
FLEX_CASE_IDS = ["T1-mha", "T7-mqa-1-3-T-2T", "T300-block-edges", "T1000-gqa-mixed"]


@cache
def inputs(case: str, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    batch, hq, hkv, seq_len, dim, _ = CASES[case]
    return make_qkv(batch, hq, hkv, seq_len, dim, seed=0, dtype=dtype)


@cache
def reference_result(case: str, dtype: torch.dtype) -> list[torch.Tensor]:
    """Reference output and gradients, computed once per case; float64 math for any dtype."""
    q, k, v, dout = inputs(case, dtype)
    windows = CASES[case][5]

    def run(q, k, v):  # type: ignore[no-untyped-def]
        return windowed_attention(q.double(), k.double(), v.double(), windows, backend="reference")

    return forward_backward(run, q, k, v, dout.double())


def backend_result(backend: str, case: str, dtype: torch.dtype) -> list[torch.Tensor]:
    q, k, v, dout = inputs(case, dtype)
    windows = CASES[case][5]
    return forward_backward(
        lambda q, k, v: windowed_attention(q, k, v, windows, backend=backend), q, k, v, dout
    )


def flex_eager(q, k, v, windows):  # type: ignore[no-untyped-def]
    return run_backend("flex-eager", q, k, v, windows)


NAMES = ("output", "dq", "dk", "dv")


@pytest.mark.parametrize(("backend", "case"), FP32_PARAMS)
def test_float32_matches_reference(backend: str, case: str) -> None:
    got = backend_result(backend, case, torch.float32)
    want = reference_result(case, torch.float32)
    for name, a, b in zip(NAMES, got, want, strict=True):
        assert a.dtype == torch.float32
        assert_close_scaled(a, b, 1e-5, f"{backend} {case} {name}")


@pytest.mark.parametrize(("backend", "case"), FLOAT64_PARAMS)
def test_float64_matches_reference(backend: str, case: str) -> None:
    got = backend_result(backend, case, torch.float64)
    want = reference_result(case, torch.float64)
    for name, a, b in zip(NAMES, got, want, strict=True):
        assert a.dtype == torch.float64
        assert_close_scaled(a, b, 1e-10, f"{backend} {case} {name}")


@pytest.mark.parametrize("case", FLEX_CASE_IDS)
def test_flex_eager_float32_forward_matches_reference(case: str) -> None:
    q, k, v, _ = inputs(case, torch.float32)
    out = flex_eager(q, k, v, CASES[case][5])
    assert out.dtype == torch.float32
    assert_close_scaled(out, reference_result(case, torch.float32)[0], 1e-5, f"flex {case}")


@pytest.mark.parametrize("case", ["T7-gqa3-repeats"])
def test_flex_eager_float64_forward_matches_reference(case: str) -> None:
    q, k, v, _ = inputs(case, torch.float64)
    out = flex_eager(q, k, v, CASES[case][5])
    assert_close_scaled(out, reference_result(case, torch.float64)[0], 1e-10, f"flex {case}")


@cache
def bf16_truth(case: str):  # type: ignore[no-untyped-def]
    """Rounded bf16 inputs, the fp32 truth on them, and plain bf16 math's error per tensor."""
    q, k, v, dout = (t.to(torch.bfloat16) for t in inputs(case, torch.float32))
    windows = CASES[case][5]
    scale = 1.0 / math.sqrt(q.shape[-1])
    truth = forward_backward(
        lambda q, k, v: windowed_attention(q, k, v, windows, backend="reference"),
        q.float(),
        k.float(),
        v.float(),
        dout.float(),
    )
    baseline = forward_backward(
        lambda q, k, v: naive_attention(q, k, v, windows, scale), q, k, v, dout
    )
    baseline_err = [max_abs_error(a, b) for a, b in zip(baseline, truth, strict=True)]
    return (q, k, v, dout), truth, baseline_err


def assert_bf16_rule(got: list[torch.Tensor], case: str, what: str) -> None:
    """error(got) <= 2 * error(plain bf16 math) + 1e-3, tensor by tensor."""
    _, truth, baseline_err = bf16_truth(case)
    for name, a, b, base in zip(NAMES, got, truth, baseline_err, strict=False):
        assert a.dtype == torch.bfloat16, f"{what} {name}: dtype {a.dtype}"
        err = max_abs_error(a, b)
        assert err <= 2 * base + 1e-3, f"{what} {case} {name}: {err:.3e} vs plain bf16 {base:.3e}"


@pytest.mark.parametrize(("backend", "case"), BF16_PARAMS)
def test_bfloat16_within_twice_plain_math_error(backend: str, case: str) -> None:
    windows = CASES[case][5]
    (q, k, v, dout), _, _ = bf16_truth(case)
    got = forward_backward(
        lambda q, k, v: windowed_attention(q, k, v, windows, backend=backend), q, k, v, dout
    )
    assert_bf16_rule(got, case, backend)


@pytest.mark.parametrize("case", ["T300-block-edges"])
def test_flex_eager_bfloat16_within_twice_plain_math_error(case: str) -> None:
    (q, k, v, _), _, _ = bf16_truth(case)
    assert_bf16_rule([flex_eager(q, k, v, CASES[case][5])], case, "flex")


def test_flex_compiled_forward_matches_reference() -> None:
    # The real (compiled) path once, on a small shape: compiling costs seconds per shape on CPU.
    case = "T7-mqa-1-3-T-2T"
    q, k, v, _ = inputs(case, torch.float32)
    with torch.no_grad():
        out = windowed_attention(q, k, v, CASES[case][5], backend="flex")
    assert out.dtype == torch.float32
    assert_close_scaled(out, reference_result(case, torch.float32)[0], 1e-5, "compiled flex")
