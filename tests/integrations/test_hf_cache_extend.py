"""PerHeadCache across turns: several tokens into a filled cache (a chat's next turn, a question
after a cached document) give the logits of one whole-sequence forward with the same plan, and
`snapshot()` / `restore()` go back to a prefilled document exactly: the storage and every
answer after it equal a fresh prefill's, to the bit."""

from __future__ import annotations

import pytest
import torch
from hf_models import VOCAB, tiny_model

from aah.cli.hf.stream import cache_argument as cache_kwargs
from aah.integrations import hf

pytest.importorskip("transformers.cache_utils", reason="needs layered caches")
from aah.integrations.hf.run.cache import PerHeadCache

PLAN = [[4, 6, 128, 3], [5, 2, 8, 8]]
SINKS = [[2, 2, 0, 1], [1, 0, 3, 3]]
PAD = 1


def ids_of(n: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(2, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


def planned(family: str, sinks=SINKS):  # type: ignore[no-untyped-def]
    model = tiny_model(family)
    hf.apply(model, PLAN, sinks=sinks)
    return model


def greedy(model, ids, cache, new: int = 8):  # type: ignore[no-untyped-def]
    return model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
        pad_token_id=PAD, output_scores=True, return_dict_in_generate=True,
        **cache_kwargs(model, cache),
    )  # fmt: skip


@pytest.mark.parametrize("sinks", [None, SINKS])
def test_chunks_into_a_filled_cache_equal_one_forward(family: str, sinks) -> None:  # type: ignore[no-untyped-def]
    # chunks of 25, 8, 1 and 6 tokens: past every window, through sliding layers and sinks
    model = planned(family, sinks)
    ids = ids_of(40)
    cache = PerHeadCache(model, max_cache_len=40)
    with torch.no_grad():
        whole = model(ids).logits  # the plan over the whole sequence, no cache
        parts = [model(ids[:, a:b], use_cache=True, **cache_kwargs(model, cache)).logits
                 for a, b in ((0, 25), (25, 33), (33, 34), (34, 40))]  # fmt: skip
    chunked = torch.cat(parts, dim=1)
    assert cache.get_seq_length() == 40
    torch.testing.assert_close(chunked, whole, rtol=0, atol=2e-6)
    assert torch.equal(chunked.argmax(-1), whole.argmax(-1))


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_snapshot_restore_equals_a_fresh_prefill_to_the_bit(family: str) -> None:
    model = planned(family)
    document, first, second = ids_of(30), ids_of(7, seed=2), ids_of(5, seed=3)
    with torch.no_grad():
        kept = PerHeadCache(model, max_cache_len=60)
        model(document, use_cache=True, **cache_kwargs(model, kept))
        snapshot = kept.snapshot()
        greedy(model, torch.cat([document, first], dim=1), kept)  # moves the cache on
        kept.restore(snapshot)
        fresh = PerHeadCache(model, max_cache_len=60)
        model(document, use_cache=True, **cache_kwargs(model, fresh))
        assert kept.get_seq_length() == fresh.get_seq_length() == 30
        for mine, theirs in zip(kept.store.layers, fresh.store.layers, strict=True):
            for a, b in zip(mine, theirs, strict=True):
                assert torch.equal(a.k, b.k) and torch.equal(a.v, b.v)
        asked = torch.cat([document, second], dim=1)
        again, alone = greedy(model, asked, kept), greedy(model, asked, fresh)
        whole = greedy(model, asked, PerHeadCache(model, max_cache_len=60))  # one prefill
    assert torch.equal(again.sequences, alone.sequences)
    assert all(torch.equal(a, b) for a, b in zip(again.scores, alone.scores, strict=True))
    assert torch.equal(again.sequences, whole.sequences)  # the answer of doc + question at once


def test_a_snapshot_needs_a_prefill_and_its_own_store() -> None:
    model = planned("llama")
    cache = PerHeadCache(model, max_cache_len=40)
    with pytest.raises(ValueError, match="holds nothing yet"):
        cache.snapshot()
    with torch.no_grad():
        model(ids_of(10), use_cache=True, **cache_kwargs(model, cache))
    snapshot = cache.snapshot()
    cache.reset()
    with pytest.raises(ValueError, match="reset since the snapshot"):
        cache.restore(snapshot)
    with torch.no_grad():
        model(ids_of(10), use_cache=True, **cache_kwargs(model, cache))
    with pytest.raises(ValueError, match="another cache store"):
        cache.restore(snapshot)


def test_several_tokens_into_a_left_padded_batch_are_refused() -> None:
    model = planned("llama")
    ids = torch.cat([ids_of(12), ids_of(12, seed=5)])
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # row 0 is left-padded
    cache = PerHeadCache(model, max_cache_len=40)
    options = {"do_sample": False, "pad_token_id": PAD, **cache_kwargs(model, cache)}
    out = model.generate(ids, attention_mask=mask, max_new_tokens=2, **options)
    more = torch.cat([out, ids_of(4).expand(2, -1)], dim=1)
    mask = torch.cat([mask, torch.ones(2, 6, dtype=torch.long)], dim=1)
    with pytest.raises(ValueError, match="left-padded batch"):
        model.generate(more, attention_mask=mask, max_new_tokens=2, **options)
