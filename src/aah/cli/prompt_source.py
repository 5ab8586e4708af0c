"""Where `aah generate` takes its text from and how it is put to the model: --prompt TEXT,
--prompt-file FILE (`-`: stdin), --question Q about that text (repeatable), and whether the
tokenizer's chat template wraps it (--chat / --raw / --system). Read and checked before any
model loads; no torch here.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from aah.textfile import read_utf8

STDIN = "-"


def add_prompt_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", metavar="TEXT", help="the text to continue or ask")
    p.add_argument(
        "--prompt-file", metavar="FILE",
        help="read the prompt from a UTF-8 file instead (- reads stdin): a long document",
    )  # fmt: skip
    p.add_argument(
        "--question", action="append", default=[], metavar="Q",
        help="a question about the prompt (repeatable): the prompt is prefilled once and each "
        "question answered from a copy of its cache, as if asked alone after a blank line",
    )  # fmt: skip
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--chat", action="store_true",
        help="wrap the prompt as a user turn of the tokenizer's chat template (the default when "
        "it has one); an error for a model without one",
    )  # fmt: skip
    mode.add_argument(
        "--raw", action="store_true",
        help="continue the text as it is, without the chat template (a run's model always does)",
    )  # fmt: skip
    p.add_argument("--system", metavar="TEXT", help="a system turn before the prompt (chat)")


def read_prompt(args: argparse.Namespace, stdin: TextIO) -> str:
    """The prompt's text from --prompt, --prompt-file or stdin; ValueError naming the flag or
    file when none, both, or an empty one is given. Checks the questions too."""
    for question in args.question:
        if not question.strip():
            raise ValueError(f"--question must hold some text, got {question!r}")
    if args.prompt is not None and args.prompt_file is not None:
        raise ValueError(
            f"give --prompt or --prompt-file, not both (got --prompt {args.prompt[:40]!r} and "
            f"--prompt-file {args.prompt_file!r})"
        )
    if args.prompt is None and args.prompt_file is None:
        if args.question:
            raise ValueError(
                f"--question {args.question[0]!r} needs a document to ask about: give "
                "--prompt-file FILE (or --prompt TEXT)"
            )
        raise ValueError(
            "give the prompt: --prompt TEXT, --prompt-file FILE, or --prompt-file - to read stdin"
        )
    if args.prompt is not None:
        if not args.prompt:
            raise ValueError("--prompt must hold some text, got ''")
        return str(args.prompt)
    if args.prompt_file == STDIN:
        text = stdin.read()
        if not text.strip():
            raise ValueError("--prompt-file - (stdin) gave no text")
        return text
    text = read_utf8(args.prompt_file, "--prompt-file")
    if not text.strip():
        raise ValueError(f"--prompt-file {args.prompt_file!r} is empty: give a text to read")
    return text


def prompt_label(args: argparse.Namespace, prompts: Any = None) -> str:
    """Where the prompt came from, for messages; with questions, the longest one's
    (`prompts`: `hf.prompt.Prompts`)."""
    if args.prompt_file == STDIN:
        source = "--prompt-file - (stdin)"
    elif args.prompt_file is not None:
        source = f"--prompt-file {args.prompt_file!r}"
    else:
        source = f"--prompt {args.prompt[:40]!r}"
    if not args.question or prompts is None:
        return source
    longest = max(range(len(prompts.runs)), key=lambda i: len(prompts.runs[i]))
    return f"{source} and --question {args.question[longest][:40]!r}"


def check_run_dir_prompt(args: argparse.Namespace) -> None:
    """A run's model reads bytes and has no chat template: only --raw continuation."""
    given_flags = {
        "--chat": args.chat,
        "--system": args.system is not None,
        "--question": bool(args.question),
        "--kv-fraction": getattr(args, "kv_fraction", None) is not None,
        "--roll": bool(getattr(args, "roll", False)),
    }
    for flag, given in given_flags.items():
        if given:
            raise ValueError(
                f"{flag} is for a Hugging Face model with a chat template; {args.target!r} is a "
                "run directory, whose model continues text as it is"
            )


def check_mode_flags(args: argparse.Namespace) -> None:
    """--system is a turn of the chat template, which --raw turns off."""
    if args.raw and args.system is not None:
        raise ValueError(
            f"--system {args.system!r} is a turn of the chat template, which --raw turns off: "
            "drop one of them"
        )


def use_chat_template(args: argparse.Namespace, tokenizer: Any | None, model: str) -> bool:
    """Whether the prompt is wrapped by the template: --raw never, --chat always (ValueError
    without a template), by default when the tokenizer has one."""
    from aah.integrations.hf.run.chat_template import has_chat_template

    if args.raw:
        return False
    if has_chat_template(tokenizer):
        return True
    system = args.system is not None
    for flag, given in (("--chat", args.chat), (f"--system {args.system!r}", system)):
        if given:
            raise ValueError(
                f"{flag}: model {model!r} has no chat template (its tokenizer carries none); "
                "drop it to continue the text as it is"
            )
    return False
