"""KVCache against an explicit per-head masked softmax over the whole history (float64)."""

import math

import pytest
import torch

from aah.model.cache import KVCache


def expected_nbytes(plan, n_kv_head, t, head_dim, batch=1, elem=4):
    """Independent formula: B * sum over layers and KV heads of min(w, t) * D * 2 * elem."""
    total = 0
    for row in plan:
        group = len(row) // n_kv_head
        for j in range(n_kv_head):
            w = max(row[j * group : (j + 1) * group])
            total += min(w, t)
    return batch * total * head_dim * 2 * elem


def reference_step(q, k, v, windows, t):
    """Output at position t: query head h sees keys t - w_h < j <= t of KV head h // G."""
    hq, hkv = q.shape[1], k.shape[1]
    outs = []
    for h in range(hq):
        kv = h // (hq // hkv)
        lo = max(0, t - windows[h] + 1)
        keys = k[:, kv, lo : t + 1].double()
        vals = v[:, kv, lo : t + 1].double()
        scores = (q[:, h, 0].double()[:, None] * keys).sum(-1) / math.sqrt(q.shape[-1])
        outs.append((scores.softmax(-1)[..., None] * vals).sum(1))
    return torch.stack(outs, dim=1)[:, :, None]  # (B, Hq, 1, D)


@pytest.mark.parametrize(
    "windows, n_kv_head",
    [
        ((8, 3, 5, 5), 2),  # GQA: KV head 0 holds 8, query head 1 must see only its last 3
        ((1, 6, 100, 2), 4),  # MHA: a window of 1 and one beyond the length
        ((4, 1, 7, 2), 1),  # MQA: one ring of 7 serving windows 4, 1, 7, 2
        ((50, 50, 50, 50), 2),  # every window >= the length: plain growing caches
        ((6, 2, 6, 6, 6, 2, 6, 6), 4),  # one bucket; window classes over KV heads 0 and 2
        ((5, 2, 5, 5, 5, 2), 2),  # group rows 0 and 2 share a window, row 1 does not
    ],
)
@pytest.mark.parametrize("prompt", [1, 5, 12])
def test_ring_decode_matches_masked_history(windows, n_kv_head, prompt):
    gen = torch.Generator().manual_seed(0)
    b, hq, d, total = 2, len(windows), 8, 30
    q = torch.randn(b, hq, total, d, generator=gen)
    k = torch.randn(b, n_kv_head, total, d, generator=gen)
    v = torch.randn(b, n_kv_head, total, d, generator=gen)
    cache = KVCache([list(windows)], n_kv_head=n_kv_head, head_dim=d, batch=b, max_len=total)
    cache.prefill(0, k[:, :, :prompt], v[:, :, :prompt])
    cache.advance(prompt)
    for t in range(prompt, total):  # decode runs well past every ring's capacity
        out = cache.attend(0, q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], d**-0.5)
        cache.advance(1)
        expected = reference_step(q[:, :, t : t + 1], k, v, windows, t)
        torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)
    assert cache.length == total


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_nbytes_follows_the_formula_and_storage_is_exact(n_kv_head):
    plan = [[1, 3, 64, 5], [7, 7, 2, 16], [200, 4, 4, 4]]
    b, d, max_len = 3, 8, 40
    cache = KVCache(plan, n_kv_head=n_kv_head, head_dim=d, batch=b, max_len=max_len)
    assert cache.nbytes() == 0
    k = torch.randn(b, n_kv_head, max_len, d)
    for layer in range(3):
        cache.prefill(layer, k[:, :, :10], k[:, :, :10])
    cache.advance(10)
    assert cache.nbytes() == expected_nbytes(plan, n_kv_head, 10, d, batch=b)
    cache.advance(max_len - 10)
    assert cache.nbytes() == expected_nbytes(plan, n_kv_head, max_len, d, batch=b)
    # Storage is reserved once, exactly the formula at max_len: no padding to a common size.
    assert cache.reserved_nbytes() == cache.nbytes()


def test_buckets_group_equal_capacities_and_gqa_takes_the_largest_window():
    plan = [[2, 9, 9, 2, 5, 5, 2, 2]]  # 4 KV heads of 2 queries: capacities 9, 9, 5, 2
    cache = KVCache(plan, n_kv_head=4, head_dim=4, batch=1, max_len=100)
    assert cache.capacities == [[9, 9, 5, 2]]
    assert [(bk.capacity, bk.kv_heads) for bk in cache.layers[0]] == [
        (9, (0, 1)),
        (5, (2,)),
        (2, (3,)),
    ]


def test_bad_plans_raise():
    with pytest.raises(ValueError, match="n_kv_head=3"):
        KVCache([[4, 4, 4, 4]], n_kv_head=3, head_dim=4, batch=1, max_len=8)
    with pytest.raises(ValueError, match=">= 1"):
        KVCache([[4, 0]], n_kv_head=2, head_dim=4, batch=1, max_len=8)
    cache = KVCache([[4, 4]], n_kv_head=2, head_dim=4, batch=1, max_len=8)
    with pytest.raises(ValueError, match="max_len=8"):
        cache.advance(9)
    cache.advance(8)
    x = torch.zeros(1, 2, 1, 4)
    with pytest.raises(ValueError, match="max_len=8"):  # a full cache never overwrites silently
        cache.attend(0, x, x, x, 0.5)


def test_decode_benchmark_plans_and_kv_check(capsys):
    import json

    from aah.attention import coverage
    from aah.bench.decode import main, plan_for_coverage

    plan = plan_for_coverage(4, 8, 4096, 4160, 0.3)
    assert 0.25 < coverage(plan, 4096).causal <= 0.3
    assert {w for row in plan for w in row} <= {256, 512, 1024, 2048, 4160}
    args = ["--contexts", "64", "--new-tokens", "3", "--reps", "1", "--layers", "2"]
    assert main([*args, "--d-model", "32", "--heads", "4", "--kv-heads", "2"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["kv_formula_ok"]
    assert {r["variant"] for r in result["rows"]} == {"per-head", "full"}


def reference_step_rows(q, k, v, windows, sinks, t, pads):
    """Output at slot t, row by row: row b's real position is r = t - pads[b]; query head h
    sees real positions j <= r with r - w_h < j or j < s_h, stored at slots pads[b] + j."""
    hq, hkv = q.shape[1], k.shape[1]
    out = torch.zeros(q.shape[0], hq, 1, q.shape[-1], dtype=torch.float64)
    for b, pad in enumerate(pads):
        r = t - pad
        for h in range(hq):
            kv = h // (hq // hkv)
            slots = [pad + j for j in range(r + 1) if r - windows[h] < j or j < sinks[h]]
            keys, vals = k[b, kv, slots].double(), v[b, kv, slots].double()
            scores = (keys @ q[b, h, 0].double()) / math.sqrt(q.shape[-1])
            out[b, h, 0] = scores.softmax(-1) @ vals
    return out


@pytest.mark.parametrize(
    "windows, sinks, n_kv_head",
    [
        ((8, 3, 5, 5), (2, 2, 0, 4), 2),  # GQA: heads of one KV head with different sinks
        ((4, 1, 7, 2), (1, 3, 0, 2), 1),  # MQA
        ((6, 2, 30, 2), (4, 4, 4, 0), 4),  # a full head: its sinks are inside its window
    ],
)
@pytest.mark.parametrize("pads", [(0, 0), (0, 3), (5, 1)])
@pytest.mark.parametrize("prompt", [2, 9])
def test_ring_decode_with_sinks_and_left_padding(windows, sinks, n_kv_head, pads, prompt):
    gen = torch.Generator().manual_seed(1)
    b, hq, d, total = 2, len(windows), 8, 30
    q = torch.randn(b, hq, total, d, generator=gen)
    k = torch.randn(b, n_kv_head, total, d, generator=gen)
    v = torch.randn(b, n_kv_head, total, d, generator=gen)
    for row, pad in enumerate(pads):  # loud padding: any read of it shows in the output
        k[row, :, :pad], v[row, :, :pad] = 50.0, 1e3
    prompt = max(prompt, max(pads) + 1)
    cache = KVCache(
        [list(windows)], n_kv_head=n_kv_head, head_dim=d, batch=b, max_len=total,
        sinks=[list(sinks)], pads=list(pads),
    )  # fmt: skip
    cache.prefill(0, k[:, :, :prompt], v[:, :, :prompt])
    cache.advance(prompt)
    for t in range(prompt, total):
        out = cache.attend(0, q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], d**-0.5)
        cache.advance(1)
        expected = reference_step_rows(q[:, :, t : t + 1], k, v, windows, sinks, t, pads)
        torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)


def test_nbytes_with_sinks_follows_the_formula():
    # Per layer and KV head: (sinks + min(w, t)) * D * 2 * itemsize, w and sinks the largest of
    # its query heads; max_len = t, so the reserved storage is exactly that too.
    plan, sinks = [[4, 4, 16, 8], [2, 6, 40, 40]], [[2, 1, 4, 4], [3, 0, 0, 0]]
    b, d, t = 2, 8, 40
    cache = KVCache(plan, n_kv_head=2, head_dim=d, batch=b, max_len=t, sinks=sinks)
    cache.advance(t)
    held = (2 + 4) + (4 + 16) + (3 + 6) + (0 + 40)
    assert cache.nbytes() == b * held * d * 2 * 4 == cache.reserved_nbytes()


def test_bad_sinks_and_pads_raise():
    with pytest.raises(ValueError, match="sinks must be ints >= 0"):
        KVCache([[4, 4]], n_kv_head=2, head_dim=4, batch=1, max_len=8, sinks=[[1, -1]])
    with pytest.raises(ValueError, match="pads must be 2 ints"):
        KVCache([[4, 4]], n_kv_head=2, head_dim=4, batch=2, max_len=8, pads=[9, 0])
