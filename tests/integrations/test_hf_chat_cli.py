"""Long inputs and conversations from the command line, on a tiny Llama whose tokenizer carries
a chat template (`hf_tokenized.CHAT_TEMPLATE`):

- `aah generate` wraps a prompt as a user turn (--system adds a system turn, --raw does not
  wrap), from --prompt, --prompt-file or stdin alike;
- `--question` twice over one document answers each as a separate `aah generate` on document
  + question does, token for token;
- `aah chat` answers piped turns, the second from the first's cache, as a fresh generation on
  the whole conversation's ids does, and stops cleanly where its context ends.

The references are independent of the code under test: the template's text is written out by
hand (`chat_text`), and every reply is recomputed greedily by running the whole sequence
through the planned model at each step, no cache.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from hf_tokenized import TEXT, chat_text, greedy_reply, save_chat_llama

from aah.cli import main
from aah.integrations import hf
from aah.integrations.hf.run.load import load_model
from aah.plan import WindowPlan

NEW = 8
EOS = 1  # "</s>": the tiny tokenizer's EOS, which ends each turn of the template
DOCUMENT = TEXT[:150]
QUESTIONS = ["what does f return?", "name the class"]


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("chat")
    save_chat_llama(root / "model", seed=4, max_position_embeddings=256)
    plan = root / "plan.json"
    WindowPlan.of([[4, 4, 8, 8], [2, 2, 16, 16]], 2, 32).save(plan)
    (root / "doc.txt").write_text(DOCUMENT, encoding="utf-8")
    model, tokenizer = load_model(str(root / "model"), "cpu")
    hf.apply(model, WindowPlan.load(plan))
    return {"root": root, "folder": str(root / "model"), "plan": str(plan),
            "doc": str(root / "doc.txt"), "model": model, "tokenizer": tokenizer}  # fmt: skip


def reply_of(chat, ids: list[int], new: int = NEW) -> list[int]:  # type: ignore[no-untyped-def]
    """The greedy reply to `ids`, the whole sequence recomputed at every step (no cache)."""
    return greedy_reply(chat["model"], ids, new, EOS)


def encode(chat, text: str) -> list[int]:  # type: ignore[no-untyped-def]
    return chat["tokenizer"](text, add_special_tokens=False)["input_ids"]


def decode(chat, ids: list[int]) -> str:  # type: ignore[no-untyped-def]
    return chat["tokenizer"].decode(ids, skip_special_tokens=True,
                                    clean_up_tokenization_spaces=False)  # fmt: skip


def run(capsys, monkeypatch, argv: list[str], stdin: str = "") -> tuple[str, str]:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def generate(chat, *flags: str) -> list[str]:  # type: ignore[no-untyped-def]
    return ["generate", chat["folder"], "--plan", chat["plan"], "--temperature", "0",
            "--max-new-tokens", str(NEW), *flags]  # fmt: skip


def positions(err: str) -> list[int]:
    return [int(n) for n in re.findall(r"held after (\d+) positions", err)]


@pytest.mark.parametrize(
    ("flags", "turns"),
    [((), [("user", "hi there")]),
     (("--system", "be brief"), [("system", "be brief"), ("user", "hi there")]),
     (("--chat",), [("user", "hi there")])],
)  # fmt: skip
def test_a_prompt_is_a_user_turn_of_the_chat_template(chat, capsys, monkeypatch, flags, turns):
    out, err = run(capsys, monkeypatch, generate(chat, "--prompt", "hi there", *flags))
    ids = encode(chat, chat_text(*turns))
    reply = reply_of(chat, ids)
    assert out == decode(chat, reply) + "\n"  # the reply alone, not the template's text
    assert positions(err) == [len(ids) + len(reply) - 1]


def test_raw_continues_the_text_as_it_is(chat, capsys, monkeypatch):
    out, err = run(capsys, monkeypatch, generate(chat, "--prompt", "def f(", "--raw"))
    ids = chat["tokenizer"]("def f(")["input_ids"]
    reply = reply_of(chat, ids)
    assert out == decode(chat, ids + reply) + "\n"
    assert positions(err) == [len(ids) + len(reply) - 1]


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_a_prompt_file_or_stdin_is_the_prompt(chat, capsys, monkeypatch, source):
    flags = ["--prompt-file", chat["doc"] if source == "file" else "-"]
    out, err = run(capsys, monkeypatch, generate(chat, *flags), stdin=DOCUMENT)
    as_prompt, _ = run(capsys, monkeypatch, generate(chat, "--prompt", DOCUMENT))
    ids = encode(chat, chat_text(("user", DOCUMENT)))
    reply = reply_of(chat, ids)
    assert out == as_prompt == decode(chat, reply) + "\n"
    assert positions(err) == [len(ids) + len(reply) - 1] and len(ids) > 100  # every position


@pytest.mark.parametrize("mode", ["chat", "raw"])
def test_each_question_is_answered_as_a_separate_generate_would(chat, capsys, monkeypatch, mode):
    flags = ("--raw",) if mode == "raw" else ()
    asked = [flag for q in QUESTIONS for flag in ("--question", q)]
    out, err = run(
        capsys, monkeypatch, generate(chat, "--prompt-file", chat["doc"], *flags, *asked)
    )
    expected = []
    for question in QUESTIONS:
        text = DOCUMENT.rstrip() + "\n\n" + question  # what a user would ask in one prompt
        if mode == "chat":
            ids = encode(chat, chat_text(("user", text)))
        else:
            ids = chat["tokenizer"](text)["input_ids"]
        reply = reply_of(chat, ids)
        alone, _ = run(capsys, monkeypatch, generate(chat, "--prompt", text, *flags))
        assert alone == decode(chat, reply if mode == "chat" else ids + reply) + "\n"
        expected.append(f"> {question}\n{decode(chat, reply)}\n")
    assert out == "\n".join(expected)
    assert "document:" in err and "prefilled once" in err
    assert len(positions(err)) == len(QUESTIONS)


def chat_command(chat, *flags: str) -> list[str]:  # type: ignore[no-untyped-def]
    return ["chat", chat["folder"], "--plan", chat["plan"], "--temperature", "0",
            "--max-new-tokens", str(NEW), *flags]  # fmt: skip


@pytest.mark.parametrize("system", [None, "be brief"])
def test_a_piped_chat_keeps_its_cache_across_turns(chat, capsys, monkeypatch, system):
    lines = ["hello there", "and what next?"]
    # a fixed context: the plain window rule, which `reply_of` recomputes (rolling: its own test)
    flags = ("--no-roll", "--system", system) if system else ("--no-roll",)
    out, err = run(capsys, monkeypatch, chat_command(chat, *flags), stdin="\n".join(lines) + "\n")
    turns = [("system", system)] if system else []
    first_ids = encode(chat, chat_text(*turns, ("user", lines[0])))
    first = reply_of(chat, first_ids)
    # the second turn as the template writes it after the first reply, on the ids the model
    # actually made (its "</s>", if it stopped on one, is the end of its turn)
    closing = "\n" if first[-1] == EOS else "</s>\n"
    turn = encode(chat, closing + chat_text(("user", lines[1])))
    conversation = first_ids + first + turn
    second = reply_of(chat, conversation)
    assert out == f"{decode(chat, first)}\n{decode(chat, second)}\n"
    status = [line for line in err.splitlines() if line.startswith("[turn")]
    assert len(status) == 2 and all("DynamicCache would hold" in s for s in status)
    # the second turn fed only its own ids and the first reply's last token: no history
    assert f"turn's {len(turn) + 1} tokens prefilled" in status[1]
    seen = len(conversation) + len(second) - 1
    assert f"held after {seen} positions" in status[1] and f"{seen} of 256 positions" in status[1]


def test_a_chat_ends_cleanly_where_its_context_does(chat, capsys, monkeypatch):
    first_ids = encode(chat, chat_text(("user", "hello")))
    context = len(first_ids) + 3  # room for a reply of 4 tokens, then nothing
    out, err = run(capsys, monkeypatch, chat_command(chat, "--context", str(context), "--no-roll"),
                   stdin="hello\nmore please\n")  # fmt: skip
    first = reply_of(chat, first_ids, new=4)
    assert out == decode(chat, first) + "\n"
    assert "the chat ends here" in err and f"of its {context} (--context)" in err
    assert "Traceback" not in err


def test_blank_lines_are_skipped_and_exit_ends_the_chat(chat, capsys, monkeypatch):
    out, err = run(capsys, monkeypatch, chat_command(chat, "--no-roll"),
                   stdin="\n  \nhello\n/exit\nmore\n")  # fmt: skip
    assert out == decode(chat, reply_of(chat, encode(chat, chat_text(("user", "hello"))))) + "\n"
    assert len([line for line in err.splitlines() if line.startswith("[turn")]) == 1


def test_chat_status_counts_the_bytes_of_both_caches(chat, capsys, monkeypatch):
    from aah.attention.kv_bytes import full_kv_bytes
    from aah.integrations.hf.run.model_layout import kv_shape

    _, err = run(capsys, monkeypatch, chat_command(chat), stdin="hello\n")
    found = re.search(r"KV ([\d.]+) MB held after (\d+) positions, DynamicCache would hold "
                      r"([\d.]+) MB", err)  # fmt: skip
    assert found, err
    seen = int(found[2])
    full = full_kv_bytes(kv_shape(chat["model"]), seen)
    assert found[3] == f"{full / 2**20:.3f}" and float(found[1]) < float(found[3])


def test_the_readme_names_the_three_commands() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## A pretrained model", 1)[1].split("\n## ", 1)[0]
    for command in ("aah plan search", "--prompt-file", "--question", "aah chat", "aah plan heal"):
        assert command in section, command
