"""Retrieval calibration prompts: one fact hidden in calibration text, then a question about it.

A plan allocated on sampled rows of running text weighs what most tokens need; a head that
matters mostly when the model must fetch one fact from far back may barely move that average.
These prompts measure the output signal where such a fetch happens: a calibration block
with one fact sentence inserted at a depth, then a question whose answer is the fact, then the
answer itself (teacher forcing). The rows that predict the answer's tokens are where the
output signal is measured (`hf.search.measure.measure_signal(..., query_rows=...)`).

The wording is unlike the needle benchmark's (`experiments.pretrained.needles`): 6-digit access
codes and (person, pet) facts hidden in real source code, not 5-digit pass keys and (name,
city) facts in a repeated filler sentence, so a plan calibrated here is not calibrated on the
test.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from aah.integrations.hf.run.data import encode, prompt_prefix

PEOPLE = ("Oliver", "Mia", "Noah", "Zoe", "Liam", "Nora", "Ethan", "Ruby")
PETS = ("cat", "dog", "parrot", "rabbit", "turtle", "horse", "goat", "owl")


@dataclass(frozen=True)
class RetrievalPrompt:
    """`ids` (1, T): the prompt, then the answer; `rows`: the positions whose next token is an
    answer token (T - len(answer) - 1 .. T - 2)."""

    ids: torch.Tensor
    rows: list[int]
    depth: float


def _fact(kind: int, rng: random.Random) -> tuple[str, str, str]:
    """(fact sentence, question, answer) of an access code (kind 0) or a pet (kind 1)."""
    if kind == 0:
        code = rng.randrange(100_000, 1_000_000)
        return (
            f" The access code is {code}. Write it down.",
            " What is the access code? The access code is",
            f" {code}",
        )
    person, pet = rng.choice(PEOPLE), rng.choice(PETS)
    return (
        f" Note that {person} has a pet {pet}.",
        f" What pet does {person} have? {person} has a pet",
        f" {pet}",
    )


def retrieval_prompts(
    blocks: Sequence[torch.Tensor],
    tokenizer: Any | None,
    n: int,
    *,
    seed: int = 0,
    vocab_size: int | None = None,
) -> list[RetrievalPrompt]:
    """`n` prompts of T tokens each, answer included (T = the blocks' length, so a window of T
    is full attention), prompt i built on block i % len(blocks): its first
    T - len(fact + question + answer) tokens with the fact inserted at depth i / (n - 1)
    (0 = the start, farthest from the question; after the tokenizer's BOS where the block
    starts with it), then the question, then the answer. Kinds
    alternate (access code first). Seeded.

    ValueError for no blocks, `n` < 1, blocks of unequal length, or a T too short for the fact
    and question alone.
    """
    if not blocks:
        raise ValueError("no calibration blocks to hide facts in")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    lengths = {int(b.shape[-1]) for b in blocks}
    if len(lengths) != 1:
        raise ValueError(f"calibration blocks differ in length: {sorted(lengths)}")
    (seq_len,) = lengths
    rng = random.Random(seed)
    prefix = prompt_prefix(tokenizer)
    prompts = []
    for i in range(n):
        depth = i / (n - 1) if n > 1 else 0.0
        fact, question, answer = (encode(t, tokenizer, vocab_size) for t in _fact(i % 2, rng))
        hay = seq_len - len(fact) - len(question) - len(answer)
        if hay < 0 or not answer:
            raise ValueError(
                f"T = {seq_len} is too short for a fact, question and answer of "
                f"{len(fact) + len(question) + len(answer)} tokens"
            )
        text = blocks[i % len(blocks)].reshape(-1)[:hay].tolist()
        keep = len(prefix) if text[: len(prefix)] == prefix else 0  # the BOS stays first
        off = keep + round(depth * (hay - keep))
        ids = text[:off] + fact + text[off:] + question + answer
        rows = list(range(seq_len - len(answer) - 1, seq_len - 1))
        prompts.append(RetrievalPrompt(torch.tensor(ids).view(1, -1), rows, depth))
    return prompts


#: retrieval probes the end-to-end choice judges plans on, with objective "text+retrieval"
PROBES = 8


def probes_on(
    batches: Sequence[torch.Tensor], tokenizer: Any | None, *, seed: int = 0,
    vocab_size: int | None = None, n: int = PROBES,
) -> list[tuple[torch.Tensor, list[int]]]:  # fmt: skip
    """`n` retrieval prompts built on the rows of `batches` (B, T) (held-out blocks, never the
    ones a signal measured on), as (ids (1, T), answer rows) for `hf.search.plan_choice`. The seed
    is offset from the calibration prompts' so the facts differ too."""
    rows = [row.view(1, -1) for batch in batches for row in batch]
    made = retrieval_prompts(rows, tokenizer, n, seed=seed + 1, vocab_size=vocab_size)
    return [(p.ids, p.rows) for p in made]
