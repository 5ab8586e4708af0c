"""`aah generate MODEL --plan plan.json --prompt TEXT`: a Hugging Face model (a transformers
folder, a GGUF file or a hub name) answers or continues a prompt with the plan's windows and
sinks, its KV cache the per-head one (`hf.run.cache.PerHeadCache`): the text streams to stdout as it
is made, then one line on stderr says how many KV bytes the cache held against a full cache's
(what DynamicCache holds).

The prompt comes from --prompt, --prompt-file or stdin (`prompt_source`). When the tokenizer
has a chat template the prompt is a user turn of it and stdout gets the reply alone; with
--raw (or without a template) the text is continued and stdout gets prompt + continuation.
With --question (repeatable) the prompt is a document: its ids are prefilled once, the cache
copied (`PerHeadCache.snapshot`), and each question answered from the copy, from exactly the
ids a separate run on document + question reads (`hf.prompt`).

The cache is sized for the longest run and every new token (`max_cache_len = prompt + N`), so
the generation never runs out of room; a prompt and N beyond the model's positions are refused
before the weights load where the tokenizer is local, else before the first token. With --roll
the cache rolls instead (`PerHeadCache(rolling=True)`: every head of the plan bounded, refused
with the heads named otherwise): prompt and reply may run past the model's positions. The same
checks as `aah plan` run before the weights load (`hf.session`).
"""

from __future__ import annotations

import argparse
import time
from typing import Any, TextIO

from aah.cli import flags
from aah.cli.hf.prompt import PromptEncoder, Prompts
from aah.cli.hf.session import load_planned, planned, preflight, with_tokenizer
from aah.cli.hf.stream import cache_argument, generate, prefill, sampling_options
from aah.cli.prompt_source import (
    check_mode_flags,
    prompt_label,
    read_prompt,
    use_chat_template,
)

__all__ = ["cache_argument", "kv_line", "run_hf_generate"]

MB = 2**20


def run_hf_generate(args: argparse.Namespace, out: TextIO, err: TextIO, stdin: TextIO) -> int:
    """Load the model, apply the plan, stream the reply or continuation (one per question);
    ValueError before the model loads for anything its files can tell, and before the first
    token for the rest."""
    where = f"{args.target!r} is not a run directory; "
    flags.check_default_plan(args.plan, args.kv_fraction, args.plan_length, where)
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    check_mode_flags(args)
    text = read_prompt(args, stdin)
    options = sampling_options(args)
    pre = preflight(args)
    new, positions = args.max_new_tokens, pre.positions()
    if args.roll:
        positions = None  # a rolling cache has no limit
    if positions is not None and new >= positions:
        raise ValueError(
            f"--max-new-tokens {new} leaves no room for the prompt in the model's {positions} "
            f"positions: give --max-new-tokens {positions - 1} or less"
        )
    pre = with_tokenizer(pre, args.target)
    prompts = None
    if pre.known:  # counted in tokens before the weights load
        vocab = pre.limits.vocab_size if pre.limits is not None else None
        prompts = _prompts(args, text, pre.tokenizer, vocab)
        check_positions(prompts.longest, new, positions, prompt_label(args, prompts))

    from aah.integrations.hf import apply, per_head_cache

    model, tokenizer, exact = load_planned(args, pre)
    if prompts is None:
        prompts = _prompts(args, text, tokenizer, exact.vocab_size)
    limit = None if args.roll else exact.max_positions
    check_positions(prompts.longest, new, limit, prompt_label(args, prompts))
    apply(model, planned(args, pre, model, tokenizer))
    if args.roll:
        cache = per_head_cache(model, rolling=True)
    else:
        cache = per_head_cache(model, max_cache_len=prompts.longest + new)
    run = Run(model, tokenizer, cache, new, options, args.seed, exact)
    if args.question:
        return run.questions(prompts, args.question, out, err)
    templated = use_chat_template(args, tokenizer, args.target)
    run.one(prompts.runs[0], out, err, skip_prompt=templated)
    return 0


def _prompts(
    args: argparse.Namespace, text: str, tokenizer: Any | None, vocab: int | None
) -> Prompts:
    templated = use_chat_template(args, tokenizer, args.target)
    encoder = PromptEncoder(tokenizer, vocab, templated, args.system)
    return encoder.prompts(text, args.question)


class Run:
    """The loaded model, its per-head cache and the sampling options of one command."""

    def __init__(
        self, model: Any, tokenizer: Any | None, cache: Any, new: int,
        options: dict[str, Any], seed: int | None, limits: Any,
    ) -> None:  # fmt: skip
        self.model, self.tokenizer, self.cache, self.new = model, tokenizer, cache, new
        self.options, self.seed, self.limits = options, seed, limits

    def one(self, ids: list[int], out: TextIO, err: TextIO, skip_prompt: bool) -> None:
        """Stream one generation after `ids` (the cache holding any prefix of them), then
        its KV line. Each is seeded alike, so an answer equals a separate seeded run's."""
        import torch

        if self.seed is not None:
            torch.manual_seed(self.seed)
        generate(self.model, self.tokenizer, ids, self.cache, self.new, self.options, out,
                 skip_prompt)  # fmt: skip
        out.write("\n")
        out.flush()
        cache = self.cache
        err.write(kv_line(cache.nbytes(), cache.get_seq_length(), self.limits) + "\n")

    def questions(self, prompts: Prompts, questions: list[str], out: TextIO, err: TextIO) -> int:
        """Prefill the shared document once, then answer each question from a copy of that
        cache: `> QUESTION` then the answer on stdout, a KV line each on stderr."""
        document = prompts.runs[0][: prompts.shared]
        snapshot = None
        if document:
            start = time.perf_counter()
            prefill(self.model, self.cache, document)
            snapshot = self.cache.snapshot()
            err.write(
                f"document: {len(document)} tokens prefilled once in "
                f"{time.perf_counter() - start:.2f} s; the per-head cache holds "
                f"{self.cache.nbytes() / MB:.3f} MB, its copy for the questions "
                f"{snapshot.nbytes / MB:.3f} MB\n"
            )
        for i, (question, ids) in enumerate(zip(questions, prompts.runs, strict=True)):
            if snapshot is not None:
                self.cache.restore(snapshot)
            else:
                self.cache.reset()
            out.write(("\n" if i else "") + f"> {question}\n")
            self.one(ids, out, err, skip_prompt=True)
        return 0


def check_positions(n_prompt: int, new: int, positions: int | None, what: str) -> None:
    """The prompt's tokens and `new` more fit the model's positions; else ValueError naming
    the prompt (`what`: where it came from) and the fix."""
    if positions is None or n_prompt + new <= positions:
        return
    if n_prompt >= positions:
        raise ValueError(
            f"the prompt's {n_prompt} tokens ({what}) fill the model's {positions} positions: "
            "give a shorter prompt"
        )
    raise ValueError(
        f"the prompt's {n_prompt} tokens ({what}) + --max-new-tokens {new} exceed the model's "
        f"{positions} positions: give --max-new-tokens {positions - n_prompt} or less (or a "
        "shorter prompt)"
    )


def kv_line(held: int, positions: int, limits: Any) -> str:
    """What the per-head cache held after `positions` positions against a full cache's."""
    from aah.attention.kv_bytes import full_kv_bytes

    full = full_kv_bytes(limits.kv, positions)
    return (
        f"KV cache: {held / MB:.3f} MB held after {positions} positions, of the full cache's "
        f"{full / MB:.3f} MB (KV share {held / full:.3f}); {held} of {full} bytes"
    )
