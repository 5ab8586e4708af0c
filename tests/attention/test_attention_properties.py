"""Property tests: random shapes and per-head plans, banded and grouped against the oracle.

Tolerance as elsewhere for float32: max abs error <= 1e-5 * max(1, max |reference|).
"""

from __future__ import annotations

import torch
from attention_helpers import assert_close_scaled, forward_backward, make_qkv, rule_mask
from hypothesis import given, settings
from hypothesis import strategies as st

from aah.attention import windowed_attention


@st.composite
def problems(draw):  # type: ignore[no-untyped-def]
    """(B, Hq, Hkv, T, D, windows) with windows in [1, T + 5] per query head."""
    batch = draw(st.integers(1, 2))
    n_kv_heads = draw(st.integers(1, 3))
    group = draw(st.integers(1, 3))
    seq_len = draw(st.integers(1, 80))
    head_dim = draw(st.sampled_from([4, 8]))
    windows = draw(
        st.lists(
            st.integers(1, seq_len + 5),
            min_size=n_kv_heads * group,
            max_size=n_kv_heads * group,
        )
    )
    seed = draw(st.integers(0, 2**16))
    return batch, n_kv_heads * group, n_kv_heads, seq_len, head_dim, tuple(windows), seed


PROPERTY_SETTINGS = settings(max_examples=25, deadline=None, derandomize=True, database=None)


def check_against_reference(backend: str, problem) -> None:  # type: ignore[no-untyped-def]
    batch, hq, hkv, seq_len, dim, windows, seed = problem
    q, k, v, dout = make_qkv(batch, hq, hkv, seq_len, dim, seed=seed)
    want = forward_backward(
        lambda q, k, v: windowed_attention(
            q.double(), k.double(), v.double(), windows, backend="reference"
        ),
        q,
        k,
        v,
        dout.double(),
    )
    got = forward_backward(
        lambda q, k, v: windowed_attention(q, k, v, windows, backend=backend), q, k, v, dout
    )
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want, strict=True):
        assert_close_scaled(a, b, 1e-5, f"{backend} {problem[:6]} {name}")


@PROPERTY_SETTINGS
@given(problems())
def test_banded_matches_reference(problem) -> None:  # type: ignore[no-untyped-def]
    check_against_reference("banded", problem)


@PROPERTY_SETTINGS
@given(problems())
def test_grouped_matches_reference(problem) -> None:  # type: ignore[no-untyped-def]
    check_against_reference("grouped", problem)


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 40), st.lists(st.integers(1, 45), min_size=1, max_size=4))
def test_reference_support_is_the_window(seq_len: int, windows: list[int]) -> None:
    # One-hot values again, on random plans: the oracle's weights live exactly on the window.
    q, k, _, _ = make_qkv(1, len(windows), 1, seq_len, seq_len, seed=seq_len)
    v = torch.eye(seq_len).expand(1, 1, seq_len, seq_len)
    probs = windowed_attention(0.3 * q, 0.3 * k, v, windows, backend="reference")
    assert torch.equal(probs[0] > 0, rule_mask(windows, seq_len))
