"""The "aah" attention implementation on tiny HF models against independent references."""

from __future__ import annotations

import pytest
import torch
import transformers
from hf_models import VOCAB, tiny_model

from aah.integrations import hf
from aah.integrations.hf.run import model_layout

T = 40
REF_NAME = "aah_test_reference"


def tokens(batch: int = 2, seq_len: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, seq_len), generator=torch.Generator().manual_seed(seed))


def window_mask(windows: list[int], seq_len: int) -> torch.Tensor:
    """(1, H, T, T) additive mask: 0 where 0 <= i - j < w_h, the dtype's minimum elsewhere."""
    dist = torch.arange(seq_len)[:, None] - torch.arange(seq_len)[None, :]
    w = torch.tensor(windows).view(-1, 1, 1)
    allowed = (dist >= 0) & (dist < w)
    return torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)[None]


def float64_reference(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Written apart from the code under test: float64, K/V repeated, per-head window mask.

    Reads `module.test_windows`; honours the layer's own sliding window like HF's masks do.
    """
    windows = list(module.test_windows)
    if kwargs.get("sliding_window") is not None:
        windows = [min(w, kwargs["sliding_window"]) for w in windows]
    n_q, seq_len = query.shape[1], query.shape[2]
    rep = n_q // key.shape[1]
    k = key.double().repeat_interleave(rep, dim=1)
    v = value.double().repeat_interleave(rep, dim=1)
    scores = query.double() @ k.transpose(-1, -2) * scaling
    scores = scores + window_mask(windows, seq_len).double().clamp_min(-1e300)
    out = torch.softmax(scores, dim=-1) @ v
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


def test_full_plan_reproduces_sdpa(family: str) -> None:
    model = tiny_model(family)
    ids = tokens()
    with torch.no_grad():
        expected = model(ids).logits
        hf.apply(model, [[T] * 4, [10_000] * 4])  # w >= T is full causal
        assert model.config._attn_implementation == "aah"
        got = model(ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    hf.remove(model)
    assert model.config._attn_implementation == "sdpa"


def test_a_plan_that_cuts_nothing_is_the_model_itself_even_with_sinks(family: str) -> None:
    # T = 40 > the sliding layers' own 16: a head whose window is not below its layer's own
    # window keeps no sinks (sinks there would show it keys the model never sees).
    model = tiny_model(family)
    ids = tokens()
    slides = model_layout.sliding_windows(model)
    with torch.no_grad():
        expected = model(ids).logits
        hf.apply(model, [[s or T] * 4 for s in slides], sinks=2)
        got = model(ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    kept = [list(m.aah_sinks) for m in model_layout.layout(model).modules]
    assert kept == [[0 if s else 2] * 4 for s in slides]  # w = T: sink_slots makes them idle


def test_layer_scaling_is_honoured() -> None:
    # GPT-2 can scale scores by 1 / (layer + 1) on top of 1 / sqrt(D): HF passes it as `scaling`.
    model = tiny_model("gpt2", scale_attn_by_inverse_layer_idx=True)
    ids = tokens()
    with torch.no_grad():
        expected = model(ids).logits
        hf.apply(model, [[T] * 4] * 2)
        torch.testing.assert_close(model(ids).logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen3"])
def test_windows_match_eager_with_a_per_head_mask(family: str) -> None:
    # One plan row for every layer, so one hand-built (1, H, T, T) mask encodes it for eager.
    windows = [1, 3, 8, T]
    model = tiny_model(family, implementation="eager")
    ids = tokens()
    with torch.no_grad():
        expected = model(ids, attention_mask=window_mask(windows, T)).logits
        hf.apply(model, [windows, windows])
        got = model(ids).logits
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    # The mask bites: the same model with full windows gives different logits.
    hf.apply(model, [[T] * 4] * 2)
    with torch.no_grad():
        assert (model(ids).logits - expected).abs().max() > 1e-3


def test_per_layer_windows_match_float64_reference(family: str) -> None:
    plan = [[2, 5, 1, 17], [30, 4, 9, 3]]
    transformers.AttentionInterface.register(REF_NAME, float64_reference)
    transformers.masking_utils.AttentionMaskInterface.register(
        REF_NAME, transformers.masking_utils.sdpa_mask
    )
    ref = tiny_model(family)
    ids = tokens()
    for module, row in zip(hf.layout(ref).modules, plan, strict=True):
        module.test_windows = row
    ref.set_attn_implementation(REF_NAME)
    model = tiny_model(family)
    hf.apply(model, plan)
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, ref(ids).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:.*past_key_values.*:FutureWarning")
@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral"])
def test_cached_decoding_matches_the_full_forward(family: str) -> None:
    # Tq < Tk runs a separate path; its logits must equal the prefill's at each position.
    model = tiny_model(family)
    hf.apply(model, [[2, 7, 1, 100], [5, 3, 24, 11]])
    ids = tokens(seq_len=30)
    with torch.no_grad():
        full = model(ids).logits
        out = model(ids[:, :20], use_cache=True)
        cache, steps = out.past_key_values, [out.logits]
        for t in range(20, 30, 2):  # two tokens per step: chunked prefill, Tq = 2 < Tk
            out = model(ids[:, t : t + 2], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_training_gradients_match_sdpa_for_a_full_plan() -> None:
    model = tiny_model("llama").train()
    ids = tokens()
    model(ids, labels=ids).loss.backward()
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    hf.apply(model, [[T] * 4] * 2)
    model(ids, labels=ids).loss.backward()
    for got, want in zip((p.grad for p in model.parameters()), expected, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_masks_the_rule_cannot_honour_are_refused() -> None:
    # Every padding pattern is accepted (tests/integrations/test_hf_masks.py); what is refused
    # is a mask that lets a query see a later key, or an additive bias other than 0 / -inf.
    model = tiny_model("llama")
    hf.apply(model, [[4] * 4] * 2)
    ids = tokens()
    with torch.no_grad():
        custom = torch.ones(2, 1, T, T, dtype=torch.bool)  # bidirectional: not causal
        with pytest.raises(ValueError, match="later key"):
            model(ids, attention_mask=custom)
        bias = torch.zeros(2, 1, T, T).masked_fill(~torch.ones(T, T).tril().bool(), -torch.inf)
        model(ids, attention_mask=bias)  # 0 / -inf: accepted
        bias[:, :, 5, 2] = 0.5
        with pytest.raises(ValueError, match="additive"):
            model(ids, attention_mask=bias)


def test_attention_dropout_in_training_is_refused() -> None:
    model = tiny_model("gpt2", attn_pdrop=0.1).train()
    hf.apply(model, [[4] * 4] * 2)
    with pytest.raises(ValueError, match="dropout"):
        model(tokens())
    model.eval()
    with torch.no_grad():
        model(tokens())  # eval passes dropout 0


def test_unsupported_family_names_the_class() -> None:
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    model = transformers.BertModel(config)
    with pytest.raises(ValueError, match="BertModel"):
        hf.apply(model, [[4, 4]])
    with pytest.raises(ValueError, match="Linear"):
        hf.apply(torch.nn.Linear(2, 2), [[4]])


def test_plan_shape_and_backend_are_checked() -> None:
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="layers"):
        hf.apply(model, [[4] * 4])
    with pytest.raises(ValueError, match="heads"):
        hf.apply(model, [[4] * 2] * 2)  # one window per QUERY head, not per KV head
    with pytest.raises(ValueError, match="backend"):
        hf.apply(model, [[4] * 4] * 2, backend="nope")


def test_aah_without_a_plan_says_what_to_call() -> None:
    hf.register()
    model = tiny_model("gpt2")
    model.set_attn_implementation("aah")
    with pytest.raises(ValueError, match=r"hf\.apply"):
        model(tokens())


def test_apply_remove_and_applied_restore_state() -> None:
    model = tiny_model("qwen2")
    plan = [[3, 4, 5, 6], [7, 8, 9, 10]]
    hf.apply(model, plan, backend="dense")
    assert hf.current_plan(model) == plan
    with hf.applied(model, [[1] * 4] * 2):
        assert hf.current_plan(model) == [[1] * 4] * 2
    assert hf.current_plan(model) == plan
    hf.remove(model)
    assert hf.current_plan(model) is None
    assert model.config._attn_implementation == "sdpa"


def test_generate_matches_recomputing_the_full_sequence() -> None:
    model = tiny_model("qwen2")
    hf.apply(model, [[2, 7, 1, 100], [5, 3, 24, 11]])
    ids = tokens(seq_len=12)
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False
    )
    seq = ids
    with torch.no_grad():
        for _ in range(6):
            seq = torch.cat([seq, model(seq).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)
