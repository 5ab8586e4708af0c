"""The output-error signal against an independent recompute: the reference backend's windowed
attention (with sinks) against SDPA's full causal attention, projected by W_o, every row."""

from __future__ import annotations

import pytest
import torch

from aah.attention import windowed_attention
from aah.integrations.hf.search.output_error import output_error


def moved_rows(q, k, v, w_o, window: int, sinks: int) -> torch.Tensor:
    """(B, Hq, T, E) float64: W_o,h (o_full - o_window) at every row, by the reference
    backend's windowed attention against SDPA's full causal attention."""
    hq, d = q.shape[1], q.shape[-1]
    rep = hq // k.shape[1]
    full = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double().repeat_interleave(rep, 1), v.double().repeat_interleave(rep, 1),
        is_causal=True,
    )  # fmt: skip
    cut = windowed_attention(q, k, v, [window] * hq, sinks=sinks, backend="reference").double()
    return torch.einsum("bhtd,ehd->bhte", full - cut, w_o.double().view(-1, hq, d))


@pytest.mark.parametrize("sinks", [0, 2])
def test_output_error_matches_a_full_recompute(sinks: int) -> None:
    gen = torch.Generator().manual_seed(0)
    b, hq, hkv, t, d, e = 2, 4, 2, 24, 8, 12
    q, k, v = (torch.randn(b, h, t, d, generator=gen) for h in (hq, hkv, hkv))
    w_o = torch.randn(e, hq * d, generator=gen)
    candidates = [1, 4, 9, t]
    got = output_error(q, k, v, w_o, candidates, sinks, sample_queries=t)  # every row 1..T-1
    for c, w in enumerate(candidates):
        moved = moved_rows(q, k, v, w_o, w, sinks)[:, :, 1:]
        want = moved.pow(2).sum(-1).mean(dim=(0, 2))
        torch.testing.assert_close(got[:, c], want, rtol=1e-4, atol=1e-6)
    assert torch.all(got[:, -1] < 1e-8)  # the full window moves nothing
    assert torch.all(got[:, 0] > got[:, 1])  # a narrower window moves more (random heads)


def test_output_error_refuses_a_projection_of_the_wrong_width() -> None:
    q = torch.randn(1, 4, 8, 8)
    k = v = torch.randn(1, 2, 8, 8)
    with pytest.raises(ValueError, match=r"output projection of \(12, 16\)"):
        output_error(q, k, v, torch.randn(12, 16), [2, 8])


def test_given_rows_replace_the_sample_and_match_a_recompute_on_those_rows() -> None:
    gen = torch.Generator().manual_seed(1)
    hq, hkv, t, d, e = 4, 2, 20, 8, 6
    q, k, v = (torch.randn(1, h, t, d, generator=gen) for h in (hq, hkv, hkv))
    w_o = torch.randn(e, hq * d, generator=gen)
    rows, candidates, sinks = [17, 3, 11], [2, 5, t], 1
    got = output_error(q, k, v, w_o, candidates, sinks, rows=rows)
    for c, w in enumerate(candidates):
        moved = moved_rows(q, k, v, w_o, w, sinks)[0][:, sorted(rows)]
        torch.testing.assert_close(got[:, c], moved.pow(2).sum(-1).mean(-1), rtol=1e-4, atol=1e-6)
    for bad in ([], [0], [t]):
        with pytest.raises(ValueError, match="rows must be"):
            output_error(q, k, v, w_o, candidates, sinks, rows=bad)


@pytest.mark.parametrize("sinks", [0, 2])
def test_a_sliding_layer_is_measured_against_its_own_window(sinks: int) -> None:
    """A layer that slides at S never computes the full causal row: a window >= S changes
    nothing, and a shorter one moves the output away from the S-window output (recomputed by
    the reference backend, sinks only below S as the layer runs them)."""
    gen = torch.Generator().manual_seed(2)
    b, hq, hkv, t, d, e, own = 1, 4, 2, 24, 8, 6, 10
    q, k, v = (torch.randn(b, h, t, d, generator=gen) for h in (hq, hkv, hkv))
    w_o = torch.randn(e, hq * d, generator=gen)
    candidates = [3, 6, own, 16, t]
    got = output_error(q, k, v, w_o, candidates, sinks, sample_queries=t, own_window=own)
    proj = w_o.double().view(-1, hq, d)
    reference = windowed_attention(q, k, v, [own] * hq, backend="reference").double()
    for c, w in enumerate(candidates[:2]):
        cut = windowed_attention(q, k, v, [w] * hq, sinks=sinks, backend="reference").double()
        moved = torch.einsum("bhtd,ehd->bhte", reference - cut, proj)[:, :, 1:]
        torch.testing.assert_close(got[:, c], moved.pow(2).sum(-1).mean(dim=(0, 2)),
                                   rtol=1e-4, atol=1e-6)  # fmt: skip
    assert torch.all(got[:, 2:] == 0)  # the layer's own window and wider: nothing moves
    assert torch.all(got[:, 0] > 0)
    plain = output_error(q, k, v, w_o, candidates, sinks, sample_queries=t)
    assert torch.all(plain[:, 2] > 0)  # against the full row its own window looked like a cut


def test_the_output_signal_prices_nothing_on_a_sliding_layer_at_its_own_window() -> None:
    pytest.importorskip("transformers")
    from hf_models import search_ids, tiny_model

    from aah.integrations.hf.run.model_layout import sliding_windows
    from aah.integrations.hf.search.measure import measure_output_error

    model = tiny_model("gemma3_text", max_position_embeddings=64)  # layer 0 slides at 16
    assert sliding_windows(model) == [16, None]
    candidates = [4, 8, 16, 32]
    costs = measure_output_error(model, [search_ids()[:, :32]], candidates, sample_queries=31)
    assert torch.all(costs[0, :, 2:] == 0) and torch.all(costs[0, :, :2] > 0)
    assert torch.all(costs[1, :, 2] > 0) and torch.all(costs[1, :, 3] < 1e-8)  # the full layer
