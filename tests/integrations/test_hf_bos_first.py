"""Text is scored and calibrated as a user's prompt is read: the tokenizer's BOS first, where it
adds one (`hf.run.data.prompt_prefix`), in the user's text blocks, the shipped mix, the retrieval
prompts and the studies' evaluation blocks."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from hf_tokenized import TEXT, tiny_tokenizer

from aah.integrations.hf.run.data import prompt_prefix, token_batches
from aah.integrations.hf.search.calibration_mix import calibration_mix
from aah.integrations.hf.search.retrieval_calib import retrieval_prompts
from aah.integrations.hf.search.text_blocks import TextFile, build_documents, draw_blocks


def bos_tokenizer():  # type: ignore[no-untyped-def]
    """The tiny tokenizer, made to put <s> before every text as Llama's and Gemma's do."""
    from tokenizers.processors import TemplateProcessing

    tok = tiny_tokenizer()
    bos = tok.convert_tokens_to_ids("<s>")
    tok.backend_tokenizer.post_processor = TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", bos)]
    )
    return tok


def test_the_prefix_is_what_the_tokenizer_puts_before_a_prompt() -> None:
    tok = bos_tokenizer()
    bos = tok.convert_tokens_to_ids("<s>")
    assert tok("hello")["input_ids"][0] == bos  # the stand-in behaves as intended
    assert prompt_prefix(tok) == [bos]
    assert prompt_prefix(tiny_tokenizer()) == []  # adds nothing: nothing changes
    assert prompt_prefix(None) == []


def test_text_blocks_start_with_bos_and_ids_are_taken_as_given() -> None:
    tok = bos_tokenizer()
    bos = tok.convert_tokens_to_ids("<s>")
    plain = tok.encode(TEXT, add_special_tokens=False)
    batches = token_batches(TEXT, 16, tokenizer=tok, batch_size=4)
    blocks = torch.cat(batches)
    assert blocks.shape[1] == 16 and (blocks[:, 0] == bos).all()
    assert blocks[:, 1:].reshape(-1).tolist() == plain[: blocks.shape[0] * 15]  # text in order
    ids = [plain[:40]]
    assert torch.cat(token_batches(ids, 16, tokenizer=tok)).reshape(-1).tolist() == plain[:32]


def test_drawn_blocks_are_the_prefix_then_a_shorter_slot_in_the_same_order() -> None:
    files = [TextFile("k", f"s{i}", f"f{i}", "x" * 50) for i in range(3)]
    docs = build_documents(files, lambda s: list(range(len(s))), 8)
    plain = draw_blocks(docs, 7, 5, seed=3)
    with_bos = draw_blocks(docs, 8, 5, seed=3, prefix=[999])
    assert [b.ids for b in with_bos] == [(999, *b.ids) for b in plain]
    assert [b.start for b in with_bos] == [b.start for b in plain]
    with pytest.raises(ValueError, match="a prefix of 8 ids leaves no text in blocks of 8"):
        draw_blocks(docs, 8, 1, prefix=[1] * 8)


def test_the_mix_and_the_retrieval_prompts_keep_bos_first() -> None:
    tok = bos_tokenizer()
    bos = tok.convert_tokens_to_ids("<s>")
    mix = calibration_mix(tok, seq_len=256, n_blocks=4)
    assert all(len(b) == 256 and b[0] == bos and bos not in b[1:] for b in mix)
    prompts = retrieval_prompts([torch.tensor([b]) for b in mix], tok, 3)
    assert all(p.ids[0, 0] == bos and p.ids.shape[1] == 256 for p in prompts)
    fact = tok.encode(" The access code is", add_special_tokens=False)
    first = prompts[0].ids[0].tolist()  # depth 0: the fact right after the BOS
    assert first[1 : 1 + len(fact)] == fact
    assert calibration_mix(tiny_tokenizer(), seq_len=64, n_blocks=1)[0][0] != bos


def test_the_studies_needles_grid_and_blocks_start_with_bos() -> None:
    from experiments.pretrained.corpus import text_blocks
    from experiments.pretrained.needles import build_needles
    from experiments.pretrained.retrieval_grid import build_probes

    tok = bos_tokenizer()
    bos = tok.convert_tokens_to_ids("<s>")
    needles = build_needles(tok, [120], [0.0, 1.0], 2)
    assert all(n.prompt[0] == bos and bos not in n.prompt[1:] for n in needles)
    assert all(len(n.prompt) == 120 for n in needles)
    probes = build_probes(tok, "design", [200], [0.0], 1)
    for probe in probes:
        prompt = probe.needle.prompt
        assert prompt[0] == bos and bos not in prompt[1:] and len(prompt) == 200
        assert probe.distance == 199  # depth 0: the needle right after the BOS
    blocks = text_blocks(tok, TEXT, 16, 3)
    plain = tok.encode(TEXT, add_special_tokens=False)
    assert [b[0].tolist() for b in blocks] == [
        [bos, *plain[i * 15 : i * 15 + 15]] for i in range(3)
    ]
