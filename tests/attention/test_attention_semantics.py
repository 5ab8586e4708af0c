"""What every backend must mean, beyond matching numbers: full causal, the exact key set,
causality, the scale, memory layout and dtype.

float32 comparisons use the suite's tolerance: max abs error <= 1e-5 * max(1, max |expected|).
"""

from __future__ import annotations

import math
from functools import cache

import pytest
import torch
import torch.nn.functional as F
from attention_helpers import (
    CPU_BACKENDS,
    TRAINABLE_BACKENDS,
    assert_close_scaled,
    forward_backward,
    make_qkv,
    rule_mask,
    run_backend,
)

# ---- w >= T is full causal attention ---------------------------------------------------------


# flex's eager path costs ~1 s per new shape on CPU: it sees one shape per check below.
FULL_CAUSAL_PARAMS = [
    (backend, shape)
    for backend in TRAINABLE_BACKENDS
    for shape in [(2, 1, 2, 2), (2, 7, 4, 2), (1, 257, 6, 3), (1, 130, 4, 1)]
] + [("flex-eager", (2, 7, 4, 2))]


@pytest.mark.parametrize(("backend", "shape"), FULL_CAUSAL_PARAMS)
def test_windows_at_least_t_equal_sdpa_causal(backend: str, shape: tuple[int, ...]) -> None:
    batch, seq_len, hq, hkv = shape
    q, k, v, dout = make_qkv(batch, hq, hkv, seq_len, 16, seed=seq_len)
    # Exactly T, just above, far above: all mean "see the whole causal prefix".
    windows = [seq_len, seq_len + 1, 10 * seq_len, 1 << 20, seq_len, seq_len + 7][:hq]

    def sdpa(q, k, v):  # type: ignore[no-untyped-def]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hkv)

    want = forward_backward(sdpa, q, k, v, dout)
    if backend == "flex-eager":
        assert_close_scaled(run_backend(backend, q, k, v, windows), want[0], 1e-5, backend)
        return
    got = forward_backward(lambda q, k, v: run_backend(backend, q, k, v, windows), q, k, v, dout)
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want, strict=True):
        assert_close_scaled(a, b, 1e-5, f"{backend} T={seq_len} {name}")


# ---- off-by-one: the exact set of keys that receive weight -----------------------------------

ONE_HOT_PLANS = {
    # A head with w >= T makes the banded layout a single masked prefix.
    "mixed-with-full": lambda t: (1, 2, 31, 32, 33, 65, t, t + 3),
    # All windows local: the banded layout runs query blocks over key spans.
    "all-local": lambda t: (1, 2, 31, 32, 33, 40, 65, 5),
}


ONE_HOT_PARAMS = [
    (backend, plan, seq_len)
    for backend in CPU_BACKENDS
    for plan in ONE_HOT_PLANS
    for seq_len in (1, 7, 160)
    if backend != "flex-eager" or (seq_len, plan) == (160, "all-local")
]


@pytest.mark.parametrize(("backend", "plan", "seq_len"), ONE_HOT_PARAMS)
def test_one_hot_values_show_exactly_the_window(backend: str, plan: str, seq_len: int) -> None:
    # v[j] = e_j, so output row i *is* the attention distribution of query i: its support must
    # be exactly {j : i - w < j <= i}, and it must sum to 1.
    windows = ONE_HOT_PLANS[plan](seq_len)
    q, k, _, _ = make_qkv(1, 8, 2, seq_len, seq_len, seed=7)
    q, k = 0.3 * q, 0.3 * k  # moderate scores: every allowed weight stays far above zero
    v = torch.eye(seq_len).expand(1, 2, seq_len, seq_len).contiguous()
    with torch.no_grad():
        probs = run_backend(backend, q, k, v, windows)
    expected = rule_mask(windows, seq_len).expand(1, -1, -1, -1)
    assert probs.shape == expected.shape
    # Masked keys must get no weight; allowed keys get at least ~e^-3 / T on these inputs.
    leaked = (probs.abs() > 1e-7) & ~expected
    missing = (probs <= 1e-6) & expected
    assert not leaked.any(), (
        f"{backend}: weight on keys outside the window at {leaked.nonzero()[:5]}"
    )
    assert not missing.any(), f"{backend}: allowed keys without weight at {missing.nonzero()[:5]}"
    torch.testing.assert_close(probs.sum(-1), torch.ones(1, 8, seq_len), rtol=0, atol=1e-5)


# ---- causality: the future never reaches the past --------------------------------------------

CAUSAL_PLANS = {"mixed": (1, 40, 200, 77), "local": (3, 33, 64, 17)}
CUTS = (1, 65, 96, 150)  # inside and at the edges of the 32-row query blocks


@pytest.mark.parametrize(
    ("backend", "plan"),
    [(b, p) for b in CPU_BACKENDS for p in CAUSAL_PLANS if b != "flex-eager" or p == "local"],
)
def test_future_tokens_do_not_change_past_outputs(backend: str, plan: str) -> None:
    windows = CAUSAL_PLANS[plan]
    q, k, v, _ = make_qkv(1, 4, 2, 200, 16, seed=11)
    with torch.no_grad():
        base = run_backend(backend, q, k, v, windows)
        noise = torch.randn(k.shape, generator=torch.Generator().manual_seed(5))
        for cut in CUTS:
            # Large changes to every key/value at positions >= cut; rows < cut must not move.
            k2, v2 = k.clone(), v.clone()
            k2[:, :, cut:] += 100 * noise[:, :, cut:]
            v2[:, :, cut:] -= 100 * noise[:, :, cut:]
            out = run_backend(backend, q, k2, v2, windows)
            assert_close_scaled(out[:, :, :cut], base[:, :, :cut], 1e-6, f"{backend} cut={cut}")
            # And the perturbation is visible from `cut` on (the check can see a change).
            assert not torch.allclose(out[:, :, cut:], base[:, :, cut:])


@pytest.mark.parametrize("backend", TRAINABLE_BACKENDS)
def test_past_outputs_have_zero_gradient_wrt_future_keys(backend: str) -> None:
    windows = CAUSAL_PLANS["mixed"]
    q, k, v, dout = make_qkv(1, 4, 2, 200, 16, seed=12)
    for cut in (37, 65, 128):
        grads = forward_backward(
            lambda q, k, v, cut=cut: run_backend(backend, q, k, v, windows)[:, :, :cut],
            q,
            k,
            v,
            dout[:, :, :cut],
        )
        _, dq, dk, dv = grads
        assert dk[:, :, cut:].abs().max().item() == 0.0, f"{backend} cut={cut}: dk leaks"
        assert dv[:, :, cut:].abs().max().item() == 0.0, f"{backend} cut={cut}: dv leaks"
        assert dq[:, :, cut:].abs().max().item() == 0.0, f"{backend} cut={cut}: dq leaks"
        assert dk[:, :, :cut].abs().max().item() > 0.0


# ---- scale, layout, dtype ---------------------------------------------------------------------

LOCAL_PLAN = (1, 17, 100, 33)  # max < T - block at T = 150: banded runs its blocked path
MIXED_PLAN = (150, 2, 64, 1)  # one head full: banded runs one masked prefix


@cache
def scaled_reference(scale: float) -> list[torch.Tensor]:
    q, k, v, dout = make_qkv(1, 4, 2, 150, 16, seed=13)
    return forward_backward(
        lambda q, k, v: run_backend(
            "reference", q.double(), k.double(), v.double(), LOCAL_PLAN, scale
        ),
        q,
        k,
        v,
        dout.double(),
    )


@pytest.mark.parametrize(
    ("backend", "scale"),
    [(b, s) for b in TRAINABLE_BACKENDS for s in (0.05, 0.9, 3.0)] + [("flex-eager", 3.0)],
)
def test_scale_is_honoured(backend: str, scale: float) -> None:
    q, k, v, dout = make_qkv(1, 4, 2, 150, 16, seed=13)
    want = scaled_reference(scale)
    default = run_backend("reference", q, k, v, LOCAL_PLAN)
    # The scale matters on these inputs: ignoring it would fail the comparison below.
    assert (want[0] - default.double()).abs().max().item() > 1e-2
    if backend == "flex-eager":
        out = run_backend(backend, q, k, v, LOCAL_PLAN, scale)
        assert_close_scaled(out, want[0], 1e-5, f"{backend} scale={scale}")
        return
    got = forward_backward(
        lambda q, k, v: run_backend(backend, q, k, v, LOCAL_PLAN, scale), q, k, v, dout
    )
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want, strict=True):
        assert_close_scaled(a, b, 1e-5, f"{backend} scale={scale} {name}")


@pytest.mark.parametrize(
    ("backend", "windows"),
    [
        (b, w)
        for b in CPU_BACKENDS
        for w in (LOCAL_PLAN, MIXED_PLAN)
        if b != "flex-eager" or w == LOCAL_PLAN
    ],
)
def test_non_contiguous_inputs_give_same_results(backend: str, windows: tuple[int, ...]) -> None:
    # The model produces q/k/v as (B, T, H, D) and transposes: strided, not contiguous.
    gen = torch.Generator().manual_seed(14)
    q_bthd = torch.randn(2, 150, 4, 16, generator=gen)
    k_bthd = torch.randn(2, 150, 2, 16, generator=gen)
    v_bthd = torch.randn(2, 150, 2, 16, generator=gen)
    dout = torch.randn(2, 4, 150, 16, generator=gen)

    def strided(q, k, v):  # type: ignore[no-untyped-def]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        assert not q.is_contiguous()
        return run_backend(backend, q, k, v, windows)

    def contiguous(q, k, v):  # type: ignore[no-untyped-def]
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        return run_backend(backend, q, k, v, windows)

    if backend == "flex-eager":
        got, want = [strided(q_bthd, k_bthd, v_bthd)], [contiguous(q_bthd, k_bthd, v_bthd)]
    else:
        got = forward_backward(strided, q_bthd, k_bthd, v_bthd, dout)
        want = forward_backward(contiguous, q_bthd, k_bthd, v_bthd, dout)
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want, strict=False):
        assert_close_scaled(a, b, 1e-6, f"{backend} {name}")
    reference = run_backend(
        "reference", *(t.transpose(1, 2).double() for t in (q_bthd, k_bthd, v_bthd)), windows
    )
    assert_close_scaled(got[0], reference, 1e-5, f"{backend} strided vs reference")


@pytest.mark.parametrize(
    ("backend", "dtype"),
    [
        (b, d)
        for b in CPU_BACKENDS
        for d in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
        if b != "flex-eager" or d == torch.bfloat16
    ],
)
def test_output_dtype_and_shape_follow_input(backend: str, dtype: torch.dtype) -> None:
    windows = (1, 17, 5, 33)  # max 33 < T - 32: banded's blocked path
    q, k, v, _ = make_qkv(1, 4, 2, 100, 8, seed=15, dtype=dtype)
    with torch.no_grad():
        out = run_backend(backend, q, k, v, windows)
    assert out.dtype == dtype
    assert out.shape == q.shape
    # And the values are attention, not garbage: loose check against the float64 oracle.
    want = run_backend("reference", q.double(), k.double(), v.double(), windows)
    tol = 1e-5 if dtype in (torch.float32, torch.float64) else 5e-2
    assert_close_scaled(out, want, tol, f"{backend} {dtype}")


def test_default_scale_is_inverse_sqrt_head_dim() -> None:
    q, k, v, _ = make_qkv(1, 2, 1, 40, 9, seed=16)
    out = run_backend("grouped", q, k, v, (5, 40))
    explicit = run_backend("reference", q, k, v, (5, 40), 1.0 / math.sqrt(9))
    assert_close_scaled(out, explicit, 1e-5, "default scale")


@pytest.mark.parametrize("backend", TRAINABLE_BACKENDS)
@pytest.mark.parametrize("windows", [LOCAL_PLAN, MIXED_PLAN], ids=["local", "mixed"])
def test_broadcast_upstream_gradient(backend: str, windows: tuple[int, ...]) -> None:
    # out.sum().backward() hands the backward a stride-0 (expanded) gradient.
    q, k, v, _ = make_qkv(1, 4, 2, 150, 16, seed=17)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    run_backend(backend, *leaves, windows).sum().backward()
    want = forward_backward(
        lambda q, k, v: run_backend("reference", q.double(), k.double(), v.double(), windows),
        q,
        k,
        v,
        torch.ones(1, 4, 150, 16, dtype=torch.float64),
    )
    for name, leaf, expected in zip(("dq", "dk", "dv"), leaves, want[1:], strict=True):
        assert_close_scaled(leaf.grad, expected, 1e-5, f"{backend} {name}")
