"""A tokenizer's chat template as token ids: a prompt as one user turn, a document and a
question as one user turn, and the longest token prefix several such prompts share.

An instruction-tuned model (SmolLM2-135M-Instruct, Llama 3 Instruct, Gemma 3 it...) expects its
own turn markers; given plain text it often ends at once. `user_turn_ids` wraps a prompt the
way the tokenizer's template says (an optional system turn, the user turn, the header of the
assistant's reply), rendered to text and tokenized without adding special tokens again (the
template writes its own BOS where it wants one), which is what transformers'
`apply_chat_template(..., tokenize=True)` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: what separates a document from a question asked about it (`question_prompt`)
QUESTION_SEPARATOR = "\n\n"

Message = dict[str, str]


def has_chat_template(tokenizer: Any | None) -> bool:
    """Whether `tokenizer` carries a chat template (None: a byte-level model, none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def messages(text: str, system: str | None = None) -> list[Message]:
    """`text` as one user turn, after a system turn when `system` is given."""
    turns = [{"role": "system", "content": system}] if system is not None else []
    return [*turns, {"role": "user", "content": text}]


def render(tokenizer: Any, turns: Sequence[Message], *, add_generation_prompt: bool) -> str:
    """The template's text for `turns`; ValueError naming the template's own complaint (a
    template that takes no system turn, or turns that do not alternate)."""
    try:
        return str(
            tokenizer.apply_chat_template(
                list(turns), tokenize=False, add_generation_prompt=add_generation_prompt
            )
        )
    except Exception as err:  # jinja2's TemplateError and whatever the template raises
        roles = "/".join(t["role"] for t in turns)
        raise ValueError(
            f"the model's chat template refuses the turns {roles}: {str(err).strip()[:200]}"
        ) from None


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of template text: its special-token markers read as such, nothing added."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def user_turn_ids(tokenizer: Any, text: str, system: str | None = None) -> list[int]:
    """Ids of `text` as a user turn (after `system`), up to the assistant's reply header."""
    return encode(tokenizer, render(tokenizer, messages(text, system), add_generation_prompt=True))


def question_prompt(document: str, question: str) -> str:
    """The one text a question about a document is asked as: the document, its trailing
    whitespace dropped, a blank line, then the question."""
    return document.rstrip() + QUESTION_SEPARATOR + question


def shared_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """The length of the longest prefix every sequence starts with."""
    if not sequences:
        return 0
    first, n = sequences[0], min(len(s) for s in sequences)
    for i in range(n):
        if any(s[i] != first[i] for s in sequences[1:]):
            return i
    return n
