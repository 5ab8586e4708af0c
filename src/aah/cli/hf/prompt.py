"""The token ids `aah generate MODEL` runs: the prompt's, or, with --question, each question's
whole sequence (document + question, as a separate `aah generate` would tokenize it) and the
prefix they all share, which is prefilled once.

Where the chat template splits a question from its document is left to the tokenizer: every
question's sequence is tokenized whole, and the shared prefix is the longest run of ids all of
them begin with, together with two probe questions that differ from the first character (so
a prefix never runs into a question's own tokens, even for a single question, and a token that
merges across the document's end is simply left to each question's part). Each answer then
starts from exactly the ids a separate run on document + question reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aah.integrations.hf.run.chat_template import (
    question_prompt,
    shared_prefix,
    user_turn_ids,
)

#: two questions that differ from their first character: where the document ends (`shared`)
PROBES = ("A", "B")


@dataclass(frozen=True)
class Prompts:
    """`runs`: one id list per generation (the prompt's, or each question's whole sequence);
    `shared`: the ids every run starts with, prefilled once (0 without questions)."""

    runs: list[list[int]]
    shared: int

    @property
    def longest(self) -> int:
        return max(len(ids) for ids in self.runs)


@dataclass(frozen=True)
class PromptEncoder:
    """Text to ids for one model: through the chat template (`templated`, after `system`), the
    tokenizer's plain ids with its special tokens, or UTF-8 bytes without a tokenizer."""

    tokenizer: Any | None
    vocab_size: int | None
    templated: bool
    system: str | None = None

    def __call__(self, text: str) -> list[int]:
        from aah.integrations.hf.run.data import encode

        if self.templated:
            return user_turn_ids(self.tokenizer, text, self.system)
        if self.tokenizer is None:
            return encode(text, None, self.vocab_size)
        return list(self.tokenizer(text)["input_ids"])

    def prompts(self, text: str, questions: list[str]) -> Prompts:
        """The runs for `text` alone, or for each of `questions` about it (module docstring);
        ValueError for a text that gives no tokens."""
        if not questions:
            ids = self(text)
            if not ids:
                raise ValueError(f"the prompt {text[:40]!r} gives no tokens")
            return Prompts([ids], 0)
        runs = [self(question_prompt(text, q)) for q in questions]
        probes = [self(question_prompt(text, q)) for q in PROBES]
        shared = min(shared_prefix(runs + probes), min(len(ids) for ids in runs) - 1)
        return Prompts(runs, max(shared, 0))
