"""The window predicate `masks.window_allows` against a brute-force double loop, and every mask
the package builds from it against the same loop (flex's mask_mod, the banded layout's band and
sink masks, the biased variant's masks, the HF path's causal pattern and suffix mask)."""

from __future__ import annotations

import random

import pytest
import torch
from attention_helpers import allowed_keys, rule_mask

from aah.attention import band_layout, band_sinks
from aah.attention.masks import window_allows, window_mask
from aah.attention.variants import biased


def _loop_mask(seq_len: int, window: int, sinks: int) -> torch.Tensor:
    mask = torch.zeros(seq_len, seq_len, dtype=torch.bool)
    for i in range(seq_len):
        for j in range(seq_len):
            mask[i, j] = 0 <= i - j < window or (j < sinks and j <= i)
    return mask


def _cases(n: int, seed: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(1, 40), rng.randint(1, 45), rng.randint(0, 8)) for _ in range(n)]


@pytest.mark.parametrize(("seq_len", "window", "sinks"), _cases(12, 0))
def test_predicate_matches_double_loop(seq_len: int, window: int, sinks: int) -> None:
    pos = torch.arange(seq_len)
    expected = _loop_mask(seq_len, window, sinks)
    got = window_allows(pos[:, None], pos[None, :], window, sinks)
    assert torch.equal(got, expected)
    if sinks == 0:
        assert torch.equal(window_allows(pos[:, None], pos[None, :], window), expected)
    # Tensor windows and sinks (a mask_mod indexes them per head) give the same answer.
    w_t, s_t = torch.tensor(window), torch.tensor(sinks)
    assert torch.equal(window_allows(pos[:, None], pos[None, :], w_t, s_t), expected)


def test_predicate_with_scalar_positions() -> None:
    # The form a FlexAttention mask_mod sees: 0-d tensors for the query and key index.
    for i in range(6):
        for j in range(6):
            got = window_allows(torch.tensor(i), torch.tensor(j), torch.tensor(2), torch.tensor(1))
            assert bool(got) == (j in allowed_keys(i, 2, 1))


@pytest.mark.parametrize("seed", [1, 2])
def test_window_mask_matches_loop(seed: int) -> None:
    rng = random.Random(seed)
    seq_len = rng.randint(5, 30)
    windows = [rng.randint(1, seq_len + 3) for _ in range(3)]
    sinks = [rng.randint(0, 5) for _ in range(3)]
    got = window_mask(torch.tensor(windows), seq_len, torch.tensor(sinks))
    assert torch.equal(got, rule_mask(windows, seq_len, sinks))
    assert torch.equal(window_mask(torch.tensor(windows), seq_len), rule_mask(windows, seq_len))


@pytest.mark.parametrize("sinks", [None, (0, 3, 9)])
def test_flex_mask_mod_matches_loop(sinks) -> None:  # type: ignore[no-untyped-def]
    from torch.nn.attention.flex_attention import create_mask

    from aah.attention.flex import block_mask

    windows, seq_len = (1, 5, 40), 37
    mask_mod = block_mask(windows, seq_len, "cpu", sinks).mask_mod
    dense = create_mask(mask_mod, None, len(windows), seq_len, seq_len, device="cpu")[0]
    assert torch.equal(dense, rule_mask(windows, seq_len, sinks))


@pytest.mark.parametrize("windows", [(96,), (70, 96, 96), (3, 130, 300)])
def test_band_mask_matches_loop(windows: tuple[int, ...]) -> None:
    geo = band_layout.geometry(windows, 1000)
    mask = band_layout.band_mask(geo, torch.device("cpu"), torch.float32)
    mask = mask.reshape(-1, geo.block, geo.span).expand(len(windows), -1, -1)
    for h, w in enumerate(windows):
        # Query r of a block sits span_before + r - c positions after span key c.
        expected = torch.tensor(
            [
                [0 <= geo.span_before + r - c < min(w, 1000) for c in range(geo.span)]
                for r in range(geo.block)
            ]
        )
        assert torch.equal(mask[h] == 0, expected), h


def test_sink_mask_matches_loop() -> None:
    windows, sinks, seq_len = (4, 70, 70), (2, 0, 9), 300
    geo = band_layout.geometry(windows, seq_len, sinks)
    mask = band_sinks.sink_mask(geo, torch.device("cpu"), torch.float32)[0]
    heads = band_sinks.sink_heads(geo)
    assert heads == (0, 2)
    for slot, h in enumerate(heads):
        for r in range(geo.n_blocks * geo.block):
            i = geo.prefix + r
            # Keys its sinks give it that its window does not.
            expected = [j < sinks[h] and not 0 <= i - j < windows[h] for j in range(max(sinks))]
            assert (mask[slot, r] == 0).tolist() == expected, (h, r)


@pytest.mark.parametrize(("windows", "seq_len"), [((3, 5), 12), ((70, 70), 200)])
def test_biased_masks_match_loop(windows, seq_len, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[torch.Tensor] = []
    original = biased.masked_attention

    def spy(q, k, v, allowed, bias, scale):  # type: ignore[no-untyped-def]
        seen.append(allowed)
        return original(q, k, v, allowed, bias, scale)

    monkeypatch.setattr(biased, "masked_attention", spy)
    q, k, v = (torch.randn(1, len(windows), seq_len, 4) for _ in range(3))
    biased.biased_window_attention(q, k, v, windows, lambda d: torch.zeros(2, *d.shape), 0.5)
    w = min(max(windows), seq_len)
    prefix = seen[0]
    assert torch.equal(prefix, rule_mask(windows, w))
    if len(seen) > 1:  # the block tile: row r is w' + r - c after column c
        geo = band_layout.BandGeometry((w,), seq_len, band_layout.block_size_for(w))
        tile = seen[1]
        for h, wh in enumerate(windows):
            expected = torch.tensor(
                [
                    [0 <= geo.span_before + r - c < wh for c in range(geo.span)]
                    for r in range(geo.block)
                ]
            )
            assert torch.equal(tile[h], expected)


def test_hf_causal_pattern_matches_loop() -> None:
    from aah.integrations.hf.run.padding import causal_pattern

    q_len, k_len = 5, 11
    for sliding in (None, 1, 3, 20):
        got = causal_pattern(q_len, k_len, sliding, torch.device("cpu"))
        window = k_len if sliding is None else sliding
        for a in range(q_len):
            i = k_len - q_len + a
            assert got[a].tolist() == [0 <= i - j < window for j in range(k_len)]


def test_hf_masked_attention_uses_the_rule() -> None:
    # Queries over more keys (a cache) with left padding of 2 in row 1, given as the mask
    # transformers builds: compare with the oracle over each row's real positions.
    from aah.attention.reference import reference_attention
    from aah.integrations.hf.run.masks import causal, keep_by_rank, masked_attention

    windows, sinks, k_len = [2, 4], [1, 0], 9
    q, k, v = (torch.randn(2, 2, k_len, 8, dtype=torch.float64) for _ in range(3))
    real = torch.arange(k_len) >= torch.tensor([0, 2])[:, None]  # (B, Tk)
    allowed = (causal(k_len, k_len, q.device) & real[:, None, :])[:, None]
    out = masked_attention(q, k, v, keep_by_rank(allowed, windows, sinks), 0.3)
    for row, pad in ((0, 0), (1, 2)):
        part = slice(pad, k_len)
        expected = reference_attention(
            q[row : row + 1, :, part], k[row : row + 1, :, part], v[row : row + 1, :, part],
            torch.tensor(windows), 0.3, torch.tensor(sinks),
        )  # fmt: skip
        assert torch.allclose(out[row : row + 1, :, part], expected, atol=1e-5)
