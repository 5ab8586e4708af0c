"""The tokens each turn of a chat adds to what the model has already read, so a per-head cache
kept across turns never reads the history again.

A chat's history is the token ids actually fed and generated, not a re-tokenization of the
conversation's text: the model's reply tokens stay as it chose them (re-encoding the decoded
reply may split it differently). Each new user turn appends, as text through the tokenizer:

- what the template writes after an assistant reply (its end-of-turn marker, e.g.
  "<|im_end|>\\n"), less the stop token the reply already ended with when the marker starts
  with it;
- what the template adds for the new user turn and the next reply's header: the template's text
  of the conversation with the new turn, past its text of the conversation without it.

So the history is always the template's conversation text, turn markers at the template's own
places. This needs a template whose text for a conversation only grows as turns are added (the
usual ChatML, Llama 3, Gemma and SmolLM2 templates); one that rewrites earlier turns (a system
prompt moved into the last user turn, earlier reasoning dropped) is refused with ValueError
before the first turn (`Conversation.check_template`).
"""

from __future__ import annotations

from typing import Any

from aah.integrations.hf.run.chat_template import Message, encode, messages, render

#: stands for a reply's text when the template is probed for what follows a reply
_REPLY_MARK = "\u2063reply\u2063"


class Conversation:
    """The turns of one chat and the ids each new user turn adds (module docstring)."""

    def __init__(self, tokenizer: Any, system: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.turns: list[Message] = messages("", system)[:-1]  # the system turn, if any
        self.after_reply = ""  # the template's text owed after the last reply

    def check_template(self) -> None:
        """ValueError unless the template's text grows turn by turn (module docstring)."""
        probe = [*self.turns, {"role": "user", "content": "a"}]
        replied = [*probe, {"role": "assistant", "content": _REPLY_MARK}]
        later = [*replied, {"role": "user", "content": "b"}]
        first = render(self.tokenizer, probe, add_generation_prompt=True)
        whole = render(self.tokenizer, replied, add_generation_prompt=False)
        if _REPLY_MARK not in whole or not whole.startswith(first):
            raise ValueError(
                "the model's chat template does not write a reply after the assistant header "
                "it opens; a chat's turns cannot be added one at a time"
            )
        if not render(self.tokenizer, later, add_generation_prompt=True).startswith(whole):
            raise ValueError(
                "the model's chat template rewrites earlier turns when a turn is added (a "
                "system prompt moved or earlier text dropped); a chat kept in a cache needs a "
                "template whose text only grows"
            )

    def user_turn(self, text: str) -> list[int]:
        """The ids the user's `text` adds to the history: the end of the last reply's turn, the
        user turn and the header of the reply to come."""
        before = ""  # the text the model has read: nothing before the first turn
        if any(turn["role"] == "assistant" for turn in self.turns):
            before = render(self.tokenizer, self.turns, add_generation_prompt=False)
        self.turns.append({"role": "user", "content": text})
        after = render(self.tokenizer, self.turns, add_generation_prompt=True)
        if not after.startswith(before):  # check_template rules this out for its probes
            raise ValueError("the model's chat template rewrote an earlier turn of this chat")
        added = self.after_reply + after[len(before) :]
        self.after_reply = ""
        return encode(self.tokenizer, added)

    def reply(self, text: str, ended_with: str | None) -> None:
        """Record the assistant's reply `text`; `ended_with`: the text of the stop token it
        ended on (None: it was cut at the token limit)."""
        self.turns.append({"role": "assistant", "content": text})
        closing = self._closing()
        if ended_with and closing.startswith(ended_with):
            closing = closing[len(ended_with) :]
        self.after_reply = closing

    def _closing(self) -> str:
        """What the template writes after an assistant reply's text (its end-of-turn)."""
        probe = [*self.turns[:-1], {"role": "assistant", "content": _REPLY_MARK}]
        return render(self.tokenizer, probe, add_generation_prompt=False).split(_REPLY_MARK)[-1]
