"""A learned sink logit per query head (`aah.attention.sink_logit`), against a float64 oracle
written out here: the scores, one more column of s_h, the softmax, that column dropped."""

from __future__ import annotations

import pytest
import torch

from aah.attention.sink_logit import sdpa_with_sink_logit, windowed_with_sink_logit

B, HQ, HKV, T, D = 2, 4, 2, 40, 16
WINDOWS, SINKS = [3, 7, T, 12], [0, 2, 1, 0]


def allowed(windows, sinks, t):  # type: ignore[no-untyped-def]
    """(Hq, T, T): key j is seen by query i if j <= i and (j > i - w or j < s)."""
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    return torch.stack(
        [(j <= i) & ((j > i - w) | (j < s)) for w, s in zip(windows, sinks, strict=True)]
    )


def oracle(q, k, v, mask, logit, scale):  # type: ignore[no-untyped-def]
    """float64: softmax over the allowed scores and s_h, the s_h column dropped."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    extra = logit.double().view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat([scores, extra], dim=-1), dim=-1)[..., :-1]
    return weights @ v


def inputs(seed: int = 0):  # type: ignore[no-untyped-def]
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, h, T, D, generator=g) for h in (HQ, HKV, HKV))
    logit = torch.tensor([-1.0, 0.5, 2.0, 4.0])
    return q, k, v, logit


@pytest.mark.parametrize("backend", ["reference", "dense", "banded", "grouped"])
def test_windowed_attention_with_a_sink_logit_matches_the_oracle(backend):
    q, k, v, logit = inputs()
    scale = D**-0.5
    want = oracle(q, k, v, allowed(WINDOWS, SINKS, T), logit, scale)
    got = windowed_with_sink_logit(q, k, v, WINDOWS, logit, backend=backend, scale=scale,
                                   sinks=SINKS)  # fmt: skip
    torch.testing.assert_close(got.double(), want, atol=2e-6, rtol=1e-5)


def test_masked_sdpa_with_a_sink_logit_matches_the_oracle_and_its_gradients():
    q, k, v, logit = inputs(1)
    logit.requires_grad_(True)
    q.requires_grad_(True)
    scale = 0.3
    mask = allowed(WINDOWS, SINKS, T)[None]
    got = sdpa_with_sink_logit(q, k, v, mask, scale, logit.view(1, HQ, 1), enable_gqa=True)
    want = oracle(q, k, v, mask, logit, scale)
    torch.testing.assert_close(got.double(), want, atol=2e-6, rtol=1e-5)
    (g_logit, g_q) = torch.autograd.grad(got.square().sum(), (logit, q))
    (w_logit, w_q) = torch.autograd.grad(want.square().sum(), (logit, q))
    torch.testing.assert_close(g_logit, w_logit, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(g_q, w_q, atol=1e-4, rtol=1e-4)


def test_a_very_low_logit_is_plain_attention_and_no_logit_is_plain_sdpa():
    q, k, v, _ = inputs(2)
    mask = allowed(WINDOWS, SINKS, T)[None]
    plain = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask
    )
    low = torch.full((HQ,), -1e4)
    got = sdpa_with_sink_logit(q, k, v, mask, D**-0.5, low.view(1, HQ, 1), enable_gqa=True)
    torch.testing.assert_close(got, plain, atol=1e-6, rtol=1e-5)
    none = sdpa_with_sink_logit(q, k, v, mask, D**-0.5, None, enable_gqa=True)
    assert torch.equal(none, torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=D**-0.5, enable_gqa=True))  # fmt: skip


def test_the_hf_attention_function_takes_transformers_own_sink_logits():
    """gpt-oss passes its learned sinks as `s_aux`; the "aah" attention function runs them as
    the same term, on the plan's windows and sinks, and refuses them beside a healed plan's."""
    from aah.integrations.hf.run.attention import SINK_LOGIT_ATTR, aah_attention_forward

    q, k, v, logit = inputs(3)
    module = torch.nn.Module()
    module.aah_windows, module.aah_sinks = WINDOWS, SINKS
    out, _ = aah_attention_forward(module, q, k, v, None, scaling=0.25, s_aux=logit)
    want = oracle(q, k, v, allowed(WINDOWS, SINKS, T), logit, 0.25).transpose(1, 2)
    torch.testing.assert_close(out.double(), want, atol=2e-6, rtol=1e-5)
    setattr(module, SINK_LOGIT_ATTR, logit)
    with pytest.raises(ValueError, match="sink logits of its own"):
        aah_attention_forward(module, q, k, v, None, scaling=0.25, s_aux=logit)


def test_the_padded_head_dimension():
    from aah.attention.sink_logit import padded_width

    cpu, gpu = torch.device("cpu"), torch.device("meta")  # any device that is not the CPU
    assert [padded_width(n, cpu) for n in (17, 65, 72, 129)] == [24, 72, 72, 136]
    assert [padded_width(n, gpu) for n in (17, 65, 64, 129)] == [32, 128, 64, 256]
