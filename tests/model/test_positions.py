"""RoPE against an explicit float64 rotation, its relative-position property and odd inputs."""

from __future__ import annotations

import math

import pytest
import torch

from aah.model.positions import RotaryPosition


def rotate_reference(x: torch.Tensor, base: float, offset: int = 0) -> torch.Tensor:
    """Rotate each pair (2i, 2i + 1) of x (..., T, D) by angle pos * base^(-2i / D), loops."""
    x = x.double()
    out = torch.empty_like(x)
    t_len, dim = x.shape[-2:]
    for t in range(t_len):
        for i in range(dim // 2):
            angle = (offset + t) * base ** (-2 * i / dim)
            c, s = math.cos(angle), math.sin(angle)
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            out[..., t, 2 * i] = a * c - b * s
            out[..., t, 2 * i + 1] = a * s + b * c
    return out


def test_rope_matches_explicit_rotation():
    rope = RotaryPosition(max_seq_len=16, head_dim=8, base=100.0)
    x = torch.randn(2, 3, 11, 8)
    q, _ = rope.rotate(x, x, offset=5)
    torch.testing.assert_close(q.double(), rotate_reference(x, 100.0, offset=5), rtol=0, atol=1e-5)
    assert q.dtype == torch.float32


def test_scores_depend_only_on_relative_position():
    rope = RotaryPosition(max_seq_len=64, head_dim=16, base=10000.0)
    q, k = torch.randn(1, 1, 1, 16, dtype=torch.float64), torch.randn(1, 1, 1, 16)
    k = k.double()
    scores = []
    for shift in (0, 7, 30):
        rq, _ = rope.rotate(q, q, offset=shift + 9)
        rk, _ = rope.rotate(k, k, offset=shift + 2)
        scores.append(float((rq * rk).sum()))
    assert scores == pytest.approx([scores[0]] * 3, rel=1e-6)


def test_half_precision_and_strided_inputs():
    rope = RotaryPosition(max_seq_len=32, head_dim=8, base=10000.0)
    base = torch.randn(2, 9, 5 * 8 + 1)  # odd row length: the q view has odd strides
    x = base[..., 1:].unflatten(-1, (5, 8)).transpose(1, 2)  # (B, H, T, D), non-contiguous
    expected = rotate_reference(x, 10000.0)
    torch.testing.assert_close(rope.rotate(x, x)[0].double(), expected, rtol=0, atol=1e-5)
    half, _ = rope.rotate(x.bfloat16(), x.bfloat16())
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.double(), expected, rtol=0, atol=5e-2)


def test_rope_backward_is_the_inverse_rotation():
    rope = RotaryPosition(max_seq_len=8, head_dim=4, base=10.0)
    x = torch.randn(1, 2, 8, 4, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(1, 2, 8, 4, dtype=torch.float64)
    rope.rotate(x, x)[0].backward(grad)
    # A rotation is orthogonal: the gradient is the output gradient rotated back.
    assert torch.allclose(x.grad.norm(dim=-1), grad.norm(dim=-1))
    assert torch.autograd.gradcheck(lambda t: rope.rotate(t, t)[0], (x,))
