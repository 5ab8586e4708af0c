"""The banded engines' buffer pool: a buffer anyone still holds is never handed out again, results
do not depend on what the pool held before, and the pool stays within its limit."""

from __future__ import annotations

import pytest
import torch
from attention_helpers import make_qkv

from aah.attention import release_workspaces, windowed_attention, workspace, workspace_limit


@pytest.fixture(autouse=True)
def _fresh_pool():  # type: ignore[no-untyped-def]
    release_workspaces()
    before = workspace_limit()
    yield
    workspace_limit(before)
    release_workspaces()


def _step(q, k, v, windows, grad, backend="banded"):  # type: ignore[no-untyped-def]
    out = windowed_attention(q, k, v, windows, backend=backend)
    out.backward(grad)
    return out


def _unpooled_grads(q, k, v, windows, grad):  # type: ignore[no-untyped-def]
    """(dq, dk, dv) with the pool off: plain allocations, nothing shared."""
    before = workspace_limit(0)
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    _step(*leaves, windows, grad)
    workspace_limit(before)
    return [t.grad for t in leaves]


def test_held_buffer_is_not_handed_out() -> None:
    like = torch.empty(0)
    a = workspace.empty((4, 5), like=like)
    b = workspace.empty((4, 5), like=like)
    assert a.data_ptr() != b.data_ptr()
    view = a[1:]
    ptr = a.data_ptr()
    del a
    c = workspace.empty((4, 5), like=like)  # a's storage is still held through `view`
    assert c.data_ptr() != ptr
    del view, c
    assert workspace.empty((4, 5), like=like).data_ptr() == ptr  # idle again: reused


def test_layout_order() -> None:
    x = workspace.empty((2, 3, 4, 5), like=torch.empty(0), order=(0, 2, 1, 3))
    assert x.shape == (2, 3, 4, 5)
    assert x.stride() == (60, 5, 15, 1)
    y = torch.randn(2, 5, 3, 4).transpose(1, 2)  # a model's (B, T, H, D) memory
    assert workspace.empty_like(y).stride() == torch.empty_like(y).stride() == (60, 4, 12, 1)


# D=64 with windows <= 256 runs the stored engine; D=32 the fused-kernel engine.
CASES = [((5, 5), "banded", 64), ((40, 40), "banded", 32), ((5, 40), "grouped", 64),
         ((3, 100), "grouped", 32)]  # fmt: skip


@pytest.mark.parametrize(("windows", "backend", "dim"), CASES)
def test_outputs_and_grads_survive_later_calls(windows, backend, dim: int) -> None:  # type: ignore[no-untyped-def]
    # Keep everything a caller could hold (output, .grad), then call again on other inputs.
    q, k, v, grad = make_qkv(1, 2, 2, 160, dim, seed=0)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out1 = _step(*leaves, windows, grad, backend)
    kept = [out1.detach().clone()] + [t.grad.clone() for t in leaves]
    for seed in (1, 2, 3):
        others = [t.requires_grad_() for t in make_qkv(1, 2, 2, 160, dim, seed=seed)[:3]]
        _step(*others, windows, grad, backend)
    assert torch.equal(out1.detach(), kept[0])
    for before, t in zip(kept[1:], leaves, strict=True):
        assert torch.equal(before, t.grad)
    # ... and what they held was right in the first place.
    before = workspace_limit(0)
    plain = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    assert torch.equal(_step(*plain, windows, grad, backend).detach(), kept[0])
    workspace_limit(before)
    for want, t in zip(kept[1:], plain, strict=True):
        assert torch.equal(want, t.grad)


@pytest.mark.parametrize("dim", [64, 32])
def test_forwards_before_backwards(dim: int) -> None:
    # Two "layers" run forward before either runs backward: what each saved for its backward
    # must stay its own.
    q, k, v, grad = make_qkv(1, 2, 2, 200, dim, seed=2)
    expected = _unpooled_grads(q, k, v, (8, 8), grad)
    a = [t.clone().requires_grad_() for t in (q, k, v)]
    b = [t.requires_grad_() for t in make_qkv(1, 2, 2, 200, dim, seed=3)[:3]]
    out_a = windowed_attention(*a, (8, 8), backend="banded")
    out_b = windowed_attention(*b, (8, 8), backend="banded")
    out_b.backward(grad)
    out_a.backward(grad)
    for got, want in zip((t.grad for t in a), expected, strict=True):
        assert torch.equal(got, want)


def test_retain_graph_second_backward_unchanged() -> None:
    q, k, v, grad = make_qkv(1, 2, 2, 200, 64, seed=4)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = windowed_attention(*leaves, (8, 8), backend="banded")
    out.backward(grad, retain_graph=True)
    for t in leaves:
        t.grad = None
    other = [t.clone().requires_grad_() for t in make_qkv(1, 2, 2, 200, 64, seed=5)[:3]]
    _step(*other, (8, 8), grad)  # a call in between takes whatever the pool has idle
    out.backward(grad)
    for got, want in zip(
        (t.grad for t in leaves), _unpooled_grads(q, k, v, (8, 8), grad), strict=True
    ):
        assert torch.equal(got, want)


def test_limit_and_release() -> None:
    q, k, v, grad = make_qkv(1, 2, 2, 200, 64, seed=6)
    for t in (q, k, v):
        t.requires_grad_()
    _step(q, k, v, (8, 8), grad)
    assert workspace.pooled_bytes() > 0
    assert release_workspaces() > 0 and workspace.pooled_bytes() == 0
    workspace_limit(0)  # pooling off: the same results from plain allocations
    q.grad = k.grad = v.grad = None
    out = _step(q, k, v, (8, 8), grad)
    assert workspace.pooled_bytes() == 0
    workspace_limit(2**30)
    grads = [t.grad.clone() for t in (q, k, v)]
    q.grad = k.grad = v.grad = None
    assert torch.equal(_step(q, k, v, (8, 8), grad), out)
    assert all(torch.equal(t.grad, g) for t, g in zip((q, k, v), grads, strict=True))
    small = 100_000
    workspace_limit(small)
    _step(q, k, v, (8, 8), grad)
    assert workspace.pooled_bytes() <= small
    with pytest.raises(ValueError, match="workspace limit"):
        workspace_limit(-1)


def test_no_pooling_in_inference_mode() -> None:
    with torch.inference_mode():
        workspace.empty((8,), like=torch.empty(0))
    assert workspace.pooled_bytes() == 0
