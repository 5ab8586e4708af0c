"""Head features and attention mass against brute force: float64 T x T matrices built here."""

import math

import pytest
import torch

from aah.controller.head_stats import (
    attention_stats,
    group_features,
    qkv_group_stats,
    qkv_head_stats,
    sample_rows,
)
from aah.controller.mass import mass_beyond, sample_positions


def make_qkv(b, hq, hkv, t, d, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, t, d, generator=gen) * 1.5
    k = torch.randn(b, hkv, t, d, generator=gen) * 1.5
    v = torch.randn(b, hkv, t, d, generator=gen)
    return q, k, v


def brute(q, k, v, windows):
    """Per (b, h, row) float64: entropy (with the method's 1e-9), output norm, look-back share,
    the windowed probabilities and the full causal ones."""
    b, hq, t, d = q.shape
    g = hq // k.shape[1]
    kk, vv = k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = q.double() @ kk.transpose(-1, -2) / math.sqrt(d)
    i, j = torch.arange(t).view(t, 1), torch.arange(t).view(1, t)
    full = torch.softmax(s.masked_fill(j > i, float("-inf")), dim=-1)
    probs = torch.zeros(b, hq, t, t, dtype=torch.float64)
    for h, w in enumerate(windows):
        allowed = (j <= i) & (j > i - w)
        probs[:, h] = torch.softmax(s[:, h].masked_fill(~allowed, float("-inf")), dim=-1)
    ent = -(probs * torch.log(probs + 1e-9)).sum(-1)
    norm = (probs @ vv).norm(dim=-1)
    reach = (torch.minimum(torch.arange(t) + 1, torch.tensor(windows).view(-1, 1)) - 1).clamp_min(1)
    share = (probs * (i - j).clamp_min(0).double()).sum(-1) / reach
    return ent, norm, share, probs, full


@pytest.mark.parametrize(
    ("hq", "hkv", "t", "windows"),
    [
        (4, 4, 37, [1, 5, 16, 100]),
        (6, 2, 300, [300, 3, 8, 8, 2, 40]),  # more rows than one block, GQA
        (3, 1, 9, [9, 9, 2]),
    ],
)
def test_exact_features_match_brute_force(hq, hkv, t, windows):
    q, k, v = make_qkv(2, hq, hkv, t, 8, seed=t)
    ent, norm, share, probs, _ = brute(q, k, v, windows)
    got = attention_stats(q, k, v, windows).double()
    torch.testing.assert_close(got[:, 0], ent.mean(dim=(0, 2)) / math.log(t), atol=1e-5, rtol=0)
    torch.testing.assert_close(got[:, 1], norm.mean(dim=(0, 2)), atol=1e-5, rtol=1e-5)
    # last-key usage: mean over batch and ALL rows of the weight on key T - 1
    torch.testing.assert_close(got[:, 2], probs[..., -1].mean(dim=(0, 2)), atol=1e-6, rtol=0)
    look = attention_stats(q, k, v, windows, usage="look-back").double()
    torch.testing.assert_close(look[:, 2], share.mean(dim=(0, 2)), atol=1e-5, rtol=0)
    torch.testing.assert_close(look[:, :2], got[:, :2])


@pytest.mark.parametrize(
    ("hq", "hkv", "t", "windows"),
    [(4, 4, 37, [1, 5, 16, 100]), (6, 2, 300, [300, 3, 8, 8, 2, 40])],
)
def test_forward_output_gives_the_same_features_from_a_key_only_pass(hq, hkv, t, windows):
    q, k, v = make_qkv(2, hq, hkv, t, 8, seed=t + 1)
    ent, norm, _, probs, _ = brute(q, k, v, windows)
    g = hq // hkv
    out = (probs @ v.double().repeat_interleave(g, 1)).float()  # what the forward computed
    got = attention_stats(q, k, v, windows, out=out).double()
    torch.testing.assert_close(got[:, 0], ent.mean(dim=(0, 2)) / math.log(t), atol=1e-5, rtol=0)
    torch.testing.assert_close(got[:, 1], norm.mean(dim=(0, 2)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[:, 2], probs[..., -1].mean(dim=(0, 2)), atol=1e-6, rtol=0)
    # The norms really come from `out`: a scaled output scales them and nothing else.
    scaled = attention_stats(q, k, v, windows, out=2 * out).double()
    torch.testing.assert_close(scaled[:, 1], 2 * got[:, 1])
    torch.testing.assert_close(scaled[:, [0, 2]], got[:, [0, 2]])
    with pytest.raises(ValueError, match="out must have q's shape"):
        attention_stats(q, k, v, windows, out=out[:, :1])
    # Look-back usage from the key-only pass too (values [k | key position]).
    _, _, share, _, _ = brute(q, k, v, windows)
    look = attention_stats(q, k, v, windows, out=out, usage="look-back").double()
    torch.testing.assert_close(look[:, 2], share.mean(dim=(0, 2)), atol=1e-5, rtol=0)
    torch.testing.assert_close(look[:, :2], got[:, :2])
    # Sampled rows take their norms from `out` as well.
    rows = sample_rows(t, 12, seed=0)
    alone = attention_stats(q, k, v, windows, rows=rows).double()
    with_out = attention_stats(q, k, v, windows, rows=rows, out=out).double()
    torch.testing.assert_close(with_out, alone)
    doubled = attention_stats(q, k, v, windows, rows=rows, out=2 * out).double()
    torch.testing.assert_close(doubled[:, 1], 2 * alone[:, 1])


def test_sampled_rows_estimate_the_same_rows_exactly():
    q, k, v = make_qkv(2, 4, 2, 120, 8, seed=1)
    windows = [120, 7, 30, 64]
    rows = sample_rows(120, 16, seed=3)
    assert rows.tolist() == sample_rows(120, 16, seed=3).tolist() and rows.numel() == 16
    ent, norm, _, probs, _ = brute(q, k, v, windows)
    got = attention_stats(q, k, v, windows, rows=rows).double()
    torch.testing.assert_close(got[:, 0], ent[:, :, rows].mean(dim=(0, 2)) / math.log(120))
    torch.testing.assert_close(got[:, 1], norm[:, :, rows].mean(dim=(0, 2)))
    # usage stays exact: one row decides it
    torch.testing.assert_close(got[:, 2], probs[..., -1].mean(dim=(0, 2)), atol=1e-6, rtol=0)


def test_sampled_rows_across_several_spans_match_brute_force_with_look_back():
    q, k, v = make_qkv(1, 4, 4, 700, 8, seed=5)
    windows = [700, 3, 90, 300]
    rows = sample_rows(700, 40, seed=1)  # spread over three ROW_SPAN chunks
    assert (rows // 256).unique().numel() == 3
    ent, norm, share, _, _ = brute(q, k, v, windows)
    got = attention_stats(q, k, v, windows, rows=rows, usage="look-back").double()
    torch.testing.assert_close(got[:, 0], ent[:, :, rows].mean(dim=(0, 2)) / math.log(700))
    torch.testing.assert_close(got[:, 1], norm[:, :, rows].mean(dim=(0, 2)))
    torch.testing.assert_close(got[:, 2], share[:, :, rows].mean(dim=(0, 2)), atol=1e-5, rtol=0)


def test_qkv_statistics_per_head_and_pooled_per_group():
    q, k, v = make_qkv(2, 6, 3, 50, 4, seed=2)
    stats = qkv_head_stats(q, k, v)
    for col, x in enumerate([q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)]):
        xd = x.double().transpose(0, 1).reshape(6, -1)
        torch.testing.assert_close(stats[:, 2 * col].double(), xd.abs().mean(1), rtol=1e-5, atol=0)
        torch.testing.assert_close(stats[:, 2 * col + 1].double(), xd.std(1), rtol=1e-5, atol=0)
    groups = [[0, 3], [1, 2, 4, 5]]
    pooled = qkv_group_stats(q, k, v, groups)
    for g, heads in enumerate(groups):
        xd = q[:, heads].double().reshape(-1)
        # pooled over the group's heads (not the mean of per-head values)
        torch.testing.assert_close(pooled[g, 1].double(), xd.std(), rtol=1e-5, atol=0)
    attn = torch.arange(18, dtype=torch.float32).view(6, 3)
    feats = group_features(q, k, v, groups, attn)
    torch.testing.assert_close(feats[1, 6:], attn[[1, 2, 4, 5]].mean(0))


def test_mass_beyond_window_matches_brute_force():
    q, k, v = make_qkv(2, 4, 2, 150, 8, seed=3)
    cands = [1, 4, 16, 64, 100, 150, 300]
    positions = torch.tensor([0, 3, 63, 64, 65, 99, 128, 149])
    mass = mass_beyond(q, k, v, cands, positions=positions, chunks=2)
    *_, full = brute(q, k, v, [150] * 4)
    expect = torch.zeros(4, len(cands), dtype=torch.float64)
    for c, w in enumerate(cands):
        vals = [full[:, :, pos, : max(pos - w + 1, 0)].sum(-1) for pos in positions.tolist()]
        expect[:, c] = torch.stack(vals, dim=-1).mean(dim=(0, 2))
    torch.testing.assert_close(mass.double(), expect, atol=1e-5, rtol=0)
    assert torch.all(mass[:, -2:] == 0)  # a window that covers everything loses nothing
    assert torch.all(mass[:, :-1] >= mass[:, 1:] - 1e-6)
    again = mass_beyond(q, k, v, cands, positions=positions, chunks=5)
    torch.testing.assert_close(mass, again, atol=1e-6, rtol=0)
    pos = sample_positions(200, 2, 64, 4)
    assert pos.tolist() == sample_positions(200, 2, 64, 4).tolist() and pos.numel() == 32
    assert pos.tolist() != sample_positions(200, 2, 64, 5).tolist()
