"""One task prompt at a haystack size, and the largest size whose prompt fits the budget.

RULER fills each prompt up to `max_seq_length - tokens_to_generate` tokens: it searches for the
number of haystack units (noise lines, distractor needles, listed words) whose tokenized prompt
still fits, and shrinks that count for a sample that overflows. Here every sample is sized on
its own: its random content is fixed by its seed and the size alone, sizes are tried doubling
from the task's smallest, then bisected, and the largest size seen to fit is kept. A sample thus
fills the budget as closely as the haystack's unit allows, whatever its own draws add.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: (task text, answer prefix) -> how many tokens the model reads for them: the tokenizer's
#: BOS or the chat template's markers included (`prompts.PromptFormat.length`)
PromptLength = Callable[[str, str], int]
#: no task needs more haystack units than this (a million noise lines is ~25M tokens)
SIZE_CEILING = 1 << 20


@dataclass(frozen=True)
class TaskText:
    """One task prompt in RULER's parts.

    `body`: what the user says (RULER's "input": instructions, examples, context, question);
    `answer_prefix`: the first words of the answer, read after the body (RULER's
    `answer_prefix`); `answers`: what a right answer names; `question_start`: where the
    question after the context starts in `body` (what a KV press leaves uncompressed);
    `size`: the haystack units it holds."""

    body: str
    answer_prefix: str
    answers: tuple[str, ...]
    question_start: int
    size: int


@dataclass(frozen=True)
class Builder:
    """One sample's prompt at any haystack size (`text(size)`, deterministic), the sizes it
    takes (`smallest`..`largest`; None: unbounded) and what one unit is called."""

    text: Callable[[int], TaskText]
    smallest: int
    largest: int | None = None
    unit: str = "haystack units"


#: (sample seed, seq_len, prompt length, word lists) -> that sample's builder
BuilderFactory = Callable[[str, int, PromptLength, Any], Builder]


def largest_fitting(
    builder: Builder, prompt_length: PromptLength, budget: int, what: str
) -> TaskText:
    """The prompt at the largest size whose length is at most `budget` tokens.

    ValueError naming `what` (the task and sequence length) when even the smallest size is
    over, or when the builder's largest size still fits (its pool of words cannot fill the
    budget)."""

    def length(text: TaskText) -> int:
        return prompt_length(text.body, text.answer_prefix)

    best = builder.text(builder.smallest)
    if length(best) > budget:
        raise ValueError(
            f"{what}: the shortest prompt ({builder.smallest} {builder.unit}) takes "
            f"{length(best)} tokens, over the {budget} left for it; give a longer --seq-len"
        )
    cap = builder.largest if builder.largest is not None else SIZE_CEILING
    low, high = builder.smallest, None  # low fits; high (once found) does not
    while high is None:
        size = min(low * 2, cap)
        if size == low:
            if builder.largest is not None:
                raise ValueError(
                    f"{what}: all {cap} {builder.unit} take only {length(best)} tokens, short "
                    f"of the {budget} available; give a shorter --seq-len"
                )
            raise ValueError(f"{what}: the prompt does not grow with its haystack")
        text = builder.text(size)
        if length(text) <= budget:
            low, best = size, text
        else:
            high = size
    while high - low > 1:
        size = (low + high) // 2
        text = builder.text(size)
        if length(text) <= budget:
            low, best = size, text
        else:
            high = size
    return best
