"""GPT against independent attention paths: SDPA with is_causal, and explicit per-head masks."""

import pytest
import torch
import torch.nn.functional as F

import aah.model.gpt as gpt_module
from aah.model import GPT, GPTConfig


def tiny(**kw):
    base = dict(n_layer=2, n_head=4, n_kv_head=4, d_model=32, max_seq_len=16, backend="reference")
    base.update(kw)
    return GPTConfig(**base)


def sdpa_causal(q, k, v, windows, *, backend="auto", scale=None):
    """Independent full-causal path: ignores windows, repeats K/V for GQA itself."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_masked(q, k, v, windows, *, backend="auto", scale=None):
    """Independent windowed path: an explicit boolean mask per head, j <= i and i - j < w."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    t = q.shape[2]
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    mask = torch.stack([(j <= i) & (i - j < w) for w in windows])  # (H, T, T)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def route_attention(monkeypatch, fn):
    """Make the model's attention call run fn instead; returns the windows of every call, so a
    test can tell that the model still calls what was patched (else it compares it with itself)."""
    calls = []

    def spy(q, k, v, windows, **kw):
        calls.append(tuple(windows))
        return fn(q, k, v, windows, **kw)

    monkeypatch.setattr(gpt_module, "windowed_attention", spy)
    return calls


def test_shapes_and_capture():
    torch.manual_seed(0)
    model = GPT(tiny(n_kv_head=2))
    x = torch.randint(0, 256, (3, 11))
    logits = model(x)
    assert logits.shape == (3, 11, 256)
    with model.capturing() as qkv:
        logits2 = model(x)
    torch.testing.assert_close(logits, logits2)
    assert isinstance(logits2, torch.Tensor) and len(qkv) == 2
    q, k, v, out = qkv[0]
    assert q.shape == (3, 4, 11, 8) and k.shape == (3, 2, 11, 8) and v.shape == (3, 2, 11, 8)
    assert not any(t.requires_grad for t in qkv[1])
    # The 4th item is the attention output itself: SDPA on the captured q, k, v.
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, expected)


def test_capture_has_no_output_where_it_is_not_plain_windowed_softmax():
    torch.manual_seed(0)
    x = torch.randint(0, 256, (2, 9))
    model = GPT(tiny())
    model.set_window_plan([[3, 9, 2, 9]] * 2, sinks=[[1, 0, 0, 0]] * 2)
    with model.capturing() as captured:
        model(x)
    assert len(captured) == 2 and all(acts[3] is None for acts in captured)
    variant = GPT(tiny(attention="kernel"))
    with variant.capturing() as captured:
        variant(x)
    assert len(captured) == 2 and all(acts[3] is None for acts in captured)


def test_capturing_records_only_inside_its_block_and_does_not_nest():
    model = GPT(tiny())
    x = torch.randint(0, 256, (1, 5))
    with model.capturing() as first:
        model(x)
        model(x)
        with pytest.raises(ValueError, match="already active"), model.capturing():
            pass
    model(x)  # outside: nothing recorded, nothing kept
    assert len(first) == 4 and model._recording is None


@pytest.mark.parametrize("position", ["rope", "learned", "none"])
@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_full_plan_equals_sdpa_causal(monkeypatch, position, n_kv_head):
    torch.manual_seed(1)
    model = GPT(tiny(position=position, n_kv_head=n_kv_head)).double()
    t = 16
    plan = [[t, 10 * t, t + 1, t] for _ in range(2)]  # every w >= T: full
    model.set_window_plan(plan)
    x = torch.randint(0, 256, (2, t))
    ours = model(x)
    calls = route_attention(monkeypatch, sdpa_causal)
    theirs = model(x)
    assert calls == [tuple(row) for row in plan]  # both layers ran the independent path
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n_kv_head", [4, 1])
def test_per_head_windows_follow_the_plan(monkeypatch, n_kv_head):
    torch.manual_seed(2)
    model = GPT(tiny(n_kv_head=n_kv_head)).double()
    plan = [[1, 3, 7, 16], [5, 16, 2, 4]]
    model.set_window_plan(plan)
    x = torch.randint(0, 256, (2, 13))
    ours = model(x)
    calls = route_attention(monkeypatch, sdpa_masked)
    theirs = model(x)
    assert calls == [tuple(row) for row in plan]  # both layers ran the independent path
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
    model.set_window_plan([[16] * 4, [16] * 4])
    assert not torch.allclose(theirs, model(x))  # the windows matter


def test_gradients_flow_with_gqa():
    torch.manual_seed(3)
    model = GPT(tiny(n_kv_head=2, backend="auto"))
    model.set_window_plan([[2, 4, 8, 16], [16, 8, 4, 2]])
    x = torch.randint(0, 256, (2, 16))
    loss = F.cross_entropy(model(x).reshape(-1, 256), x.roll(-1, 1).reshape(-1))
    loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_same_seed_same_model():
    torch.manual_seed(7)
    a = GPT(tiny())
    torch.manual_seed(7)
    b = GPT(tiny())
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert a.embed.weight is a.embed.weight and "lm_head" not in dict(a.named_parameters())


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ([[16] * 4], "2"),
        ([[16] * 4, [16] * 3], "layer 1"),
        ([[16] * 4, [16, 0, 16, 16]], ">= 1"),
        ([[16] * 4, [16, True, 16, 16]], ">= 1"),
        ([[16] * 4, [16, 2.0, 16, 16]], ">= 1"),
        (5, "list"),
    ],
)
def test_set_window_plan_validates(plan, message):
    model = GPT(tiny())
    with pytest.raises(ValueError, match=message):
        model.set_window_plan(plan)
    assert model.window_plan() == [[16] * 4, [16] * 4]  # unchanged after a rejected plan


def test_window_plan_round_trip_and_too_long_input():
    model = GPT(tiny())
    model.set_window_plan([[1, 2, 3, 4], [5, 6, 7, 8]])
    assert model.window_plan() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, 17, dtype=torch.long))
