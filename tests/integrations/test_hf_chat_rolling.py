"""`aah chat` with a plan whose every head is bounded rolls: a piped conversation longer than
--context and than the model's positions keeps answering, every reply the one the rolling rule
gives on the whole conversation (recomputed without a cache by the float64 reference of
`test_hf_rolling`), and the KV line stops growing once every window is full. `aah generate
--roll --question` answers questions over a document longer than the model the same way."""

from __future__ import annotations

import io
import re
import sys

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from hf_tokenized import TEXT, chat_text, greedy_reply, save_chat_llama
from test_hf_rolling import as_reference

from aah.cli import main
from aah.integrations import hf
from aah.integrations.hf.run.load import load_model
from aah.plan import WindowPlan

NEW = 6
EOS = 1
POSITIONS = 96
TURNS = [f"tell me about item {i}" for i in range(12)]


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("chat_rolling")
    save_chat_llama(root / "model", seed=4, max_position_embeddings=POSITIONS)
    plan = root / "plan.json"
    WindowPlan.of([[4, 4, 8, 8], [2, 2, 16, 16]], 2, 32).save(plan)
    model, tokenizer = load_model(str(root / "model"), "cpu")
    hf.apply(model, WindowPlan.load(plan))
    return {"folder": str(root / "model"), "plan": str(plan), "tokenizer": tokenizer,
            "reference": as_reference(model)}  # fmt: skip


def rolling_reply(chat, ids: list[int]) -> list[int]:  # type: ignore[no-untyped-def]
    """The greedy reply under the rolling rule, the whole sequence recomputed at every step."""
    return greedy_reply(chat["reference"], ids, NEW, EOS)


def test_a_chat_longer_than_its_context_keeps_answering(chat, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(TURNS) + "\n"))
    capsys.readouterr()
    argv = ["chat", chat["folder"], "--plan", chat["plan"], "--temperature", "0",
            "--max-new-tokens", str(NEW), "--context", "40"]  # fmt: skip
    assert main(argv) == 0
    out, err = capsys.readouterr()
    status = [line for line in err.splitlines() if line.startswith("[turn")]
    assert len(status) == len(TURNS), err
    seen = [int(m) for m in re.findall(r"\| (\d+) tokens seen, rolling", err)]
    assert seen[-1] > POSITIONS > 40  # past --context and past the model's positions
    held = re.findall(r"KV ([\d.]+) MB held", err)
    assert len(set(held[2:])) == 1  # constant once every window is full
    # every reply is the rolling rule's on the whole conversation so far
    encode = chat["tokenizer"]
    history: list[int] = []
    replies = []
    for i, line in enumerate(TURNS):
        if i == 0:
            turn = encode(chat_text(("user", line)), add_special_tokens=False)["input_ids"]
        else:
            closing = "\n" if history[-1] == EOS else "</s>\n"
            turn = encode(closing + chat_text(("user", line)), add_special_tokens=False)[
                "input_ids"
            ]
        ids = history + turn
        reply = rolling_reply(chat, ids)
        history = ids + reply
        replies.append(encode.decode(reply, skip_special_tokens=True,
                                     clean_up_tokenization_spaces=False))  # fmt: skip
    assert out == "".join(r + "\n" for r in replies)
    assert len(history) - 1 == seen[-1]


def test_questions_over_a_document_longer_than_the_model_roll(chat, capsys, monkeypatch, tmp_path):
    document = TEXT[:400]
    doc = tmp_path / "doc.txt"
    doc.write_text(document, encoding="utf-8")
    questions = ["what does f return?", "name the class"]
    argv = ["generate", chat["folder"], "--plan", chat["plan"], "--temperature", "0",
            "--max-new-tokens", str(NEW), "--prompt-file", str(doc), "--raw",
            *[flag for q in questions for flag in ("--question", q)]]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 2  # without --roll: beyond the model's positions
    assert f"fill the model's {POSITIONS} positions" in capsys.readouterr().err
    assert main([*argv, "--roll"]) == 0
    out, err = capsys.readouterr()
    expected = []
    for question in questions:
        ids = chat["tokenizer"](document.rstrip() + "\n\n" + question)["input_ids"]
        assert len(ids) > POSITIONS
        reply = rolling_reply(chat, ids)
        text = chat["tokenizer"].decode(reply, skip_special_tokens=True,
                                        clean_up_tokenization_spaces=False)  # fmt: skip
        expected.append(f"> {question}\n{text}\n")
    assert out == "\n".join(expected)
    assert "prefilled once" in err
