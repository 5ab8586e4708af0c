"""`aah generate RUN_DIR|MODEL --prompt TEXT [--plan FILE]`: stream a continuation of a
prompt (or, for a chat model, its reply) to stdout, then one line on stderr with the KV bytes
the per-head cache held against a full cache's.

The prompt is --prompt TEXT, --prompt-file FILE or --prompt-file - (stdin) (`prompt_source`).
A run directory (a folder with checkpoints/, config.toml or summary.json) generates with its
own model, its last plan in force or --plan's; its tokens are bytes, and a character may span
several, so text is decoded incrementally and written as soon as each character is complete
(invalid UTF-8 shows as U+FFFD). Anything else is a Hugging Face model (a transformers folder,
a GGUF file or a hub name) and needs --plan (`hf.generate`: chat templates, --question).
"""

from __future__ import annotations

import argparse
import codecs
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from aah.cli import flags
from aah.cli.prompt_source import add_prompt_arguments, check_run_dir_prompt, read_prompt

RUN_MARKERS = ("checkpoints", "config.toml", "summary.json")
MB = 2**20


EPILOG = """\
prompt:     --prompt TEXT, --prompt-file FILE, or --prompt-file - to read stdin
chat model: when the tokenizer has a chat template the prompt is a user turn (--system adds a
            system turn) and stdout gets the reply alone; --raw continues the text as it is
            (stdout: prompt + continuation), as a model without a template always does
questions:  with --question Q (repeatable) the prompt is a document, prefilled once; each
            question is answered from a copy of that cache, from exactly the tokens a
            separate run on DOCUMENT + a blank line + Q reads; stdout: "> Q", then the answer

  aah generate MODEL --plan plan.json --prompt-file report.txt \\
      --question "Who wrote it?" --question "When?" --temperature 0
"""


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target", metavar="RUN_DIR|MODEL",
        help="a run directory (aah train), or a Hugging Face model: a transformers folder, a "
        "GGUF file or a hub name (needs aah-attention[hf] and --plan)",
    )  # fmt: skip
    add_prompt_arguments(p)
    p.add_argument(
        "--plan", metavar="FILE",
        help="a plan file (aah plan search, aah plan heal, aah plan export): its windows and "
        "sinks (and a healed plan's parameters); a Hugging Face model needs it or "
        "--kv-fraction, a run defaults to its last plan in force",
    )  # fmt: skip
    flags.add_default_plan(p)
    p.add_argument("--max-new-tokens", type=int, default=256, metavar="N",
                   help="tokens to generate (default 256; a run's tokens are bytes), per "
                   "question with --question; prompt + N <= the model's positions unless "
                   "--roll")  # fmt: skip
    p.add_argument("--roll", action="store_true",
                   help="a Hugging Face model's rolling cache (every head of the plan bounded): "
                   "the prompt and the reply may run past the model's positions")  # fmt: skip
    flags.add_sampling(p)
    flags.add_device(p)
    flags.add_threads(p)


def is_run_dir(target: str) -> bool:
    """A folder that `aah train` wrote (or is writing)."""
    path = Path(target)
    return path.is_dir() and any((path / marker).exists() for marker in RUN_MARKERS)


def utf8_pieces(chunks: Iterable[bytes]) -> Iterator[str]:
    """Text of a byte stream, each piece yielded once its characters are complete."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in chunks:
        text = decoder.decode(chunk)
        if text:
            yield text
    tail = decoder.decode(b"", final=True)  # a truncated last character becomes U+FFFD
    if tail:
        yield tail


def run_generate(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Stream the continuation or reply to `out` (stdout), then the KV line to `err` (stderr):
    a run directory's model, or a Hugging Face model with --plan. Bad arguments raise
    ValueError before anything is printed."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    stdin = sys.stdin if stdin is None else stdin
    flags.check_threads(args.threads)
    if not is_run_dir(args.target):
        from aah.cli.hf.generate import run_hf_generate

        return run_hf_generate(args, out, err, stdin)
    check_run_dir_prompt(args)
    return _run_dir_generate(args, read_prompt(args, stdin), out, err)


def _run_dir_generate(args: argparse.Namespace, prompt: str, out: TextIO, err: TextIO) -> int:
    import torch

    from aah.data import ByteTokenizer
    from aah.model.generate import stream
    from aah.model.sampling import Sampling
    from aah.plan import WindowPlan
    from aah.training.distributed import resolve_device
    from aah.training.load import load

    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    ids = ByteTokenizer().encode(prompt)
    plan = WindowPlan.load(args.plan) if args.plan is not None else None
    device = resolve_device(args.device, what="--device")
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load(args.target, map_location=device)
    if plan is not None:
        try:
            model.set_window_plan(plan.windows, plan.sinks)
        except ValueError as bad:
            raise ValueError(f"plan file {args.plan!r}: {bad}") from None
    idx = torch.tensor(ids, dtype=torch.long, device=device)[None]  # (1, T)
    tokens = stream(model, idx, args.max_new_tokens, sampling)
    out.write(prompt)
    out.flush()
    for piece in utf8_pieces(bytes([int(token[0])]) for token in tokens):
        out.write(piece)
        out.flush()
    out.write("\n")
    out.flush()
    if args.max_new_tokens > 0:
        err.write(run_kv_line(model, idx.shape[1] + args.max_new_tokens - 1) + "\n")
    return 0


def run_kv_line(model: Any, positions: int) -> str:
    """The KV bytes the run's cache held after `positions` positions (the last new token is
    never fed back) against a cache keeping every position of every KV head."""
    cache = model.make_cache(1, positions)  # its storage is what a full `positions` holds
    held = cache.reserved_nbytes()
    cfg = model.config
    itemsize = model.embed.weight.element_size()
    full = cfg.n_layer * cfg.n_kv_head * positions * cfg.head_dim * 2 * itemsize
    return (
        f"KV cache: {held / MB:.3f} MB held after {positions} positions, of the full cache's "
        f"{full / MB:.3f} MB (KV share {held / full:.3f}); {held} of {full} bytes"
    )
