"""Head routing for buckets: split_heads / merge_heads against plain indexing, values and grads."""

from __future__ import annotations

import pytest
import torch

from aah.attention.heads import merge_heads, split_heads

CASES = {
    "contiguous partition": (slice(0, 2), slice(2, 3), slice(3, 6)),
    "scattered partition": ((0, 3, 5), (1, 2), (4,)),
    "overlapping (GQA split)": ((0, 0, 1), (1, 2), (2, 2)),
    "subset": ((1,), slice(3, 5)),
}


def plain(x, index):
    return x[:, index] if isinstance(index, slice) else x[:, list(index)]


@pytest.mark.parametrize("seq_major", [False, True], ids=["BHTD-memory", "BTHD-memory"])
@pytest.mark.parametrize("name", list(CASES))
def test_split_matches_indexing_in_values_and_gradients(name, seq_major):
    indices = CASES[name]
    x = torch.randn(2, 6, 5, 3, dtype=torch.float64)
    if seq_major:  # how a model's q/k/v arrive: (B, T, H, D) memory viewed as (B, H, T, D)
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    x.requires_grad_(True)
    weights = [torch.randn_like(plain(x, i)) for i in indices]
    ours = split_heads(x, indices)
    for part, index in zip(ours, indices, strict=True):
        assert torch.equal(part, plain(x, index))
    loss = sum((p * w).sum() for p, w in zip(ours, weights, strict=True))
    (g_ours,) = torch.autograd.grad(loss, x)
    ref = sum((plain(x, i) * w).sum() for i, w in zip(indices, weights, strict=True))
    (g_ref,) = torch.autograd.grad(ref, x)
    torch.testing.assert_close(g_ours, g_ref, rtol=1e-12, atol=1e-12)  # sums may reorder


def test_split_with_an_unused_part_still_gives_exact_gradients():
    x = torch.randn(1, 4, 3, 2, requires_grad=True)
    a, _ = split_heads(x, (slice(0, 2), (2, 3)))
    a.sum().backward()
    expected = torch.zeros_like(x)
    expected[:, :2] = 1
    assert torch.equal(x.grad, expected)


def test_merge_is_the_inverse_of_split_for_a_partition():
    indices = CASES["scattered partition"]
    x = torch.randn(2, 6, 5, 3, dtype=torch.float64, requires_grad=True)
    y = merge_heads(tuple(p * 2 for p in split_heads(x, indices)), indices)
    assert torch.equal(y, 2 * x)
    assert y.transpose(1, 2).is_contiguous()  # (B, T, H, D) memory
    w = torch.randn_like(y)
    (grad,) = torch.autograd.grad((y * w).sum(), x)
    assert torch.equal(grad, 2 * w)


def test_no_grad_split_returns_plain_indexing():
    x = torch.randn(1, 4, 2, 2)
    parts = split_heads(x, ((3, 1), slice(0, 1)))
    assert torch.equal(parts[0], x[:, [3, 1]]) and parts[1].data_ptr() == x.data_ptr()
