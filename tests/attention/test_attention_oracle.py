"""The float64 `reference` backend against a brute-force loop written in the tests.

The loop oracle is itself pinned on cases small enough to work out by hand, so a wrong window
rule cannot be shared silently by the oracle and the package.
"""

from __future__ import annotations

import math

import pytest
import torch
from attention_helpers import band_mask, brute_force_attention, make_qkv, rule_mask

from aah.attention import windowed_attention


def test_rule_mask_matches_hand_written_window_two() -> None:
    # T = 4, w = 2: every query sees itself and the key just before it, nothing else.
    expected = torch.tensor(
        [
            [1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(rule_mask([2], 4)[0], expected)


@pytest.mark.parametrize("seq_len", [1, 5, 12])
def test_vectorised_mask_matches_loop_mask(seq_len: int) -> None:
    windows = [1, 2, seq_len, seq_len + 3, 3]
    assert torch.equal(band_mask(windows, seq_len), rule_mask(windows, seq_len))


def test_brute_force_window_one_returns_values() -> None:
    # w = 1: each query attends only to itself, so the output is v whatever q and k are.
    q, k, v, _ = make_qkv(2, 3, 3, 6, 4, dtype=torch.float64)
    out = brute_force_attention(q, k, v, [1, 1, 1], scale=0.5)
    torch.testing.assert_close(out, v, rtol=0, atol=1e-15)


def test_brute_force_uniform_scores_average_visible_values() -> None:
    # q = 0 makes every score equal: the output is the plain mean of the visible values.
    seq_len, window = 7, 3
    _, k, v, _ = make_qkv(1, 1, 1, seq_len, 4, dtype=torch.float64)
    q = torch.zeros_like(k)
    out = brute_force_attention(q, k, v, [window], scale=1.0)
    for i in range(seq_len):
        first = max(0, i - window + 1)
        torch.testing.assert_close(out[0, 0, i], v[0, 0, first : i + 1].mean(0), rtol=0, atol=1e-14)


def test_brute_force_two_keys_by_hand() -> None:
    # One head, T = 2, D = 1, full window: row 1 mixes v0 and v1 with softmax([q1 k0, q1 k1]).
    q = torch.tensor([[[[0.0], [2.0]]]], dtype=torch.float64)
    k = torch.tensor([[[[1.0], [-1.0]]]], dtype=torch.float64)
    v = torch.tensor([[[[3.0], [5.0]]]], dtype=torch.float64)
    out = brute_force_attention(q, k, v, [2], scale=1.0)
    p0 = math.exp(2.0) / (math.exp(2.0) + math.exp(-2.0))
    assert out[0, 0, 0, 0].item() == pytest.approx(3.0, abs=1e-15)
    assert out[0, 0, 1, 0].item() == pytest.approx(p0 * 3.0 + (1 - p0) * 5.0, abs=1e-14)


# (B, Hq, Hkv, T, D, windows): MHA, GQA, MQA; windows 1, < T, = T, > T, mixed.
ORACLE_CASES = [
    (1, 1, 1, 1, 4, (1,)),
    (2, 2, 2, 1, 3, (3, 1)),
    (1, 2, 1, 2, 4, (1, 2)),
    (2, 4, 2, 5, 4, (1, 3, 5, 10)),
    (1, 6, 3, 9, 8, (2, 9, 2, 4, 100, 2)),
    (2, 3, 1, 12, 5, (1, 7, 12)),
    (1, 4, 4, 12, 8, (11, 13, 6, 1)),
]


@pytest.mark.parametrize(("batch", "hq", "hkv", "seq_len", "dim", "windows"), ORACLE_CASES)
@pytest.mark.parametrize("scale", [None, 0.37, 2.5])
def test_reference_matches_brute_force(
    batch: int, hq: int, hkv: int, seq_len: int, dim: int, windows: tuple[int, ...], scale
) -> None:
    q, k, v, _ = make_qkv(batch, hq, hkv, seq_len, dim, seed=seq_len + hq, dtype=torch.float64)
    out = windowed_attention(q, k, v, windows, backend="reference", scale=scale)
    expected = brute_force_attention(
        q, k, v, windows, 1.0 / math.sqrt(dim) if scale is None else scale
    )
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_reference_float32_inputs_match_brute_force() -> None:
    # The oracle computes in float64 internally: its fp32 output is the float64 answer rounded.
    q, k, v, _ = make_qkv(2, 4, 2, 11, 6, seed=3)
    windows = (1, 4, 11, 30)
    out = windowed_attention(q, k, v, windows, backend="reference")
    assert out.dtype == torch.float32
    expected = brute_force_attention(q.double(), k.double(), v.double(), windows, 6**-0.5)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=1e-6)
