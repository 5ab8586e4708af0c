"""Attention sinks: query i also sees keys j < s (j <= i). Every backend against the float64
`reference`, and `reference` against the brute-force loop, with the masks built in the tests.

Tolerances as in test_attention_backends.py: float32 1e-5 x scale, float64 1e-10 x scale.
"""

from __future__ import annotations

import math
from functools import cache

import pytest
import torch
from attention_helpers import (
    assert_close_scaled,
    band_mask,
    brute_force_attention,
    forward_backward,
    make_qkv,
    rule_mask,
    run_backend,
)

from aah.attention import coverage, executed_elements, windowed_attention
from aah.attention.flex import TILE, block_mask


def test_rule_mask_with_sinks_by_hand() -> None:
    # T = 5, w = 2, s = 1: the window of two keys plus key 0 for every query.
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [1, 0, 1, 1, 0],
            [1, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(rule_mask([2], 5, [1])[0], expected)
    windows, sinks = [1, 2, 4, 9, 3], [0, 3, 1, 2, 20]
    assert torch.equal(band_mask(windows, 9, sinks), rule_mask(windows, 9, sinks))


def test_brute_force_sinks_with_uniform_scores_average_sinks_and_window() -> None:
    # q = 0: every visible key weighs the same, so row i is the mean of its sinks and window.
    _, k, v, _ = make_qkv(1, 1, 1, 8, 3, dtype=torch.float64)
    out = brute_force_attention(torch.zeros_like(k), k, v, [2], scale=1.0, sinks=[2])
    for i in range(8):
        keys = sorted({0, 1, i - 1, i} & set(range(i + 1)))
        torch.testing.assert_close(out[0, 0, i], v[0, 0, keys].mean(0), rtol=0, atol=1e-14)


# (B, Hq, Hkv, T, D, windows, sinks)
ORACLE_CASES = [
    (1, 1, 1, 6, 4, (2,), (1,)),
    (2, 4, 2, 9, 4, (1, 3, 9, 2), (2, 0, 4, 9)),
    (1, 6, 3, 12, 5, (2, 12, 2, 4, 1, 3), (3, 3, 0, 1, 11, 2)),
]


@pytest.mark.parametrize(("batch", "hq", "hkv", "seq_len", "dim", "windows", "sinks"), ORACLE_CASES)
def test_reference_with_sinks_matches_brute_force(  # type: ignore[no-untyped-def]
    batch, hq, hkv, seq_len, dim, windows, sinks
) -> None:
    q, k, v, _ = make_qkv(batch, hq, hkv, seq_len, dim, seed=seq_len, dtype=torch.float64)
    out = windowed_attention(q, k, v, windows, backend="reference", sinks=sinks)
    expected = brute_force_attention(q, k, v, windows, 1 / math.sqrt(dim), sinks)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_one_int_means_every_head() -> None:
    q, k, v, _ = make_qkv(1, 4, 2, 10, 4, seed=5, dtype=torch.float64)
    one = windowed_attention(q, k, v, [2, 3, 4, 1], backend="reference", sinks=2)
    each = windowed_attention(q, k, v, [2, 3, 4, 1], backend="reference", sinks=[2, 2, 2, 2])
    assert torch.equal(one, each)


# (B, Hq, Hkv, T, D, windows, sinks): sinks inside and beyond the window, on heads that split
# GQA groups, next to heads without sinks, on full heads, and on the block rows of `banded`.
CASES = {
    "T9-gqa": (2, 4, 2, 9, 8, (1, 3, 9, 2), (2, 0, 4, 1)),
    "T70-mqa": (1, 4, 1, 70, 16, (1, 5, 70, 20), (4, 4, 4, 4)),
    "T300-mixed-gqa3": (2, 6, 3, 300, 16, (17, 100, 17, 300, 100, 17), (4, 0, 1, 8, 4, 64)),
    "T300-block-edges": (1, 6, 6, 300, 8, (31, 32, 33, 64, 65, 299), (1, 2, 3, 40, 0, 5)),
    "T600-sinks-one-width": (1, 4, 2, 600, 64, (64, 64, 128, 128), (4, 4, 4, 4)),
    "T257-sinks-beyond-T": (1, 2, 2, 257, 8, (200, 40), (500, 300)),
}
KERNELS = ("dense", "banded", "grouped", "auto")
NAMES = ("output", "dq", "dk", "dv")


@cache
def inputs(case: str, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    batch, hq, hkv, seq_len, dim, _, _ = CASES[case]
    return make_qkv(batch, hq, hkv, seq_len, dim, seed=1, dtype=dtype)


@cache
def reference_result(case: str, dtype: torch.dtype) -> list[torch.Tensor]:
    q, k, v, dout = inputs(case, dtype)
    windows, sinks = CASES[case][5], CASES[case][6]

    def run(q, k, v):  # type: ignore[no-untyped-def]
        return windowed_attention(
            q.double(), k.double(), v.double(), windows, backend="reference", sinks=sinks
        )

    return forward_backward(run, q, k, v, dout.double())


def test_reference_with_sinks_matches_loop_oracle_on_a_banded_case() -> None:
    # The block rows of `banded` start at the widest window: a case with rows past it.
    case = "T70-mqa"
    q, k, v, _ = inputs(case, torch.float64)
    expected = brute_force_attention(q, k, v, CASES[case][5], 0.25, CASES[case][6])
    torch.testing.assert_close(
        reference_result(case, torch.float64)[0], expected, atol=1e-12, rtol=0
    )


@pytest.mark.parametrize("backend", KERNELS)
@pytest.mark.parametrize("case", list(CASES))
def test_float32_with_sinks_matches_reference(backend: str, case: str) -> None:
    q, k, v, dout = inputs(case, torch.float32)
    windows, sinks = CASES[case][5], CASES[case][6]
    got = forward_backward(
        lambda q, k, v: windowed_attention(q, k, v, windows, backend=backend, sinks=sinks),
        q, k, v, dout,
    )  # fmt: skip
    for name, a, b in zip(NAMES, got, reference_result(case, torch.float32), strict=True):
        assert_close_scaled(a, b, 1e-5, f"{backend} {case} {name}")


@pytest.mark.parametrize("backend", ["banded", "grouped"])
@pytest.mark.parametrize("case", ["T9-gqa", "T300-mixed-gqa3", "T300-block-edges"])
def test_float64_with_sinks_matches_reference(backend: str, case: str) -> None:
    q, k, v, dout = inputs(case, torch.float64)
    windows, sinks = CASES[case][5], CASES[case][6]
    got = forward_backward(
        lambda q, k, v: windowed_attention(q, k, v, windows, backend=backend, sinks=sinks),
        q, k, v, dout,
    )  # fmt: skip
    for name, a, b in zip(NAMES, got, reference_result(case, torch.float64), strict=True):
        assert_close_scaled(a, b, 1e-10, f"{backend} {case} {name}")


@pytest.mark.parametrize("case", ["T9-gqa", "T300-mixed-gqa3", "T600-sinks-one-width"])
def test_flex_eager_with_sinks_matches_reference(case: str) -> None:
    q, k, v, _ = inputs(case, torch.float32)
    out = run_backend("flex-eager", q, k, v, CASES[case][5], sinks=CASES[case][6])
    assert_close_scaled(out, reference_result(case, torch.float32)[0], 1e-5, f"flex {case}")


@pytest.mark.parametrize("backend", ["banded", "grouped"])
def test_bfloat16_with_sinks_stays_close(backend: str) -> None:
    case = "T300-mixed-gqa3"
    q, k, v, _ = (t.to(torch.bfloat16) for t in inputs(case, torch.float32))
    out = windowed_attention(q, k, v, CASES[case][5], backend=backend, sinks=CASES[case][6])
    truth = windowed_attention(
        q.double(),
        k.double(),
        v.double(),
        CASES[case][5],
        backend="reference",
        sinks=CASES[case][6],
    )
    assert out.dtype == torch.bfloat16
    assert_close_scaled(out, truth, 2e-2, f"{backend} bf16")


@pytest.mark.parametrize("backend", ["banded", "grouped", "dense"])
def test_zero_sinks_change_nothing(backend: str) -> None:
    q, k, v, _ = inputs("T300-mixed-gqa3", torch.float32)
    windows = CASES["T300-mixed-gqa3"][5]
    plain = windowed_attention(q, k, v, windows, backend=backend)
    assert torch.equal(windowed_attention(q, k, v, windows, backend=backend, sinks=0), plain)


@pytest.mark.parametrize(
    ("sinks", "match"),
    [
        (-1, "sinks must be >= 0"),
        ([1, 2], "one sink per query head"),
        ([1, -2, 0, 0], "every sink must be >= 0"),
        ([1.0, 2, 0, 0], "sinks must be ints"),
        (True, "sinks must be"),
        (torch.tensor(2), "0-d tensor"),
    ],
)
def test_bad_sinks_are_refused(sinks, match: str) -> None:  # type: ignore[no-untyped-def]
    q, k, v, _ = make_qkv(1, 4, 2, 8, 4)
    with pytest.raises(ValueError, match=match):
        windowed_attention(q, k, v, [2, 2, 2, 2], sinks=sinks)


def test_flash_refuses_sinks_and_says_why() -> None:
    q, k, v, _ = make_qkv(1, 2, 2, 8, 4)
    with pytest.raises(ValueError, match="cannot keep attention sinks"):
        windowed_attention(q, k, v, [2, 2], backend="flash", sinks=1)


# ---- cost -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("windows", "sinks", "seq_len"),
    [((2,), (1,), 5), ((1, 3, 9, 18), (4, 0, 2, 3), 9), ((2, 7, 100, 1, 5), (1, 30, 4, 3, 2), 30)],
)
def test_coverage_with_sinks_counts_the_mask(windows, sinks, seq_len: int) -> None:  # type: ignore[no-untyped-def]
    got = coverage(list(windows), seq_len, list(sinks))
    pairs = int(rule_mask(windows, seq_len, sinks).sum())
    assert got.causal == pytest.approx(pairs / (len(windows) * seq_len * (seq_len + 1) / 2))
    acr = sum(min(w + s, seq_len) / seq_len for w, s in zip(windows, sinks, strict=True))
    assert got.acr == pytest.approx(acr / len(windows))


def test_coverage_refuses_bad_sinks() -> None:
    with pytest.raises(ValueError, match="sinks must be ints >= 0"):
        coverage([2, 3], 8, [1])


@pytest.mark.parametrize("backend", ["banded", "grouped"])
@pytest.mark.parametrize("case", list(CASES))
def test_windowed_backends_execute_at_least_the_allowed_pairs_with_sinks(
    backend: str, case: str
) -> None:
    seq_len, windows, sinks = CASES[case][3], CASES[case][5], CASES[case][6]
    pairs = int(band_mask(windows, seq_len, sinks).sum())
    assert executed_elements(backend, windows, seq_len, sinks) >= pairs


def test_sinks_cost_a_few_columns_on_a_long_sequence() -> None:
    windows, seq_len = (128,) * 4, 4096
    plain = executed_elements("banded", windows, seq_len)
    with_sinks = executed_elements("banded", windows, seq_len, 4)
    assert 0 < with_sinks - plain <= 4 * seq_len * 4


@pytest.mark.parametrize(
    ("windows", "sinks", "seq_len"),
    [((1, 128, 129, 300), (1, 4, 200, 0), 300), ((128, 128), (4, 130), 1000)],
)
def test_flex_count_with_sinks_equals_blockmask_tiles(windows, sinks, seq_len: int) -> None:  # type: ignore[no-untyped-def]
    mask = block_mask(windows, seq_len, "cpu", sinks)
    dense = mask.to_dense()[0]
    assert executed_elements("flex", windows, seq_len, sinks) == int(dense.sum()) * TILE * TILE
    allowed = band_mask(windows, seq_len, sinks)
    n = -(-seq_len // TILE)
    for h in range(len(windows)):
        for qb in range(n):
            for kb in range(n):
                tile = allowed[h, qb * TILE : (qb + 1) * TILE, kb * TILE : (kb + 1) * TILE]
                assert bool(dense[h, qb, kb]) == bool(tile.any()), (h, qb, kb)
