"""Bad input to `aah generate MODEL` (prompt sources, questions, chat templates), `aah chat` and
`aah plan search --whole-layers`: exit 2 with one line naming the bad value, nothing on stdout,
and before the weights load (the tests make loading itself an error): the prompt is counted
with the model's own tokenizer, loaded first."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from hf_models import tiny_model
from hf_tokenized import TEXT, save_chat_llama, save_tokenized_llama

from aah.cli import main
from aah.plan import WindowPlan


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("prompts")
    save_tokenized_llama(root / "plain")  # a tokenizer without a chat template
    save_chat_llama(root / "chat")
    tiny_model("llama").save_pretrained(root / "bytes")  # byte-level, no tokenizer
    (root / "empty.txt").write_text("")
    (root / "blank.txt").write_text(" \n\n")
    (root / "long.txt").write_text(TEXT)  # far more than 128 tokens
    (root / "doc.txt").write_text(TEXT[:100])
    WindowPlan.of([[8] * 4] * 2, 2, 32).save(root / "plan.json")
    return {p.stem: str(p) for p in root.iterdir()}


@pytest.fixture
def never_loads(monkeypatch):  # type: ignore[no-untyped-def]
    def load_model(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the model was loaded before a check that needs no model")

    monkeypatch.setattr("aah.integrations.hf.run.load.load_model", load_model)


def refused(argv: list[str], capsys, monkeypatch, *named: str, stdin: str = "") -> str:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("aah ")]
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in captured.err, lines
    assert captured.out == "", "a refused command wrote to stdout"
    for word in named:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def generate(files, *flags: str, model: str = "chat") -> list[str]:  # type: ignore[no-untyped-def]
    return ["generate", files[model], "--plan", files["plan"], "--max-new-tokens", "4", *flags]


PROBES = [
    (("--prompt-file", "missing.txt"), {}, ("--prompt-file", "missing.txt", "does not exist")),
    (("--prompt-file", "EMPTY"), {}, ("--prompt-file", "empty.txt", "is empty")),
    (("--prompt-file", "BLANK"), {}, ("blank.txt", "is empty")),
    (("--prompt-file", "-"), {}, ("--prompt-file - (stdin) gave no text",)),
    (("--prompt", ""), {}, ("--prompt must hold some text",)),
    ((), {}, ("give the prompt", "--prompt-file")),
    (("--prompt", "x", "--prompt-file", "DOC"), {}, ("not both", "doc.txt")),
    (("--question", "why?"), {}, ("--question 'why?' needs a document", "--prompt-file")),
    (("--prompt", "x", "--question", " "), {}, ("--question must hold some text", "' '")),
    (("--prompt-file", "LONG"), {}, ("--prompt-file", "long.txt", "the model's 128 positions")),
    (("--prompt-file", "DOC", "--question", "x" * 200), {},
     ("doc.txt", "--question 'xxxx", "the model's 128 positions")),
    (("--prompt", "x", "--chat"), {"model": "plain"}, ("--chat", "has no chat template")),
    (("--prompt", "x", "--system", "s"), {"model": "plain"}, ("--system 's'", "no chat template")),
    (("--prompt", "x", "--raw", "--system", "s"), {}, ("--system 's'", "--raw")),
    (("--prompt", "x", "--chat"), {"model": "bytes"}, ("--chat", "no chat template")),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "where", "named"), PROBES)
def test_bad_prompts_fail_before_loading(
    files, capsys, monkeypatch, never_loads, flags, where, named
):
    flags = tuple(files[f.lower()] if f.isupper() else f for f in flags)
    refused(generate(files, *flags, **where), capsys, monkeypatch, *named)


def test_a_long_stdin_prompt_is_counted_before_loading(files, capsys, monkeypatch, never_loads):
    argv = generate(files, "--prompt-file", "-")
    refused(argv, capsys, monkeypatch, "(stdin)", "the model's 128 positions", stdin=TEXT)


def chat(files, *flags: str, model: str = "chat") -> list[str]:  # type: ignore[no-untyped-def]
    return ["chat", files[model], "--plan", files["plan"], "--max-new-tokens", "8", *flags]


CHAT_PROBES = [
    ((), {"model": "plain"}, ("has no chat template", "`aah chat` needs one")),
    ((), {"model": "bytes"}, ("has no chat template",)),
    (("--context", "1000"), {}, ("--context 1000 is beyond the model's 128 positions",)),
    (("--context", "1"), {}, ("--context must be >= 2",)),
    (("--context", "16", "--max-new-tokens", "16"), {}, ("--max-new-tokens 16 leaves no room",)),
    (("--max-new-tokens", "0"), {}, ("--max-new-tokens must be >= 1",)),
    (("--temperature", "-1"), {}, ("temperature must be >= 0",)),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "where", "named"), CHAT_PROBES)
def test_chat_probes_fail_before_loading(
    files, capsys, monkeypatch, never_loads, flags, where, named
):
    refused(chat(files, *flags, **where), capsys, monkeypatch, *named, stdin="hello\n")


def test_whole_layers_are_checked_before_loading(
    files, capsys, monkeypatch, never_loads, tmp_path: Path
):
    search = ["plan", "search", files["plain"], "--text", files["long"], "--seq-len", "32",
              "--sinks", "0", "--out", str(tmp_path / "plan.json")]  # fmt: skip
    refused([*search, "--whole-layers", "99"], capsys, monkeypatch,
            "--whole-layers 99", "2 layers, 0..1")  # fmt: skip
    refused([*search, "--whole-layers", "0", "--candidates", "4,8"], capsys, monkeypatch,
            "--whole-layers 0", "largest candidate window, 8", "T=32")  # fmt: skip
    # the smallest plan keeps its whole layers at the largest window: below the budget, refused
    refused([*search, "--whole-layers", "0", "--kv-fraction", "0.3"], capsys, monkeypatch,
            "--kv-fraction 0.3", "below the smallest plan's", "layers 0 whole at 32",
            "fewer --whole-layers")  # fmt: skip
    refused([*search, "--whole-layers", "1", "--budget", "0.3"], capsys, monkeypatch,
            "--budget 0.3 is below the smallest plan's", "layers 1 whole at 32")  # fmt: skip
    assert not (tmp_path / "plan.json").exists()
