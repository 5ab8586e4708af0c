"""RULER's samples as a model reads them, and `python -m experiments.ruler.run` end to end on a
tiny random Llama saved with its own BPE tokenizer: the sample file (ids, question split,
reuse, growth, refusal), the raw and chat prompts, and a run that resumes without computing a
cell again."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from hf_tokenized import CHAT_TEMPLATE, chat_text, save_tokenized_llama, tiny_tokenizer
from test_ruler import WORDS

from experiments.ruler import run as ruler_run
from experiments.ruler.prompts import PromptFormat
from experiments.ruler.samples import read_samples, sample_file

SEQ_LEN = 1024


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    """The tiny BPE tokenizer, made to put its BOS before every text as Llama's does."""
    from tokenizers.processors import TemplateProcessing

    tok = tiny_tokenizer()
    tok._tokenizer.post_processor = TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.bos_token_id)]
    )
    assert tok("a")["input_ids"][0] == tok.bos_token_id
    return tok


def test_raw_prompts_start_with_bos_and_end_with_the_answer_prefix(tokenizer, tmp_path) -> None:
    prompt_format = PromptFormat(tokenizer, "raw")
    samples = sample_file(tmp_path / "s.jsonl", ["niah_single_1", "fwe"], 2, SEQ_LEN, 0,
                          prompt_format, WORDS)  # fmt: skip
    for s in samples:
        assert s.input_ids[0] == tokenizer.bos_token_id
        assert len(s.input_ids) + s.tokens_to_generate <= SEQ_LEN
        text = tokenizer.decode(s.input_ids, skip_special_tokens=True)
        assert text.endswith(s.answer_prefix)
        context = tokenizer.decode(s.input_ids[: s.context_tokens], skip_special_tokens=True)
        question = tokenizer.decode(s.input_ids[s.context_tokens :])
        assert "Question" not in context and "What" not in context
        assert question.strip().startswith(("What", "Question:")) and len(question) < 300
        if s.task == "niah_single_1":
            assert s.answers[0] in context


def test_chat_prompts_are_a_user_turn_then_the_answer_prefix(tokenizer) -> None:
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = CHAT_TEMPLATE
    prompt_format = PromptFormat(tokenizer, "chat")
    ids = prompt_format.ids("the body", " The answer is")
    assert tokenizer.decode(ids) == chat_text(("user", "the body")) + " The answer is"
    with pytest.raises(ValueError, match="--template chat needs a tokenizer with a chat template"):
        PromptFormat(tiny_tokenizer(), "chat")
    with pytest.raises(ValueError, match="unknown --template 'base'"):
        PromptFormat(tokenizer, "base")


def test_the_sample_file_is_reused_grown_and_refused_for_other_settings(tokenizer, tmp_path):
    path, prompt_format = tmp_path / "samples.jsonl", PromptFormat(tokenizer, "raw")
    first = sample_file(path, ["fwe"], 2, SEQ_LEN, 0, prompt_format, WORDS)
    lines = path.read_text().splitlines()
    assert [json.loads(line)["index"] for line in lines] == [0, 1]
    assert set(json.loads(lines[0])) >= {"task", "index", "input_ids", "answers", "context_tokens"}
    grown = sample_file(path, ["fwe"], 3, SEQ_LEN, 0, prompt_format, WORDS)
    assert grown[:2] == first and len(read_samples(path)) == 3
    with pytest.raises(ValueError, match="holds samples made for"):
        sample_file(path, ["fwe"], 1, SEQ_LEN, 1, prompt_format, WORDS)


def test_bad_methods_are_refused_by_name() -> None:
    assert ruler_run.parse_methods("full,uniform-s4,plan:p.json,full") == [
        "full", "uniform-s4", "plan:p.json",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="unknown method 'uniform'"):
        ruler_run.parse_methods("full,uniform")


def test_a_run_scores_every_cell_and_a_rerun_computes_none(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "llama"
    save_tokenized_llama(folder, max_position_embeddings=2 * SEQ_LEN)
    monkeypatch.setattr("experiments.ruler.tasks.wonderwords_lists", lambda: WORDS)
    out = tmp_path / "out"
    plan_file = tmp_path / "half.json"
    from aah.plan import WindowPlan

    WindowPlan.of([[SEQ_LEN // 2] * 4] * 2, 0, SEQ_LEN).save(plan_file)  # half the context
    methods = f"full,uniform-s0,uniform-s2,plan:{plan_file}"
    argv = ["--model", str(folder), "--out", str(out), "--seq-len", str(SEQ_LEN),
            "--tasks", "niah_single_1,fwe", "--samples", "2", "--methods", methods,
            "--kv-fraction", "0.3", "--threads", "1"]  # fmt: skip
    assert ruler_run.main(argv) == 0
    cells = [json.loads(line) for line in (out / "cells.jsonl").read_text().splitlines()]
    assert len(cells) == 1 + 4 * 2 * 2  # the settings line, then one per method, task, sample
    for cell in cells[1:]:
        value = cell["value"]
        assert 0 <= value["score"] <= 1 and 1 <= value["new_tokens"] <= 128
        assert 0 < value["prefill_seconds"] <= value["seconds"]
        assert (value["kv_bytes"] is None) == cell["key"].startswith("full/")
    results = json.loads((out / "results.json").read_text())
    assert results["tasks"] == ["niah_single_1", "fwe"]
    assert results["kv_share"]["uniform-s0"] == pytest.approx(0.3, abs=0.02)
    assert results["kv_share"]["full"] == 1.0
    for method in ("full", "uniform-s0"):
        assert results["scores"][method]["fwe"]["n"] == 2
    assert "Left out of the mean" in (out / "table.md").read_text()
    samples_before = (out / "samples.jsonl").read_bytes()

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a finished cell was computed again")

    monkeypatch.setattr(ruler_run, "answer", refuse)
    assert ruler_run.main(argv) == 0
    assert (out / "samples.jsonl").read_bytes() == samples_before
    assert len((out / "cells.jsonl").read_text().splitlines()) == len(cells)
    assert json.loads((out / "results.json").read_text())["scores"] == results["scores"]
    with pytest.raises(ValueError, match="holds cells of other settings"):
        ruler_run.main([*argv[:-4], "--kv-fraction", "0.5", "--threads", "1"])


def test_decoding_stops_once_the_text_made_scores_one() -> None:
    import torch

    def decode(ids: list[int]) -> str:
        return bytes(ids).decode()

    prompt = list(b"prompt: ")
    found = ruler_run.answers_found(decode, len(prompt), "string_match_all", ["12", "AB"])

    def stops(made: bytes) -> bool:
        return bool(found(torch.tensor([prompt + list(made)]), None)[0])

    assert not stops(b" 1") and not stops(b" 12 and a") and not stops(b"prompt")
    assert stops(b" 12 and ab") and stops(b"ab, 12.")
