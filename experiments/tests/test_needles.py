"""Needle-in-a-haystack grid: prompts rebuilt as text, hits against brute-force greedy decoding."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from hf_models import VOCAB, tiny_model

from aah.integrations.hf.search.retrieval_calib import retrieval_prompts
from experiments.pretrained.needles import (
    CITIES,
    FILLER,
    Needle,
    build_needles,
    needle_grid,
    needle_hit,
    plot_needle_grids,
)

pytest.importorskip("transformers")

LENGTHS = [128, 160]  # bytes: the fact needle and its question alone take ~115
DEPTHS = [0.0, 0.25, 0.5, 0.75, 1.0]


def text(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8")


def expected_prompt(needle: Needle) -> str:
    """The prompt as text, written from the spec: filler cut at round(depth * haystack), the
    needle sentence there, the question last."""
    answer = text(needle.answer)
    assert answer.startswith(" ")
    key = answer[1:]
    if needle.kind == "passkey":
        sentence = f" The pass key is {key}. Remember it. {key} is the pass key."
        question = " What is the pass key? The pass key is"
    else:
        name = re.search(r"What is the secret city of (\w+)\?", text(needle.prompt)).group(1)
        sentence = f" Remember this: the secret city of {name} is {key}."
        question = f" What is the secret city of {name}? The secret city of {name} is"
    hay = needle.length - len(sentence) - len(question)
    off = round(needle.depth * hay)
    filler = FILLER * 10
    return filler[:off] + sentence + filler[off:hay] + question


def test_prompts_are_exact_and_the_needle_sits_at_its_depth() -> None:
    needles = build_needles(None, LENGTHS, DEPTHS, 2, vocab_size=VOCAB)
    assert len(needles) == len(LENGTHS) * len(DEPTHS) * 2
    assert [(n.length, n.depth) for n in needles[::2]] == [(t, d) for t in LENGTHS for d in DEPTHS]
    for n in needles:
        assert len(n.prompt) == n.length
        assert text(n.prompt) == expected_prompt(n)
        assert text(n.answer).strip() in text(n.prompt)
    # The key's first place in the prompt moves right with depth (pass keys: same-size needles).
    for length in LENGTHS:
        keys = [n for n in needles if n.length == length and n.kind == "passkey"]
        places = [text(n.prompt).index(text(n.answer).strip()) for n in keys]
        assert places == sorted(places) and places[0] < places[-1]
        assert places[0] == len(" The pass key is ")  # depth 0: the needle opens the prompt


def test_kinds_alternate_and_seeds_decide_the_keys() -> None:
    needles = build_needles(None, [128], [0.0, 1.0], 3, vocab_size=VOCAB, seed=5)
    assert [n.kind for n in needles] == ["passkey", "fact", "passkey"] * 2
    assert needles == build_needles(None, [128], [0.0, 1.0], 3, vocab_size=VOCAB, seed=5)
    keys = [text(n.answer) for n in needles if n.kind == "passkey"]
    assert len(set(keys)) == len(keys)  # every cell its own key
    assert all(re.fullmatch(r" \d{5}", k) for k in keys)
    other = build_needles(None, [128], [0.0, 1.0], 3, vocab_size=VOCAB, seed=6)
    assert [text(n.answer) for n in other if n.kind == "passkey"] != keys


class WordTokenizer:
    """Words with their leading space as tokens; records the keyword it is called with."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.calls: list[bool] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.calls.append(add_special_tokens)
        ids = []
        for piece in re.findall(r" ?[^ ]+", text):
            if piece not in self.pieces:
                self.pieces.append(piece)
            ids.append(self.pieces.index(piece))
        return ids


def test_a_tokenizer_is_used_without_special_tokens() -> None:
    tok = WordTokenizer()
    needles = build_needles(tok, [40, 64], [0.0, 0.5, 1.0], 2)
    assert tok.calls and not any(tok.calls)
    for n in needles:
        words = "".join(tok.pieces[i] for i in n.prompt)
        assert len(n.prompt) == n.length
        assert words.startswith(" The grass is green.") or n.depth == 0.0
        assert "".join(tok.pieces[i] for i in n.answer).strip() in words
    passkey_64 = [n for n in needles if n.length == 64 and n.kind == "passkey"]
    # 12-word needle, 9-word question: 43 filler words, the needle after round(0.5 * 43) = 22.
    words = [tok.pieces[i] for i in passkey_64[1].prompt]
    assert words[20:24] == [" grass", " is", " The", " pass"]  # the filler has 19 words
    assert words[-9:] == [" What", " is", " the", " pass", " key?", " The", " pass", " key", " is"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lengths": []}, "lengths"),
        ({"depths": []}, "depths"),
        ({"depths": [0.5, 1.5]}, "1.5"),
        ({"depths": [-0.25]}, "-0.25"),
        ({"depths": [float("nan")]}, "nan"),
        ({"per_cell": 0}, "per_cell"),
        ({"lengths": [128, 90]}, "length 90"),
        ({"vocab_size": 200}, "vocab_size >= 256"),
    ],
)
def test_bad_arguments_raise(kwargs: dict, message: str) -> None:
    args = {"lengths": [128], "depths": [0.5], "per_cell": 2, "vocab_size": VOCAB, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        build_needles(None, **args)


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", max_position_embeddings=256)


def greedy(model, prompt: list[int], n: int) -> list[int]:
    """Brute force: n argmax steps, each a fresh full forward over everything so far."""
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1]
            ids.append(int(logits.argmax()))
    return ids[len(prompt) :]


def with_greedy_answer(model, needle: Needle, n: int = 4) -> Needle:
    return dataclasses.replace(needle, answer=greedy(model, needle.prompt, n))


class NoLogitsToKeep(torch.nn.Module):
    """A model whose forward has no `logits_to_keep`: needle_hit must take the full logits."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids: torch.Tensor, use_cache: bool = False):
        return self.inner(input_ids=input_ids, use_cache=use_cache)


def test_needle_hit_is_greedy_decoding(model) -> None:
    needles = build_needles(None, [128], [0.0, 0.5, 1.0], 2, vocab_size=VOCAB)
    own = [with_greedy_answer(model, n) for n in needles[:2]]
    last_wrong = dataclasses.replace(own[0], answer=[*own[0].answer[:-1], own[0].answer[-1] ^ 1])
    first_wrong = dataclasses.replace(own[1], answer=[own[1].answer[0] ^ 1, *own[1].answer[1:]])
    cases = [*needles, *own, last_wrong, first_wrong]
    hits = [needle_hit(model, n) for n in cases]
    assert hits == [greedy(model, n.prompt, len(n.answer)) == n.answer for n in cases]
    assert hits[-4:] == [True, True, False, False]
    assert hits == [needle_hit(NoLogitsToKeep(model), n) for n in cases]
    # Cached greedy decoding (generate) agrees on the model's own continuation.
    out = model.generate(
        torch.tensor([own[0].prompt]), do_sample=False, max_new_tokens=4, min_new_tokens=4
    )
    assert out[0, 128:].tolist() == own[0].answer


def test_needle_hit_runs_the_attention_the_model_has(model) -> None:
    from aah.integrations import hf

    needle = build_needles(None, [128], [0.5], 1, vocab_size=VOCAB)[0]
    plan = [[4, 8, 16, 1000], [2, 1000, 4, 8]]
    with hf.applied(model, plan, sinks=2):
        windowed = with_greedy_answer(model, needle)
        assert needle_hit(model, windowed)
    full = greedy(model, needle.prompt, 4)
    assert full != windowed.answer  # the plan changed the continuation, so it really ran
    assert not needle_hit(model, windowed)


def test_needle_grid_is_the_mean_hit_per_cell(model) -> None:
    needles = build_needles(None, [128, 136], [0.0, 1.0], 3, vocab_size=VOCAB)
    # Some needles answer with the model's own continuation, so cells hold 0 < accuracy < 1.
    needles = [with_greedy_answer(model, n, 2) if i % 4 == 0 else n for i, n in enumerate(needles)]
    grid = needle_grid(model, needles, progress=True)
    expected: dict[tuple[int, float], list[bool]] = {}
    for n in needles:
        expected.setdefault((n.length, n.depth), []).append(needle_hit(model, n))
    assert list(grid) == [(128, 0.0), (128, 1.0), (136, 0.0), (136, 1.0)]
    assert grid == {cell: sum(h) / len(h) for cell, h in expected.items()}
    assert any(0.0 < v < 1.0 for v in grid.values())


def test_plot_writes_a_png(tmp_path) -> None:
    grids = {
        "full": {(128, 0.0): 1.0, (128, 1.0): 0.5, (256, 0.0): 0.25, (256, 1.0): 0.0},
        "windows": {(128, 0.0): 0.75, (128, 1.0): 0.0, (256, 0.0): 1.0},
    }
    path = tmp_path / "needles.png"
    plot_needle_grids(grids, path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
    with pytest.raises(ValueError, match="no needle grids"):
        plot_needle_grids({}, tmp_path / "none.png")


def calibration_rows() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, 256, (1, 200), generator=gen) for _ in range(2)]


def test_the_wording_shares_no_sentence_with_the_needle_benchmark() -> None:
    text = "".join(bytes(p.ids.view(-1).tolist()).decode("latin-1")
                   for p in retrieval_prompts(calibration_rows(), None, 8))  # fmt: skip
    for phrase in ("pass key", "secret city", "grass is green", *CITIES):
        assert phrase not in text
