"""Variants against independent float64 computations written here."""

from __future__ import annotations

import pytest
import torch
from variant_oracle import allowed_by_loops, explicit_attention, qkv, t5_bucket_scalar

from aah.attention import windowed_attention
from aah.attention.variants import make_variant
from aah.attention.variants.connectivity import block_sparse_mask, global_tokens_mask
from aah.attention.variants.score_bias import alibi_slopes

D = 8


def _dims(hq: int, hkv: int, seq_len: int) -> dict:
    return {"n_head": hq, "n_kv_head": hkv, "head_dim": D, "max_seq_len": seq_len}


@pytest.mark.parametrize("hkv", [4, 1])
def test_softmax_is_the_engine(hkv: int) -> None:
    q, k, v = qkv(2, 4, hkv, 50, D)
    windows = [1, 7, 50, 20]
    out = make_variant("softmax", backend="banded", **_dims(4, hkv, 50))(q, k, v, windows)
    torch.testing.assert_close(out, windowed_attention(q, k, v, windows, backend="banded"))
    oracle = explicit_attention(q, k, v, allowed_by_loops(windows, 50))
    torch.testing.assert_close(out.double(), oracle, rtol=1e-4, atol=1e-5)


def test_bilinear_identity_is_softmax_and_general_w_matches_oracle() -> None:
    q, k, v = qkv(1, 4, 2, 45, D, seed=4)
    windows = [5, 45, 12, 30]
    bil = make_variant("bilinear", **_dims(4, 2, 45))
    soft = make_variant("softmax", **_dims(4, 2, 45))
    torch.testing.assert_close(bil(q, k, v, windows), soft(q, k, v, windows))
    with torch.no_grad():
        bil.weight.normal_(generator=torch.Generator().manual_seed(5))
    w64 = bil.weight.double()
    scores_q = torch.einsum("bhtd,hde->bhte", q.double(), w64)  # q^T W, then . k
    oracle = explicit_attention(scores_q, k, v, allowed_by_loops(windows, 45))
    torch.testing.assert_close(bil(q, k, v, windows).double(), oracle, rtol=1e-4, atol=1e-5)


def test_alibi_zero_slopes_is_softmax() -> None:
    q, k, v = qkv(2, 4, 4, 130, D)
    windows = [3, 130, 70, 33]
    zero = make_variant(
        "softmax", position="alibi", alibi_slopes=torch.zeros(4), **_dims(4, 4, 130)
    )
    soft = make_variant("softmax", **_dims(4, 4, 130))
    torch.testing.assert_close(zero(q, k, v, windows), soft(q, k, v, windows), rtol=1e-5, atol=1e-5)


def test_alibi_slopes_are_the_papers() -> None:
    torch.testing.assert_close(
        alibi_slopes(8), torch.tensor([2.0**-i for i in range(1, 9)]).double()
    )
    torch.testing.assert_close(
        alibi_slopes(4), torch.tensor([2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]).double()
    )
    # 6 heads: the 4-head set, then slopes 1 and 3 (0-based 0, 2) of the 8-head set.
    expected = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    torch.testing.assert_close(alibi_slopes(6), torch.tensor(expected).double())


def _bucket_matrix(seq_len: int, num_buckets: int, max_distance: int) -> torch.Tensor:
    """(T, T) bucket ids by scalar loops (future pairs get 0; they are masked anyway)."""
    rows = [
        [
            t5_bucket_scalar(i - j, num_buckets, max_distance) if j <= i else 0
            for j in range(seq_len)
        ]
        for i in range(seq_len)
    ]
    return torch.tensor(rows)


def _distance_matrix(seq_len: int) -> torch.Tensor:
    return torch.tensor([[float(max(i - j, 0)) for j in range(seq_len)] for i in range(seq_len)])


def _bias_oracle(module, pos: str, seq_len: int, table=None) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """(H, T, T) float64 bias from the module's parameters, indexed by the loop-built matrices."""
    if pos == "alibi":
        slopes = module.bias.slopes.double()
        return -slopes[:, None, None] * _distance_matrix(seq_len).double()
    table = module.bias.table.detach().double() if table is None else table
    bucket = _bucket_matrix(seq_len, module.bias.num_buckets, module.bias.max_distance)
    return table[bucket].permute(2, 0, 1)


# (T, windows): full (prefix only), windows below T with blocks, T not a multiple of the block.
PLANS = [(90, [90, 90, 90, 90]), (150, [3, 40, 70, 17]), (173, [1, 100, 64, 65])]


@pytest.mark.parametrize("pos", ["alibi", "relative"])
@pytest.mark.parametrize(("seq_len", "windows"), PLANS)
def test_score_bias_with_windows_matches_oracle(pos: str, seq_len: int, windows: list[int]) -> None:
    hq, hkv = 4, 2
    opts = {"num_buckets": 16, "max_distance": 60} if pos == "relative" else {}
    module = make_variant("softmax", position=pos, **opts, **_dims(hq, hkv, seq_len))
    if pos == "relative":
        with torch.no_grad():
            module.bias.table.normal_(generator=torch.Generator().manual_seed(6))
    q, k, v = qkv(2, hq, hkv, seq_len, D, seed=7)
    allowed = allowed_by_loops(windows, seq_len)
    bias = _bias_oracle(module, pos, seq_len)
    oracle = explicit_attention(q, k, v, allowed, bias)
    torch.testing.assert_close(module(q, k, v, windows).double(), oracle, rtol=1e-4, atol=2e-5)
    # Gradients too, including the learned table's.
    q.requires_grad_(True)
    g = torch.randn(2, hq, seq_len, D, generator=torch.Generator().manual_seed(8))
    (module(q, k, v, windows) * g).sum().backward()
    q64 = q.detach().double().requires_grad_(True)
    (explicit_attention(q64, k, v, allowed, bias) * g.double()).sum().backward()
    torch.testing.assert_close(q.grad.double(), q64.grad, rtol=1e-4, atol=1e-4)
    if pos == "relative":
        table = module.bias.table.detach().double().requires_grad_(True)
        bias_t = _bias_oracle(module, pos, seq_len, table)
        (explicit_attention(q.detach(), k, v, allowed, bias_t) * g.double()).sum().backward()
        torch.testing.assert_close(
            module.bias.table.grad.double(), table.grad, rtol=1e-3, atol=1e-3
        )


def test_additive_matches_oracle_with_windows() -> None:
    q, k, v = qkv(1, 4, 2, 30, D, seed=9)
    windows = [4, 30, 11, 1]
    module = make_variant("additive", chunk=7, **_dims(4, 2, 30))
    a, c, u = (p.detach().double() for p in (module.w_query, module.w_key, module.u))
    q64, k64, v64 = (
        q.double(),
        k.double().repeat_interleave(2, 1),
        v.double().repeat_interleave(2, 1),
    )
    scores = torch.zeros(1, 4, 30, 30, dtype=torch.float64)
    for h in range(4):
        for i in range(30):
            for j in range(30):
                scores[0, h, i, j] = u[h] @ torch.tanh(q64[0, h, i] @ a[h] + k64[0, h, j] @ c[h])
    scores = scores.masked_fill(~allowed_by_loops(windows, 30), float("-inf"))
    oracle = torch.softmax(scores, -1) @ v64
    torch.testing.assert_close(module(q, k, v, windows).double(), oracle, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["kernel", "kernel-favor"])
@pytest.mark.parametrize("seq_len", [1, 29, 64])
def test_kernel_matches_quadratic_linear_attention(name: str, seq_len: int) -> None:
    module = make_variant(name, chunk=8, n_features=24, **_dims(4, 2, seq_len))
    q, k, v = qkv(2, 4, 2, seq_len, D, seed=10)
    fq = module.phi(q.double(), True)
    fk = module.phi(k.double(), False).repeat_interleave(2, 1)
    weights = (fq @ fk.transpose(-1, -2)).tril()  # (B, H, T, T), explicit causal
    oracle = weights @ v.double().repeat_interleave(2, 1) / weights.sum(-1, keepdim=True)
    torch.testing.assert_close(module(q, k, v).double(), oracle, rtol=1e-4, atol=1e-5)


def test_favor_features_are_seeded_and_redrawable() -> None:
    a = make_variant("kernel-favor", seed=1, **_dims(4, 4, 16))
    b = make_variant("kernel-favor", seed=1, **_dims(4, 4, 16))
    torch.testing.assert_close(a.features, b.features)
    before = a.features.clone()
    a.redraw(2)
    assert not torch.allclose(a.features, before)


def test_favor_approximates_softmax_with_many_features() -> None:
    module = make_variant("kernel-favor", n_features=4096, **_dims(1, 1, 32))
    q, k, v = qkv(1, 1, 1, 32, D, seed=11)
    q, k = 0.3 * q, 0.3 * k  # small logits: where random features are accurate
    exact = explicit_attention(q, k, v, torch.ones(32, 32, dtype=torch.bool).tril())
    assert (module(q, k, v).double() - exact).abs().max() < 0.05


def test_block_sparse_mask_matches_loops() -> None:
    seq_len, block, local, stride = 37, 4, 1, 3
    mask = block_sparse_mask(seq_len, block, local, stride)
    for i in range(seq_len):
        for j in range(seq_len):
            qb, kb = i // block, j // block
            expected = j <= i and (
                qb == kb or qb - local <= kb < qb or (kb < qb and (qb - kb) % stride == 0)
            )
            assert bool(mask[i, j]) == expected, (i, j)


def test_global_tokens_mask_matches_loops() -> None:
    windows, seq_len, n_global = [1, 5, 37], 37, 3
    mask = global_tokens_mask(tuple(windows), seq_len, n_global)
    for h, w in enumerate(windows):
        for i in range(seq_len):
            for j in range(seq_len):
                expected = j <= i and (i - j < w or j < n_global)
                assert bool(mask[h, i, j]) == expected, (h, i, j)


@pytest.mark.parametrize("name", ["block-sparse", "global-tokens"])
def test_connectivity_variants_match_oracle(name: str) -> None:
    seq_len, windows = 33, [2, 33, 9, 15]
    opts = {"block": 4, "stride": 3} if name == "block-sparse" else {"n_global": 3}
    module = make_variant(name, **opts, **_dims(4, 2, seq_len))
    q, k, v = qkv(1, 4, 2, seq_len, D, seed=12)
    plan = allowed_by_loops(windows, seq_len)
    if name == "block-sparse":
        allowed = plan & block_sparse_mask(seq_len, 4, 1, 3)
    else:
        allowed = plan | global_tokens_mask((1, 1, 1, 1), seq_len, 3)
    oracle = explicit_attention(q, k, v, allowed)
    torch.testing.assert_close(module(q, k, v, windows).double(), oracle, rtol=1e-4, atol=1e-5)
