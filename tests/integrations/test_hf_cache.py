"""PerHeadCache, sinks and left padding on tiny HF models built from configs (no download)."""

from __future__ import annotations

import inspect

import pytest
import torch
from hf_models import SLIDING, VOCAB, tiny_model

from aah.integrations import hf

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="needs layered caches")
from aah.integrations.hf.run.cache import PerHeadCache  # noqa: E402

PLAN = [[4, 6, 128, 3], [5, 2, 8, 8]]
SINKS = [[2, 2, 0, 1], [1, 0, 3, 3]]
PAD = 1


def cache_kwargs(model, cache) -> dict:  # type: ignore[no-untyped-def]
    """`generate`'s name for a cache object in this transformers version."""
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    return {name: cache}


def greedy(model, ids, new: int, cache=None, attention_mask=None):  # type: ignore[no-untyped-def]
    extra = cache_kwargs(model, cache) if cache is not None else {}
    mask = attention_mask if attention_mask is not None else torch.ones_like(ids)
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=PAD, **extra
    )


def recompute(model, ids, new: int):  # type: ignore[no-untyped-def]
    """Independent path: the whole sequence through the model at every step, no cache."""
    with torch.no_grad():
        for _ in range(new):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def prompts(lengths, seed: int = 0) -> list[torch.Tensor]:  # type: ignore[no-untyped-def]
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(2, VOCAB, (n,), generator=gen) for n in lengths]


def left_pad(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :], mask[i, width - len(r) :] = r, 1
    return ids, mask


@pytest.mark.parametrize("sinks", [None, SINKS])
def test_greedy_with_the_cache_equals_full_recompute(family: str, sinks) -> None:  # type: ignore[no-untyped-def]
    model = tiny_model(family)
    hf.apply(model, PLAN, sinks=sinks)
    ids = torch.stack(prompts([20, 20]))
    new = 25  # well past every local window
    out = greedy(model, ids, new, PerHeadCache(model, max_cache_len=20 + new))
    assert torch.equal(out, recompute(model, ids, new))


def test_a_sliding_layer_holds_sinks_only_where_the_plan_cuts_below_its_window() -> None:
    # Gemma 3's tiny config: layer 0 slides at 16, layer 1 sees everything. KV heads pair query
    # heads (0, 1) and (2, 3): on layer 0, the pair at 32 >= 16 holds its 16 keys and no sinks.
    from aah.attention.kv_bytes import full_kv_bytes, plan_kv_bytes
    from aah.integrations.hf.run.model_layout import kv_shape

    model = tiny_model("gemma3_text")
    plan, sinks = [[32, 32, 4, 4], [6, 6, 40, 40]], 2
    hf.apply(model, plan, sinks=sinks)
    batch, prompt, new, dim = 2, 30, 11, 16
    t = prompt + new - 1
    cache = PerHeadCache(model, max_cache_len=t)
    out = greedy(model, torch.stack(prompts([prompt] * batch)), new, cache)
    assert torch.equal(out, recompute(model, torch.stack(prompts([prompt] * batch)), new))
    per_head = [(0, 16), (2, 4), (2, 6), (0, 40)]  # (sinks, keys) per layer and KV head
    expected = batch * sum(s + min(w, t) for s, w in per_head) * dim * 2 * 4
    shape = kv_shape(model)
    assert cache.nbytes() == expected == batch * plan_kv_bytes(plan, [[sinks] * 4] * 2, shape, t)
    # the model's own cache: layer 0 keeps its 16 positions, layer 1 all t
    assert full_kv_bytes(shape, t) == 2 * (16 + t) * dim * 2 * 4


def test_kv_bytes_follow_the_formula_exactly() -> None:
    # Per layer and KV head: (sinks + min(w, t)) * D * 2 * itemsize, w and sinks the largest
    # of its query heads (GQA pairs (0, 1) and (2, 3)); t = positions held.
    model = tiny_model("llama")
    hf.apply(model, [[4, 6, 3, 3], [5, 2, 8, 8]], sinks=[[2, 1, 0, 1], [1, 0, 3, 3]])
    batch, prompt, new, dim = 2, 30, 11, 16
    cache = PerHeadCache(model, max_cache_len=prompt + new - 1)  # the last token is not fed
    greedy(model, torch.stack(prompts([prompt] * batch)), new, cache)
    t = prompt + new - 1
    per_head = [(2, 6), (1, 3), (1, 5), (3, 8)]  # (sinks, w) per layer and KV head
    expected = batch * sum(s + min(w, t) for s, w in per_head) * dim * 2 * 4
    assert cache.nbytes() == expected == cache.reserved_nbytes()
    full = batch * 2 * 2 * t * dim * 2 * 4  # a DynamicCache of the same run: every position
    assert expected < full / 4


def test_prefill_longer_than_the_windows_stores_only_what_is_read() -> None:
    model = tiny_model("llama")
    hf.apply(model, [[4, 4, 4, 4], [4, 4, 4, 4]], sinks=2)
    cache = PerHeadCache(model, max_cache_len=100)
    with torch.no_grad():
        model(torch.stack(prompts([90])), **cache_kwargs(model, cache), use_cache=True)
    assert cache.get_seq_length() == 90
    # 2 layers x 2 KV heads x (2 sinks + 4 ring slots), whatever the prompt's length.
    assert cache.reserved_nbytes() == cache.nbytes() == 2 * 2 * 6 * 16 * 2 * 4


@pytest.mark.parametrize("sinks", [None, SINKS])
@pytest.mark.parametrize("use_cache", ["per-head", "dynamic"])
def test_left_padded_batch_equals_each_prompt_alone(family: str, use_cache: str, sinks) -> None:  # type: ignore[no-untyped-def]
    model = tiny_model(family)
    hf.apply(model, PLAN, sinks=sinks)
    rows = prompts([12, 7, 3], seed=1)
    ids, mask = left_pad(rows)
    new = 15
    cache = PerHeadCache(model, ids.shape[1] + new) if use_cache == "per-head" else None
    if family in SLIDING and use_cache == "dynamic" and sinks:
        # Its DynamicCache keeps only the sliding layer's window: the sinks are gone.
        with pytest.raises(ValueError, match="sinks"):
            greedy(model, ids, new, cache, attention_mask=mask)
        return
    out = greedy(model, ids, new, cache, attention_mask=mask)
    for i, row in enumerate(rows):
        alone = recompute(model, row[None], new)
        assert torch.equal(out[i, ids.shape[1] :], alone[0, len(row) :]), f"row {i}"


def test_left_padded_prefill_logits_equal_each_prompt_alone() -> None:
    model = tiny_model("qwen2")
    hf.apply(model, PLAN, sinks=SINKS)
    rows = prompts([10, 4], seed=2)
    ids, mask = left_pad(rows)
    with torch.no_grad():
        padded = model(ids, attention_mask=mask).logits
        for i, row in enumerate(rows):
            alone = model(row[None]).logits[0]
            torch.testing.assert_close(padded[i, ids.shape[1] - len(row) :], alone)


@pytest.mark.parametrize("where", ["right", "hole"])
def test_per_head_cache_refuses_padding_other_than_left(where: str) -> None:
    # Plain forwards take any padding (test_hf_masks.py); the per-head cache's rings and sinks
    # follow one run of real tokens that ends at the last slot.
    model = tiny_model("llama")
    hf.apply(model, PLAN)
    ids = torch.stack(prompts([10, 10]))
    mask = torch.ones_like(ids)
    if where == "right":
        mask[1, -3:] = 0
    else:
        mask[1, 4:6] = 0
    with torch.no_grad(), pytest.raises(ValueError, match="PerHeadCache"):
        greedy(model, ids, 3, PerHeadCache(model, max_cache_len=20), attention_mask=mask)


def test_cache_without_aah_attention_is_refused() -> None:
    model = tiny_model("llama")
    hf.apply(model, PLAN)
    cache = PerHeadCache(model, max_cache_len=40)
    hf.remove(model)
    with pytest.raises(ValueError, match="not running 'aah' attention"):
        greedy(model, torch.stack(prompts([10])), 3, cache)


def test_cache_needs_a_plan() -> None:
    # several tokens into a filled cache are a chunked prefill: test_hf_cache_extend.py
    model = tiny_model("llama")
    with pytest.raises(ValueError, match=r"hf\.apply"):
        PerHeadCache(model)


def test_beam_search_is_refused() -> None:
    model = tiny_model("llama")
    hf.apply(model, PLAN)
    ids = torch.stack(prompts([6]))
    cache = PerHeadCache(model, max_cache_len=20)
    with pytest.raises(ValueError, match="beam search"):
        model.generate(
            ids, max_new_tokens=4, num_beams=2, do_sample=False, pad_token_id=PAD,
            **cache_kwargs(model, cache),
        )  # fmt: skip


def test_a_plan_changed_after_the_cache_was_built_is_refused() -> None:
    model = tiny_model("llama")
    hf.apply(model, PLAN)
    cache = PerHeadCache(model, max_cache_len=40)
    hf.apply(model, PLAN, sinks=1)
    with pytest.raises(ValueError, match="differ from those the cache was built with"):
        greedy(model, torch.stack(prompts([12])), 3, cache)


def test_sinks_are_checked_and_restored() -> None:
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="every sink must be an int >= 0"):
        hf.apply(model, PLAN, sinks=[[0, 0, 0, -1], [0] * 4])
    with pytest.raises(ValueError, match=r"\[layer\]\[head\]"):
        hf.apply(model, PLAN, sinks=[[0] * 4])
    hf.apply(model, PLAN, sinks=3)
    assert hf.current_sinks(model) == [[3] * 4, [3] * 4]
    with hf.applied(model, PLAN):
        assert hf.current_sinks(model) is None
    assert hf.current_sinks(model) == [[3] * 4, [3] * 4]
    hf.remove(model)
    assert hf.current_sinks(model) is None


def float64_sink_reference(module, query, key, value, attention_mask, scaling=None, **kwargs):  # type: ignore[no-untyped-def]
    """Written apart from the code under test: float64, K/V repeated, mask from the rule
    (key j <= i with i - w < j or j < s); reads `module.test_windows` / `module.test_sinks`."""
    windows, sinks = list(module.test_windows), list(module.test_sinks)
    if kwargs.get("sliding_window") is not None:
        windows = [min(w, kwargs["sliding_window"]) for w in windows]
    n_q, seq_len = query.shape[1], query.shape[2]
    rep = n_q // key.shape[1]
    i = torch.arange(seq_len)[:, None]
    j = torch.arange(seq_len)[None, :]
    w = torch.tensor(windows).view(-1, 1, 1)
    s = torch.tensor(sinks).view(-1, 1, 1)
    allowed = (j <= i) & ((i - j < w) | (j < s))
    k = key.double().repeat_interleave(rep, dim=1)
    v = value.double().repeat_interleave(rep, dim=1)
    scores = (query.double() @ k.transpose(-1, -2) * scaling).masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


def test_prefill_with_sinks_matches_float64_reference(family: str) -> None:
    name = "aah_test_sink_reference"
    transformers.AttentionInterface.register(name, float64_sink_reference)
    transformers.masking_utils.AttentionMaskInterface.register(
        name, transformers.masking_utils.sdpa_mask
    )
    ref = tiny_model(family)
    for module, row, srow in zip(hf.layout(ref).modules, PLAN, SINKS, strict=True):
        module.test_windows, module.test_sinks = row, srow
    ref.set_attn_implementation(name)
    model = tiny_model(family)
    hf.apply(model, PLAN, sinks=SINKS)
    ids = torch.stack(prompts([40, 40], seed=3))
    with torch.no_grad():
        got, want = model(ids).logits, ref(ids).logits
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        hf.apply(model, PLAN)  # the sinks bite: without them the logits differ
        assert (model(ids).logits - want).abs().max() > 1e-3


def test_a_plan_file_carries_its_sinks_to_apply(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from aah.plan import WindowPlan

    plan = WindowPlan.of(PLAN, SINKS, 64, budget=0.3, model="LlamaForCausalLM")
    plan.save(tmp_path / "plan.json")
    loaded = WindowPlan.load(tmp_path / "plan.json")
    assert loaded == plan
    model = tiny_model("llama")
    hf.apply(model, loaded)
    assert hf.current_sinks(model) == SINKS
    hf.apply(model, loaded, sinks=0)  # an explicit value wins over the plan's
    assert hf.current_sinks(model) is None
    with pytest.raises(ValueError, match="sinks must be shaped like the windows"):
        WindowPlan.of(PLAN, [[1]], 64)
