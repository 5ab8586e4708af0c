"""Features against brute force: float64 attention matrices built independently here."""

import math

import pytest
import torch

from aah.controller.features import head_features, qkv_stats, sample_positions


def brute_rows(q, k, v, windows, positions):
    """Per (b, h, row) float64 entropy/log n, output norm, usage and full-row matrices."""
    b, hq, t, d = q.shape
    g = hq // k.shape[1]
    kk = k.double().repeat_interleave(g, dim=1)
    vv = v.double().repeat_interleave(g, dim=1)
    s = q.double() @ kk.transpose(-1, -2) / math.sqrt(d)  # (B, H, T, T)
    i = torch.arange(t).view(t, 1)
    j = torch.arange(t).view(1, t)
    full = torch.softmax(s.masked_fill(j > i, float("-inf")), dim=-1)
    ent = torch.zeros(b, hq, len(positions), dtype=torch.float64)
    norm = torch.zeros_like(ent)
    use = torch.zeros_like(ent)
    for h, w in enumerate(windows):
        allowed = (j <= i) & (j > i - w)
        p = torch.softmax(s[:, h].masked_fill(~allowed, float("-inf")), dim=-1)
        out = p @ vv[:, h]
        for r, pos in enumerate(positions.tolist()):
            row = p[:, pos]
            n = min(pos + 1, w)
            terms = torch.where(row > 0, -row * torch.log(row), torch.zeros_like(row))
            ent[:, h, r] = terms.sum(-1) / math.log(n) if n > 1 else 0.0
            norm[:, h, r] = out[:, pos].norm(dim=-1)
            look_back = (pos - torch.arange(t)).clamp_min(0).double()
            use[:, h, r] = (row * look_back).sum(-1) / max(n - 1, 1)
    return ent, norm, use, full


def make_qkv(b, hq, hkv, t, d, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, t, d, generator=gen) * 1.5
    k = torch.randn(b, hkv, t, d, generator=gen) * 1.5
    v = torch.randn(b, hkv, t, d, generator=gen)
    return q, k, v


@pytest.mark.parametrize(
    ("hq", "hkv", "t", "windows"),
    [
        (4, 4, 37, [1, 5, 16, 100]),
        (6, 2, 64, [64, 3, 8, 8, 2, 40]),
        (3, 1, 9, [9, 9, 2]),
        (4, 2, 80, [3, 10, 20, 7]),  # every window short: old keys are skipped per chunk
    ],
)
def test_base_features_match_brute_force(hq, hkv, t, windows):
    q, k, v = make_qkv(2, hq, hkv, t, 8, seed=t)
    positions = torch.tensor(sorted({0, 1, t // 3, t // 2, min(t // 2 + 9, t - 1), t - 2, t - 1}))
    feats = head_features(q, k, v, windows, positions=positions, chunks=3)
    ent, norm, use, _ = brute_rows(q, k, v, windows, positions)
    torch.testing.assert_close(feats.base[:, 6].double(), ent.mean(dim=(0, 2)), atol=2e-4, rtol=0)
    torch.testing.assert_close(
        feats.base[:, 7].double(), norm.mean(dim=(0, 2)), atol=1e-4, rtol=1e-4
    )
    torch.testing.assert_close(feats.base[:, 8].double(), use.mean(dim=(0, 2)), atol=1e-4, rtol=0)
    # The six statistics: mean |x| and population std over (B, T, D), k/v via the KV head.
    g = hq // hkv
    for col, x in enumerate([q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)]):
        xd = x.double().transpose(0, 1).reshape(hq, -1)
        expect_abs = xd.abs().mean(dim=1)
        expect_std = ((xd - xd.mean(dim=1, keepdim=True)) ** 2).mean(dim=1).sqrt()
        torch.testing.assert_close(
            feats.base[:, 2 * col].double(), expect_abs, rtol=1e-5, atol=1e-6
        )
        torch.testing.assert_close(
            feats.base[:, 2 * col + 1].double(), expect_std, rtol=1e-5, atol=1e-6
        )


def test_mass_beyond_window_matches_brute_force():
    q, k, v = make_qkv(2, 4, 2, 150, 8, seed=3)
    cands = [1, 4, 16, 64, 100, 150, 300]
    positions = torch.tensor([0, 3, 63, 64, 65, 99, 128, 149])
    feats = head_features(q, k, v, [150] * 4, cands, positions=positions, chunks=2)
    *_, full = brute_rows(q, k, v, [150] * 4, positions)
    expect = torch.zeros(4, len(cands), dtype=torch.float64)
    for c, w in enumerate(cands):
        vals = []
        for pos in positions.tolist():
            vals.append(full[:, :, pos, : max(pos - w + 1, 0)].sum(-1))  # keys j <= i - w
        expect[:, c] = torch.stack(vals, dim=-1).mean(dim=(0, 2))
    torch.testing.assert_close(feats.mass_beyond.double(), expect, atol=1e-5, rtol=0)
    # Mass beyond a window that covers everything is zero; it never grows with the window.
    assert torch.all(feats.mass_beyond[:, -2:] == 0)
    assert torch.all(feats.mass_beyond[:, :-1] >= feats.mass_beyond[:, 1:] - 1e-6)


def test_features_independent_of_chunking_and_seeded_sample():
    q, k, v = make_qkv(2, 4, 4, 200, 8, seed=5)
    a = head_features(q, k, v, [7, 50, 200, 13], [8, 32], chunks=1, seed=4)
    b = head_features(q, k, v, [7, 50, 200, 13], [8, 32], chunks=5, seed=4)
    torch.testing.assert_close(a.base, b.base, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.mass_beyond, b.mass_beyond, atol=1e-6, rtol=0)
    pos = sample_positions(200, 2, 64, 4)
    assert pos.tolist() == sample_positions(200, 2, 64, 4).tolist()
    assert pos.numel() == 32 and len(set(pos.tolist())) == 32
    assert pos.tolist() != sample_positions(200, 2, 64, 5).tolist()


def test_stats_stride_for_long_sequences_stays_close():
    q, k, v = make_qkv(2, 2, 2, 4096, 32, seed=1)
    exact = qkv_stats(q, k, v, max_positions=4096)
    strided = qkv_stats(q, k, v)  # every 16th position at T = 4096
    torch.testing.assert_close(strided, exact, rtol=0.02, atol=0)
