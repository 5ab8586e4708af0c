"""A rolling PerHeadCache against the rule it implements, computed independently in float64.

The rule: a query at stream position p of a head with window w and s sinks reads keys
p - w < j <= p and the sinks j < s its window has left; once p >= s + w - 1 the sinks sit at
positions 0 .. s - 1 within the cache and the query at s + w - 1, so sink j is scored at
distance s + w - 1 - j (window keys keep their distance p - j). The reference below is a loop
over queries in float64 that moves each sink with the model's own rotary module and
transformers' `rotate_half`, installed as the model's attention over the whole stream in one
forward; the cache streams the same tokens in float32 through chunks and single steps, past
the tiny models' 64 positions.
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
from hf_models import FAMILIES, VOCAB, tiny_model

from aah.cli.hf.stream import cache_argument as cache_kwargs
from aah.integrations import hf

pytest.importorskip("transformers.cache_utils", reason="needs layered caches")

from transformers import AttentionInterface
from transformers.models.llama.modeling_llama import rotate_half

from aah.integrations.hf.run.cache import PerHeadCache

POSITIONS = 64
STREAM = 500
PLAN = [[8, 8, 12, 5], [16, 6, 6, 10]]
SINKS = [[2, 2, 0, 3], [1, 0, 2, 2]]
REFERENCE = "rolling_reference"
ROPE_FAMILIES = [f for f in FAMILIES if f != "gpt2"]


def ids_of(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


def planned(family: str, plan=PLAN, sinks=SINKS):  # type: ignore[no-untyped-def]
    model = tiny_model(family, max_position_embeddings=POSITIONS)
    hf.apply(model, plan, sinks=sinks)
    return model


def moved_keys(module, key: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """(T, Hkv, T, D): key (1, Hkv, T, D) moved forward by 0 .. T - 1 positions, with the
    model's own rotary module (cos and sin of the move) and transformers' rotate_half."""
    model = module.aah_reference_model
    rotary = model.model.rotary_emb
    moves = torch.arange(key.shape[2])[None]
    per_kind = isinstance(rotary.rope_type, dict)  # Gemma 3: one rotary per kind of layer
    extra = {"layer_type": model.config.layer_types[module.layer_idx]} if per_kind else {}
    cos, sin = rotary(key, moves, **extra)  # (1, T, D)
    cos, sin = cos[0, :, None, None].double(), sin[0, :, None, None].double()  # (T, 1, 1, D)
    k = key[0][None].double()  # (1, Hkv, T, D)
    return k * cos + rotate_half(k) * sin


def reference_attention(module, query, key, value, attention_mask, scaling=None,
                        sliding_window=None, **kwargs):  # type: ignore[no-untyped-def]  # fmt: skip
    """The rolling rule over a whole stream (batch 1), one query at a time, in float64."""
    q, k, v = query[0].double(), key[0].double(), value[0].double()  # (H, T, D)
    n_head, length, _ = q.shape
    group = n_head // k.shape[0]
    moved = moved_keys(module, key)  # moved[d, kv, j]: key j moved forward by d
    windows = [min(w, sliding_window) if sliding_window else w for w in module.aah_windows]
    sinks = getattr(module, "aah_sinks", None) or [0] * n_head
    out = torch.zeros_like(q)
    for h in range(n_head):
        w, s, kv = windows[h], sinks[h], h // group
        for p in range(length):
            window = list(range(max(0, p - w + 1), p + 1))
            own_sinks = list(range(min(s, max(0, p - w + 1))))
            move = max(0, p - (s + w - 1))
            keys = torch.stack([moved[move, kv, j] for j in own_sinks] + [k[kv, j] for j in window])
            values = torch.stack([v[kv, j] for j in own_sinks + window])
            weights = torch.softmax(keys @ q[h, p] * scaling, dim=0)
            out[h, p] = weights @ values
    return out.transpose(0, 1)[None].to(query.dtype), None


def as_reference(model):  # type: ignore[no-untyped-def]
    """A float64 copy of a planned model whose attention is the reference rule."""
    AttentionInterface.register(REFERENCE, reference_attention)
    reference = copy.deepcopy(model).double()
    for module in hf.layout(reference).modules:
        module.aah_reference_model = reference
    reference.set_attn_implementation(REFERENCE)
    return reference


def reference_logits(family: str, ids: torch.Tensor, plan=PLAN, sinks=SINKS) -> torch.Tensor:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        return as_reference(planned(family, plan, sinks))(ids).logits


def streamed_logits(model, ids: torch.Tensor, cache, cuts) -> torch.Tensor:  # type: ignore[no-untyped-def]
    parts = []
    with torch.no_grad():
        for a, b in itertools.pairwise(cuts):
            parts.append(model(ids[:, a:b], use_cache=True, **cache_kwargs(model, cache)).logits)
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("family", ROPE_FAMILIES)
def test_rolling_stream_equals_the_float64_rule(family: str) -> None:
    ids = ids_of(STREAM)
    expected = reference_logits(family, ids)
    model = planned(family)
    cache = PerHeadCache(model, rolling=True)
    # a prompt of 37, chunks of up to 90 (past every window), then single steps to the end
    cuts = [0, 37, 127, 217, 300, 390, 470, *range(471, STREAM + 1)]
    held = []
    got = []
    with torch.no_grad():
        for a, b in itertools.pairwise(cuts):
            step = model(ids[:, a:b], use_cache=True, **cache_kwargs(model, cache))
            got.append(step.logits)
            held.append(cache.nbytes())
    got_all = torch.cat(got, dim=1)
    assert cache.get_seq_length() == STREAM
    torch.testing.assert_close(got_all.double(), expected, rtol=0, atol=1e-5)
    assert len(set(held[1:])) == 1  # constant once every window has filled
    # each step's mask spans its own tokens, not every position seen: its cost does not grow
    assert cache.layers[0].get_mask_sizes(7) == (7, STREAM)
    # the check can tell: the same plan with its sinks left where they are differs
    with torch.no_grad():
        unmoved = planned(family)(ids).logits.double()
    assert (unmoved[:, 100:] - expected[:, 100:]).abs().max() > 1e-3


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_generate_runs_past_the_models_positions(family: str) -> None:
    model = planned(family)
    prompt = ids_of(20)
    cache = PerHeadCache(model, rolling=True)
    with torch.no_grad():
        out = model.generate(
            prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=3 * POSITIONS,
            min_new_tokens=3 * POSITIONS, do_sample=False, pad_token_id=1,
            **cache_kwargs(model, cache),
        )  # fmt: skip
    assert out.shape[1] == 20 + 3 * POSITIONS
    expected = reference_logits(family, out[:, :-1])
    assert torch.equal(expected[0, 19:].argmax(-1), out[0, 20:])  # greedy under the rule


def test_a_whole_layer_is_refused_by_name() -> None:
    model = planned("llama", plan=[[8, 8, 12, 5], [POSITIONS, POSITIONS, 6, 10]])
    named = r"layer 1 head 0 \(window 64 \+ 1 sinks\).*layer 1 head 1"
    with pytest.raises(ValueError, match=named):
        PerHeadCache(model, rolling=True)
    model = planned("llama", plan=[[8, 8, 12, 5], [60, 6, 6, 10]], sinks=[[0] * 4, [5, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"layer 1 head 0 \(window 60 \+ 5 sinks\)"):
        PerHeadCache(model, rolling=True)


def test_models_without_rotary_positions_are_refused() -> None:
    model = tiny_model("gpt2")
    hf.apply(model, [[8] * 4, [8] * 4], sinks=2)
    with pytest.raises(ValueError, match="no rotary position embedding"):
        PerHeadCache(model, rolling=True)


def test_rolling_refuses_a_length_limit_and_left_padding() -> None:
    model = planned("llama")
    with pytest.raises(ValueError, match="no length limit"):
        PerHeadCache(model, max_cache_len=100, rolling=True)
    cache = PerHeadCache(model, rolling=True)
    ids = ids_of(12).repeat(2, 1)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with pytest.raises(ValueError, match="left padding"):
        model.generate(ids, attention_mask=mask, max_new_tokens=2, pad_token_id=1,
                       **cache_kwargs(model, cache))  # fmt: skip


def test_snapshot_and_restore_on_a_rolling_cache() -> None:
    model = planned("llama")
    document, question = ids_of(150), ids_of(9, seed=2)
    with torch.no_grad():
        cache = PerHeadCache(model, rolling=True)
        model(document, use_cache=True, **cache_kwargs(model, cache))
        snapshot = cache.snapshot()
        first = model(question, use_cache=True, **cache_kwargs(model, cache)).logits
        model(ids_of(40, seed=5), use_cache=True, **cache_kwargs(model, cache))
        cache.restore(snapshot)
        again = model(question, use_cache=True, **cache_kwargs(model, cache)).logits
    assert torch.equal(first, again)
    expected = reference_logits("llama", torch.cat([document, question], dim=1))
    torch.testing.assert_close(first.double(), expected[:, 150:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_query_blocks_read_every_key_their_windows_reach(family: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import aah.model.cache_extend as cache_extend

    monkeypatch.setattr(cache_extend, "QUERY_BLOCK", 7)  # many blocks per chunk, some partial
    ids = ids_of(STREAM)
    expected = reference_logits(family, ids)
    model = planned(family)
    cache = PerHeadCache(model, rolling=True)
    got = streamed_logits(model, ids, cache, [0, 150, 333, STREAM])
    torch.testing.assert_close(got.double(), expected, rtol=0, atol=1e-5)
