"""A RULER prompt as the token ids a model reads: raw (RULER's "base" template) or chat.

- `raw`: the tokenizer's BOS where it adds one (`hf.run.data.prompt_prefix`), then the task text
  and its answer prefix as one string: what RULER sends a base model, and what a user's prompt
  reads as. The default, and the one for a base model (Gemma 3 270M here has no chat template).
- `chat`: the task text as the user turn of the tokenizer's own chat template (its default
  system turn included, where it writes one), the assistant's reply header, then the answer
  prefix: what RULER sends a chat model through its model template (SmolLM2-135M-Instruct).
  The template's text is tokenized whole, its markers read as special tokens.

RULER's answer prefixes start with a space; it is kept in both modes, as RULER keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TEMPLATES = ("raw", "chat")


@dataclass
class PromptFormat:
    """How one tokenizer reads a prompt under `template`; None: UTF-8 bytes (a byte-level
    model), raw only."""

    tokenizer: Any | None
    template: str = "raw"
    vocab_size: int | None = None
    _prefix: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from aah.integrations.hf.run.chat_template import has_chat_template
        from aah.integrations.hf.run.data import prompt_prefix

        if self.template not in TEMPLATES:
            raise ValueError(f"unknown --template {self.template!r}; known: {', '.join(TEMPLATES)}")
        if self.template == "chat" and not has_chat_template(self.tokenizer):
            raise ValueError(
                "--template chat needs a tokenizer with a chat template; this model's has none "
                "(a base model): use --template raw"
            )
        self._prefix = prompt_prefix(self.tokenizer)

    def ids(self, body: str, answer_prefix: str) -> list[int]:
        """The ids the model reads for the task text `body` and its `answer_prefix`."""
        from aah.integrations.hf.run.chat_template import encode as encode_template
        from aah.integrations.hf.run.chat_template import messages, render
        from aah.integrations.hf.run.data import encode

        if self.template == "chat":
            turn = render(self.tokenizer, messages(body), add_generation_prompt=True)
            return encode_template(self.tokenizer, turn + answer_prefix)
        return self._prefix + encode(body + answer_prefix, self.tokenizer, self.vocab_size)

    def length(self, body: str, answer_prefix: str) -> int:
        """How many ids `ids` gives (`fitting.PromptLength`)."""
        return len(self.ids(body, answer_prefix))

    def context_tokens(self, body: str, question_start: int, ids: list[int]) -> int:
        """How many of the prompt's `ids` come before its question: the ids it shares with the
        prompt cut where the question starts (a token merging across the cut stays with the
        question). A KV press compresses those and leaves the rest, as kvpress's pipeline
        splits a context from its question."""
        from aah.integrations.hf.run.chat_template import shared_prefix

        return shared_prefix([ids, self.ids(body[:question_start], "")])
