"""Cost diagnostics: `coverage` (ACR, causal coverage) and `executed_elements`, each checked
against counts made here (mask entries, BlockMask tiles), not against the package's formulas."""

from __future__ import annotations

import pytest
import torch
from attention_helpers import band_mask, rule_mask

from aah.attention import coverage, executed_elements
from aah.attention.cost import executed_ratio
from aah.attention.flex import TILE, block_mask


def allowed_pairs(windows, seq_len: int) -> int:  # type: ignore[no-untyped-def]
    """Allowed (query, key) pairs over all heads, counted from the mask (once per distinct
    window: a (T, T) mask per head at T = 4096 would be needlessly large)."""
    return sum(windows.count(w) * int(band_mask([w], seq_len).sum()) for w in sorted(set(windows)))


def brute_coverage(windows, seq_len: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    acr = sum(min(w, seq_len) / seq_len for w in windows) / len(windows)
    causal = int(rule_mask(windows, seq_len).sum()) / (len(windows) * seq_len * (seq_len + 1) / 2)
    return acr, causal


# ---- coverage ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("windows", "seq_len"),
    [
        ((1,), 1),
        ((1,), 9),
        ((9,), 9),
        ((1, 3, 9, 18), 9),
        ((4, 4, 4), 12),
        ((2, 7, 100, 1, 5), 30),
    ],
)
def test_coverage_matches_brute_force(windows: tuple[int, ...], seq_len: int) -> None:
    got = coverage(list(windows), seq_len)
    acr, causal = brute_coverage(windows, seq_len)
    assert isinstance(got.acr, float)
    assert isinstance(got.causal, float)
    assert got.acr == pytest.approx(acr, rel=1e-12)
    assert got.causal == pytest.approx(causal, rel=1e-12)


def test_coverage_full_and_minimal_windows() -> None:
    # Full windows cover everything; w = 1 covers T of the T (T + 1) / 2 causal pairs.
    assert coverage([64, 100], 64).acr == pytest.approx(1.0)
    assert coverage([64, 100], 64).causal == pytest.approx(1.0)
    assert coverage([1], 64).acr == pytest.approx(1 / 64)
    assert coverage([1], 64).causal == pytest.approx(2 / 65)


def test_coverage_acr_and_causal_differ_for_local_windows() -> None:
    # ACR counts w / T per head; causal coverage counts pairs: for w = T / 2 they differ.
    cov = coverage([8], 16)
    assert cov.acr == pytest.approx(0.5)
    assert cov.causal == pytest.approx((8 * 9 / 2 + 8 * 8) / (16 * 17 / 2))
    assert cov.causal > cov.acr


def test_coverage_of_layer_head_plan_averages_every_head() -> None:
    plan = [[1, 8, 16], [4, 4, 40]]
    flat = [w for layer in plan for w in layer]
    got = coverage(plan, 16)
    acr, causal = brute_coverage(flat, 16)
    assert got.acr == pytest.approx(acr)
    assert got.causal == pytest.approx(causal)


@pytest.mark.parametrize(
    "windows",
    [torch.tensor([1, 8, 16, 40]), (1, 8, 16, 40), [torch.tensor([1, 8]), torch.tensor([16, 40])]],
    ids=["tensor", "tuple", "list-of-tensors"],
)
def test_coverage_accepts_tensors_and_sequences(windows) -> None:  # type: ignore[no-untyped-def]
    got = coverage(windows, 16)
    acr, causal = brute_coverage([1, 8, 16, 40], 16)
    assert got.acr == pytest.approx(acr)
    assert got.causal == pytest.approx(causal)


@pytest.mark.parametrize(
    ("windows", "match"),
    [([], "empty"), ([[], []], "empty"), ([0], "got 0"), ([3, -2], "got -2"), ([[4], [0]], "0")],
)
def test_coverage_rejects_empty_and_nonpositive(windows, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=match):
        coverage(windows, 8)


def test_coverage_rejects_empty_sequence_length() -> None:
    with pytest.raises(ValueError, match="0"):
        coverage([4], 0)


# ---- executed elements ------------------------------------------------------------------------

PLANS = [
    ((1,), 1),
    ((1, 3, 7, 14), 7),
    ((1, 17, 100, 1000), 1000),
    ((129, 2000, 129, 63, 63, 129), 1000),
    ((31, 32, 33, 64, 65, 299), 300),
    ((1, 1), 100),
    ((300, 301), 300),
    ((128,) * 4, 4096),
]


@pytest.mark.parametrize("backend", ["dense", "reference"])
@pytest.mark.parametrize(("windows", "seq_len"), PLANS)
def test_dense_executes_the_whole_square(backend: str, windows, seq_len: int) -> None:  # type: ignore[no-untyped-def]
    assert executed_elements(backend, windows, seq_len) == len(windows) * seq_len * seq_len


def test_dense_executed_ratio_is_about_two() -> None:
    # The paper's dense mask runs the whole square: 2T / (T + 1) of a causal kernel.
    n = executed_elements("dense", (16, 16), 1024)
    assert executed_ratio(n, 2, 1024) == pytest.approx(2 * 1024 / 1025)


@pytest.mark.parametrize("backend", ["banded", "grouped"])
@pytest.mark.parametrize(("windows", "seq_len"), PLANS)
def test_windowed_backends_execute_at_least_the_allowed_pairs(
    backend: str, windows, seq_len: int
) -> None:  # type: ignore[no-untyped-def]
    # Fewer elements than the rule needs would mean some allowed pair was never scored.
    assert executed_elements(backend, windows, seq_len) >= allowed_pairs(windows, seq_len)


@pytest.mark.parametrize("backend", ["banded", "grouped"])
def test_local_window_costs_at_most_twice_its_pairs(backend: str) -> None:
    windows, seq_len = (128,) * 8, 4096
    pairs = allowed_pairs(windows, seq_len)
    executed = executed_elements(backend, windows, seq_len)
    assert pairs <= executed <= 2 * pairs
    # And far below a full causal kernel: the point of the windowed backends.
    assert executed_ratio(executed, len(windows), seq_len) < 0.1


def test_grouped_counts_full_heads_as_causal_triangles() -> None:
    # One head w = T (a causal SDPA bucket) and one w = 1: the full head costs T (T + 1) / 2.
    seq_len = 512
    both = executed_elements("grouped", (seq_len, 1), seq_len)
    local = executed_elements("grouped", (1,), seq_len)
    assert both - local == seq_len * (seq_len + 1) // 2


FLEX_PLANS = [
    ((1, 3, 7, 14), 7),
    ((1, 128, 129, 300), 300),
    ((1, 127, 128, 129, 255, 256, 257, 1000), 1000),
    ((128, 128), 4096),
]


@pytest.mark.parametrize(("windows", "seq_len"), FLEX_PLANS)
def test_flex_count_equals_blockmask_tiles(windows: tuple[int, ...], seq_len: int) -> None:
    mask = block_mask(windows, seq_len, "cpu")
    assert tuple(mask.BLOCK_SIZE) == (TILE, TILE)
    kept = int(mask.kv_num_blocks.sum())
    if mask.full_kv_num_blocks is not None:
        kept += int(mask.full_kv_num_blocks.sum())
    assert executed_elements("flex", windows, seq_len) == kept * TILE * TILE
    assert executed_elements("flex", windows, seq_len) >= allowed_pairs(windows, seq_len)


def test_flex_blockmask_keeps_exactly_the_tiles_with_allowed_pairs() -> None:
    # Independent of the count formula: a tile is needed iff the rule allows a pair inside it.
    windows, seq_len = (1, 130, 300), 300
    mask = block_mask(windows, seq_len, "cpu")
    dense = mask.to_dense()[0]  # (H, q tiles, kv tiles) 0/1
    allowed = rule_mask(windows, seq_len)
    n_tiles = -(-seq_len // TILE)
    for h in range(len(windows)):
        for qb in range(n_tiles):
            for kb in range(n_tiles):
                tile = allowed[h, qb * TILE : (qb + 1) * TILE, kb * TILE : (kb + 1) * TILE]
                assert bool(dense[h, qb, kb]) == bool(tile.any()), (h, qb, kb)


def test_executed_elements_unknown_backend() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        executed_elements("nope", (4,), 8)
