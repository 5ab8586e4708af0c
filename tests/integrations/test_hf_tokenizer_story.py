"""One tokenizer story: a model loaded with `load_model` reads text with its own tokenizer
wherever text goes (the search, the budget sweep), so passing `tokenizer=` changes nothing;
text without any tokenizer is read as UTF-8 bytes only by a byte-level model, and is an error
naming the fix for any other."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from hf_models import tiny_model
from hf_tokenized import TEXT, save_tokenized_llama

from aah.integrations.hf.run.data import token_batches, token_stream
from aah.integrations.hf.run.load import load_model, resolve_tokenizer
from aah.integrations.hf.search.plan_search import search_plan
from aah.integrations.hf.search.sweep import budget_sweep

OPTIONS = {
    "signal": "mass",
    "seq_len": 32,
    "candidates": [4, 8, 16, 32],
    "max_batches": 2,
    "sinks": 1,
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("tokenized")
    save_tokenized_llama(folder, seed=2)
    model, tokenizer = load_model(str(folder), "cpu")
    assert tokenizer is not None and resolve_tokenizer(model) is tokenizer
    return model, tokenizer


def test_the_tokenizer_differs_from_bytes(loaded) -> None:
    _, tokenizer = loaded  # else the comparisons below could not tell the two apart
    assert token_stream(TEXT, tokenizer) != list(TEXT.encode("utf-8"))


def test_search_plan_reads_text_with_the_models_own_tokenizer(loaded) -> None:
    model, tokenizer = loaded
    given = search_plan(model, TEXT, 0.5, tokenizer=tokenizer, **OPTIONS)
    assert search_plan(model, TEXT, 0.5, **OPTIONS) == given
    ids = torch.tensor(token_stream(TEXT, tokenizer)[: 2 * 32]).view(2, 32)
    assert search_plan(model, ids, 0.5, **OPTIONS) == given  # the same tokens, as ids
    as_bytes = torch.tensor(list(TEXT.encode("utf-8"))[: 2 * 32]).view(2, 32)
    other = search_plan(model, as_bytes, 0.5, **OPTIONS)  # other tokens: other scores
    assert other.info["choice"]["scores"] != given.info["choice"]["scores"]


def test_the_budget_sweep_reads_text_with_the_models_own_tokenizer(loaded) -> None:
    model, tokenizer = loaded
    kw = {"seq_len": 32, "candidates": [4, 8, 16, 32], "max_batches": 1}
    given = budget_sweep(model, TEXT, TEXT[::-1], [0.5], tokenizer=tokenizer, **kw)
    assert budget_sweep(model, TEXT, TEXT[::-1], [0.5], **kw) == given


def test_text_for_a_model_with_a_real_vocabulary_needs_its_tokenizer() -> None:
    model = tiny_model("llama", vocab_size=1000)  # built in code, no tokenizer tied
    with pytest.raises(ValueError, match=r"tokenizer=.*load_model") as caught:
        search_plan(model, TEXT, 0.5, **OPTIONS)
    assert "1000-token vocabulary" in str(caught.value)


def test_a_model_loaded_without_a_tokenizer_reads_bytes_only_if_byte_level(tmp_path) -> None:
    tiny_model("llama", vocab_size=1000).save_pretrained(tmp_path / "big")
    model, tokenizer = load_model(str(tmp_path / "big"), "cpu")
    assert tokenizer is None
    with pytest.raises(ValueError, match="1000-token vocabulary"):
        search_plan(model, TEXT, 0.5, **OPTIONS)
    tiny_model("llama").save_pretrained(tmp_path / "bytes")  # vocab 300: byte-level
    model, tokenizer = load_model(str(tmp_path / "bytes"), "cpu")
    assert tokenizer is None
    ids = torch.tensor(list(TEXT.encode("utf-8"))[: 2 * 32]).view(2, 32)
    assert search_plan(model, TEXT, 0.5, **OPTIONS) == search_plan(model, ids, 0.5, **OPTIONS)


def test_one_token_is_too_little_data_and_a_short_stream_is_announced() -> None:
    with pytest.raises(ValueError, match="gives 1 token; at least 2"):
        token_batches("x", 32, vocab_size=300)
    with pytest.warns(UserWarning, match="gives 5 tokens, fewer than seq_len 8"):
        assert token_batches([[1, 2, 3], [4, 5]], 8)[0].tolist() == [[1, 2, 3, 4, 5]]
